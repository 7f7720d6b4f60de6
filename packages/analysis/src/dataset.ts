/**
 * The data of the selected session(s), combined from the segments' aggregates: per session and
 * rank one time-ordered series of samples (typed columns), its phase boundaries, alerts, health
 * transitions and peaks. The analyses read this and nothing else.
 */
import type {
  AlertEntry,
  BoundaryEntry,
  CounterPeak,
  HealthEntry,
  RankPart,
  SampleIdentity,
} from "./aggregate.js";
import { TimeRangeError } from "./errors.js";
import type { SegmentData } from "./merge.js";

/** Storage order of a line: segment ordinal and line number in one exact double. */
export const ORDER_SEGMENT_SCALE = 2 ** 32;

/** One session's rank: its samples in time order (ties in storage order) and its other records. */
export interface RankSeries {
  readonly sessionId: string;
  readonly rank: number;
  readonly count: number;
  /** Timestamp origin: `t[i]` is `timestamp_ns - base` (exact doubles). */
  readonly base: bigint;
  readonly t: Float64Array;
  /** Storage order (segment ordinal * 2^32 + line). */
  readonly order: Float64Array;
  /** NaN marks a null counter / an absent tensor count. */
  readonly allocated: Float64Array;
  readonly reserved: Float64Array;
  readonly used: Float64Array;
  readonly total: Float64Array;
  readonly tensors: Float64Array;
  readonly identities: readonly SampleIdentity[];
  /** Per sample index into `identities`; null when all use identity 0. */
  readonly identity: Uint16Array | null;
  readonly samplesWithoutUsed: number;
  /** Every event of the rank, samples or not. */
  readonly eventCount: number;
  readonly minTs: bigint | null;
  readonly maxTs: bigint | null;
  readonly peaks: readonly [CounterPeak | null, CounterPeak | null, CounterPeak | null];
  /** Phase boundaries in storage order, `order` like the samples'. */
  readonly boundaries: readonly (BoundaryEntry & { readonly order: number })[];
  readonly alerts: readonly AlertEntry[];
  readonly health: readonly HealthEntry[];
}

/** The selected data. */
export interface Dataset {
  /** Per session and rank, ordered by session id then rank. */
  readonly series: readonly RankSeries[];
  /** Event counts per type over the selection. */
  readonly eventTypes: ReadonlyMap<string, number>;
  readonly eventCount: number;
}

interface Builder {
  sessionId: string;
  rank: number;
  parts: { ordinal: number; part: RankPart }[];
}

/** Combines the parts of `memberIds` from every segment (given in reading order). */
export function buildDataset(segments: readonly SegmentData[], memberIds: readonly string[]): Dataset {
  const members = new Set(memberIds);
  const builders = new Map<string, Builder>();
  const eventTypes = new Map<string, number>();
  let eventCount = 0;
  segments.forEach((segment, ordinal) => {
    for (const [sessionId, session] of segment.aggregate.sessions) {
      if (!members.has(sessionId)) continue;
      eventCount += session.eventCount;
      for (const [type, count] of session.eventTypes)
        eventTypes.set(type, (eventTypes.get(type) ?? 0) + count);
      for (const [rank, part] of session.ranks) {
        const key = `${rank}\u0000${sessionId}`;
        let builder = builders.get(key);
        if (builder === undefined) {
          builder = { sessionId, rank, parts: [] };
          builders.set(key, builder);
        }
        builder.parts.push({ ordinal, part });
      }
    }
  });
  const series = [...builders.values()].map(combine);
  series.sort((a, b) => (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : a.rank - b.rank));
  return { series, eventTypes, eventCount };
}

