/**
 * The data of the selected session(s), one rank at a time. `planDataset` works out from the segments'
 * digests which ranks there are and where their parts lie; `DatasetLoader.load` then combines one
 * session's rank from its segments into a time-ordered series of samples (typed columns) with its
 * phase boundaries, alerts, health transitions and peaks. Aggregates kept on disk (the index) are
 * read when a rank needs them and let go after, so memory holds one rank's data, not the input's.
 */
import type { JsonObject } from "@stormlog/core";
import { type ExactCounters, SAMPLE_RULE_BITS, type SampleRule } from "@stormlog/core/internal";
import { TimeRangeError } from "../errors.js";
import { decodeAggregate, readAggregateFile } from "../index/index-format.js";
import { withHeadroom } from "../scratch.js";
import type {
  AlertEntry,
  BirthEntry,
  CounterPeak,
  HealthEntry,
  InstantEntry,
  RankPart,
  RankSeed,
  SampleIdentity,
  SegmentAggregate,
} from "./aggregate.js";
import { ALL_SAMPLE_RULES, seriesKey } from "./aggregate.js";
import type { BoundaryEntry } from "./boundary-log.js";
import { scanRangeSync, scanSegmentSync } from "./scan.js";
import type { SegmentData } from "./sessions.js";

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
  /**
   * Per sample, which of the reference's sample rules take it (core's `sampleRules` bits); null when
   * all samples are exact `sample` records. `seriesForRule` keeps one rule's samples.
   */
  readonly rules: Uint8Array | null;
  /**
   * Exact values of counters past 2^53 (where the columns hold the nearest double), by the sample's
   * storage order (`order`); null when there are none, the usual case. Read them with `exactAt`.
   */
  readonly exact: ReadonlyMap<number, ExactCounters> | null;
  /**
   * Phase attribution hints of samples (`origin_thread_id` / `origin_phase_scope_id` of their
   * metadata), by storage order like `exact`; null when there are none. Read them with `originAt`.
   */
  readonly origins: ReadonlyMap<number, JsonObject> | null;
  readonly samplesWithoutUsed: number;
  /** Every event of the rank, samples or not. */
  readonly eventCount: number;
  readonly minTs: bigint | null;
  readonly maxTs: bigint | null;
  readonly peaks: readonly [CounterPeak | null, CounterPeak | null, CounterPeak | null];
  /** Phase boundaries in storage order. */
  readonly boundaries: readonly BoundaryEntry[];
  /** Storage order of each boundary (as `order`), so that boundaries and samples interleave exactly. */
  readonly boundaryOrder: Float64Array;
  /** Alerts in storage order, each segment's complete (see `DETAIL_CAP`). */
  readonly alerts: readonly AlertEntry[];
  /** Storage order of each alert (as `order`). */
  readonly alertOrder: Float64Array;
  readonly health: readonly HealthEntry[];
  /** Samples' live tensors by birth phase (tfjs attribution), in storage order. */
  readonly births: readonly BirthEntry[];
  /** Records shown as instants (alerts, lifecycle, collector health), in storage order. */
  readonly instants: readonly InstantEntry[];
  /** Storage order of each instant (as `order`). */
  readonly instantOrder: Float64Array;
  /** Hosts of the rank's events, that of its earliest event first (ties: storage order). */
  readonly hosts: readonly string[];
  /** Storage order of the earliest event (NaN without events), which decides ties with other series. */
  readonly firstOrder: number;
  /** The earliest event with a `job_id` (ties: storage order), null when none has one. */
  readonly job: SeriesJob | null;
}

/** The earliest event of a series with a `job_id`: the job id, when, and its storage order. */
export interface SeriesJob {
  readonly jobId: string;
  readonly timestampNs: bigint;
  readonly order: number;
}

/** Where one session's rank lies: the ordinals of the segments holding parts of it. */
export interface SeriesPlan {
  readonly sessionId: string;
  readonly rank: number;
  readonly ordinals: readonly number[];
}

/** What the selection holds, from the digests alone. */
export interface DatasetPlan {
  readonly segments: readonly SegmentData[];
  /** Per rank (ascending), its sessions' series (by session id). */
  readonly ranks: readonly { readonly rank: number; readonly series: readonly SeriesPlan[] }[];
  readonly eventTypes: ReadonlyMap<string, number>;
  readonly eventCount: number;
  /** Sample records (of any reference rule). */
  readonly sampleCount: number;
  /** Sample records the cross-rank analysis takes (`event_type.casefold() == "sample"`). */
  readonly crossRankSampleCount: number;
  /** Cross-rank job statistics over samples with device used memory: count and first position. */
  readonly jobs: ReadonlyMap<string, { count: number; firstTs: bigint; firstOrder: number }>;
}

