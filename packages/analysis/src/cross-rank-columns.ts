/**
 * `summarizeCrossRankAnalysis` (cross-rank.ts) computed straight from the sample columns, so a
 * 64-rank job's 320k samples never become objects. Same steps, notes, tie-breaks and output as the
 * event version; `test/cross-rank-columns.test.ts` checks that both agree on every golden case and
 * on generated jobs. Used when the selection's timestamps fit exact doubles (a span below 2^53 ns);
 * otherwise the event version runs.
 */
import { comparePythonStrings, type PhaseResolver, phaseAttributionToPayload } from "@stormlog/phases";
import {
  type CrossRankAnalysis,
  type FirstCauseConfidence,
  type FirstCauseSuspect,
  SKEW_NOTE_MULTIPLIER,
  SPIKE_MIN_BYTES,
} from "./cross-rank.js";
import type { Dataset, RankSeries } from "./dataset.js";

const NOTE_NON_SAMPLE = "Ignored non-sample events during cross-rank analysis.";
const NOTE_NO_DEVICE_USED = "Ignored samples without device-used memory during cross-rank analysis.";
const NOTE_NO_SAMPLES = "No sample telemetry events were available for distributed analysis.";
const NOTE_MULTIPLE_JOBS = "Multiple job_id values were observed; filtering to the most common value.";
const NOTE_ONE_RANK = "At least two ranks are required for cross-rank first-cause analysis.";
const NOTE_NO_SPIKES = "No qualifying cross-rank spikes were detected.";
const NOTE_ONE_SPIKE = "Only one rank produced a qualifying spike; confidence is limited.";

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const MAX_SAFE_BIG = BigInt(MAX_SAFE);

/** One rank's selected samples in the order the event version sorts them. */
interface RankSamples {
  rank: number;
  count: number;
  /** ns after the global base. */
  t: Float64Array;
  used: Float64Array;
  /** Sampling interval (ms) of each sample. */
  interval: Float64Array;
  /** Series of each sample (for its session id). */
  series: RankSeries[];
}

interface Position {
  t: number;
  order: number;
}

const before = (a: Position, b: Position): boolean => a.t < b.t || (a.t === b.t && a.order < b.order);

/** `Counter(...).most_common(1)`: the highest count, the first seen (in time order) on ties. */
function mostCommon<K>(counts: Map<K, { count: number; first: Position }>): K | undefined {
  let best: K | undefined;
  let bestCount = 0;
  let bestFirst: Position | null = null;
  for (const [key, { count, first }] of counts) {
    if (count > bestCount || (count === bestCount && bestFirst !== null && before(first, bestFirst))) {
      best = key;
      bestCount = count;
      bestFirst = first;
    }
  }
  return best;
}

/** `int(statistics.median(values))` of exact integers held in doubles (as cross-rank.ts computes it). */
function integerMedian(values: Float64Array): bigint {
  const n = values.length;
  values.sort();
  if (n % 2 === 1) return BigInt(values[n >> 1]!);
  const a = values[(n >> 1) - 1]!;
  const b = values[n >> 1]!;
  const total = a + b <= MAX_SAFE ? a + b : Number(BigInt(a) + BigInt(b));
  return BigInt(Math.trunc(total / 2));
}

/**
 * The cross-rank summary of the selection, or null when its timestamps do not fit exact doubles
 * (the caller then uses the event version).
 */
