/**
 * TEST ORACLE: the cross-rank analysis over events, written step by step after the reference's
 * `summarize_cross_rank_analysis`. The package computes it from the dataset only
 * (`src/cross-rank-columns.ts`); this version checks it on golden and generated jobs.
 *
 * Cross-rank analysis of a distributed job, as the Python reference's
 * `stormlog/distributed_analysis.py` computes it: rank timelines aligned on their first samples,
 * and the ranks whose device memory spiked first ("first-cause suspects"), with phase attribution.
 *
 * `summarizeCrossRankAnalysis` returns exactly the reference's `summarize_cross_rank_analysis`
 * structure (snake_case keys in its order, timestamps as exact `bigint`s). Pass events sorted by
 * `timestamp_ns` (a stable sort), as the reference's callers do; within a rank, samples are ordered
 * by `(timestamp_ns, pid, host)` here anyway.
 *
 * Differences from the reference, all on inputs it cannot take: schema v4 samples without
 * `device_used_bytes` are dropped with a note (as the v4 upstream does), and JavaScript objects list
 * integer-like keys in numeric order, so `rank_sample_counts` cannot keep the reference's
 * first-appearance key order (JSON key order carries no meaning; `mergeCrossRankTimelines` returns
 * it as an ordered `Map`).
 */
import type { TelemetryEvent } from "@stormlog/core";
import { isSampleEventType } from "@stormlog/core/internal";
import { type PhaseResolver, phaseAttributionToPayload } from "@stormlog/phases";
import { comparePythonStrings } from "@stormlog/phases/internal";
import {
  type CrossRankAnalysis,
  type CrossRankOptions,
  type FirstCause,
  NOTE_MULTIPLE_JOBS,
  NOTE_NO_DEVICE_USED,
  NOTE_NO_SAMPLES,
  NOTE_NON_SAMPLE,
  NOTE_ONE_RANK,
  rankFirstCause,
  SKEW_NOTE_MULTIPLIER,
  SPIKE_MIN_BYTES,
  type SpikeCandidate,
} from "../../src/analyses/first-cause.js";

const NOTE_NO_EVENTS = "No telemetry events were provided.";
const NOTE_NO_ANALYSIS_EVENTS = "No telemetry events were available for distributed analysis.";

function compareSamples(a: TelemetryEvent, b: TelemetryEvent): number {
  if (a.timestamp_ns !== b.timestamp_ns) return a.timestamp_ns < b.timestamp_ns ? -1 : 1;
  if (a.pid !== b.pid) return a.pid - b.pid;
  return comparePythonStrings(a.host, b.host);
}

/** `Counter(values).most_common(1)[0][0]`: the most frequent value, the first seen on ties. */
function mostCommon<T>(counts: Map<T, number>): T | undefined {
  let best: T | undefined;
  let bestCount = 0;
  for (const [value, count] of counts) {
    if (count > bestCount) {
      best = value;
      bestCount = count;
    }
  }
  return best;
}

/** One rank's samples, with what the analyses need read once from each event. */
interface RankSamples {
  events: TelemetryEvent[];
  /** `device_used_bytes` of `events`, in the same order. */
  used: number[];
  /** Positive gaps between consecutive samples, as numbers while they are below 2^53. */
  deltas: number[];
  /** A positive gap did not fit a double exactly. */
  largeDelta: boolean;
  /** Still in `(timestamp_ns, pid, host)` order as collected. */
  sorted: boolean;
}

interface Collected {
  grouped: Map<number, RankSamples>;
  sampleCount: number;
  withoutDeviceUsed: number;
  jobCounts: Map<string, number>;
  claimedWorldSizes: Map<number, number>;
}

/**
 * One pass over the events: keeps `sample` events with device-used memory (of one job when
 * `jobId` is given), grouped by rank in order of first appearance, and gathers per rank the
 * device-used series and the sampling gaps, so later steps do not walk the events again.
 */
