/**
 * The cross-rank analysis (the reference's `summarize_cross_rank_analysis`), computed one rank at a
 * time from the dataset's sample columns, so that a large job's samples never become objects nor
 * need to be in memory together. Same steps, notes, tie-breaks and output as the reference;
 * `test/report-golden.test.ts` checks it against the golden cases and, on hundreds of generated jobs,
 * against an event-by-event oracle (`test/oracles/cross-rank-events.ts`). What crosses ranks is
 * small: per rank its sample count, first sample and spike candidate, and the positive gaps between
 * samples (for the median sampling interval).
 */

import type { TelemetryEvent } from "@stormlog/core";
import {
  type PhaseAttributionPayload,
  type PhaseResolver,
  phaseAttributionToPayload,
} from "@stormlog/phases";
import { comparePythonStrings } from "@stormlog/phases/internal";
import { TimeRangeError } from "../errors.js";
import {
  type DatasetPlan,
  loadRanks,
  planDataset,
  type RankSeries,
  seriesForRule,
} from "../input/dataset.js";
import { aggregateEvents } from "../input/scan.js";
import { inMemorySegment } from "../input/sessions.js";
import type { RankAnalysis, RankData } from "./analysis.js";
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
} from "./first-cause.js";
import { halfSum, integerMedian, mostCommon } from "./stats.js";

/** A position in the input: timestamp, then storage order. */
interface Position {
  ts: bigint;
  order: number;
}

/**
 * Counts each sample's positive interval, and its world size above 1 (with where it first appears).
 * Like `Deltas.pushGaps`, a loop of its own: V8 compiled `CrossRankAccumulator.addRank` whole
 * around such loops, up to four times in a cold analysis.
 */
function countIdentities(
  interval: Float64Array,
  worldSize: Float64Array,
  n: number,
  intervals: Map<number, number>,
  worlds: Map<number, { count: number; index: number }>,
): void {
  for (let i = 0; i < n; i++) {
    const ms = interval[i]!;
    if (ms > 0) intervals.set(ms, (intervals.get(ms) ?? 0) + 1);
    const size = worldSize[i]!;
    if (size > 1) {
      const entry = worlds.get(size);
      if (entry === undefined) worlds.set(size, { count: 1, index: i });
      else entry.count++;
    }
  }
}

const before = (a: Position, b: Position): boolean => a.ts < b.ts || (a.ts === b.ts && a.order < b.order);

/** `most_common` over counts whose first occurrence is known by position (ranks arrive out of time order). */
function mostCommonByPosition<K>(counts: ReadonlyMap<K, { count: number; first: Position }>): K | undefined {
  return mostCommon(
    [...counts].map(([key, { count }]) => [key, count] as const),
    (a, b) => before(counts.get(a)!.first, counts.get(b)!.first),
  );
}

/** The median of a multiset given as value -> count (for the declared sampling intervals). */
function countedMedian(counts: ReadonlyMap<number, number>): bigint {
  const values = [...counts.keys()].sort((a, b) => a - b);
  let n = 0;
  for (const count of counts.values()) n += count;
  const at = (k: number): number => {
    let seen = 0;
    for (const value of values) {
      seen += counts.get(value)!;
      if (k < seen) return value;
    }
    return values[values.length - 1]!;
  };
  if (n % 2 === 1) return BigInt(at(n >> 1));
  return halfSum(at((n >> 1) - 1), at(n >> 1));
}

interface Spike {
  sessionId: string;
  firstSpikeNs: bigint;
  peakDeltaBytes: number | bigint;
  windowSamples: number;
  attribution: PhaseAttributionPayload | null;
}

type ColumnSpike = Spike & SpikeCandidate;

interface RankPartial {
  rank: number;
  count: number;
  firstTs: bigint;
  spike: Spike | null;
}

/**
 * The positive gaps between consecutive samples, every rank's (the median sampling interval needs
 * them all). Sized once from the plan's sample count, 4 bytes each while they fit in 32 bits (4.29 s),
 * widened to doubles otherwise.
 */
class Deltas {
  private narrow: Uint32Array | null = null;
  private wide: Float64Array | null = null;
  length = 0;

  constructor(private readonly capacity: number) {}

  /** Pushes the positive gaps between consecutive values of `t[0, n)`. */
  pushGaps(t: Float64Array, n: number): void {
    for (let i = 1; i < n; i++) {
      const delta = t[i]! - t[i - 1]!;
      if (delta > 0) this.push(delta);
    }
  }