/** Plans the selection `memberIds` over `segments` (in reading order). */
export function planDataset(segments: readonly SegmentData[], memberIds: readonly string[]): DatasetPlan {
  const members = new Set(memberIds);
  const bySeries = new Map<string, { sessionId: string; rank: number; ordinals: number[] }>();
  const eventTypes = new Map<string, number>();
  const jobs = new Map<string, { count: number; firstTs: bigint; firstOrder: number }>();
  let eventCount = 0;
  let sampleCount = 0;
  let crossRankSampleCount = 0;
  segments.forEach((segment, ordinal) => {
    for (const session of segment.digest.sessions) {
      if (!members.has(session.sessionId)) continue;
      eventCount += session.eventCount;
      for (const [type, count] of session.eventTypes)
        eventTypes.set(type, (eventTypes.get(type) ?? 0) + count);
      for (const rank of session.ranks) {
        sampleCount += rank.sampleCount;
        crossRankSampleCount += rank.crossRankSampleCount;
        const key = `${rank.rank}\u0000${session.sessionId}`;
        const entry = bySeries.get(key);
        if (entry === undefined)
          bySeries.set(key, { sessionId: session.sessionId, rank: rank.rank, ordinals: [ordinal] });
        else entry.ordinals.push(ordinal);
        for (const job of rank.jobs) {
          const order = ordinal * ORDER_SEGMENT_SCALE + job.firstLine;
          const known = jobs.get(job.jobId);
          if (known === undefined)
            jobs.set(job.jobId, { count: job.count, firstTs: job.firstTs, firstOrder: order });
          else {
            known.count += job.count;
            if (job.firstTs < known.firstTs || (job.firstTs === known.firstTs && order < known.firstOrder)) {
              known.firstTs = job.firstTs;
              known.firstOrder = order;
            }
          }
        }
      }
    }
  });
  const byRank = new Map<number, SeriesPlan[]>();
  for (const series of bySeries.values()) {
    const list = byRank.get(series.rank);
    if (list === undefined) byRank.set(series.rank, [series]);
    else list.push(series);
  }
  const ranks = [...byRank.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([rank, series]) => ({
      rank,
      series: series.sort((a, b) => (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0)),
    }));
  return { segments, ranks, eventTypes, eventCount, sampleCount, crossRankSampleCount, jobs };
}

/**
 * Byte buffers and sample columns handed out for one rank and taken back by `release()`, then
 * reused for the next rank. A rank's arrays live for a few milliseconds, but V8 frees typed arrays'
 * memory only once tens of MB of them have piled up: reusing them keeps memory at the largest
 * rank's size instead of growing with the number of ranks.
 */
class ArrayPool {
  private readonly freeBytes: Buffer[] = [];
  private readonly freeColumns: Float64Array[] = [];
  private readonly freeIdentity: Uint16Array[] = [];
  private heldBytes: Buffer[] = [];
  private readonly heldColumns: Float64Array[] = [];
  private readonly heldIdentity: Uint16Array[] = [];

  /** A buffer of at least `size` bytes at byte offset 0 (so that 8-byte columns can view it). */
  bytes(size: number): Buffer {
    const free = take(this.freeBytes, size);
    const buffer = free ?? Buffer.allocUnsafeSlow(withHeadroom(size));
    this.heldBytes.push(buffer);
    return buffer;
  }

  /** `count` doubles (not zeroed). */
  doubles(count: number): Float64Array {
    const array = take(this.freeColumns, count) ?? new Float64Array(withHeadroom(count));
    this.heldColumns.push(array);
    return array.subarray(0, count);
  }

  /** `count` zeroed 16-bit values. */
  identity(count: number): Uint16Array {
    const array = take(this.freeIdentity, count) ?? new Uint16Array(withHeadroom(count));
    this.heldIdentity.push(array);
    const view = array.subarray(0, count);
    view.fill(0);
    return view;
  }