function collect(events: readonly TelemetryEvent[], jobId: string | null): Collected {
  const grouped = new Map<number, RankSamples>();
  const jobCounts = new Map<string, number>();
  const claimedWorldSizes = new Map<number, number>();
  let sampleCount = 0;
  let withoutDeviceUsed = 0;
  let last: RankSamples | undefined;
  let lastRank = Number.NaN;
  for (const event of events) {
    if (!isSampleEventType(event.event_type, "casefold")) continue;
    const used = event.device_used_bytes;
    if (used === null) {
      withoutDeviceUsed++;
      continue;
    }
    const job = event.job_id;
    if (jobId !== null) {
      if (job !== jobId) continue;
    } else if (job) {
      jobCounts.set(job, (jobCounts.get(job) ?? 0) + 1);
    }
    sampleCount++;
    const worldSize = event.world_size;
    if (worldSize > 1) claimedWorldSizes.set(worldSize, (claimedWorldSizes.get(worldSize) ?? 0) + 1);
    const rank = event.rank;
    let group = rank === lastRank ? last : grouped.get(rank);
    if (group === undefined) {
      group = { events: [event], used: [used], deltas: [], largeDelta: false, sorted: true };
      grouped.set(rank, group);
    } else {
      const previous = group.events[group.events.length - 1]!;
      if (group.sorted && compareSamples(previous, event) > 0) group.sorted = false;
      if (group.sorted) {
        const delta = event.timestamp_ns - previous.timestamp_ns;
        if (delta > 0n) {
          if (delta > MAX_SAFE) group.largeDelta = true;
          group.deltas.push(Number(delta));
        }
      }
      group.events.push(event);
      group.used.push(used);
    }
    last = group;
    lastRank = rank;
  }
  // Ranks that arrived out of order: sort (stable, like Python's) and recompute their series.
  for (const group of grouped.values()) {
    if (group.sorted) continue;
    group.events.sort(compareSamples);
    group.used = group.events.map((event) => event.device_used_bytes!);
    group.deltas = [];
    for (let i = 1; i < group.events.length; i++) {
      const delta = group.events[i]!.timestamp_ns - group.events[i - 1]!.timestamp_ns;
      if (delta <= 0n) continue;
      if (delta > MAX_SAFE) group.largeDelta = true;
      group.deltas.push(Number(delta));
    }
    group.sorted = true;
  }
  return { grouped, sampleCount, withoutDeviceUsed, jobCounts, claimedWorldSizes };
}

