/**
 * The reference's `merge_cross_rank_timelines`: the ranks' sample streams on one timeline, aligned on
 * each rank's first sample. (The cross-rank first-cause analysis itself is `cross-rank.ts`.)
 *
 * Differences from the reference, all on inputs it cannot take: schema v4 samples without
 * `device_used_bytes` are dropped with a note (as the v4 upstream does); `rank_sample_counts` and
 * `alignment_offsets_ns` are ordered `Map`s, which keep the reference's first-appearance key order.
 */
import type { TelemetryEvent } from "@stormlog/core";
import { isSampleEventType } from "@stormlog/core/internal";
import { comparePythonStrings } from "@stormlog/phases/internal";
import {
  NOTE_MULTIPLE_JOBS,
  NOTE_NO_DEVICE_USED,
  NOTE_NO_SAMPLES,
  NOTE_NON_SAMPLE,
  SKEW_NOTE_MULTIPLIER,
} from "./first-cause.js";
import { integerMedian, mostCommon } from "./stats.js";

/** One sample on the merged, rank-aligned timeline (`RankTimelinePoint`). */
export interface RankTimelinePoint {
  rank: number;
  timestamp_ns: bigint;
  /** `timestamp_ns` minus the rank's alignment offset. */
  aligned_timestamp_ns: bigint;
  device_used_bytes: number | null;
  allocator_reserved_bytes: number | null;
  allocator_allocated_bytes: number | null;
  allocator_change_bytes: number | null;
}

/** The merged timeline of a job (`CrossRankMergeResult`). Maps keep the reference's key order. */
export interface CrossRankMergeResult {
  job_id: string | null;
  world_size: number;
  participating_ranks: number[];
  missing_ranks: number[];
  /** Samples per rank, in order of each rank's first sample. */
  rank_sample_counts: Map<number, number>;
  /** Per rank: its first sample's timestamp minus the anchor rank's. */
  alignment_offsets_ns: Map<number, bigint>;
  /** Sorted by `(aligned_timestamp_ns, rank, timestamp_ns)`. */
  merged_points: RankTimelinePoint[];
  notes: string[];
}

const NOTE_NO_EVENTS = "No telemetry events were provided.";

function compareSamples(a: TelemetryEvent, b: TelemetryEvent): number {
  if (a.timestamp_ns !== b.timestamp_ns) return a.timestamp_ns < b.timestamp_ns ? -1 : 1;
  if (a.pid !== b.pid) return a.pid - b.pid;
  return comparePythonStrings(a.host, b.host);
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

/** Gaps past this many nanoseconds (104 days) are not exact as doubles. */
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

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

function sampleCounts(prepared: Prepared): Map<number, number> {
  const counts = new Map<number, number>();
  for (const [rank, group] of prepared.grouped) counts.set(rank, group.events.length);
  return counts;
}

/**
 * Merges the ranks' sample streams into one timeline aligned on each rank's first sample
 * (`merge_cross_rank_timelines`). Counters are the records' numbers: past 2^53, the nearest double
 * (the reference's are exact ints).
 */
export function mergeCrossRankTimelines(events: readonly TelemetryEvent[]): CrossRankMergeResult {
  const prepared = prepare(events);
  const points: RankTimelinePoint[] = [];
  for (const rank of prepared.participatingRanks) {
    const offset = prepared.offsets.get(rank)!;
    for (const event of prepared.grouped.get(rank)!.events) {
      points.push({
        rank,
        timestamp_ns: event.timestamp_ns,
        aligned_timestamp_ns: event.timestamp_ns - offset,
        device_used_bytes: event.device_used_bytes,
        allocator_reserved_bytes: event.allocator_reserved_bytes,
        allocator_allocated_bytes: event.allocator_allocated_bytes,
        allocator_change_bytes: event.allocator_change_bytes,
      });
    }
  }
  points.sort((a, b) => {
    if (a.aligned_timestamp_ns !== b.aligned_timestamp_ns)
      return a.aligned_timestamp_ns < b.aligned_timestamp_ns ? -1 : 1;
    if (a.rank !== b.rank) return a.rank - b.rank;
    return a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0;
  });
  return {
    job_id: prepared.jobId,
    world_size: prepared.worldSize,
    participating_ranks: prepared.participatingRanks,
    missing_ranks: prepared.missingRanks,
    rank_sample_counts: sampleCounts(prepared),
    alignment_offsets_ns: prepared.offsets,
    merged_points: points,
    notes: prepared.notes,
  };
}
