/**
 * Leak verdicts per phase path. A phase leaks when its repeated occurrences keep adding memory that
 * stays: each occurrence ends higher than it started (net change > 0) AND the level left behind
 * keeps rising from one occurrence to the next, through the later occurrences, not just at the
 * start. Checked per rank (each process leaks on its own) on the second half of the occurrences:
 *
 * - a phase that allocates and a sibling that frees (forward/backward) is not a leak: its level
 *   after each occurrence stays flat;
 * - a sibling of a leaking phase is not a leak: its net change is zero, though the level rises;
 * - warm-up (arenas, caches) is a plateau: the phase's own net changes raised the level over the
 *   first half, and the level then stopped rising;
 * - the last third must still grow at a rate of at least half the retained amount per occurrence,
 *   so a plateau that begins late in the run is not taken for a leak.
 *
 * The same test runs on bytes (allocator allocated, else device used) and on tensor counts where
 * the tfjs adapter records them.
 */
import { formatBytes } from "@stormlog/core";
import { median, type Occurrence } from "./phase-stats.js";
import type { LeakEvidence, LeakReport, LeakVerdictKind } from "./types.js";

/** Occurrences per rank needed for a verdict. */
export const MIN_LEAK_OCCURRENCES = 5;
/** Share of later occurrences that must end higher than they began. */
export const MIN_POSITIVE_FRACTION = 0.6;
/** Share of later occurrences after which the level rose, unless the trend is a clean line (R² >= 0.8). */
export const MIN_GROWTH_FRACTION = 0.6;
export const MIN_TREND_R_SQUARED = 0.8;

interface Levels {
  enter: number[];
  exit: number[];
}

/** A verdict on one metric. */
export interface MetricVerdict {
  verdict: LeakVerdictKind;
  confidence: number;
  evidence: LeakEvidence | null;
  retained: number;
}

function fraction(values: readonly number[], predicate: (value: number) => boolean): number {
  if (values.length === 0) return 0;
  let hits = 0;
  for (const value of values) if (predicate(value)) hits++;
  return hits / values.length;
}

/**
 * A robust slope of `y` against its index: the median of the slopes between points half the window
 * apart. A transient bump touching fewer than half of those pairs does not move it, and it costs
 * O(n log n), not the O(n²) of Theil-Sen.
 */
function robustSlope(y: readonly number[]): number {
  const n = y.length;
  if (n < 2) return 0;
  const lag = Math.ceil(n / 2);
  const slopes: number[] = [];
  for (let i = 0; i + lag < n; i++) slopes.push((y[i + lag]! - y[i]!) / lag);
  if (slopes.length === 0) return (y[n - 1]! - y[0]!) / (n - 1);
  return median(slopes);
}

/** Least-squares slope and R² of `y` against its index. */
function trend(y: readonly number[]): { slope: number; rSquared: number } {
  const n = y.length;
  if (n < 2) return { slope: 0, rSquared: 0 };
  const meanX = (n - 1) / 2;
  let meanY = 0;
  for (const value of y) meanY += value;
  meanY /= n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    const dx = i - meanX;
    const dy = y[i]! - meanY;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  const slope = sxy / sxx;
  const rSquared = syy === 0 ? 0 : (sxy * sxy) / (sxx * syy);
  return { slope, rSquared };
}

const round = (value: number, digits: number): number => {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
};