  /** Takes back what was handed out except `keep` (buffers of aggregates still loaded). */
  reclaim(keep: ReadonlySet<Buffer>): void {
    for (const buffer of this.heldBytes) if (!keep.has(buffer)) this.freeBytes.push(buffer);
    this.heldBytes = this.heldBytes.filter((buffer) => keep.has(buffer));
    for (const array of this.heldColumns) this.freeColumns.push(array);
    for (const array of this.heldIdentity) this.freeIdentity.push(array);
    this.heldColumns.length = 0;
    this.heldIdentity.length = 0;
  }
}

/** The smallest free array of at least `size` elements, taken off the list; too-small ones are dropped when the list is long. */
function take<T extends { length: number }>(free: T[], size: number): T | undefined {
  let best = -1;
  for (let i = 0; i < free.length; i++) {
    const length = free[i]!.length;
    if (length >= size && (best < 0 || length < free[best]!.length)) best = i;
  }
  if (best < 0) {
    // None fits: the smallest gives way to a larger one (the pool never holds more arrays than a rank uses).
    if (free.length > 0) {
      let smallest = 0;
      for (let i = 1; i < free.length; i++) if (free[i]!.length < free[smallest]!.length) smallest = i;
      free.splice(smallest, 1);
    }
    return undefined;
  }
  return free.splice(best, 1)[0];
}

/** A rank part as a series is made of it: its segment, and its lines' storage order base. */
interface LoadedPart {
  readonly ordinal: number;
  /** `ordinal * ORDER_SEGMENT_SCALE`, plus the lines before its piece for a segment scanned in pieces. */
  readonly orderBase: number;
  readonly part: RankPart;
}

/** Pieces per segment a unit key leaves room for (`unitKey`). */
const PIECE_SCALE = 2 ** 20;

/** Key of one stored aggregate: a segment's (`piece` -1), or one piece's of a segment scanned in pieces. */
const unitKey = (ordinal: number, piece: number): number => ordinal * PIECE_SCALE + piece + 1;

/**
 * Combines series from the plan's segments, reading aggregates kept on disk when needed. A series
 * `load` returns may use the loader's reused arrays: it is valid until the next `release()`.
 */
export class DatasetLoader {
  /** Aggregates read from disk, by unit (`units`), with the buffer they view, until `release()`. */
  private readonly loaded = new Map<number, { aggregate: SegmentAggregate; buffer: Buffer | null }>();
  private readonly pool = new ArrayPool();
  /** Per segment scanned in pieces, the series (`seriesKey`) each piece holds. */
  private readonly pieceSeries = new Map<number, ReadonlySet<string>[]>();

  constructor(private readonly plan: DatasetPlan) {}

  /**
   * The stored aggregates (units) that hold parts of `series`, in storage order: a unit per
   * segment, or, for a segment scanned in pieces, the pieces holding it.
   */
  units(series: SeriesPlan): number[] {
    const out: number[] = [];
    const key = seriesKey(series.sessionId, series.rank);
    for (const ordinal of series.ordinals) {
      const pieces = this.plan.segments[ordinal]!.pieces;
      if (pieces === undefined) {
        out.push(unitKey(ordinal, -1));
        continue;
      }
      let held = this.pieceSeries.get(ordinal);
      if (held === undefined) {
        held = pieces.map(
          (piece) =>
            new Set(
              piece.digest.sessions.flatMap((session) =>
                session.ranks.map((rank) => seriesKey(session.sessionId, rank.rank)),
              ),
            ),
        );
        this.pieceSeries.set(ordinal, held);
      }
      held.forEach((keys, k) => {
        if (keys.has(key)) out.push(unitKey(ordinal, k));
      });
    }
    return out;
  }

  private aggregate(unit: number): SegmentAggregate {
    const ordinal = Math.floor(unit / PIECE_SCALE);
    const k = (unit % PIECE_SCALE) - 1;
    const segment = this.plan.segments[ordinal]!;
    const stored = k < 0 ? segment : segment.pieces![k]!;
    if (stored.aggregate !== null) return stored.aggregate;
    const known = this.loaded.get(unit);
    if (known !== undefined) return known.aggregate;
    const file = stored.file!;
    const read = readAggregateFile(file.path, (size) => this.pool.bytes(size));
    let aggregate = read === null ? undefined : decodeAggregate(read.bytes, file.stamp);
    let buffer = read?.buffer ?? null;
    // An index file damaged since it was checked: the segment (or the piece) itself is read again.
    if (aggregate === undefined && segment.segment !== undefined) {
      aggregate = k < 0 ? scanSegmentSync(segment.segment) : this.rescan(segment, k, null);
      buffer = null;
    }
    if (aggregate === undefined)
      throw new Error(`index file ${file.path} is unreadable; delete the index directory and analyse again`);
    this.loaded.set(unit, { aggregate, buffer });
    return aggregate;
  }