export function crossRankFromColumns(
  dataset: Dataset,
  resolver: PhaseResolver | null,
): CrossRankAnalysis | null {
  const all = dataset.series.filter((series) => series.count > 0);
  let base: bigint | null = null;
  let high: bigint | null = null;
  for (const series of all) {
    if (base === null || series.base < base) base = series.base;
    const end = series.base + BigInt(series.t[series.count - 1]!);
    if (high === null || end > high) high = end;
  }
  if (base !== null && high !== null && high - base > MAX_SAFE_BIG) return null;
  const globalBase = base ?? 0n;
  const shifts = all.map((series) => Number(series.base - globalBase));

  // Selection: samples with device used memory; the most common job id.
  const notes: string[] = [];
  let samples = 0;
  let withoutUsed = 0;
  for (const series of all) {
    samples += series.count;
    withoutUsed += series.samplesWithoutUsed;
  }
  if (samples !== dataset.eventCount) notes.push(NOTE_NON_SAMPLE);
  if (withoutUsed > 0) notes.push(NOTE_NO_DEVICE_USED);
  if (samples - withoutUsed === 0) {
    notes.push(NOTE_NO_SAMPLES);
    return empty(notes);
  }
  const jobCounts = new Map<string, { count: number; first: Position }>();
  all.forEach((series, k) => {
    for (let i = 0; i < series.count; i++) {
      if (Number.isNaN(series.used[i]!)) continue;
      const jobId = series.identities[series.identity === null ? 0 : series.identity[i]!]!.job_id;
      if (!jobId) continue;
      const entry = jobCounts.get(jobId);
      const position = { t: series.t[i]! + shifts[k]!, order: series.order[i]! };
      if (entry === undefined) jobCounts.set(jobId, { count: 1, first: position });
      else {
        entry.count++;
        if (before(position, entry.first)) entry.first = position;
      }
    }
  });
  const jobId = mostCommon(jobCounts) ?? null;
  const filterJob = jobCounts.size > 1 && jobId !== null ? jobId : null;
  if (filterJob !== null) notes.push(NOTE_MULTIPLE_JOBS);
  const selected = (series: RankSeries, i: number): boolean =>
    !Number.isNaN(series.used[i]!) &&
    (filterJob === null ||
      series.identities[series.identity === null ? 0 : series.identity[i]!]!.job_id === filterJob);

  // Per rank, the selected samples by (timestamp, storage order), then (timestamp, pid, host) stable.
  const byRank = new Map<number, number[]>();
  all.forEach((series, k) => {
    const list = byRank.get(series.rank);
    if (list === undefined) byRank.set(series.rank, [k]);
    else list.push(k);
  });
  const grouped = new Map<number, RankSamples>();
  const worldCounts = new Map<number, { count: number; first: Position }>();
  for (const [rank, members] of byRank) {
    const rankSamples = collectRank(
      rank,
      members.map((k) => all[k]!),
      members.map((k) => shifts[k]!),
      selected,
      worldCounts,
    );
    if (rankSamples.count > 0) grouped.set(rank, rankSamples);
  }
  const participatingRanks = [...grouped.keys()].sort((a, b) => a - b);

  // World size: the most common declared size above 1, at least the highest rank + 1.
  const declared = mostCommon(worldCounts) ?? 1;
  const observed =
    participatingRanks.length > 0 ? participatingRanks[participatingRanks.length - 1]! + 1 : declared;
  const worldSize =
    participatingRanks.length > 1 ? Math.max(declared, observed) : Math.max(declared, observed, 1);
  const present = new Set(participatingRanks);
  const missingRanks: number[] = [];
  for (let rank = 0; rank < worldSize; rank++) if (!present.has(rank)) missingRanks.push(rank);
  if (missingRanks.length > 0) notes.push(`Missing rank data for ranks: ${missingRanks.join(", ")}.`);

  const anchorRank = grouped.has(0) ? 0 : participatingRanks[0]!;
  const anchorT = grouped.get(anchorRank)!.t[0]!;
  const medianIntervalNs = medianInterval(grouped);
  const skewLimit = BigInt(SKEW_NOTE_MULTIPLIER) * medianIntervalNs;
  const offsets = new Map<number, bigint>();
  for (const rank of participatingRanks) {
    const offset = BigInt(grouped.get(rank)!.t[0]! - anchorT);
    offsets.set(rank, offset);
    const magnitude = offset < 0n ? -offset : offset;
    if (medianIntervalNs > 0n && magnitude > skewLimit) {
      notes.push(
        `Rank ${rank} starts ${offset} ns from the anchor; first-sample alignment may be approximate.`,
      );
    }
  }

  const firstCause = detectFirstCause(grouped, offsets, missingRanks, medianIntervalNs, globalBase, resolver);
  const rankSampleCounts: Record<string, number> = {};
  for (const [rank, rankSamples] of grouped) rankSampleCounts[String(rank)] = rankSamples.count;
  const alignment: Record<string, bigint> = {};
  for (const [rank, offset] of offsets) alignment[String(rank)] = offset;
  return {
    job_id: jobId,
    world_size: worldSize,
    participating_ranks: participatingRanks,
    missing_ranks: missingRanks,
    rank_sample_counts: rankSampleCounts,
    alignment_offsets_ns: alignment,
    cluster_onset_timestamp_ns: firstCause.clusterOnsetNs,
    first_cause_suspects: firstCause.suspects,
    notes: [...new Set([...notes, ...firstCause.notes])],
  };
}

function empty(notes: string[]): CrossRankAnalysis {
  return {
    job_id: null,
    world_size: 0,
    participating_ranks: [],
    missing_ranks: [],
    rank_sample_counts: {},
    alignment_offsets_ns: {},
    cluster_onset_timestamp_ns: null,
    first_cause_suspects: [],
    notes: [...new Set(notes)],
  };
}