/** The verdict of one metric on one rank's occurrences (in time order). */
export function judgeLevels(levels: Levels, metric: LeakEvidence["metric"]): MetricVerdict {
  const n = levels.exit.length;
  if (n < MIN_LEAK_OCCURRENCES)
    return { verdict: "insufficient_data", confidence: 0, evidence: null, retained: 0 };
  const { enter, exit } = levels;
  const half = Math.floor(n / 2);
  const net: number[] = [];
  for (let i = half; i < n; i++) net.push(exit[i]! - enter[i]!);
  const retained: number[] = [];
  for (let i = Math.max(1, half); i < n; i++) retained.push(exit[i]! - exit[i - 1]!);
  const tail = exit.slice(half);
  const { rSquared } = trend(tail);
  const slope = robustSlope(tail);
  const positiveFraction = fraction(net, (value) => value > 0);
  const growthFraction = fraction(retained, (value) => value > 0);
  const netMedian = median(net);
  const retainedMedian = median(retained);
  const retainedMean =
    retained.length > 0 ? (exit[n - 1]! - exit[Math.max(1, half) - 1]!) / retained.length : 0;
  const headGrowth = exit[half]! - exit[0]!;
  const tailGrowth = exit[n - 1]! - exit[half]!;
  // Decisions use robust slopes, so that a transient bump at either end of a window does not hide a trend.
  const third = Math.max(3, Math.floor(n / 3));
  const lastThirdRate = robustSlope(exit.slice(n - third));
  const perOccurrence = retainedMedian > 0 ? retainedMedian : retainedMean;
  const evidence: LeakEvidence = {
    metric,
    retained_per_occurrence: round(perOccurrence, 3),
    net_per_occurrence: round(netMedian, 3),
    positive_fraction: round(positiveFraction, 3),
    growth_fraction: round(growthFraction, 3),
    slope_per_occurrence: round(slope, 3),
    r_squared: round(rSquared, 4),
    head_growth: headGrowth,
    tail_growth: tailGrowth,
  };
  const consistent = growthFraction >= MIN_GROWTH_FRACTION || rSquared >= MIN_TREND_R_SQUARED;
  const leaking =
    positiveFraction >= MIN_POSITIVE_FRACTION &&
    netMedian > 0 &&
    slope > 0 &&
    perOccurrence > 0 &&
    consistent &&
    lastThirdRate >= 0.5 * Math.min(perOccurrence, slope);
  if (leaking) {
    const confidence =
      0.4 * positiveFraction +
      0.3 * Math.max(growthFraction, rSquared) +
      0.3 * Math.min(1, n / (4 * MIN_LEAK_OCCURRENCES));
    return {
      verdict: "leaking",
      confidence: round(Math.min(1, confidence), 2),
      evidence,
      retained: perOccurrence,
    };
  }
  // The phase itself added memory over the first half, and the level stopped rising: warm-up.
  let ownHeadGrowth = 0;
  for (let i = 0; i < half; i++) ownHeadGrowth += Math.max(0, exit[i]! - enter[i]!);
  const robustTailGrowth = Math.max(0, slope) * (n - half - 1);
  if (headGrowth > 0 && ownHeadGrowth >= 0.5 * headGrowth && robustTailGrowth < 0.25 * headGrowth) {
    return {
      verdict: "plateau",
      confidence: round(Math.min(1, 0.5 + 0.5 * (1 - robustTailGrowth / headGrowth)), 2),
      evidence,
      retained: 0,
    };
  }
  return {
    verdict: "stable",
    confidence: round(Math.max(0.5, 1 - positiveFraction * growthFraction), 2),
    evidence,
    retained: 0,
  };
}

const VERDICT_RANK: Readonly<Record<LeakVerdictKind, number>> = {
  leaking: 0,
  plateau: 1,
  stable: 2,
  insufficient_data: 3,
};

/** One session's rank's verdicts on one path. */
export interface RankVerdicts {
  rank: number;
  bytes: MetricVerdict | null;
  tensors: MetricVerdict | null;
}

function levelsOf(
  occurrences: readonly Occurrence[],
  enter: (o: Occurrence) => number,
  exit: (o: Occurrence) => number,
): Levels | null {
  const levels: Levels = { enter: [], exit: [] };
  for (const occurrence of occurrences) {
    if (occurrence.span.syntheticEnd) continue;
    const a = enter(occurrence);
    const b = exit(occurrence);
    if (Number.isNaN(a) || Number.isNaN(b)) continue;
    levels.enter.push(a);
    levels.exit.push(b);
  }
  return levels.exit.length === 0 ? null : levels;
}