  /** Piece `k` of a segment scanned again, with `part`'s timestamp origin when given (see `ScanRange`). */
  private rescan(segment: SegmentData, k: number, part: RankPart | null): SegmentAggregate {
    const { start, end, lineOffset } = segment.pieces![k]!;
    const seeds = new Map<string, RankSeed>();
    if (part?.base != null)
      seeds.set(seriesKey(part.sessionId, part.rank), {
        base: part.base,
        head: part.baseHead,
        tail: part.baseTail,
      });
    return scanRangeSync(segment.segment!, { start, end, lineOffset, seeds }).aggregate;
  }

  /**
   * A session's rank part in a unit, complete: a part whose stored alerts or health transitions
   * were cut by DETAIL_CAP is read from its segment (or piece) again (rare: more than DETAIL_CAP alerts).
   */
  private part(unit: number, sessionId: string, rank: number): LoadedPart {
    const ordinal = Math.floor(unit / PIECE_SCALE);
    const k = (unit % PIECE_SCALE) - 1;
    const data = this.plan.segments[ordinal]!;
    const orderBase = ordinal * ORDER_SEGMENT_SCALE + (k < 0 ? 0 : data.pieces![k]!.lineOffset);
    const part = this.aggregate(unit).sessions.get(sessionId)!.ranks.get(rank)!;
    if (!part.detailsCut || data.segment === undefined) return { ordinal, orderBase, part };
    const aggregate = k < 0 ? scanSegmentSync(data.segment) : this.rescan(data, k, part);
    this.loaded.set(unit, { aggregate, buffer: null });
    return { ordinal, orderBase, part: aggregate.sessions.get(sessionId)!.ranks.get(rank)! };
  }

  /** One session's rank, combined from its segments. */
  load(plan: SeriesPlan): RankSeries {
    const parts = this.units(plan).map((unit) => this.part(unit, plan.sessionId, plan.rank));
    if (parts.length === 1) return single(plan, parts[0]!, this.pool);
    return combine(plan, parts, this.pool, (ordinal) => this.plan.segments[ordinal]!.source);
  }

  /**
   * Lets go of aggregates read from disk, except those of the units (`units`) in `keep`; the series
   * loaded so far must no longer be used.
   */
  release(keep: readonly number[] = []): void {
    const wanted = new Set(keep);
    const kept = new Set<Buffer>();
    for (const [unit, entry] of [...this.loaded.entries()]) {
      if (!wanted.has(unit)) this.loaded.delete(unit);
      else if (entry.buffer !== null) kept.add(entry.buffer);
    }
    this.pool.reclaim(kept);
  }
}

/** One rank of a plan, loaded: its series (one per session), valid until the iteration moves on. */
export interface LoadedRank {
  readonly rank: number;
  readonly series: readonly RankSeries[];
  /** Its position in the iteration's order. */
  readonly position: number;
}

/**
 * The plan's ranks loaded one at a time (in `order`, by default the plan's), each let go of before
 * the next, so that memory holds one rank: a segment holding several ranks stays loaded until the
 * last of them is done. A rank of `order` the plan does not hold comes with no series.
 */
export function* loadRanks(
  plan: DatasetPlan,
  order: readonly number[] = plan.ranks.map((entry) => entry.rank),
): Generator<LoadedRank> {
  const loader = new DatasetLoader(plan);
  const byRank = new Map(plan.ranks.map((entry) => [entry.rank, entry.series]));
  const lastUse = new Map<number, number>();
  order.forEach((rank, position) => {
    for (const seriesPlan of byRank.get(rank) ?? [])
      for (const unit of loader.units(seriesPlan)) lastUse.set(unit, position);
  });
  try {
    for (let position = 0; position < order.length; position++) {
      const rank = order[position]!;
      const series = (byRank.get(rank) ?? []).map((seriesPlan) => loader.load(seriesPlan));
      yield { rank, series, position };
      loader.release([...lastUse.entries()].filter(([, last]) => last > position).map(([unit]) => unit));
    }
  } finally {
    loader.release();
  }
}