  push(value: number): void {
    if (this.wide === null && value <= 0xffffffff) {
      this.narrow ??= new Uint32Array(Math.max(16, this.capacity));
      if (this.length === this.narrow.length)
        this.narrow = grow(this.narrow, new Uint32Array(this.length * 2));
      this.narrow[this.length++] = value;
      return;
    }
    if (this.wide === null) {
      this.wide = new Float64Array(Math.max(16, this.capacity, this.length + 1));
      if (this.narrow !== null) this.wide.set(this.narrow.subarray(0, this.length));
      this.narrow = null;
    }
    if (this.length === this.wide.length) this.wide = grow(this.wide, new Float64Array(this.length * 2));
    this.wide[this.length++] = value;
  }

  /** The values (the median selection may reorder them). */
  values(): Float64Array | Uint32Array {
    if (this.wide !== null) return this.wide.subarray(0, this.length);
    return this.narrow?.subarray(0, this.length) ?? new Float64Array(0);
  }
}

function grow<T extends Uint32Array | Float64Array>(from: T, to: T): T {
  to.set(from);
  return to;
}

/** What the cross-rank analysis reads of a rank: a `RankData`, or any resolver of its spikes' phases. */
export type CrossRankInput = Pick<RankData, "rank" | "series"> & {
  phaseIndex(series: RankSeries): PhaseResolver | null;
};

/** The cross-rank analysis, fed one rank at a time (all of that rank's sessions at once). */
export class CrossRankAccumulator implements RankAnalysis<CrossRankAnalysis> {
  private readonly filterJob: string | null;
  private readonly jobId: string | null;
  private readonly partials: RankPartial[] = [];
  private readonly worldCounts = new Map<number, { count: number; first: Position }>();
  private readonly deltas: Deltas;
  private readonly intervals = new Map<number, number>();
  private withoutUsed = 0;

  constructor(private readonly plan: DatasetPlan) {
    this.deltas = new Deltas(plan.crossRankSampleCount);
    const jobs = new Map<string, { count: number; first: Position }>();
    for (const [jobId, job] of plan.jobs)
      jobs.set(jobId, { count: job.count, first: { ts: job.firstTs, order: job.firstOrder } });
    this.jobId = mostCommonByPosition(jobs) ?? null;
    this.filterJob = jobs.size > 1 && this.jobId !== null ? this.jobId : null;
  }

  /** One rank: its series (one per session), and the phase resolver of each (for the spike's attribution). */
  addRank({ rank, series: allSeries, phaseIndex: resolverOf }: CrossRankInput): void {
    // The reference's cross-rank rule for samples: `event_type.casefold() == "sample"`.
    const series = allSeries.map((s) => seriesForRule(s, "casefold"));
    const resolverOfOwn = (s: RankSeries): PhaseResolver | null =>
      resolverOf(allSeries[series.indexOf(s)] ?? s);
    for (const s of series) this.withoutUsed += s.samplesWithoutUsed;
    const samples = this.selected(series);
    const n = samples.t.length;
    if (n === 0) return;
    // Positive gaps between consecutive samples, declared intervals, world sizes (first seen).
    const t = samples.t;
    this.deltas.pushGaps(t, n);
    const localWorld = new Map<number, { count: number; index: number }>();
    const only = samples.only;
    if (only !== null) {
      // One identity: every sample has its interval and world size (counted at once, not sample by sample).
      if (only.interval > 0) this.intervals.set(only.interval, (this.intervals.get(only.interval) ?? 0) + n);
      if (only.worldSize > 1) localWorld.set(only.worldSize, { count: n, index: 0 });
    } else countIdentities(samples.interval!, samples.worldSize!, n, this.intervals, localWorld);
    for (const [worldSize, { count, index }] of localWorld) {
      const first = { ts: samples.base + BigInt(t[index]!), order: samples.order[index]! };
      const known = this.worldCounts.get(worldSize);
      if (known === undefined) this.worldCounts.set(worldSize, { count, first });
      else {
        known.count += count;
        if (before(first, known.first)) known.first = first;
      }
    }
    this.partials.push({
      rank,
      count: n,
      firstTs: samples.base + BigInt(t[0]!),
      spike: findSpike(samples, rank, resolverOfOwn),
    });
  }