function strongest(verdicts: readonly (MetricVerdict | null)[]): MetricVerdict | null {
  let best: MetricVerdict | null = null;
  for (const verdict of verdicts) {
    if (verdict === null) continue;
    if (
      best === null ||
      VERDICT_RANK[verdict.verdict] < VERDICT_RANK[best.verdict] ||
      (verdict.verdict === best.verdict && verdict.confidence > best.confidence)
    )
      best = verdict;
  }
  return best;
}

function formatCount(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

/** The verdicts of one session's rank on one path (its occurrences, any order). */
export function judgeRank(list: readonly Occurrence[]): RankVerdicts {
  const occurrences = [...list].sort((a, b) =>
    a.span.startNs < b.span.startNs ? -1 : a.span.startNs > b.span.startNs ? 1 : 0,
  );
  let bytesLevels = levelsOf(
    occurrences,
    (o) => o.enterAllocated,
    (o) => o.exitAllocated,
  );
  let bytesMetric: LeakEvidence["metric"] = "allocator_allocated_bytes";
  if (bytesLevels === null) {
    bytesLevels = levelsOf(
      occurrences,
      (o) => o.enterUsed,
      (o) => o.exitUsed,
    );
    bytesMetric = "device_used_bytes";
  }
  const tensorLevels = levelsOf(
    occurrences,
    (o) => o.enterTensors,
    (o) => o.exitTensors,
  );
  return {
    rank: occurrences[0]!.span.rank,
    bytes: bytesLevels === null ? null : judgeLevels(bytesLevels, bytesMetric),
    tensors: tensorLevels === null ? null : judgeLevels(tensorLevels, "tfjs_num_tensors"),
  };
}

/** Leak verdicts accumulated one session's rank at a time (see `PhaseAccumulator`'s `onPath`). */
export class LeakAccumulator {
  private readonly paths = new Map<string, { perRank: RankVerdicts[]; occurrences: number }>();

  /** The occurrences of `phasePath` on one session's rank. */
  add(phasePath: string, occurrences: readonly Occurrence[]): void {
    let entry = this.paths.get(phasePath);
    if (entry === undefined) {
      entry = { perRank: [], occurrences: 0 };
      this.paths.set(phasePath, entry);
    }
    entry.perRank.push(judgeRank(occurrences));
    entry.occurrences += occurrences.length;
  }

  /** Verdicts for every path, leaking ones first. */
  finish(): LeakReport[] {
    const reports: LeakReport[] = [];
    for (const [phasePath, entry] of this.paths)
      reports.push(report(phasePath, entry.perRank, entry.occurrences));
    annotateParents(reports);
    return reports.sort(
      (a, b) =>
        VERDICT_RANK[a.verdict] - VERDICT_RANK[b.verdict] ||
        b.confidence - a.confidence ||
        (a.phase_path < b.phase_path ? -1 : a.phase_path > b.phase_path ? 1 : 0),
    );
  }
}

/** Leak verdicts for occurrences already grouped by path (all ranks). */
export function detectLeaks(groups: ReadonlyMap<string, readonly Occurrence[]>): LeakReport[] {
  const accumulator = new LeakAccumulator();
  for (const [phasePath, list] of groups) {
    const byRank = new Map<string, Occurrence[]>();
    for (const occurrence of list) {
      const key = `${occurrence.span.rank}\u0000${occurrence.span.sessionId}`;
      const entry = byRank.get(key);
      if (entry === undefined) byRank.set(key, [occurrence]);
      else entry.push(occurrence);
    }
    for (const occurrences of byRank.values()) accumulator.add(phasePath, occurrences);
  }
  return accumulator.finish();
}

function report(phasePath: string, verdicts: readonly RankVerdicts[], occurrences: number): LeakReport {
  const perRank = [...verdicts].sort((a, b) => a.rank - b.rank);
  const leakingRanks = perRank.filter(
    (r) => r.bytes?.verdict === "leaking" || r.tensors?.verdict === "leaking",
  );
  const analyzed = perRank.filter(
    (r) =>
      (r.bytes !== null && r.bytes.verdict !== "insufficient_data") ||
      (r.tensors !== null && r.tensors.verdict !== "insufficient_data"),
  );
  let verdict: LeakVerdictKind;
  if (leakingRanks.length > 0) verdict = "leaking";
  else if (analyzed.length === 0) verdict = "insufficient_data";
  else if (analyzed.some((r) => r.bytes?.verdict === "plateau" || r.tensors?.verdict === "plateau"))
    verdict = "plateau";
  else verdict = "stable";

  const pool = verdict === "leaking" ? leakingRanks : analyzed;
  const best = pool
    .map((r) => ({ r, v: strongest([r.bytes, r.tensors]) }))
    .filter((x) => x.v !== null && x.v.verdict === verdict)
    .sort((a, b) => b.v!.confidence - a.v!.confidence)[0];
  const confidences = pool.map((r) => strongest([r.bytes, r.tensors])?.confidence ?? 0);
  const confidence = verdict === "insufficient_data" ? 0 : round(median(confidences), 2);
  const leakingBytes = leakingRanks
    .filter((r) => r.bytes?.verdict === "leaking")
    .map((r) => r.bytes!.retained);
  const leakingTensors = leakingRanks
    .filter((r) => r.tensors?.verdict === "leaking")
    .map((r) => r.tensors!.retained);
  const bytesPer = leakingBytes.length > 0 ? Math.round(median(leakingBytes)) : null;
  const tensorsPer = leakingTensors.length > 0 ? round(median(leakingTensors), 1) : null;
  return {
    phase_path: phasePath,
    verdict,
    confidence,
    message: message(
      phasePath,
      verdict,
      bytesPer,
      tensorsPer,
      leakingRanks.map((r) => r.rank),
      perRank.length,
      occurrences,
    ),
    bytes_per_occurrence: bytesPer,
    tensors_per_occurrence: tensorsPer,
    occurrences,
    ranks_analyzed: analyzed.length,
    leaking_ranks: leakingRanks.map((r) => r.rank),
    evidence: {
      bytes: best?.r.bytes?.evidence ?? null,
      tensors: best?.r.tensors?.evidence ?? null,
      rank: best?.r.rank ?? null,
    },
  };
}

function listRanks(ranks: readonly number[], total: number): string {
  if (total <= 1) return "";
  if (ranks.length === total) return ` (all ${total} ranks)`;
  const shown = ranks.slice(0, 8).join(", ");
  return ` (rank${ranks.length > 1 ? "s" : ""} ${shown}${ranks.length > 8 ? ", ..." : ""} of ${total})`;
}

function message(
  phasePath: string,
  verdict: LeakVerdictKind,
  bytesPer: number | null,
  tensorsPer: number | null,
  leakingRanks: readonly number[],
  rankCount: number,
  occurrences: number,
): string {
  const label = `\`${phasePath}\``;
  switch (verdict) {
    case "leaking": {
      const parts: string[] = [];
      if (tensorsPer !== null) parts.push(`${formatCount(tensorsPer)} tensor${tensorsPer === 1 ? "" : "s"}`);
      if (bytesPer !== null) parts.push(formatBytes(bytesPer));
      return `${label} keeps ${parts.join(", ")} per occurrence${listRanks(leakingRanks, rankCount)}`;
    }
    case "plateau":
      return `${label} grew over its first occurrences, then held steady (warm-up, not a leak)`;
    case "stable":
      return `${label} does not retain memory across its ${occurrences} occurrences`;
    default:
      return `${label} has too few occurrences per rank to judge (${MIN_LEAK_OCCURRENCES} needed)`;
  }
}

/** A leaking parent whose leak is a leaking child's says so. */
function annotateParents(reports: LeakReport[]): void {
  const leaking = reports.filter((report) => report.verdict === "leaking");
  for (const parent of leaking) {
    const child = leaking
      .filter((candidate) => candidate.phase_path.startsWith(`${parent.phase_path} / `))
      .sort((a, b) => b.phase_path.split(" / ").length - a.phase_path.split(" / ").length)[0];
    if (child !== undefined) parent.message += `; the growth is inside \`${child.phase_path}\``;
  }
}