function combine(builder: Builder): RankSeries {
  let n = 0;
  let base: bigint | null = null;
  for (const { part } of builder.parts) {
    n += part.samples.count;
    if (part.base !== null && (base === null || part.base < base)) base = part.base;
  }
  base ??= 0n;
  const t = new Float64Array(n);
  const order = new Float64Array(n);
  const allocated = new Float64Array(n);
  const reserved = new Float64Array(n);
  const used = new Float64Array(n);
  const total = new Float64Array(n);
  const tensors = new Float64Array(n);
  const identities: SampleIdentity[] = [];
  let identity: Uint16Array | null = null;
  const boundaries: (BoundaryEntry & { order: number })[] = [];
  const alerts: AlertEntry[] = [];
  const health: HealthEntry[] = [];
  const peaks: [CounterPeak | null, CounterPeak | null, CounterPeak | null] = [null, null, null];
  let eventCount = 0;
  let samplesWithoutUsed = 0;
  let minTs: bigint | null = null;
  let maxTs: bigint | null = null;
  let offset = 0;
  for (const { ordinal, part } of builder.parts) {
    const samples = part.samples;
    const count = samples.count;
    const orderBase = ordinal * ORDER_SEGMENT_SCALE;
    const shift = part.base === null ? 0n : part.base - base;
    if (shift > 9_007_199_254_740_991n) throw new TimeRangeError(builder.sessionId, builder.rank);
    const delta = Number(shift);
    const source = samples.t;
    for (let i = 0; i < count; i++) t[offset + i] = source[i]! + delta;
    allocated.set(samples.allocated.subarray(0, count), offset);
    reserved.set(samples.reserved.subarray(0, count), offset);
    used.set(samples.used.subarray(0, count), offset);
    total.set(samples.total.subarray(0, count), offset);
    tensors.set(samples.tensors.subarray(0, count), offset);
    for (let i = 0; i < count; i++) order[offset + i] = orderBase + samples.line[i]!;
    // Identities: re-indexed into the combined list.
    const map = part.identities.map((id) => {
      const found = identities.findIndex(
        (known) =>
          known.pid === id.pid &&
          known.host === id.host &&
          known.job_id === id.job_id &&
          known.world_size === id.world_size &&
          known.sampling_interval_ms === id.sampling_interval_ms &&
          known.device_id === id.device_id,
      );
      if (found >= 0) return found;
      identities.push(id);
      return identities.length - 1;
    });
    const local = samples.identity;
    if (local !== null || (map.length > 0 && map[0] !== 0)) {
      identity ??= new Uint16Array(n);
      for (let i = 0; i < count; i++) identity[offset + i] = map[local === null ? 0 : local[i]!]!;
    }
    offset += count;
    for (const boundary of part.boundaries)
      boundaries.push({ ...boundary, order: orderBase + boundary.line });
    alerts.push(...part.alerts);
    health.push(...part.health);
    part.peaks.forEach((peak, i) => {
      const current = peaks[i] ?? null;
      if (peak !== null && (current === null || peak.value > current.value)) peaks[i] = { ...peak };
    });
    eventCount += part.eventCount;
    samplesWithoutUsed += part.samplesWithoutUsed;
    if (part.minTs !== null && (minTs === null || part.minTs < minTs)) minTs = part.minTs;
    if (part.maxTs !== null && (maxTs === null || part.maxTs > maxTs)) maxTs = part.maxTs;
  }
  const result: RankSeries = {
    sessionId: builder.sessionId,
    rank: builder.rank,
    count: n,
    base,
    t,
    order,
    allocated,
    reserved,
    used,
    total,
    tensors,
    identities,
    identity,
    samplesWithoutUsed,
    eventCount,
    minTs,
    maxTs,
    peaks,
    boundaries,
    alerts,
    health,
  };
  return sortSeries(result);
}

/** Sorts a series by `(timestamp, storage order)` when it is not already. */
function sortSeries(series: RankSeries): RankSeries {
  const { t, order, count } = series;
  let sorted = true;
  for (let i = 1; i < count && sorted; i++) {
    if (t[i - 1]! > t[i]! || (t[i - 1] === t[i] && order[i - 1]! > order[i]!)) sorted = false;
  }
  if (sorted) return series;
  const index = Array.from({ length: count }, (_, i) => i);
  index.sort((a, b) => t[a]! - t[b]! || order[a]! - order[b]!);
  const permute = <T extends Float64Array | Uint16Array>(array: T): T => {
    const out = array.slice() as T;
    for (let i = 0; i < count; i++) out[i] = array[index[i]!]!;
    return out;
  };
  return {
    ...series,
    t: permute(t),
    order: permute(order),
    allocated: permute(series.allocated),
    reserved: permute(series.reserved),
    used: permute(series.used),
    total: permute(series.total),
    tensors: permute(series.tensors),
    identity: series.identity === null ? null : permute(series.identity),
  };
}

/** The exact timestamp of sample `i`. */
export function sampleTimestamp(series: RankSeries, i: number): bigint {
  return series.base + BigInt(series.t[i]!);
}