  /** The rank's selected samples (device used present, the chosen job) in the event version's order. */
  private selected(series: readonly RankSeries[]): Selected {
    const filter = this.filterJob;
    const identityAt = (s: RankSeries, i: number) => s.identities[s.identity === null ? 0 : s.identity[i]!]!;
    const keep = (s: RankSeries, i: number): boolean =>
      !Number.isNaN(s.used[i]!) && (filter === null || identityAt(s, i).job_id === filter);
    // The usual case: one series, one identity, so equal timestamps keep their order.
    if (series.length === 1 && series[0]!.identities.length === 1) {
      const s = series[0]!;
      const identity = s.identities[0]!;
      const n = s.count;
      let kept = 0;
      if (filter === null || identity.job_id === filter)
        for (let i = 0; i < n; i++) if (!Number.isNaN(s.used[i]!)) kept++;
      const all = kept === n;
      const out: Selected = {
        base: s.base,
        t: all ? s.t : new Float64Array(kept),
        order: all ? s.order : new Float64Array(kept),
        used: all ? s.used : new Float64Array(kept),
        interval: null,
        worldSize: null,
        series: null,
        only: {
          interval: identity.sampling_interval_ms * 1_000_000,
          worldSize: identity.world_size,
          series: s,
        },
      };
      if (!all && kept > 0) {
        let k = 0;
        for (let i = 0; i < n; i++) {
          if (Number.isNaN(s.used[i]!)) continue;
          out.t[k] = s.t[i]!;
          out.order[k] = s.order[i]!;
          out.used[k] = s.used[i]!;
          k++;
        }
      }
      return out;
    }
    let base = series[0]!.base;
    for (const s of series) if (s.base < base) base = s.base;
    const shifts = series.map((s) => {
      const shift = s.base - base;
      if (shift > 9_007_199_254_740_991n) throw new TimeRangeError(s.sessionId, s.rank);
      return Number(shift);
    });
    // (series, index) of the kept samples, by (timestamp, storage order): each series is sorted so.
    const picks: { s: number; i: number; t: number; order: number }[] = [];
    series.forEach((s, k) => {
      for (let i = 0; i < s.count; i++)
        if (keep(s, i)) picks.push({ s: k, i, t: s.t[i]! + shifts[k]!, order: s.order[i]! });
    });
    if (series.length > 1) picks.sort((a, b) => a.t - b.t || a.order - b.order);
    // Equal timestamps: the event version's stable sort by (timestamp, pid, host).
    for (let i = 1; i < picks.length; i++) {
      if (picks[i]!.t !== picks[i - 1]!.t) continue;
      let end = i + 1;
      while (end < picks.length && picks[end]!.t === picks[i]!.t) end++;
      const run = picks.slice(i - 1, end);
      run.sort((a, b) => {
        const x = identityAt(series[a.s]!, a.i);
        const y = identityAt(series[b.s]!, b.i);
        return x.pid - y.pid || comparePythonStrings(x.host, y.host);
      });
      picks.splice(i - 1, run.length, ...run);
      i = end - 1;
    }
    const n = picks.length;
    const out: Selected = {
      base,
      t: new Float64Array(n),
      order: new Float64Array(n),
      used: new Float64Array(n),
      interval: new Float64Array(n),
      worldSize: new Float64Array(n),
      series: new Array(n),
      only: null,
    };
    for (let k = 0; k < n; k++) {
      const pick = picks[k]!;
      const s = series[pick.s]!;
      const identity = identityAt(s, pick.i);
      out.t[k] = pick.t;
      out.order[k] = pick.order;
      out.used[k] = s.used[pick.i]!;
      out.interval![k] = identity.sampling_interval_ms * 1_000_000;
      out.worldSize![k] = identity.world_size;
      out.series![k] = s;
    }
    return out;
  }