/** A series made of one segment's part: its columns are used as they are (no copy). */
function single(plan: SeriesPlan, loaded: LoadedPart, pool: ArrayPool): RankSeries {
  const { orderBase, part } = loaded;
  const samples = part.samples;
  const n = samples.count;
  const order = pool.doubles(n);
  for (let i = 0; i < n; i++) order[i] = orderBase + samples.line[i]!;
  const view = (array: Float64Array): Float64Array => (array.length === n ? array : array.subarray(0, n));
  const boundaries = part.boundaries;
  return sortSeries({
    sessionId: plan.sessionId,
    rank: plan.rank,
    count: n,
    base: part.base ?? 0n,
    t: view(samples.t),
    order,
    allocated: view(samples.allocated),
    reserved: view(samples.reserved),
    used: view(samples.used),
    total: view(samples.total),
    tensors: view(samples.tensors),
    identities: part.identities,
    identity: samples.identity === null ? null : samples.identity.subarray(0, n),
    rules: samples.rules === null ? null : samples.rules.subarray(0, n),
    exact: byOrder(part.exact, orderBase, null),
    origins: byOrder(part.origins, orderBase, null),
    samplesWithoutUsed: part.samplesWithoutUsed,
    eventCount: part.eventCount,
    minTs: part.minTs,
    maxTs: part.maxTs,
    peaks: part.peaks,
    boundaries,
    boundaryOrder: Float64Array.from(boundaries, (boundary) => orderBase + boundary.line),
    alerts: part.alerts,
    alertOrder: Float64Array.from(part.alerts, (alert) => orderBase + alert.line),
    health: part.health,
    births: part.births,
    instants: part.instants,
    instantOrder: Float64Array.from(part.instants, (instant) => orderBase + instant.line),
    hosts: hostsOf([loaded]),
    firstOrder: part.first === null ? Number.NaN : orderBase + part.first.line,
    job: jobOf([loaded]),
  });
}

/** The hosts of a rank's parts: that of the earliest event (ties: storage order) first. */
function hostsOf(parts: readonly LoadedPart[]): string[] {
  let first: { ts: bigint; order: number; host: string } | null = null;
  const hosts = new Set<string>();
  for (const { orderBase, part } of parts) {
    for (const host of part.hosts) hosts.add(host);
    const evidence = part.first;
    if (evidence === null) continue;
    const ts = evidence.evidence.timestamp_ns;
    const order = orderBase + evidence.line;
    if (first === null || ts < first.ts || (ts === first.ts && order < first.order))
      first = { ts, order, host: evidence.evidence.host };
  }
  if (first === null) return [...hosts];
  hosts.delete(first.host);
  return [first.host, ...hosts];
}

/**
 * `into[offset + i] = from[i] + add` for the first `count` values. A loop of its own: in `combine`,
 * V8 compiled the whole function around such loops (150 ms of a cold analysis's compiling).
 */
function addInto(into: Float64Array, offset: number, from: Float64Array, count: number, add: number): void {
  for (let i = 0; i < count; i++) into[offset + i] = from[i]! + add;
}

/** `into[offset + i] = map[from[i]]` for the first `count` values (like `addInto`, a loop of its own). */
function remapInto(
  into: Uint16Array,
  offset: number,
  from: Uint16Array,
  count: number,
  map: readonly number[],
): void {
  for (let i = 0; i < count; i++) into[offset + i] = map[from[i]!]!;
}

/** The earliest event with a job id over a rank's parts (ties: storage order). */
function jobOf(parts: readonly LoadedPart[]): SeriesJob | null {
  let best: SeriesJob | null = null;
  for (const { orderBase, part } of parts) {
    if (part.job === null) continue;
    const timestampNs = part.timestampOf(part.jobT);
    const order = orderBase + part.job.line;
    if (
      best === null ||
      timestampNs < best.timestampNs ||
      (timestampNs === best.timestampNs && order < best.order)
    )
      best = { jobId: part.job.jobId, timestampNs, order };
  }
  return best;
}