/** One rank's selected samples from its series (usually one), merged in time then storage order. */
function collectRank(
  rank: number,
  members: readonly RankSeries[],
  shifts: readonly number[],
  selected: (series: RankSeries, i: number) => boolean,
  worldCounts: Map<number, { count: number; first: Position }>,
): RankSamples {
  const countWorld = (t: number, order: number, worldSize: number): void => {
    if (worldSize <= 1) return;
    const entry = worldCounts.get(worldSize);
    const position = { t, order };
    if (entry === undefined) worldCounts.set(worldSize, { count: 1, first: position });
    else {
      entry.count++;
      if (before(position, entry.first)) entry.first = position;
    }
  };
  const identityAt = (series: RankSeries, i: number) =>
    series.identities[series.identity === null ? 0 : series.identity[i]!]!;
  // The usual case: one series, one identity, no equal timestamps: its selected samples as they are.
  if (members.length === 1 && members[0]!.identities.length === 1) {
    const series = members[0]!;
    const shift = shifts[0]!;
    const identity = series.identities[0]!;
    let n = 0;
    for (let i = 0; i < series.count; i++) if (selected(series, i)) n++;
    const out: RankSamples = {
      rank,
      count: n,
      t: new Float64Array(n),
      used: new Float64Array(n),
      interval: new Float64Array(n).fill(identity.sampling_interval_ms),
      series: new Array(n).fill(series),
    };
    let k = 0;
    for (let i = 0; i < series.count; i++) {
      if (!selected(series, i)) continue;
      const t = series.t[i]! + shift;
      out.t[k] = t;
      out.used[k] = series.used[i]!;
      countWorld(t, series.order[i]!, identity.world_size);
      k++;
    }
    return out;
  }
  // Candidates: (member, index) pairs in (t, order) order: a merge of the members' sorted series.
  const picks: { m: number; i: number; t: number; order: number }[] = [];
  members.forEach((series, m) => {
    const shift = shifts[m]!;
    for (let i = 0; i < series.count; i++) {
      if (!selected(series, i)) continue;
      const t = series.t[i]! + shift;
      picks.push({ m, i, t, order: series.order[i]! });
      countWorld(t, series.order[i]!, identityAt(series, i).world_size);
    }
  });
  if (members.length > 1) picks.sort((a, b) => a.t - b.t || a.order - b.order);
  // Equal timestamps: the event version's stable sort by (timestamp, pid, host).
  const identityOf = (p: { m: number; i: number }) => identityAt(members[p.m]!, p.i);
  for (let i = 1; i < picks.length; i++) {
    if (picks[i]!.t !== picks[i - 1]!.t) continue;
    let end = i + 1;
    while (end < picks.length && picks[end]!.t === picks[i]!.t) end++;
    const run = picks.slice(i - 1, end);
    run.sort((a, b) => {
      const x = identityOf(a);
      const y = identityOf(b);
      return x.pid - y.pid || comparePythonStrings(x.host, y.host);
    });
    picks.splice(i - 1, run.length, ...run);
    i = end - 1;
  }
  const n = picks.length;
  const out: RankSamples = {
    rank,
    count: n,
    t: new Float64Array(n),
    used: new Float64Array(n),
    interval: new Float64Array(n),
    series: new Array(n),
  };
  for (let k = 0; k < n; k++) {
    const pick = picks[k]!;
    const series = members[pick.m]!;
    out.t[k] = pick.t;
    out.used[k] = series.used[pick.i]!;
    out.interval[k] = identityOf(pick).sampling_interval_ms;
    out.series[k] = series;
  }
  return out;
}

/** Median positive gap between a rank's consecutive samples; else of the declared intervals; else 0. */
function medianInterval(grouped: ReadonlyMap<number, RankSamples>): bigint {
  let count = 0;
  for (const samples of grouped.values()) {
    for (let i = 1; i < samples.count; i++) if (samples.t[i]! - samples.t[i - 1]! > 0) count++;
  }
  if (count > 0) {
    const deltas = new Float64Array(count);
    let k = 0;
    for (const samples of grouped.values()) {
      for (let i = 1; i < samples.count; i++) {
        const delta = samples.t[i]! - samples.t[i - 1]!;
        if (delta > 0) deltas[k++] = delta;
      }
    }
    return integerMedian(deltas);
  }
  const fallback: number[] = [];
  for (const samples of grouped.values()) {
    for (let i = 0; i < samples.count; i++)
      if (samples.interval[i]! > 0) fallback.push(samples.interval[i]! * 1_000_000);
  }
  return fallback.length > 0 ? integerMedian(Float64Array.from(fallback)) : 0n;
}

interface Candidate {
  rank: number;
  sessionId: string;
  firstSpikeNs: bigint;
  alignedFirstSpikeNs: bigint;
  peakDeltaBytes: number;
  windowSamples: number;
}