  /** The reference's structure (`summarize_cross_rank_analysis`). */
  finish(): CrossRankAnalysis {
    const notes: string[] = [];
    const samples = this.plan.crossRankSampleCount;
    if (samples !== this.plan.eventCount) notes.push(NOTE_NON_SAMPLE);
    if (this.withoutUsed > 0) notes.push(NOTE_NO_DEVICE_USED);
    if (samples - this.withoutUsed === 0) {
      notes.push(NOTE_NO_SAMPLES);
      return empty(notes);
    }
    if (this.filterJob !== null) notes.push(NOTE_MULTIPLE_JOBS);
    const grouped = new Map(this.partials.map((partial) => [partial.rank, partial]));
    const participatingRanks = [...grouped.keys()].sort((a, b) => a - b);
    if (participatingRanks.length === 0) {
      // Every sample belonged to another job: the event version has nothing to group either.
      return { ...empty(notes), job_id: this.jobId };
    }
    const declared = mostCommonByPosition(this.worldCounts) ?? 1;
    const observed = participatingRanks[participatingRanks.length - 1]! + 1;
    const worldSize =
      participatingRanks.length > 1 ? Math.max(declared, observed) : Math.max(declared, observed, 1);
    const present = new Set(participatingRanks);
    const missingRanks: number[] = [];
    for (let rank = 0; rank < worldSize; rank++) if (!present.has(rank)) missingRanks.push(rank);
    if (missingRanks.length > 0) notes.push(`Missing rank data for ranks: ${missingRanks.join(", ")}.`);

    const anchorRank = grouped.has(0) ? 0 : participatingRanks[0]!;
    const anchorNs = grouped.get(anchorRank)!.firstTs;
    let medianIntervalNs = 0n;
    if (this.deltas.length > 0) medianIntervalNs = integerMedian(this.deltas.values());
    else if (this.intervals.size > 0) medianIntervalNs = countedMedian(this.intervals);
    const skewLimit = BigInt(SKEW_NOTE_MULTIPLIER) * medianIntervalNs;
    const offsets = new Map<number, bigint>();
    for (const rank of participatingRanks) {
      const offset = grouped.get(rank)!.firstTs - anchorNs;
      offsets.set(rank, offset);
      const magnitude = offset < 0n ? -offset : offset;
      if (medianIntervalNs > 0n && magnitude > skewLimit) {
        notes.push(
          `Rank ${rank} starts ${offset} ns from the anchor; first-sample alignment may be approximate.`,
        );
      }
    }
    const firstCause = detectFirstCause(grouped, offsets, missingRanks, medianIntervalNs);
    const rankSampleCounts: Record<string, number> = {};
    for (const [rank, partial] of grouped) rankSampleCounts[String(rank)] = partial.count;
    const alignment: Record<string, bigint> = {};
    for (const [rank, offset] of offsets) alignment[String(rank)] = offset;
    return {
      job_id: this.jobId,
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
}

/** One rank's selected samples, `t` in ns after `base`. */
interface Selected {
  base: bigint;
  t: Float64Array;
  order: Float64Array;
  used: Float64Array;
  /** Declared sampling interval, ns (null: `only.interval` for every sample). */
  interval: Float64Array | null;
  worldSize: Float64Array | null;
  series: RankSeries[] | null;
  /** The usual case (one series, one identity): what every sample shares. */
  only: { interval: number; worldSize: number; series: RankSeries } | null;
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

/** The first sample where consecutive increases of device used add up to `max(64 MiB, 10% of the peak)`. */
function findSpike(
  samples: Selected,
  rank: number,
  resolverOf: (series: RankSeries) => PhaseResolver | null,
): Spike | null {
  const n = samples.t.length;
  if (n < 2) return null;
  const exactUsed = exactUsedOf(samples);
  if (exactUsed !== null) return findSpikeExactly(samples, exactUsed, rank, resolverOf);
  let peak = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < n; i++) if (samples.used[i]! > peak) peak = samples.used[i]!;
  const threshold = Math.max(SPIKE_MIN_BYTES, Math.trunc(peak * 0.1));
  let cumulative = 0;
  let windowSamples = 0;
  let previous = samples.used[0]!;
  for (let i = 1; i < n; i++) {
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
    if (cumulative >= threshold) return spikeAt(samples, i, cumulative, windowSamples, rank, resolverOf);
  }
  return null;
}

/** Device used of the selected samples as exact integers, when one of them passes 2^53 (else null). */
function exactUsedOf(samples: Selected): bigint[] | null {
  // The usual case, decided without a pass over the samples: no series holds an exact counter.
  if (
    samples.only !== null
      ? samples.only.series.exact === null
      : samples.series!.every((s) => s.exact === null)
  )
    return null;
  const seriesOf = (i: number) => samples.series?.[i] ?? samples.only!.series;
  let any = false;
  for (let i = 0; i < samples.t.length && !any; i++) {
    const exact = seriesOf(i).exact;
    if (exact !== null && exact.get(samples.order[i]!)?.device_used_bytes !== undefined) any = true;
  }
  if (!any) return null;
  return Array.from(
    samples.used,
    (used, i) => seriesOf(i).exact?.get(samples.order[i]!)?.device_used_bytes ?? BigInt(used),
  );
}

/** `findSpike` with the reference's unbounded integers, for a rank whose counters pass 2^53. */
function findSpikeExactly(
  samples: Selected,
  used: readonly bigint[],
  rank: number,
  resolverOf: (series: RankSeries) => PhaseResolver | null,
): Spike | null {
  let peak = used[0]!;
  for (const value of used) if (value > peak) peak = value;
  // `max(64 MiB, int(peak * 0.1))`: the product is a float in the reference too.
  const tenth = BigInt(Math.trunc(Number(peak) * 0.1));
  const threshold = tenth > BigInt(SPIKE_MIN_BYTES) ? tenth : BigInt(SPIKE_MIN_BYTES);
  let cumulative = 0n;
  let windowSamples = 0;
  for (let i = 1; i < used.length; i++) {
    const delta = used[i]! - used[i - 1]!;
    if (delta <= 0n) {
      cumulative = 0n;
      windowSamples = 0;
      continue;
    }
    cumulative += delta;
    windowSamples++;
    if (cumulative >= threshold) {
      const bytes = Number.isSafeInteger(Number(cumulative)) ? Number(cumulative) : cumulative;
      return spikeAt(samples, i, bytes, windowSamples, rank, resolverOf);
    }
  }
  return null;
}

function spikeAt(
  samples: Selected,
  i: number,
  peakDeltaBytes: number | bigint,
  windowSamples: number,
  rank: number,
  resolverOf: (series: RankSeries) => PhaseResolver | null,
): Spike {
  const series = samples.series?.[i] ?? samples.only!.series;
  const ts = samples.base + BigInt(samples.t[i]!);
  const resolver = resolverOf(series);
  return {
    sessionId: series.sessionId,
    firstSpikeNs: ts,
    peakDeltaBytes,
    windowSamples,
    attribution: resolver ? phaseAttributionToPayload(resolver.resolve(ts, series.sessionId, rank)) : null,
  };
}

function detectFirstCause(
  grouped: ReadonlyMap<number, RankPartial>,
  offsets: ReadonlyMap<number, bigint>,
  missingRanks: readonly number[],
  medianIntervalNs: bigint,
): FirstCause {
  if (grouped.size === 1) return { clusterOnsetNs: null, suspects: [], notes: [NOTE_ONE_RANK] };
  const sparseRanks: number[] = [];
  const candidates: ColumnSpike[] = [];
  for (const [rank, partial] of grouped) {
    if (partial.count < 2) sparseRanks.push(rank);
    if (partial.spike !== null) {
      candidates.push({
        ...partial.spike,
        rank,
        alignedFirstSpikeNs: partial.spike.firstSpikeNs - (offsets.get(rank) ?? 0n),
      });
    }
  }
  return rankFirstCause(
    candidates,
    sparseRanks,
    missingRanks,
    medianIntervalNs,
    (candidate) => candidate.attribution,
  );
}

const NOTE_NO_EVENTS = "No telemetry events were provided.";

/**
 * The cross-rank summary of a job held as events (`summarize_cross_rank_analysis`): participating and
 * missing ranks, alignment offsets, the cluster onset and the first-cause suspects, with notes
 * explaining what limited the analysis. All events count as one job, whatever their sessions. The
 * events become the dataset the analysis reads (as `stormlog analyze` reads a sink); pass them
 * sorted by `timestamp_ns` (a stable sort), as the reference's callers do.
 */
export function summarizeCrossRankAnalysis(
  events: readonly TelemetryEvent[],
  options: CrossRankOptions = {},
): CrossRankAnalysis {
  if (events.length === 0) return empty([NOTE_NO_EVENTS, NOTE_NO_SAMPLES]);
  const aggregate = aggregateEvents(events);
  const plan = planDataset([inMemorySegment("<events>", null, aggregate)], [...aggregate.sessions.keys()]);
  const resolver = options.phaseResolver ?? null;
  const accumulator = new CrossRankAccumulator(plan);
  for (const { rank, series } of loadRanks(plan))
    accumulator.addRank({ rank, series, phaseIndex: () => resolver });
  return accumulator.finish();
}