function combine(
  plan: SeriesPlan,
  parts: readonly LoadedPart[],
  pool: ArrayPool,
  sourceOf: (ordinal: number) => string,
): RankSeries {
  let n = 0;
  let base: bigint | null = null;
  let earliest = parts[0]!.ordinal;
  let previous = -1;
  for (const { ordinal, part } of parts) {
    n += part.samples.count;
    // A segment's part begins where the rank first appears in it: the origin a scan of the whole
    // segment gives, whatever later pieces' parts began at (their offsets are exact either way).
    if (ordinal !== previous && part.base !== null && (base === null || part.base < base)) {
      base = part.base;
      earliest = ordinal;
    }
    previous = ordinal;
  }
  base ??= 0n;
  const t = pool.doubles(n);
  const order = pool.doubles(n);
  const allocated = pool.doubles(n);
  const reserved = pool.doubles(n);
  const used = pool.doubles(n);
  const total = pool.doubles(n);
  const tensors = pool.doubles(n);
  const identities: SampleIdentity[] = [];
  let identity: Uint16Array | null = null;
  let rules: Uint8Array | null = null;
  let exact: Map<number, ExactCounters> | null = null;
  let origins: Map<number, JsonObject> | null = null;
  const boundaries: BoundaryEntry[] = [];
  const boundaryOrders: number[] = [];
  const alerts: AlertEntry[] = [];
  const alertOrders: number[] = [];
  const health: HealthEntry[] = [];
  const births: BirthEntry[] = [];
  const instants: InstantEntry[] = [];
  const instantOrders: number[] = [];
  let firstOrder = Number.NaN;
  let firstTs: bigint | null = null;
  const peaks: [CounterPeak | null, CounterPeak | null, CounterPeak | null] = [null, null, null];
  let eventCount = 0;
  let samplesWithoutUsed = 0;
  let minTs: bigint | null = null;
  let maxTs: bigint | null = null;
  let offset = 0;
  for (const { ordinal, orderBase, part } of parts) {
    const samples = part.samples;
    const count = samples.count;
    const shift = part.base === null ? 0n : part.base - base;
    if (shift > 9_007_199_254_740_991n)
      throw new TimeRangeError(plan.sessionId, plan.rank, `${sourceOf(earliest)} and ${sourceOf(ordinal)}`);
    const delta = Number(shift);
    addInto(t, offset, samples.t, count, delta);
    allocated.set(samples.allocated.subarray(0, count), offset);
    reserved.set(samples.reserved.subarray(0, count), offset);
    used.set(samples.used.subarray(0, count), offset);
    total.set(samples.total.subarray(0, count), offset);
    tensors.set(samples.tensors.subarray(0, count), offset);
    addInto(order, offset, samples.line, count, orderBase);
    // Identities, re-indexed into the combined list.
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
      identity ??= pool.identity(n);
      if (local === null) identity.fill(map[0]!, offset, offset + count);
      else remapInto(identity, offset, local, count, map);
    }
    if (samples.rules !== null) {
      rules ??= new Uint8Array(n).fill(ALL_SAMPLE_RULES);
      rules.set(samples.rules.subarray(0, count), offset);
    }
    exact = byOrder(part.exact, orderBase, exact);
    origins = byOrder(part.origins, orderBase, origins);
    offset += count;
    for (const boundary of part.boundaries) {
      boundaries.push(boundary);
      boundaryOrders.push(orderBase + boundary.line);
    }
    for (const alert of part.alerts) {
      alerts.push(alert);
      alertOrders.push(orderBase + alert.line);
    }
    for (const entry of part.health) health.push(entry);
    for (const entry of part.births) births.push(entry);
    for (const instant of part.instants) {
      instants.push(instant);
      instantOrders.push(orderBase + instant.line);
    }
    const first = part.first;
    if (first !== null) {
      const ts = first.evidence.timestamp_ns;
      const order = orderBase + first.line;
      if (firstTs === null || ts < firstTs || (ts === firstTs && order < firstOrder)) {
        firstTs = ts;
        firstOrder = order;
      }
    }
    part.peaks.forEach((peak, i) => {
      const current = peaks[i] ?? null;
      if (peak !== null && (current === null || peak.value > current.value)) peaks[i] = { ...peak };
    });
    eventCount += part.eventCount;
    samplesWithoutUsed += part.samplesWithoutUsed;
    if (part.minTs !== null && (minTs === null || part.minTs < minTs)) minTs = part.minTs;
    if (part.maxTs !== null && (maxTs === null || part.maxTs > maxTs)) maxTs = part.maxTs;
  }
  return sortSeries({
    sessionId: plan.sessionId,
    rank: plan.rank,
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
    rules,
    exact,
    origins,
    samplesWithoutUsed,
    eventCount,
    minTs,
    maxTs,
    peaks,
    boundaries,
    boundaryOrder: Float64Array.from(boundaryOrders),
    alerts,
    alertOrder: Float64Array.from(alertOrders),
    health,
    births,
    instants,
    instantOrder: Float64Array.from(instantOrders),
    hosts: hostsOf(parts),
    firstOrder,
    job: jobOf(parts),
  });
}

