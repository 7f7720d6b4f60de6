/**
 * Leak verdicts per phase path for the analysis report: each session's rank is judged by
 * `judgeRetention` (@stormlog/phases, shared with the tracker's leak alerts; how a verdict is reached
 * is in docs/leak-verdicts.md), and the ranks' verdicts are pooled per path with a message.
 */
import {
  type BirthSnapshot,
  describeBirths,
  describeGrowthInside,
  describeKept,
  median,
  parseBirthCounts,
  type RankVerdicts,
  strongestVerdict,
  VERDICT_ORDER,
} from "@stormlog/phases/internal";
import type { BirthEntry } from "../input/aggregate.js";
import type { BirthEvidence, LeakReport, LeakVerdictKind } from "../report/types.js";
import type { RankAnalysis, RankData } from "./analysis.js";
import { IN_THREAD_JUDGE, type LeakJudge } from "./leak-judges.js";
import type { Occurrence } from "./phase-stats.js";

const round = (value: number, digits: number): number => {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
};

/**
 * Whether the rank's phase records repeat the last sample's counters. Records that say they were
 * read at the boundary settle it; without that flag (the Python tracker writes none), every boundary
 * reading equal to the sample before it, in a run whose readings vary, does.
 */
function countersAreLastSample(occurrences: readonly Occurrence[]): boolean {
  if (occurrences.length === 0 || occurrences.some((o) => o.boundaryRead)) return false;
  const series = occurrences[0]!.series;
  if (series.count === 0) return false;
  let compared = 0;
  let distinct = false;
  let first = Number.NaN;
  for (const occurrence of occurrences) {
    for (const [value, ns] of [
      [occurrence.enterAllocated, occurrence.span.startNs],
      [occurrence.exitAllocated, occurrence.span.endNs],
    ] as const) {
      if (Number.isNaN(value)) continue;
      if (Number.isNaN(first)) first = value;
      else if (value !== first) distinct = true;
      const sampled = sampleBefore(series, ns);
      if (Number.isNaN(sampled)) continue;
      if (sampled !== value) return false;
      compared++;
    }
  }
  return compared > 0 && distinct;
}