/** The first sample where consecutive increases of device used add up to `max(64 MiB, 10% of the peak)`. */
function findSpike(samples: RankSamples, offset: bigint, base: bigint): Candidate | null {
  if (samples.count < 2) return null;
  let peak = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < samples.count; i++) if (samples.used[i]! > peak) peak = samples.used[i]!;
  const threshold = Math.max(SPIKE_MIN_BYTES, Math.trunc(peak * 0.1));
  let cumulative = 0;
  let windowSamples = 0;
  let previous = samples.used[0]!;
  for (let i = 1; i < samples.count; i++) {
    const used = samples.used[i]!;
    const delta = used - previous;
    previous = used;
    if (delta <= 0) {
      cumulative = 0;
      windowSamples = 0;
      continue;
    }
    cumulative += delta;
    windowSamples++;
    if (cumulative < threshold) continue;
    const ts = base + BigInt(samples.t[i]!);
    return {
      rank: samples.rank,
      sessionId: samples.series[i]!.sessionId,
      firstSpikeNs: ts,
      alignedFirstSpikeNs: ts - offset,
      peakDeltaBytes: cumulative,
      windowSamples,
    };
  }
  return null;
}

function detectFirstCause(
  grouped: ReadonlyMap<number, RankSamples>,
  offsets: ReadonlyMap<number, bigint>,
  missingRanks: readonly number[],
  medianIntervalNs: bigint,
  base: bigint,
  resolver: PhaseResolver | null,
): { clusterOnsetNs: bigint | null; suspects: FirstCauseSuspect[]; notes: string[] } {
  if (grouped.size === 1) return { clusterOnsetNs: null, suspects: [], notes: [NOTE_ONE_RANK] };
  const notes: string[] = [];
  const sparseRanks: number[] = [];
  const candidates: Candidate[] = [];
  for (const [rank, samples] of grouped) {
    if (samples.count < 2) sparseRanks.push(rank);
    const candidate = findSpike(samples, offsets.get(rank) ?? 0n, base);
    if (candidate !== null) candidates.push(candidate);
  }
  if (sparseRanks.length > 0) {
    const listed = [...sparseRanks].sort((a, b) => a - b).join(", ");
    notes.push(`Some ranks have fewer than two samples and cannot contribute to spike detection: ${listed}.`);
  }
  if (candidates.length === 0) {
    notes.push(NOTE_NO_SPIKES);
    return { clusterOnsetNs: null, suspects: [], notes };
  }
  candidates.sort((a, b) => {
    if (a.alignedFirstSpikeNs !== b.alignedFirstSpikeNs)
      return a.alignedFirstSpikeNs < b.alignedFirstSpikeNs ? -1 : 1;
    if (a.peakDeltaBytes !== b.peakDeltaBytes) return b.peakDeltaBytes - a.peakDeltaBytes;
    return a.rank - b.rank;
  });
  let clusterOnsetNs: bigint | null = null;
  if (candidates.length >= 2) clusterOnsetNs = candidates[1]!.alignedFirstSpikeNs;
  else notes.push(NOTE_ONE_SPIKE);
  const cutoff = clusterOnsetNs ?? candidates[0]!.alignedFirstSpikeNs;
  const ranked = candidates.filter((candidate) => candidate.alignedFirstSpikeNs <= cutoff);
  const earliest = ranked[0]!.alignedFirstSpikeNs;
  let earliestCount = 0;
  for (const candidate of ranked) if (candidate.alignedFirstSpikeNs === earliest) earliestCount++;
  const sparse = missingRanks.length > 0 || sparseRanks.length > 0;
  const suspects = ranked.map((candidate): FirstCauseSuspect => {
    const lead = clusterOnsetNs === null ? 0n : clusterOnsetNs - candidate.alignedFirstSpikeNs;
    let confidence: FirstCauseConfidence = "low";
    if (candidates.length >= 2 && candidate.alignedFirstSpikeNs === earliest) {
      if (earliestCount === 1 && !sparse && (medianIntervalNs <= 0n || lead >= medianIntervalNs))
        confidence = "high";
      else confidence = sparse ? "low" : "medium";
    }
    const attribution = resolver
      ? resolver.resolve(candidate.firstSpikeNs, candidate.sessionId, candidate.rank)
      : null;
    return {
      rank: candidate.rank,
      first_spike_timestamp_ns: candidate.firstSpikeNs,
      aligned_first_spike_timestamp_ns: candidate.alignedFirstSpikeNs,
      peak_delta_bytes: candidate.peakDeltaBytes,
      spike_window_samples: candidate.windowSamples,
      lead_over_cluster_onset_ns: lead,
      confidence,
      evidence: {
        device_used_delta_bytes: candidate.peakDeltaBytes,
        supporting_ranks_at_or_before_onset: ranked.length,
      },
      phase_attribution: phaseAttributionToPayload(attribution),
    };
  });
  return { clusterOnsetNs, suspects, notes };
}