/** `_determine_world_size`. */
function determineWorldSize(claimed: Map<number, number>, ranks: readonly number[]): number {
  const declared = mostCommon(claimed) ?? 1;
  const observed = ranks.length > 0 ? ranks[ranks.length - 1]! + 1 : declared;
  if (ranks.length > 1) return Math.max(declared, observed);
  return Math.max(declared, observed, 1);
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** `int(statistics.median(values))` of exact integers. */
function integerMedian(values: Float64Array | bigint[]): bigint {
  const n = values.length;
  if (values instanceof Float64Array) {
    values.sort();
    if (n % 2 === 1) return BigInt(values[n >> 1]!);
    const a = values[(n >> 1) - 1]!;
    const b = values[n >> 1]!;
    // Python: (a + b) / 2 as a correctly rounded float, then truncated; halving is exact.
    const total = a + b <= Number.MAX_SAFE_INTEGER ? a + b : Number(BigInt(a) + BigInt(b));
    return BigInt(Math.trunc(total / 2));
  }
  values.sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  if (n % 2 === 1) return values[n >> 1]!;
  return BigInt(Math.trunc(Number(values[(n >> 1) - 1]! + values[n >> 1]!) / 2));
}

/** `_median_sampling_interval_ns`: median positive gap between a rank's samples, else of the declared intervals. */
function medianSamplingIntervalNs(grouped: Map<number, RankSamples>): bigint {
  let count = 0;
  let large = false;
  for (const group of grouped.values()) {
    count += group.deltas.length;
    if (group.largeDelta) large = true;
  }
  if (count > 0) {
    if (large) {
      // Rare: gaps beyond 2^53 ns (104 days); redo them exactly.
      const exact: bigint[] = [];
      for (const group of grouped.values()) {
        for (let i = 1; i < group.events.length; i++) {
          const delta = group.events[i]!.timestamp_ns - group.events[i - 1]!.timestamp_ns;
          if (delta > 0n) exact.push(delta);
        }
      }
      return integerMedian(exact);
    }
    const all = new Float64Array(count);
    let k = 0;
    for (const group of grouped.values()) for (const delta of group.deltas) all[k++] = delta;
    return integerMedian(all);
  }
  const fallback: number[] = [];
  for (const group of grouped.values()) {
    for (const event of group.events)
      if (event.sampling_interval_ms > 0) fallback.push(event.sampling_interval_ms * 1_000_000);
  }
  return fallback.length > 0 ? integerMedian(Float64Array.from(fallback)) : 0n;
}

interface Prepared {
  jobId: string | null;
  worldSize: number;
  participatingRanks: number[];
  missingRanks: number[];
  grouped: Map<number, RankSamples>;
  offsets: Map<number, bigint>;
  medianIntervalNs: bigint;
  /** Notes of the merge step (`merge_result.notes`). */
  notes: string[];
  /** Notes of the selection step, for the first-cause step when nothing was selected. */
  selectionNotes: string[];
}

/** Everything `merge_cross_rank_timelines` computes except the points themselves. */
function prepare(events: readonly TelemetryEvent[]): Prepared {
  const empty = (jobId: string | null, notes: string[], selectionNotes: string[]): Prepared => ({
    jobId,
    worldSize: 0,
    participatingRanks: [],
    missingRanks: [],
    grouped: new Map(),
    offsets: new Map(),
    medianIntervalNs: 0n,
    notes,
    selectionNotes,
  });
  // `_select_cross_rank_analysis_events`, fused with the grouping.
  let collected = collect(events, null);
  const selectionNotes: string[] = [];
  if (collected.sampleCount + collected.withoutDeviceUsed !== events.length)
    selectionNotes.push(NOTE_NON_SAMPLE);
  if (collected.withoutDeviceUsed > 0) selectionNotes.push(NOTE_NO_DEVICE_USED);
  if (collected.sampleCount === 0) selectionNotes.push(NOTE_NO_SAMPLES);
  const jobId = collected.sampleCount === 0 ? null : (mostCommon(collected.jobCounts) ?? null);
  if (collected.jobCounts.size > 1 && jobId !== null) {
    selectionNotes.push(NOTE_MULTIPLE_JOBS);
    collected = collect(events, jobId);
  }
  if (events.length === 0) return empty(null, [NOTE_NO_EVENTS], selectionNotes);
  if (collected.sampleCount === 0) return empty(jobId, [...selectionNotes], selectionNotes);

  const notes = [...selectionNotes];
  const grouped = collected.grouped;
  const participatingRanks = [...grouped.keys()].sort((a, b) => a - b);
  const worldSize = determineWorldSize(collected.claimedWorldSizes, participatingRanks);
  const present = new Set(participatingRanks);
  const missingRanks: number[] = [];
  for (let rank = 0; rank < worldSize; rank++) if (!present.has(rank)) missingRanks.push(rank);
  if (missingRanks.length > 0) notes.push(`Missing rank data for ranks: ${missingRanks.join(", ")}.`);

  const anchorRank = grouped.has(0) ? 0 : participatingRanks[0]!;
  const anchorNs = grouped.get(anchorRank)!.events[0]!.timestamp_ns;
  const medianIntervalNs = medianSamplingIntervalNs(grouped);
  const skewLimit = BigInt(SKEW_NOTE_MULTIPLIER) * medianIntervalNs;
  const offsets = new Map<number, bigint>();
  for (const rank of participatingRanks) {
    const offset = grouped.get(rank)!.events[0]!.timestamp_ns - anchorNs;
    offsets.set(rank, offset);
    const magnitude = offset < 0n ? -offset : offset;
    if (medianIntervalNs > 0n && magnitude > skewLimit) {
      notes.push(
        `Rank ${rank} starts ${offset} ns from the anchor; first-sample alignment may be approximate.`,
      );
    }
  }
  return {
    jobId,
    worldSize,
    participatingRanks,
    missingRanks,
    grouped,
    offsets,
    medianIntervalNs,
    notes,
    selectionNotes,
  };
}

/** A spike candidate, with the session its spike sample belongs to (for phase attribution). */
interface EventSpike extends SpikeCandidate {
  readonly sessionId: string;
}

/**
 * `_find_rank_spike_candidate`: the first sample where a run of consecutive increases of device
 * used memory adds up to the threshold, `max(64 MiB, 10% of the rank's peak)`.
 */
function findSpike(samples: RankSamples, offset: bigint): EventSpike | null {
  const used = samples.used;
  const n = used.length;
  if (n < 2) return null;
  let peak = used[0]!;
  for (let i = 1; i < n; i++) if (used[i]! > peak) peak = used[i]!;
  const threshold = Math.max(SPIKE_MIN_BYTES, Math.trunc(peak * 0.1));
  let cumulative = 0;
  let windowSamples = 0;
  for (let i = 1; i < n; i++) {
    const delta = used[i]! - used[i - 1]!;
    if (delta <= 0) {
      cumulative = 0;
      windowSamples = 0;
      continue;
    }
    cumulative += delta;
    windowSamples++;
    if (cumulative < threshold) continue;
    const event = samples.events[i]!;
    return {
      rank: event.rank,
      sessionId: event.session_id,
      firstSpikeNs: event.timestamp_ns,
      alignedFirstSpikeNs: event.timestamp_ns - offset,
      peakDeltaBytes: cumulative,
      windowSamples,
    };
  }
  return null;
}

/** `_detect_first_cause_spikes`. */
function detectFirstCause(prepared: Prepared, phaseResolver: PhaseResolver | null | undefined): FirstCause {
  const grouped = prepared.grouped;
  if (grouped.size === 0) return { clusterOnsetNs: null, suspects: [], notes: [NOTE_NO_ANALYSIS_EVENTS] };
  if (grouped.size === 1) return { clusterOnsetNs: null, suspects: [], notes: [NOTE_ONE_RANK] };

  const sparseRanks: number[] = [];
  const candidates: EventSpike[] = [];
  for (const [rank, samples] of grouped) {
    if (samples.events.length < 2) sparseRanks.push(rank);
    const candidate = findSpike(samples, prepared.offsets.get(rank) ?? 0n);
    if (candidate !== null) candidates.push(candidate);
  }
  return rankFirstCause(
    candidates,
    sparseRanks,
    prepared.missingRanks,
    prepared.medianIntervalNs,
    (candidate) =>
      phaseAttributionToPayload(
        phaseResolver
          ? phaseResolver.resolve(candidate.firstSpikeNs, candidate.sessionId, candidate.rank)
          : null,
      ),
  );
}

/**
 * The cross-rank summary of a job (`summarize_cross_rank_analysis`): participating and missing
 * ranks, alignment offsets, the cluster onset and the first-cause suspects, with notes explaining
 * what limited the analysis.
 */
export function summarizeCrossRankEvents(
  events: readonly TelemetryEvent[],
  options: CrossRankOptions = {},
): CrossRankAnalysis {
  const prepared = prepare(events);
  const firstCause: FirstCause =
    prepared.grouped.size === 0
      ? {
          clusterOnsetNs: null,
          suspects: [],
          notes: prepared.selectionNotes.length > 0 ? prepared.selectionNotes : [...prepared.notes],
        }
      : detectFirstCause(prepared, options.phaseResolver);

  const rankSampleCounts: Record<string, number> = {};
  for (const [rank, group] of prepared.grouped) rankSampleCounts[String(rank)] = group.events.length;
  const offsets: Record<string, bigint> = {};
  for (const [rank, offset] of prepared.offsets) offsets[String(rank)] = offset;
  return {
    job_id: prepared.jobId,
    world_size: prepared.worldSize,
    participating_ranks: prepared.participatingRanks,
    missing_ranks: prepared.missingRanks,
    rank_sample_counts: rankSampleCounts,
    alignment_offsets_ns: offsets,
    cluster_onset_timestamp_ns: firstCause.clusterOnsetNs,
    first_cause_suspects: firstCause.suspects,
    notes: [...new Set([...prepared.notes, ...firstCause.notes])],
  };
}