/** The allocated counter of the last sample at or before `ns` (NaN without one). */
function sampleBefore(series: Occurrence["series"], ns: bigint): number {
  const t = Number(ns - series.base);
  let lo = 0;
  let hi = series.count;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (series.t[mid]! <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo === 0 ? Number.NaN : series.allocated[lo - 1]!;
}

/**
 * The rank's samples' live tensors by birth phase, as the engine reads them. Entries that are not
 * `{ tensors, bytes, largest }` objects (another writer's) are left out rather than guessed at.
 */
export function birthSnapshots(entries: readonly BirthEntry[]): BirthSnapshot[] {
  const out: BirthSnapshot[] = [];
  for (const entry of entries) {
    let value: unknown;
    try {
      value = JSON.parse(entry.json);
    } catch {
      continue;
    }
    out.push({ timestampNs: entry.timestampNs, phases: parseBirthCounts(value) });
  }
  return out;
}

/** Leak verdicts accumulated one session's rank at a time. */
export class LeakAccumulator implements RankAnalysis<LeakReport[]> {
  private readonly paths = new Map<string, { perRank: RankVerdicts[]; occurrences: number }>();
  /** Per path, each rank's mean net change (exit minus entry) in bytes: the other ranks' baseline. */
  private readonly nets = new Map<string, Map<number, number>>();
  /** Two sessions of one rank: baselines by rank would mix them, so shortfalls stay unsettled. */
  private rankSeenTwice = false;

  /** Ranks judged, in the order they were added; a promise while a worker judges it. */
  private readonly judged: (Map<string, RankVerdicts> | Promise<Map<string, RankVerdicts>>)[] = [];

  /** `judge`: where each rank is judged (this thread by default; see `leak-judges.ts`). */
  constructor(private readonly judge: LeakJudge = IN_THREAD_JUDGE) {}

  addRank(data: RankData): void {
    for (const series of data.series)
      this.addSession(data.occurrences(series), birthSnapshots(series.births));
  }

  /** All occurrences (every path) of one session's rank. */
  addSession(occurrences: readonly Occurrence[], births: readonly BirthSnapshot[] = []): void {
    const verdicts = this.judge.judge(occurrences, {
      lastSample: countersAreLastSample(occurrences),
      births,
    });
    // A rank judged elsewhere that throws does so when `settled` reaches it, not before.
    if (verdicts instanceof Promise) verdicts.catch(() => {});
    this.judged.push(verdicts);
    for (const [phasePath, net] of meanNets(occurrences)) {
      const rank = occurrences[0]!.span.rank;
      let byRank = this.nets.get(phasePath);
      if (byRank === undefined) {
        byRank = new Map();
        this.nets.set(phasePath, byRank);
      }
      if (byRank.has(rank)) this.rankSeenTwice = true;
      byRank.set(rank, net);
    }
  }

  /** Waits for the ranks judged elsewhere (`finish` needs every verdict), then lets the judge go. */
  async settled(): Promise<void> {
    try {
      for (let k = 0; k < this.judged.length; k++) this.judged[k] = await this.judged[k]!;
    } finally {
      await this.judge.close();
    }
  }

  /** Verdicts for every path, leaking ones first. */
  finish(): LeakReport[] {
    // Pooled in the order the ranks were added, wherever they were judged.
    for (const verdicts of this.judged) {
      if (verdicts instanceof Promise)
        throw new Error("LeakAccumulator.finish: a rank is still being judged (await settled() first)");
      for (const [phasePath, rankVerdicts] of verdicts) {
        let entry = this.paths.get(phasePath);
        if (entry === undefined) {
          entry = { perRank: [], occurrences: 0 };
          this.paths.set(phasePath, entry);
        }
        entry.perRank.push(rankVerdicts);
        entry.occurrences += rankVerdicts.occurrences;
      }
    }
    this.judged.length = 0;
    this.settleShortfalls();
    const reports: LeakReport[] = [];
    for (const [phasePath, entry] of this.paths)
      reports.push(report(phasePath, entry.perRank, entry.occurrences));
    annotateParents(reports);
    return reports.sort(
      (a, b) =>
        VERDICT_ORDER[a.verdict] - VERDICT_ORDER[b.verdict] ||
        b.confidence - a.confidence ||
        (a.phase_path < b.phase_path ? -1 : a.phase_path > b.phase_path ? 1 : 0),
    );
  }

  /**
   * Counters cannot tell "a phase kept part of what it allocated" from "a later sibling freed less".
   * Ranks that do not leak run the same step and show each phase's usual net change: the phase whose
   * net change differs on the leaking ranks by the kept amount is the one that keeps it.
   */
  private settleShortfalls(): void {
    if (this.rankSeenTwice) return;
    for (const [phasePath, entry] of this.paths) {
      const leaking = entry.perRank.filter(
        (r) => r.bytes?.verdict === "leaking" && r.bytes.evidence?.shortfall_sibling && r.births === null,
      );
      if (leaking.length === 0) continue;
      const sibling = leaking[0]!.bytes!.evidence!.shortfall_sibling!;
      const leakingRanks = new Set(leaking.map((r) => r.rank));
      const shift = (path: string): number | null => {
        const byRank = this.nets.get(path);
        if (byRank === undefined) return null;
        const inside: number[] = [];
        const outside: number[] = [];
        for (const [rank, net] of byRank) (leakingRanks.has(rank) ? inside : outside).push(net);
        if (inside.length === 0 || outside.length === 0) return null;
        return median(inside) - median(outside);
      };
      const own = shift(phasePath);
      const theirs = shift(sibling);
      if (own === null || theirs === null) continue;
      const kept = median(leaking.map((r) => r.bytes!.retained));
      const siblingEntry = this.paths.get(sibling);
      if (Math.abs(own) >= 0.5 * kept && Math.abs(theirs) < 0.5 * kept) {
        for (const r of leaking) r.bytes!.evidence!.shortfall_sibling = null;
      } else if (Math.abs(theirs) >= 0.5 * kept && Math.abs(own) < 0.5 * kept && siblingEntry !== undefined) {
        // The sibling's net change is what moved: the leak is the sibling's.
        for (const r of leaking) {
          const moved = siblingEntry.perRank.find((candidate) => candidate.rank === r.rank);
          if (moved === undefined || moved.bytes === null) continue;
          moved.bytes = {
            ...r.bytes!,
            evidence: { ...r.bytes!.evidence!, shortfall_sibling: null },
          };
          r.bytes = {
            ...r.bytes!,
            verdict: "stable",
            retained: 0,
            evidence: { ...r.bytes!.evidence!, retained_per_occurrence: 0, shortfall_sibling: null },
          };
        }
      }
    }
  }
}

/** Per path, the mean net change in bytes (allocator allocated, else device used) of closed occurrences. */
function meanNets(occurrences: readonly Occurrence[]): Map<string, number> {
  const sums = new Map<string, { total: number; count: number }>();
  for (const o of occurrences) {
    if (o.span.syntheticEnd) continue;
    let net = o.exitAllocated - o.enterAllocated;
    if (Number.isNaN(net)) net = o.exitUsed - o.enterUsed;
    if (Number.isNaN(net)) continue;
    const sum = sums.get(o.span.phasePath) ?? { total: 0, count: 0 };
    sum.total += net;
    sum.count++;
    sums.set(o.span.phasePath, sum);
  }
  return new Map([...sums].map(([path, { total, count }]) => [path, total / count]));
}

function isLeaking(r: RankVerdicts): boolean {
  return r.bytes?.verdict === "leaking" || r.tensors?.verdict === "leaking" || r.births?.leaking === true;
}

function report(phasePath: string, verdicts: readonly RankVerdicts[], occurrences: number): LeakReport {
  const perRank = [...verdicts].sort((a, b) => a.rank - b.rank);
  const leakingRanks = perRank.filter(isLeaking);
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

  const pool = verdict === "leaking" ? leakingRanks : verdict === "insufficient_data" ? perRank : analyzed;
  const best = pool
    .map((r) => ({ r, v: strongestVerdict([r.bytes, r.tensors]) }))
    .filter((x) => x.v !== null && x.v.verdict === verdict)
    .sort((a, b) => b.v!.confidence - a.v!.confidence)[0];
  const confidences = pool.map((r) =>
    verdict === "leaking" && r.births?.leaking
      ? r.births.confidence
      : (strongestVerdict([r.bytes, r.tensors])?.confidence ?? 0),
  );
  const confidence = verdict === "insufficient_data" ? 0 : round(median(confidences), 2);
  const leakingBytes = leakingRanks
    .filter((r) => r.bytes?.verdict === "leaking")
    .map((r) => r.bytes!.retained);
  const leakingTensors = leakingRanks
    .filter((r) => r.tensors?.verdict === "leaking")
    .map((r) => r.tensors!.retained);
  const bytesPer = leakingBytes.length > 0 ? Math.round(median(leakingBytes)) : null;
  const tensorsPer = leakingTensors.length > 0 ? round(median(leakingTensors), 1) : null;
  const reason =
    verdict === "insufficient_data"
      ? (strongestVerdict([perRank[0]?.bytes ?? null, perRank[0]?.tensors ?? null])?.reason ?? "no readings")
      : null;
  const birthRanks = leakingRanks.filter((r) => r.births?.leaking === true);
  const births =
    birthRanks.length > 0
      ? birthRanks.map((r) => r.births!).sort((a, b) => b.confidence - a.confidence)[0]!
      : null;
  const bestEvidence = birthRanks[0] ?? best?.r ?? perRank[0];
  const unitPath = bestEvidence?.bytes?.evidence?.unit_path ?? bestEvidence?.tensors?.evidence?.unit_path;
  const shortfall =
    verdict === "leaking"
      ? (bestEvidence?.bytes?.evidence?.shortfall_sibling ??
        bestEvidence?.tensors?.evidence?.shortfall_sibling ??
        null)
      : null;
  return {
    phase_path: phasePath,
    verdict,
    confidence,
    message: message(phasePath, verdict, {
      bytesPer,
      tensorsPer,
      leakingRanks: leakingRanks.map((r) => r.rank),
      rankCount: perRank.length,
      occurrences,
      unitPath: unitPath ?? phasePath,
      shortfall,
      reason,
      births: births?.evidence ?? null,
    }),
    bytes_per_occurrence: bytesPer,
    tensors_per_occurrence: tensorsPer,
    occurrences,
    ranks_analyzed: analyzed.length,
    leaking_ranks: leakingRanks.map((r) => r.rank),
    evidence: {
      bytes: bestEvidence?.bytes?.evidence ?? null,
      tensors: bestEvidence?.tensors?.evidence ?? null,
      rank: bestEvidence?.rank ?? null,
    },
    births: births?.evidence ?? null,
    reason,
  };
}

function listRanks(ranks: readonly number[], total: number): string {
  if (total <= 1) return "";
  if (ranks.length === total) return ` (all ${total} ranks)`;
  const shown = ranks.slice(0, 8).join(", ");
  return ` (rank${ranks.length > 1 ? "s" : ""} ${shown}${ranks.length > 8 ? ", ..." : ""} of ${total})`;
}

interface MessageParts {
  bytesPer: number | null;
  tensorsPer: number | null;
  leakingRanks: readonly number[];
  rankCount: number;
  occurrences: number;
  unitPath: string;
  shortfall: string | null;
  reason: string | null;
  births: BirthEvidence | null;
}

/** The wording of a leak is shared with the tracker's leak alerts (@stormlog/phases, retention/describe.ts). */
function message(phasePath: string, verdict: LeakVerdictKind, parts: MessageParts): string {
  const label = `\`${phasePath}\``;
  switch (verdict) {
    case "leaking": {
      const ranks = listRanks(parts.leakingRanks, parts.rankCount);
      if (parts.births !== null) return describeBirths(phasePath, parts.births, ranks);
      return describeKept(phasePath, parts, ranks);
    }
    case "plateau":
      return `${label} grew, then held steady (warm-up or a one-time step, not a leak)`;
    case "stable":
      return `${label} does not retain memory across its ${parts.occurrences} occurrences`;
    default:
      return `${label} cannot be judged: ${parts.reason ?? "no readings"}`;
  }
}

/** A leaking parent whose growth a leaking child keeps says which child. */
function annotateParents(reports: LeakReport[]): void {
  const judged = reports
    .filter((report) => report.verdict !== "insufficient_data")
    .map((report) => ({
      path: report.phase_path,
      leaking: report.verdict === "leaking",
      ownUnit: (report.evidence.bytes ?? report.evidence.tensors)?.unit_path === report.phase_path,
    }));
  for (const parent of reports)
    if (parent.verdict === "leaking") parent.message += describeGrowthInside(parent.phase_path, judged);
}
