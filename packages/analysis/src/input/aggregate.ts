/**
 * What one scan of a segment keeps: per session and rank, the samples as typed columns, the phase
 * boundaries with the counters read at them, alerts, collector-health transitions, peaks and event
 * counts. Everything the analyses need and nothing else, so a segment's aggregate can be stored in
 * the index and combined later with other segments' without reading the segment again.
 *
 * Sample times are stored as exact doubles: nanoseconds after the rank part's `base` (its first
 * timestamp, a bigint). One process's timeline spans far less than 2^53 ns (104 days); a rank part
 * that does not is refused with `TimeRangeError`.
 */
import {
  ALERT_EVENT_TYPES,
  type JsonObject,
  type JsonValue,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import {
  CASEFOLD_SAMPLE,
  type ExactCounters,
  exactCountersOf,
  FLOAT_KEYS,
  markFloat,
  SAMPLE_EVENT_TYPE,
  type SessionEventLike,
  STRIP_LOWER_SAMPLE,
  sampleRules,
  sessionEventLikeOf,
  setJsonMember,
} from "@stormlog/core/internal";
import { LIVE_BY_PHASE_KEY } from "@stormlog/phases/internal";
import { TimeRangeError } from "../errors.js";
import { type BoundaryEntry, BoundaryLog } from "./boundary-log.js";

/** `metadata.phase_counters` of a phase record whose counters were read at the boundary itself. */
export const BOUNDARY_READ = "boundary_read";

/** Every reference rule takes an exact `sample` record for a sample (`sampleRules` bits). */
export const ALL_SAMPLE_RULES = CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE;

/**
 * At most this many alerts and health transitions are stored per rank and segment in the index (so
 * that a segment of alerts cannot bloat it); a part cut so is scanned again when loaded. Aggregates
 * in memory keep them all.
 */
export const DETAIL_CAP = 1000;

/** Fields of an event that identify who sampled it; several per rank only when they change. */
export interface SampleIdentity {
  readonly pid: number;
  readonly host: string;
  readonly job_id: string | null;
  readonly world_size: number;
  readonly sampling_interval_ms: number;
  readonly device_id: number;
}

/** The event fields a session summary is inferred from. */
export type SessionEvidence = SessionEventLike;

/** Session evidence with the line it came from (ties between rank parts go by line). */
export interface LinedEvidence {
  readonly evidence: SessionEvidence;
  readonly line: number;
}

/** A peak of one counter: value, when, on which device. */
export interface CounterPeak {
  value: number;
  timestampNs: bigint;
  deviceId: number;
  /** The record's collector (`stormlog.tfjs_tracker+stormlog.cpu_tracker` for merged ones). */
  collector: string;
}

/** A sample's live tensors by birth phase (`metadata.tfjs_live_by_phase`, the tfjs adapter's attribution). */
export interface BirthEntry {
  readonly timestampNs: bigint;
  /** The object's JSON text, as stored in the index. */
  readonly json: string;
}

/** An alert event (`warning`, `critical`, `error`). */
export interface AlertEntry {
  readonly timestampNs: bigint;
  /** Line within its segment, or its piece of one (storage order, which decides ties in time). */
  readonly line: number;
  readonly eventType: string;
  readonly context: string | null;
  /** `metadata.oom_reason`, when the alert is an OOM report. */
  readonly oomReason: string | null;
  readonly used: number;
  readonly allocated: number;
  /** `origin_thread_id` / `origin_phase_scope_id` of its metadata (phase attribution hints), if any. */
  readonly origin: JsonObject | null;
}

/** A collector-health transition (`collector_degraded` / `collector_recovered`). */
export interface HealthEntry {
  readonly timestampNs: bigint;
  readonly eventType: string;
  readonly collector: string;
  readonly context: string | null;
  /** `metadata.collector_last_error`, when a string. */
  readonly error: string | null;
  /** `metadata.collector_health_status`, when a string. */
  readonly status: string | null;
}

/**
 * Records that the Perfetto export shows as instants on their rank's timeline: alerts, lifecycle
 * records and collector-health transitions (`INSTANT_EVENT_TYPES`). Rare, so kept whole.
 */
export interface InstantEntry {
  readonly timestampNs: bigint;
  /** Line within its segment, or its piece of one (storage order, which decides ties in time). */
  readonly line: number;
  readonly eventType: string;
  readonly context: string | null;
  /**
   * The record's metadata without `memory_capabilities` and `phase_scope` (bulky, and shown
   * elsewhere), float marks kept: its phase attribution hints resolve as the record's own.
   */
  readonly metadata: JsonObject;
}

/** Event types kept as `InstantEntry`s. */
export const INSTANT_EVENT_TYPES: ReadonlySet<string> = new Set([
  "warning",
  "critical",
  "error",
  "start",
  "stop",
  "cleanup",
  "collector_degraded",
  "collector_recovered",
]);

/** Metadata keys an `InstantEntry` leaves out. */
const INSTANT_DROPPED_KEYS: ReadonlySet<string> = new Set(["memory_capabilities", "phase_scope"]);

/** A record's metadata as an `InstantEntry` keeps it (a copy; float marks of its own keys copied too). */
export function instantMetadataOf(metadata: JsonObject): JsonObject {
  const out: JsonObject = {};
  const floats = (metadata as { [FLOAT_KEYS]?: ReadonlySet<string | number> })[FLOAT_KEYS];
  for (const key of Object.keys(metadata)) {
    if (INSTANT_DROPPED_KEYS.has(key)) continue;
    setJsonMember(out, key, metadata[key] as JsonValue);
    if (floats?.has(key) === true) markFloat(out, key);
  }
  return out;
}

/** Growable sample columns (NaN marks null counters and absent tensor counts). */
export class SampleColumns {
  count = 0;
  /** ns after the rank part's base. */
  t: Float64Array;
  line: Float64Array;
  allocated: Float64Array;
  reserved: Float64Array;
  used: Float64Array;
  total: Float64Array;
  tensors: Float64Array;
  /** Index into the rank part's identities; null while every sample has identity 0. */
  identity: Uint16Array | null = null;
  /**
   * Which of the reference's sample rules take each sample (`sampleRules` bits of core); null while
   * every sample is an exact `sample` record, which all rules take.
   */
  rules: Uint8Array | null = null;

  constructor(capacity = 256) {
    this.t = new Float64Array(capacity);
    this.line = new Float64Array(capacity);
    this.allocated = new Float64Array(capacity);
    this.reserved = new Float64Array(capacity);
    this.used = new Float64Array(capacity);
    this.total = new Float64Array(capacity);
    this.tensors = new Float64Array(capacity);
  }

  private grow(): void {
    const capacity = this.t.length * 2;
    const bigger = (array: Float64Array): Float64Array => {
      const next = new Float64Array(capacity);
      next.set(array);
      return next;
    };
    this.t = bigger(this.t);
    this.line = bigger(this.line);
    this.allocated = bigger(this.allocated);
    this.reserved = bigger(this.reserved);
    this.used = bigger(this.used);
    this.total = bigger(this.total);
    this.tensors = bigger(this.tensors);
    if (this.identity !== null) {
      const next = new Uint16Array(capacity);
      next.set(this.identity);
      this.identity = next;
    }
    if (this.rules !== null) {
      const next = new Uint8Array(capacity);
      next.set(this.rules);
      this.rules = next;
    }
  }

  push(
    t: number,
    line: number,
    allocated: number,
    reserved: number,
    used: number,
    total: number,
    tensors: number,
    identity: number,
    rules: number = ALL_SAMPLE_RULES,
  ): void {
    const i = this.count;
    if (i === this.t.length) this.grow();
    this.t[i] = t;
    this.line[i] = line;
    this.allocated[i] = allocated;
    this.reserved[i] = reserved;
    this.used[i] = used;
    this.total[i] = total;
    this.tensors[i] = tensors;
    if (identity !== 0 && this.identity === null) this.identity = new Uint16Array(this.t.length);
    if (this.identity !== null) this.identity[i] = identity;
    if (rules !== ALL_SAMPLE_RULES && this.rules === null) {
      this.rules = new Uint8Array(this.t.length);
      this.rules.fill(ALL_SAMPLE_RULES, 0, i);
    }
    if (this.rules !== null) this.rules[i] = rules;
    this.count = i + 1;
  }

  /** Drops the spare capacity (a view when little is spare, else a copy). */
  trim(): void {
    const n = this.count;
    if (this.t.length === n) return;
    if (this.t.length - n <= this.t.length / 8) {
      this.t = this.t.subarray(0, n);
      this.line = this.line.subarray(0, n);
      this.allocated = this.allocated.subarray(0, n);
      this.reserved = this.reserved.subarray(0, n);
      this.used = this.used.subarray(0, n);
      this.total = this.total.subarray(0, n);
      this.tensors = this.tensors.subarray(0, n);
      if (this.identity !== null) this.identity = this.identity.subarray(0, n);
      if (this.rules !== null) this.rules = this.rules.subarray(0, n);
      return;
    }
    this.t = this.t.slice(0, n);
    this.line = this.line.slice(0, n);
    this.allocated = this.allocated.slice(0, n);
    this.reserved = this.reserved.slice(0, n);
    this.used = this.used.slice(0, n);
    this.total = this.total.slice(0, n);
    this.tensors = this.tensors.slice(0, n);
    if (this.identity !== null) this.identity = this.identity.slice(0, n);
    if (this.rules !== null) this.rules = this.rules.slice(0, n);
  }
}

/** Columns for `samples` samples and a sixteenth more, from 256 to 65,536. */
export function roomForSamples(samples: number): number {
  return Math.min(1 << 16, Math.max(256, samples + (samples >> 4)));
}

const BILLION = 1_000_000_000;
/** Seconds apart beyond which `(head difference) * 1e9` is no longer exact. */
const MAX_HEAD_SPAN = 9_007_199;

/** One rank of one session within a segment. */
export class RankPart {
  eventCount = 0;
  /** Timestamp origin of `t` values (the first timestamp seen). */
  base: bigint | null = null;
  // The offsets and parts of timestamps below start as doubles (NaN: unset, read only once set): one
  // that starts as a small integer changes representation at its first large value, which throws
  // away the code compiled against rank parts (see `CanonicalLineReader`).
  /** `base` split into seconds and nanoseconds, for the fast path. */
  baseHead = Number.NaN;
  baseTail = Number.NaN;
  /** Earliest and latest event, as offsets from `base`. */
  minT = Number.POSITIVE_INFINITY;
  maxT = Number.NEGATIVE_INFINITY;
  /** Earliest event (first seen on ties) and latest stop (last seen on ties). */
  first: LinedEvidence | null = null;
  firstT = Number.NaN;
  lastStop: LinedEvidence | null = null;
  lastStopT = Number.NaN;
  readonly samples: SampleColumns;
  readonly identities: SampleIdentity[] = [];
  /** Peak values, their offsets and devices (allocated, reserved, device used). */
  private readonly peakValues = [
    Number.NEGATIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
  ];
  private readonly peakTs = [0, 0, 0];
  private readonly peakDevices = [0, 0, 0];
  private readonly peakCollectors = ["", "", ""];
  /** Phase boundaries, as the index stores them (see `BoundaryLog`). */
  boundaryLog = new BoundaryLog();
  readonly births: BirthEntry[] = [];
  readonly alerts: AlertEntry[] = [];
  readonly health: HealthEntry[] = [];
  /** Records shown as instants (alerts, lifecycle, collector health), in storage order. */
  readonly instants: InstantEntry[] = [];
  /** Hosts of the rank's events, in the order first seen (one, nearly always). */
  readonly hosts: string[] = [];
  private lastHost: string | null = null;
  /** The earliest event with a `job_id` (first seen on ties): its job id and line, and its offset. */
  job: { readonly jobId: string; readonly line: number } | null = null;
  jobT = Number.NaN;
  /** Samples whose device used memory is null (schema v4), of any sample rule. */
  samplesWithoutUsed = 0;
  /** Largest positive `world_size` over every event (0: none), and whether several were seen. */
  worldSizeMax = 0;
  worldSizeMixed = false;
  /**
   * Phase attribution hints of samples (`origin_thread_id` / `origin_phase_scope_id` of their
   * metadata), by the sample's line (null: none, the usual case).
   */
  origins: Map<number, JsonObject> | null = null;
  /** Read back from the index with alerts or health transitions left out by DETAIL_CAP. */
  detailsCut = false;
  /** Exact values of samples' counters past 2^53, by the sample's line (null: none, the usual case). */
  exact: Map<number, ExactCounters> | null = null;

  constructor(
    readonly rank: number,
    readonly sessionId: string,
    capacity = 256,
  ) {
    this.samples = new SampleColumns(capacity);
  }

  /** The phase boundaries as objects, in storage order, made anew at each call (`BoundaryLog.list`). */
  get boundaries(): readonly BoundaryEntry[] {
    return this.boundaryLog.list();
  }

  /**
   * Takes the timestamp origin an earlier piece of the segment gave this session's rank (see
   * `RankSeed`), so that offsets and their range checks are those of one scan of the whole segment.
   */
  seed(seed: RankSeed): void {
    this.base = seed.base;
    this.baseHead = seed.head;
    this.baseTail = seed.tail;
  }

  /** The offset of a timestamp given as seconds and nanoseconds (the fast path). */
  offsetOf(head: number, tail: number): number {
    if (this.base === null) {
      this.base = exactTimestamp(head, tail);
      this.baseHead = head;
      this.baseTail = tail;
      return 0;
    }
    const seconds = head - this.baseHead;
    if (seconds > MAX_HEAD_SPAN || seconds < -MAX_HEAD_SPAN)
      throw new TimeRangeError(this.sessionId, this.rank);
    // Exact up to 9,007,199 s; past 2^53 ns the sum rounds to at least 2^53, which this refuses.
    const offset = seconds * BILLION + (tail - this.baseTail);
    if (offset > Number.MAX_SAFE_INTEGER || offset < -Number.MAX_SAFE_INTEGER)
      throw new TimeRangeError(this.sessionId, this.rank);
    return offset;
  }

  /** The offset of an exact timestamp. */
  offsetOfBigInt(ts: bigint): number {
    if (this.base === null) {
      this.base = ts;
      this.baseHead = Number(ts / 1_000_000_000n);
      this.baseTail = Number(ts % 1_000_000_000n);
      return 0;
    }
    const offset = ts - this.base;
    if (offset > 9_007_199_254_740_991n || offset < -9_007_199_254_740_991n)
      throw new TimeRangeError(this.sessionId, this.rank);
    return Number(offset);
  }

  /** The timestamp of an offset. */
  timestampOf(t: number): bigint {
    return (this.base ?? 0n) + BigInt(t);
  }

  /** Index of an identity, added when new (the last one is checked first). */
  identityIndex(
    pid: number,
    host: string,
    jobId: string | null,
    worldSize: number,
    interval: number,
    deviceId: number,
  ): number {
    const ids = this.identities;
    for (let i = ids.length - 1; i >= 0; i--) {
      const id = ids[i]!;
      if (
        id.pid === pid &&
        id.host === host &&
        id.job_id === jobId &&
        id.world_size === worldSize &&
        id.sampling_interval_ms === interval &&
        id.device_id === deviceId
      )
        return i;
    }
    if (ids.length >= 0xffff) return ids.length - 1; // absurd input: keep the last identity
    ids.push({
      pid,
      host,
      job_id: jobId,
      world_size: worldSize,
      sampling_interval_ms: interval,
      device_id: deviceId,
    });
    return ids.length - 1;
  }

  /**
   * Counts an event at offset `t`. Returns what the caller must record with `setFirst`/`setLastStop`
   * (1: it is the earliest event so far, 2: it is the latest stop), so evidence is built only then.
   */
  touch(t: number, isStop: boolean): number {
    this.eventCount++;
    if (t < this.minT) this.minT = t;
    if (t > this.maxT) this.maxT = t;
    let wanted = 0;
    if (this.first === null || t < this.firstT) wanted |= 1;
    if (isStop && (this.lastStop === null || t >= this.lastStopT)) wanted |= 2;
    return wanted;
  }

  /** Notes an event's host (a list search only when it differs from the last one). */
  host(host: string): void {
    if (host === this.lastHost) return;
    this.lastHost = host;
    if (!this.hosts.includes(host)) this.hosts.push(host);
  }

  /** Notes an event's `job_id` at offset `t` (the trace names the earliest one's job). */
  jobSeen(jobId: string | null, t: number, line: number): void {
    if (jobId === null || (this.job !== null && t >= this.jobT)) return;
    this.job = { jobId, line };
    this.jobT = t;
  }

  /** Notes an event's `world_size`. */
  worldSize(value: number): void {
    if (!(value > 0) || value === this.worldSizeMax) return;
    if (this.worldSizeMax !== 0) this.worldSizeMixed = true;
    if (value > this.worldSizeMax) this.worldSizeMax = value;
  }

  /** Records the evidence `touch` asked for. */
  record(wanted: number, t: number, line: number, evidence: SessionEvidence): void {
    if (wanted & 1) {
      this.first = { evidence, line };
      this.firstT = t;
    }
    if (wanted & 2) {
      this.lastStop = { evidence, line };
      this.lastStopT = t;
    }
  }

  peak(which: 0 | 1 | 2, value: number, t: number, deviceId: number, collector: string): void {
    if (!(value > this.peakValues[which]!)) return;
    this.peakValues[which] = value;
    this.peakTs[which] = t;
    this.peakDevices[which] = deviceId;
    this.peakCollectors[which] = collector;
  }

  /** The peaks of allocator allocated, allocator reserved and device used, over every event. */
  get peaks(): [CounterPeak | null, CounterPeak | null, CounterPeak | null] {
    const out: [CounterPeak | null, CounterPeak | null, CounterPeak | null] = [null, null, null];
    for (let i = 0; i < 3; i++) {
      const value = this.peakValues[i]!;
      if (value > Number.NEGATIVE_INFINITY)
        out[i] = {
          value,
          timestampNs: this.timestampOf(this.peakTs[i]!),
          deviceId: this.peakDevices[i]!,
          collector: this.peakCollectors[i]!,
        };
    }
    return out;
  }

  /** Restores a peak after loading from the index. */
  setPeak(which: 0 | 1 | 2, peak: CounterPeak | null): void {
    this.peakValues[which] = peak === null ? Number.NEGATIVE_INFINITY : peak.value;
    this.peakTs[which] = peak === null ? 0 : this.offsetOfBigInt(peak.timestampNs);
    this.peakDevices[which] = peak?.deviceId ?? 0;
    this.peakCollectors[which] = peak?.collector ?? "";
  }

  get minTs(): bigint | null {
    return this.eventCount === 0 ? null : this.timestampOf(this.minT);
  }

  get maxTs(): bigint | null {
    return this.eventCount === 0 ? null : this.timestampOf(this.maxT);
  }
}

/** One session within a segment. */
export class SessionPart {
  eventCount = 0;
  readonly eventTypes = new Map<string, number>();
  readonly ranks = new Map<number, RankPart>();
  /** Hot-path counter merged into `eventTypes` by `finish()`. */
  sampleCount = 0;

  constructor(readonly sessionId: string) {}

  rankPart(rank: number, capacity?: number): RankPart {
    let part = this.ranks.get(rank);
    if (part === undefined) {
      part = new RankPart(rank, this.sessionId, capacity);
      this.ranks.set(rank, part);
    }
    return part;
  }

  countType(eventType: string): void {
    this.eventTypes.set(eventType, (this.eventTypes.get(eventType) ?? 0) + 1);
  }

  /** Earliest event of the session (first seen on ties). */
  get first(): SessionEvidence | null {
    let best: LinedEvidence | null = null;
    for (const part of this.ranks.values()) {
      const candidate = part.first;
      if (candidate === null) continue;
      if (
        best === null ||
        candidate.evidence.timestamp_ns < best.evidence.timestamp_ns ||
        (candidate.evidence.timestamp_ns === best.evidence.timestamp_ns && candidate.line < best.line)
      )
        best = candidate;
    }
    return best?.evidence ?? null;
  }

  /** Latest `stop` of the session (last seen on ties). */
  get lastStop(): SessionEvidence | null {
    let best: LinedEvidence | null = null;
    for (const part of this.ranks.values()) {
      const candidate = part.lastStop;
      if (candidate === null) continue;
      if (
        best === null ||
        candidate.evidence.timestamp_ns > best.evidence.timestamp_ns ||
        (candidate.evidence.timestamp_ns === best.evidence.timestamp_ns && candidate.line > best.line)
      )
        best = candidate;
    }
    return best?.evidence ?? null;
  }

  /** Latest timestamp of the session. */
  get lastTs(): bigint | null {
    let last: bigint | null = null;
    for (const part of this.ranks.values()) {
      const ts = part.maxTs;
      if (ts !== null && (last === null || ts > last)) last = ts;
    }
    return last;
  }

  finish(): void {
    if (this.sampleCount > 0) {
      this.eventTypes.set(
        SAMPLE_EVENT_TYPE,
        (this.eventTypes.get(SAMPLE_EVENT_TYPE) ?? 0) + this.sampleCount,
      );
      this.sampleCount = 0;
    }
    for (const part of this.ranks.values()) part.samples.trim();
  }
}

/** What one scan of one segment (or one in-memory batch of events) yields. */
export interface SegmentAggregate {
  /** Lines read (blank lines included), as line numbers count them. */
  lineCount: number;
  eventCount: number;
  sessions: Map<string, SessionPart>;
  /** Read warnings (a final line cut short), with the session they belong to. */
  warnings: { message: string; sessionId: string | null }[];
  /** Earliest and latest timestamps (for the index's ranges). */
  minTs: bigint | null;
  maxTs: bigint | null;
}

const nullable = (value: number | null): number => (value === null ? Number.NaN : value);

function metadataString(metadata: JsonObject, key: string): string | null {
  const value = metadata[key];
  return typeof value === "string" ? value : null;
}

/** Metadata keys that steer phase attribution (`resolveForEvent`). */
const ORIGIN_KEYS = ["origin_thread_id", "origin_phase_scope_id"] as const;

/** The phase attribution hints of a metadata object, or null without any. */
export function originOf(metadata: JsonObject): JsonObject | null {
  let out: JsonObject | null = null;
  const floats = (metadata as { [FLOAT_KEYS]?: ReadonlySet<string | number> })[FLOAT_KEYS];
  for (const key of ORIGIN_KEYS) {
    if (metadata[key] === undefined) continue;
    out ??= {};
    out[key] = metadata[key]!;
    // `7.0` is no thread id to the resolver (Python's isinstance(int)): the mark goes along.
    if (floats?.has(key) === true) markFloat(out, key);
  }
  return out;
}

function tensorsOf(metadata: JsonObject): number {
  const value = metadata.tfjs_num_tensors;
  return typeof value === "number" ? value : typeof value === "bigint" ? Number(value) : Number.NaN;
}

/**
 * How the scan takes a line the fast reader read (one rule for the line-by-line path, `scan.ts`, and
 * the kernel's rows, `LineTemplate.rows`): decoded on the general path, a sample into the columns (its
 * birth counts parsed too), a phase boundary with its scope's text, or counted.
 */
export const FAST_DECODED = 0;
export const FAST_SAMPLE = 1;
export const FAST_SAMPLE_BIRTHS = 2;
export const FAST_BOUNDARY = 3;
export const FAST_COUNTED = 4;

export function fastLineUse(eventType: string, origin: boolean, births: boolean, inexact: boolean): number {
  // Phase attribution hints (rare): the general path keeps them exactly, float marks included.
  if (eventType === SAMPLE_EVENT_TYPE)
    return origin ? FAST_DECODED : births ? FAST_SAMPLE_BIRTHS : FAST_SAMPLE;
  // Detailed records (alerts, health, and the lifecycle records the Perfetto export shows with their
  // metadata: only the general path keeps their details), and sample records whose type is not exactly
  // "sample" (rare), take the general path.
  if (INSTANT_EVENT_TYPES.has(eventType) || sampleRules(eventType) !== 0) return FAST_DECODED;
  // Floats or long integers in a boundary's metadata: the exact parser keeps their marks and digits.
  if (eventType === "phase_enter" || eventType === "phase_exit")
    return inexact ? FAST_DECODED : FAST_BOUNDARY;
  return FAST_COUNTED;
}

/** The strings of a fast-read line: its template's (see `CanonicalLineReader`), the same for many lines. */
export interface LineStrings {
  readonly sessionId: string;
  readonly eventType: string;
  readonly host: string;
  readonly collector: string;
  readonly jobId: string | null;
}

/** A fast-read line's `timestamp_ns`, given as seconds (all but its last nine digits) and nanoseconds. */
export function exactTimestamp(head: number, tail: number): bigint {
  return BigInt(head) * 1_000_000_000n + BigInt(tail);
}

/** Fields of a fast-read line the accumulator takes (see `CanonicalLineReader`). */
export interface LineFields extends LineStrings {
  readonly tsHead: number;
  readonly tsTail: number;
  readonly rank: number;
  readonly localRank: number;
  readonly pid: number;
  readonly worldSize: number;
  readonly samplingIntervalMs: number;
  readonly deviceId: number;
  readonly allocated: number;
  readonly reserved: number;
  readonly used: number;
  readonly total: number;
  readonly tensors: number;
  /** Top-level `metadata.phase_counters` is `"boundary_read"`. */
  readonly boundaryRead: boolean;
  /** Where `metadata.phase_scope`'s JSON text starts and ends in the line's buffer (-1: it has none). */
  readonly scopeStart: number;
  readonly scopeEnd: number;
  timestampNs(): bigint;
}

/**
 * A rank part's timestamp origin as its first event set it: `base`, and the seconds and
 * nanoseconds the range checks compare against (`RankPart.offsetOf`).
 */
export interface RankSeed {
  readonly base: bigint;
  readonly head: number;
  readonly tail: number;
}

/** Key of one session's rank in maps of seeds and series. */
export const seriesKey = (sessionId: string, rank: number): string => `${rank}\u0000${sessionId}`;

/** Feeds events into a `SegmentAggregate`: whole records (general path) or fast-read lines. */
export class Accumulator {
  private readonly sessions = new Map<string, SessionPart>();
  private readonly warnings: SegmentAggregate["warnings"] = [];
  private eventCount = 0;
  private lastSession: SessionPart | null = null;
  private lastRank: RankPart | null = null;

  /** Samples of the rank part left last, and of the one left before it (see `leaveRank`). */
  private leftSamples: number;
  private leftBefore = 0;

  /**
   * `expectedSamples`: capacity of the first rank part's columns (a segment usually holds one; the
   * next ones are sized like the larger of the two before, see `leaveRank`).
   * `seeds`: origins of rank parts that earlier pieces of the segment began (by `seriesKey`).
   * `carriedSamples`: `recentSamples` of the scan of the range before, in the same segment (0: none).
   */
  constructor(
    private expectedSamples = 256,
    private readonly seeds: ReadonlyMap<string, RankSeed> | null = null,
    carriedSamples = 0,
  ) {
    this.leftSamples = carriedSamples;
  }

  /** The samples of the larger of the last rank parts: what the next range's first ones are sized for. */
  get recentSamples(): number {
    return Math.max(this.lastRank?.samples.count ?? 0, this.leftSamples, this.leftBefore);
  }

  session(sessionId: string): SessionPart {
    const last = this.lastSession;
    if (last !== null && last.sessionId === sessionId) return last;
    let part = this.sessions.get(sessionId);
    if (part === undefined) {
      part = new SessionPart(sessionId);
      this.sessions.set(sessionId, part);
    }
    this.lastSession = part;
    this.leaveRank();
    return part;
  }

  /**
   * The rank part read until now is left: the next new one's columns are sized for as many samples
   * as the larger of it and the one before, and a sixteenth more, at most 65,536 (a job's ranks
   * record alike, but a piece of a file begins and ends with part of a rank; growing by doubling
   * copied each rank's columns up to five times, and each copy's memory is first touched anew).
   * Within an eighth, `SampleColumns.trim` keeps the spare room rather than copying.
   */
  private leaveRank(): void {
    const last = this.lastRank;
    if (last === null) return;
    const count = last.samples.count;
    this.expectedSamples = roomForSamples(Math.max(count, this.leftSamples));
    this.leftBefore = this.leftSamples;
    this.leftSamples = count;
    this.lastRank = null;
  }

  private rank(session: SessionPart, rank: number): RankPart {
    const last = this.lastRank;
    if (last !== null && last.rank === rank && last.sessionId === session.sessionId) return last;
    this.leaveRank();
    const part = session.rankPart(rank, this.expectedSamples);
    if (this.seeds !== null && part.base === null) {
      const seed = this.seeds.get(seriesKey(session.sessionId, rank));
      if (seed !== undefined) part.seed(seed);
    }
    this.lastRank = part;
    return part;
  }

  /** A fast-read line: samples go to the columns; other types are counted (and their counters feed the peaks). */
  addLine(fields: LineFields, line: number): RankPart {
    return this.addRead(
      fields,
      fields.tsHead,
      fields.tsTail,
      fields.rank,
      fields.pid,
      fields.localRank,
      fields.worldSize,
      fields.samplingIntervalMs,
      fields.deviceId,
      fields.allocated,
      fields.reserved,
      fields.used,
      fields.total,
      fields.tensors,
      line,
    );
  }

  /**
   * `addLine` with the line's numbers one by one: the scan's rows of samples come here straight from
   * the kernel's memory (`CanonicalLineReader.addRow`) rather than through a reader's fields, which
   * took as long as the rest of adding them.
   */
  addRead(
    strings: LineStrings,
    tsHead: number,
    tsTail: number,
    rank: number,
    pid: number,
    localRank: number,
    worldSize: number,
    interval: number,
    deviceId: number,
    allocated: number,
    reserved: number,
    used: number,
    total: number,
    tensors: number,
    line: number,
  ): RankPart {
    const session = this.session(strings.sessionId);
    this.eventCount++;
    session.eventCount++;
    const eventType = strings.eventType;
    // The fast reader hands every other kind of sample record to `addEvent`.
    const isSample = eventType === SAMPLE_EVENT_TYPE;
    if (isSample) session.sampleCount++;
    else session.countType(eventType);
    const part = this.rank(session, rank);
    const t = part.offsetOf(tsHead, tsTail);
    const wanted = part.touch(t, eventType === "stop");
    const host = strings.host;
    const jobId = strings.jobId;
    part.worldSize(worldSize);
    part.host(host);
    part.jobSeen(jobId, t, line);
    if (wanted !== 0) {
      part.record(wanted, t, line, {
        timestamp_ns: exactTimestamp(tsHead, tsTail),
        event_type: eventType,
        host,
        pid,
        job_id: jobId,
        rank,
        local_rank: localRank,
        world_size: worldSize,
      });
    }
    const collector = strings.collector;
    part.peak(0, allocated, t, deviceId, collector);
    part.peak(1, reserved, t, deviceId, collector);
    part.peak(2, used, t, deviceId, collector);
    if (isSample) {
      if (Number.isNaN(used)) part.samplesWithoutUsed++;
      const identity = part.identityIndex(pid, host, jobId, worldSize, interval, deviceId);
      part.samples.push(t, line, allocated, reserved, used, total, tensors, identity);
    }
    return part;
  }

  /** A fast-read phase boundary, whose line is in `bytes` (its scope's text is kept as it is there). */
  addBoundaryLine(fields: LineFields, line: number, bytes: Uint8Array): void {
    const part = this.addLine(fields, line);
    if (fields.scopeStart < 0) return;
    part.boundaryLog.pushRead(
      fields.tsHead,
      fields.tsTail,
      fields.eventType !== "phase_enter",
      fields.boundaryRead,
      line,
      fields.allocated,
      fields.reserved,
      fields.used,
      fields.tensors,
      fields.total,
      fields.deviceId,
      bytes,
      fields.scopeStart,
      fields.scopeEnd,
    );
  }

  /** Any event, decoded (the general path, and in-memory analysis). */
  addEvent(event: TelemetryEvent, line: number): void {
    const eventType = event.event_type;
    const session = this.session(event.session_id);
    this.eventCount++;
    session.eventCount++;
    const rules = sampleRules(eventType);
    const isSample = rules !== 0;
    if (eventType === SAMPLE_EVENT_TYPE) session.sampleCount++;
    else session.countType(eventType);
    const part = this.rank(session, event.rank);
    const ts = event.timestamp_ns;
    const t = part.offsetOfBigInt(ts);
    const wanted = part.touch(t, eventType === "stop");
    part.worldSize(event.world_size);
    part.host(event.host);
    part.jobSeen(event.job_id, t, line);
    if (wanted !== 0) part.record(wanted, t, line, sessionEventLikeOf(event));
    const allocated = nullable(event.allocator_allocated_bytes);
    const reserved = nullable(event.allocator_reserved_bytes);
    const used = nullable(event.device_used_bytes);
    part.peak(0, allocated, t, event.device_id, event.collector);
    part.peak(1, reserved, t, event.device_id, event.collector);
    part.peak(2, used, t, event.device_id, event.collector);
    if (isSample) {
      if (Number.isNaN(used)) part.samplesWithoutUsed++;
      const origin = originOf(event.metadata);
      if (origin !== null) {
        part.origins ??= new Map();
        part.origins.set(line, origin);
      }
      const identity = part.identityIndex(
        event.pid,
        event.host,
        event.job_id,
        event.world_size,
        event.sampling_interval_ms,
        event.device_id,
      );
      part.samples.push(
        t,
        line,
        allocated,
        reserved,
        used,
        nullable(event.device_total_bytes),
        tensorsOf(event.metadata),
        identity,
        rules,
      );
      const exact = exactCountersOf(event);
      if (exact !== undefined) {
        part.exact ??= new Map();
        part.exact.set(line, exact);
      }
      const births = event.metadata[LIVE_BY_PHASE_KEY];
      if (typeof births === "object" && births !== null && !Array.isArray(births))
        // Decoded metadata may hold bigints (integers past 2^53): the lossless encoder writes them.
        part.births.push({ timestampNs: ts, json: stringifyJson(births) });
    } else if (eventType === "phase_enter" || eventType === "phase_exit") {
      const scope = event.metadata.phase_scope;
      if (scope !== undefined) {
        part.boundaryLog.push({
          timestampNs: ts,
          eventType,
          scope,
          scopeJson: null,
          line,
          allocated,
          reserved,
          used,
          tensors: tensorsOf(event.metadata),
          total: nullable(event.device_total_bytes),
          deviceId: event.device_id,
          boundaryRead: event.metadata.phase_counters === BOUNDARY_READ,
        });
      }
    } else if (ALERT_EVENT_TYPES.has(eventType)) {
      part.alerts.push({
        timestampNs: ts,
        line,
        eventType,
        context: event.context,
        oomReason: metadataString(event.metadata, "oom_reason"),
        used,
        allocated,
        origin: originOf(event.metadata),
      });
    } else if (eventType === "collector_degraded" || eventType === "collector_recovered") {
      part.health.push({
        timestampNs: ts,
        eventType,
        collector: event.collector,
        context: event.context,
        error: metadataString(event.metadata, "collector_last_error"),
        status: metadataString(event.metadata, "collector_health_status"),
      });
    }
    if (INSTANT_EVENT_TYPES.has(eventType))
      part.instants.push({
        timestampNs: ts,
        line,
        eventType,
        context: event.context,
        metadata: instantMetadataOf(event.metadata),
      });
  }

  warn(message: string, sessionId: string | null): void {
    this.warnings.push({ message, sessionId });
  }

  finish(lineCount: number): SegmentAggregate {
    let minTs: bigint | null = null;
    let maxTs: bigint | null = null;
    for (const session of this.sessions.values()) {
      session.finish();
      for (const part of session.ranks.values()) {
        const low = part.minTs;
        const high = part.maxTs;
        if (low !== null && (minTs === null || low < minTs)) minTs = low;
        if (high !== null && (maxTs === null || high > maxTs)) maxTs = high;
      }
    }
    return {
      lineCount,
      eventCount: this.eventCount,
      sessions: this.sessions,
      warnings: this.warnings,
      minTs,
      maxTs,
    };
  }
}