/** A part's sparse per-sample values (by line) keyed by storage order instead, added to `into`. */
function byOrder<T>(
  byLine: ReadonlyMap<number, T> | null,
  orderBase: number,
  into: Map<number, T> | null,
): Map<number, T> | null {
  if (byLine === null) return into;
  const out = into ?? new Map<number, T>();
  for (const [line, value] of byLine) out.set(orderBase + line, value);
  return out;
}

/** The exact counters of sample `i` past 2^53, if it has any (the columns hold their nearest doubles). */
export function exactAt(series: RankSeries, i: number): ExactCounters | undefined {
  return series.exact?.get(series.order[i]!);
}

/** The phase attribution hints of sample `i`, if its metadata has any. */
export function originAt(series: RankSeries, i: number): JsonObject | undefined {
  return series.origins?.get(series.order[i]!);
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
  const permute = <T extends Float64Array | Uint16Array | Uint8Array>(array: T): T => {
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
    rules: series.rules === null ? null : permute(series.rules),
  };
}

/**
 * The series with only the samples that the reference's `rule` takes (itself when every sample is
 * an exact `sample` record). The reference's analyses each read samples by their own rule.
 */
export function seriesForRule(series: RankSeries, rule: SampleRule): RankSeries {
  const rules = series.rules;
  if (rules === null) return series;
  const bit = SAMPLE_RULE_BITS[rule];
  const keep: number[] = [];
  let withoutUsed = 0;
  for (let i = 0; i < series.count; i++) {
    if ((rules[i]! & bit) === 0) continue;
    keep.push(i);
    if (Number.isNaN(series.used[i]!)) withoutUsed++;
  }
  const pick = <T extends Float64Array | Uint16Array>(array: T): T => {
    const out = new (array.constructor as { new (length: number): T })(keep.length);
    for (let k = 0; k < keep.length; k++) out[k] = array[keep[k]!]!;
    return out;
  };
  return {
    ...series,
    count: keep.length,
    t: pick(series.t),
    order: pick(series.order),
    allocated: pick(series.allocated),
    reserved: pick(series.reserved),
    used: pick(series.used),
    total: pick(series.total),
    tensors: pick(series.tensors),
    identity: series.identity === null ? null : pick(series.identity),
    rules: null,
    samplesWithoutUsed: withoutUsed,
  };
}

/**
 * One rank over its sessions: their series (each of one session, in `parts`) merged in time order,
 * ties in storage order, which is the order a stable sort of the events by time gives. Each sample,
 * boundary and alert keeps its series (for its session, identity, hints and exact counters).
 */
export interface MergedRank {
  readonly rank: number;
  readonly parts: readonly RankSeries[];
  readonly count: number;
  /** Timestamp origin of `t` (the earliest series' base). */
  readonly base: bigint;
  readonly t: Float64Array;
  readonly order: Float64Array;
  readonly allocated: Float64Array;
  readonly reserved: Float64Array;
  readonly used: Float64Array;
  readonly total: Float64Array;
  /** Per sample, its series in `parts` and its index there; null with one series (the same index). */
  readonly samplePart: Uint16Array | null;
  readonly sampleIndex: Int32Array | null;
  /** Boundaries of every series, with their storage order and series (null: one series). */
  readonly boundaries: readonly BoundaryEntry[];
  readonly boundaryOrder: Float64Array;
  readonly boundaryPart: Uint16Array | null;
  /** Alerts in time order (ties in storage order), with their series. */
  readonly alerts: readonly { readonly alert: AlertEntry; readonly part: number }[];
  /** The rank's earliest event of any kind. */
  readonly minTs: bigint | null;
}

const byTimeThenOrder = (t: ArrayLike<number>, order: ArrayLike<number>) => (a: number, b: number) =>
  t[a]! - t[b]! || order[a]! - order[b]!;

/** Merges one rank's series (one per session; a single one is used as it is). */
export function mergeRankSeries(parts: readonly RankSeries[]): MergedRank {
  const alertsOf = (): { alert: AlertEntry; part: number }[] => {
    const all: { alert: AlertEntry; part: number; order: number }[] = [];
    parts.forEach((series, part) => {
      series.alerts.forEach((alert, j) => {
        all.push({ alert, part, order: series.alertOrder[j]! });
      });
    });
    return all
      .sort((a, b) =>
        a.alert.timestampNs < b.alert.timestampNs
          ? -1
          : a.alert.timestampNs > b.alert.timestampNs
            ? 1
            : a.order - b.order,
      )
      .map(({ alert, part }) => ({ alert, part }));
  };
  let minTs: bigint | null = null;
  for (const series of parts)
    if (series.minTs !== null && (minTs === null || series.minTs < minTs)) minTs = series.minTs;
  const first = parts[0]!;
  if (parts.length === 1) {
    const { rank, count, base, t, order, allocated, reserved, used, total, boundaries, boundaryOrder } =
      first;
    return {
      rank,
      parts,
      count,
      base,
      t,
      order,
      allocated,
      reserved,
      used,
      total,
      samplePart: null,
      sampleIndex: null,
      boundaries,
      boundaryOrder,
      boundaryPart: null,
      alerts: alertsOf(),
      minTs,
    };
  }
  let base = first.base;
  for (const series of parts) if (series.base < base) base = series.base;
  // Offsets from the common base must stay exact doubles, as within one series.
  for (const series of parts) {
    const low = series.minTs ?? series.base;
    const high = series.maxTs ?? series.base;
    if (high - base > 9_007_199_254_740_991n || base - low > 9_007_199_254_740_991n)
      throw new TimeRangeError(series.sessionId, series.rank, `merged with ${first.sessionId}`);
  }
  let n = 0;
  let boundaryCount = 0;
  for (const series of parts) {
    n += series.count;
    boundaryCount += series.boundaries.length;
  }
  const keyT = new Float64Array(n);
  const keyOrder = new Float64Array(n);
  const fromPart = new Uint16Array(n);
  const fromIndex = new Int32Array(n);
  let k = 0;
  parts.forEach((series, part) => {
    const shift = Number(series.base - base);
    for (let i = 0; i < series.count; i++, k++) {
      keyT[k] = series.t[i]! + shift;
      keyOrder[k] = series.order[i]!;
      fromPart[k] = part;
      fromIndex[k] = i;
    }
  });
  const sorted = Array.from({ length: n }, (_, i) => i).sort(byTimeThenOrder(keyT, keyOrder));
  const t = new Float64Array(n);
  const order = new Float64Array(n);
  const allocated = new Float64Array(n);
  const reserved = new Float64Array(n);
  const used = new Float64Array(n);
  const total = new Float64Array(n);
  const samplePart = new Uint16Array(n);
  const sampleIndex = new Int32Array(n);
  sorted.forEach((from, i) => {
    const series = parts[fromPart[from]!]!;
    const j = fromIndex[from]!;
    t[i] = keyT[from]!;
    order[i] = keyOrder[from]!;
    allocated[i] = series.allocated[j]!;
    reserved[i] = series.reserved[j]!;
    used[i] = series.used[j]!;
    total[i] = series.total[j]!;
    samplePart[i] = fromPart[from]!;
    sampleIndex[i] = j;
  });
  const boundaries: BoundaryEntry[] = [];
  const boundaryOrder = new Float64Array(boundaryCount);
  const boundaryPart = new Uint16Array(boundaryCount);
  parts.forEach((series, part) => {
    series.boundaries.forEach((boundary, j) => {
      boundaryOrder[boundaries.length] = series.boundaryOrder[j]!;
      boundaryPart[boundaries.length] = part;
      boundaries.push(boundary);
    });
  });
  return {
    rank: first.rank,
    parts,
    count: n,
    base,
    t,
    order,
    allocated,
    reserved,
    used,
    total,
    samplePart,
    sampleIndex,
    boundaries,
    boundaryOrder,
    boundaryPart,
    alerts: alertsOf(),
    minTs,
  };
}

/**
 * `Number(timestamp_ns)` of each sample without making bigints: `Number(base)` plus the (exact)
 * rest, rounded once by the addition, which is how `Number()` rounds the exact sum.
 */
export function sampleTimeAsNumber(series: Pick<RankSeries, "base" | "t">): (i: number) => number {
  const head = Number(series.base);
  const rest = Number(series.base - BigInt(head));
  const t = series.t;
  return (i) => {
    const offset = rest + t[i]!;
    // Beyond 2^53 the rest would round first; exact bigints then (timelines that long do not occur).
    return Math.abs(offset) <= Number.MAX_SAFE_INTEGER ? head + offset : Number(series.base + BigInt(t[i]!));
  };
}

/** The exact timestamp of sample `i`. */
export function sampleTimestamp(series: RankSeries, i: number): bigint {
  return series.base + BigInt(series.t[i]!);
}
