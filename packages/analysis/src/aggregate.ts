/**
 * What one scan of a segment keeps: per session and rank, the samples as typed columns, the phase
 * boundaries with the counters read at them, alerts, collector-health transitions, peaks and event
 * counts. Everything the analyses need and nothing else, so a segment's aggregate can be stored in
 * the index and combined later with other segments' without reading the segment again.
 */
import { ALERT_EVENT_TYPES, type JsonObject, type JsonValue, type TelemetryEvent } from "@stormlog/core";

/** At most this many alerts and health transitions are kept per rank and segment (counts stay exact). */
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

/** The event fields a session summary is inferred from (core's `SessionEventLike`). */
export interface SessionEvidence {
  readonly timestamp_ns: bigint;
  readonly event_type: string;
  readonly host: string;
  readonly pid: number;
  readonly job_id: string | null;
  readonly rank: number;
  readonly local_rank: number;
  readonly world_size: number;
}

/** A peak of one counter: value, when, on which device. */
export interface CounterPeak {
  value: number;
  timestampNs: bigint;
  deviceId: number;
}

/** A phase boundary record with the counters it carries. NaN marks a null counter. */
export interface BoundaryEntry {
  readonly timestampNs: bigint;
  readonly eventType: string;
  /** `metadata.phase_scope` as recorded (validated later by the replay index). */
  readonly scope: JsonValue;
  /** Line within its segment (storage order). */
  readonly line: number;
  readonly allocated: number;
  readonly reserved: number;
  readonly used: number;
  /** `metadata.tfjs_num_tensors` on the boundary record, NaN when absent. */
  readonly tensors: number;
}

/** An alert event (`warning`, `critical`, `error`). */
export interface AlertEntry {
  readonly timestampNs: bigint;
  readonly eventType: string;
  readonly context: string | null;
  /** `metadata.oom_reason`, when the alert is an OOM report. */
  readonly oomReason: string | null;
  readonly used: number;
  readonly allocated: number;
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

/** Growable sample columns (NaN marks null counters and absent tensor counts). */
export class SampleColumns {
  count = 0;
  ts: BigInt64Array;
  line: Float64Array;
  allocated: Float64Array;
  reserved: Float64Array;
  used: Float64Array;
  total: Float64Array;
  tensors: Float64Array;
  /** Index into the rank part's identities; null while every sample has identity 0. */
  identity: Uint16Array | null = null;

  constructor(capacity = 256) {
    this.ts = new BigInt64Array(capacity);
    this.line = new Float64Array(capacity);
    this.allocated = new Float64Array(capacity);
    this.reserved = new Float64Array(capacity);
    this.used = new Float64Array(capacity);
    this.total = new Float64Array(capacity);
    this.tensors = new Float64Array(capacity);
  }

  private grow(): void {
    const capacity = this.ts.length * 2;
    const bigger = <T extends BigInt64Array | Float64Array | Uint16Array>(array: T, make: (n: number) => T): T => {
      const next = make(capacity);
      next.set(array as never);
      return next;
    };
    this.ts = bigger(this.ts, (n) => new BigInt64Array(n));
    this.line = bigger(this.line, (n) => new Float64Array(n));
    this.allocated = bigger(this.allocated, (n) => new Float64Array(n));
    this.reserved = bigger(this.reserved, (n) => new Float64Array(n));
    this.used = bigger(this.used, (n) => new Float64Array(n));
    this.total = bigger(this.total, (n) => new Float64Array(n));
    this.tensors = bigger(this.tensors, (n) => new Float64Array(n));
    if (this.identity !== null) this.identity = bigger(this.identity, (n) => new Uint16Array(n));
  }

  push(
    ts: bigint,
    line: number,
    allocated: number,
    reserved: number,
    used: number,
    total: number,
    tensors: number,
    identity: number,
  ): void {
    const i = this.count;
    if (i === this.ts.length) this.grow();
    this.ts[i] = ts;
    this.line[i] = line;
    this.allocated[i] = allocated;
    this.reserved[i] = reserved;
    this.used[i] = used;
    this.total[i] = total;
    this.tensors[i] = tensors;
    if (identity !== 0 && this.identity === null) this.identity = new Uint16Array(this.ts.length);
    if (this.identity !== null) this.identity[i] = identity;
    this.count = i + 1;
  }

  /** Drops the spare capacity. */
  trim(): void {
    const n = this.count;
    if (this.ts.length === n) return;
    this.ts = this.ts.slice(0, n);
    this.line = this.line.slice(0, n);
    this.allocated = this.allocated.slice(0, n);
    this.reserved = this.reserved.slice(0, n);
    this.used = this.used.slice(0, n);
    this.total = this.total.slice(0, n);
    this.tensors = this.tensors.slice(0, n);
    if (this.identity !== null) this.identity = this.identity.slice(0, n);
  }
}

/** One rank of one session within a segment. */
export class RankPart {
  eventCount = 0;
  minTs: bigint | null = null;
  maxTs: bigint | null = null;
  readonly samples = new SampleColumns();
  readonly identities: SampleIdentity[] = [];
  /** Peaks of allocator allocated, allocator reserved and device used, over every event. */
  readonly peaks: [CounterPeak | null, CounterPeak | null, CounterPeak | null] = [null, null, null];
  readonly boundaries: BoundaryEntry[] = [];
  readonly alerts: AlertEntry[] = [];
  readonly health: HealthEntry[] = [];
  /** Samples whose device used memory is null (schema v4). */
  samplesWithoutUsed = 0;

  constructor(readonly rank: number) {}

  /** Index of an identity, added when new (the last one is checked first). */
  identityIndex(pid: number, host: string, jobId: string | null, worldSize: number, interval: number, deviceId: number): number {
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
    ids.push({ pid, host, job_id: jobId, world_size: worldSize, sampling_interval_ms: interval, device_id: deviceId });
    return ids.length - 1;
  }

  touch(ts: bigint): void {
    this.eventCount++;
    if (this.minTs === null || ts < this.minTs) this.minTs = ts;
    if (this.maxTs === null || ts > this.maxTs) this.maxTs = ts;
  }

  peak(which: 0 | 1 | 2, value: number, ts: bigint, deviceId: number): void {
    if (Number.isNaN(value)) return;
    const current = this.peaks[which];
    if (current === null) this.peaks[which] = { value, timestampNs: ts, deviceId };
    else if (value > current.value) {
      current.value = value;
      current.timestampNs = ts;
      current.deviceId = deviceId;
    }
  }
}

/** One session within a segment. */
export class SessionPart {
  eventCount = 0;
  /** Earliest event (first seen on ties). */
  first: SessionEvidence | null = null;
  lastTs: bigint | null = null;
  /** Latest `stop` event (last seen on ties). */
  lastStop: SessionEvidence | null = null;
  readonly eventTypes = new Map<string, number>();
  readonly ranks = new Map<number, RankPart>();
  /** Hot-path counter merged into `eventTypes` by `finish()`. */
  sampleCount = 0;

  constructor(readonly sessionId: string) {}

  rankPart(rank: number): RankPart {
    let part = this.ranks.get(rank);
    if (part === undefined) {
      part = new RankPart(rank);
      this.ranks.set(rank, part);
    }
    return part;
  }

  countType(eventType: string): void {
    this.eventTypes.set(eventType, (this.eventTypes.get(eventType) ?? 0) + 1);
  }

  finish(): void {
    if (this.sampleCount > 0) {
      this.eventTypes.set("sample", (this.eventTypes.get("sample") ?? 0) + this.sampleCount);
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
  /** Earliest and latest timestamps, and ranks seen (for the index's ranges). */
  minTs: bigint | null;
  maxTs: bigint | null;
}

function evidenceOf(event: SessionEvidence): SessionEvidence {
  return {
    timestamp_ns: event.timestamp_ns,
    event_type: event.event_type,
    host: event.host,
    pid: event.pid,
    job_id: event.job_id,
    rank: event.rank,
    local_rank: event.local_rank,
    world_size: event.world_size,
  };
}

const nullable = (value: number | null): number => (value === null ? Number.NaN : value);

function metadataString(metadata: JsonObject, key: string): string | null {
  const value = metadata[key];
  return typeof value === "string" ? value : null;
}

function tensorsOf(metadata: JsonObject): number {
  const value = metadata.tfjs_num_tensors;
  return typeof value === "number" ? value : typeof value === "bigint" ? Number(value) : Number.NaN;
}

/** Feeds events into a `SegmentAggregate`: whole records (general path) or fast-read lines. */
export class Accumulator {
  readonly aggregate: SegmentAggregate = {
    lineCount: 0,
    eventCount: 0,
    sessions: new Map(),
    warnings: [],
    minTs: null,
    maxTs: null,
  };
  private lastSession: SessionPart | null = null;
  private lastRank: RankPart | null = null;

  session(sessionId: string): SessionPart {
    const last = this.lastSession;
    if (last !== null && last.sessionId === sessionId) return last;
    let part = this.aggregate.sessions.get(sessionId);
    if (part === undefined) {
      part = new SessionPart(sessionId);
      this.aggregate.sessions.set(sessionId, part);
    }
    this.lastSession = part;
    this.lastRank = null;
    return part;
  }

  private rank(session: SessionPart, rank: number): RankPart {
    const last = this.lastRank;
    if (last !== null && last.rank === rank && this.lastSession === session) return last;
    const part = session.rankPart(rank);
    this.lastRank = part;
    return part;
  }

  private common(session: SessionPart, ts: bigint, evidence: () => SessionEvidence, isStop: boolean): void {
    const aggregate = this.aggregate;
    aggregate.eventCount++;
    if (aggregate.minTs === null || ts < aggregate.minTs) aggregate.minTs = ts;
    if (aggregate.maxTs === null || ts > aggregate.maxTs) aggregate.maxTs = ts;
    session.eventCount++;
    if (session.first === null || ts < session.first.timestamp_ns) session.first = evidence();
    if (session.lastTs === null || ts > session.lastTs) session.lastTs = ts;
    if (isStop && (session.lastStop === null || ts >= session.lastStop.timestamp_ns)) session.lastStop = evidence();
  }

  /** A sample read by the fast path (`event_type` exactly `sample`). */
  addSample(
    sessionId: string,
    ts: bigint,
    line: number,
    rank: number,
    localRank: number,
    pid: number,
    host: string,
    jobId: string | null,
    worldSize: number,
    interval: number,
    deviceId: number,
    allocated: number,
    reserved: number,
    used: number,
    total: number,
    tensors: number,
  ): void {
    const session = this.session(sessionId);
    const aggregate = this.aggregate;
    aggregate.eventCount++;
    if (aggregate.minTs === null || ts < aggregate.minTs) aggregate.minTs = ts;
    if (aggregate.maxTs === null || ts > aggregate.maxTs) aggregate.maxTs = ts;
    session.eventCount++;
    session.sampleCount++;
    if (session.first === null || ts < session.first.timestamp_ns) {
      session.first = {
        timestamp_ns: ts,
        event_type: "sample",
        host,
        pid,
        job_id: jobId,
        rank,
        local_rank: localRank,
        world_size: worldSize,
      };
    }
    if (session.lastTs === null || ts > session.lastTs) session.lastTs = ts;
    const part = this.rank(session, rank);
    part.touch(ts);
    const identity = part.identityIndex(pid, host, jobId, worldSize, interval, deviceId);
    if (Number.isNaN(used)) part.samplesWithoutUsed++;
    part.samples.push(ts, line, allocated, reserved, used, total, tensors, identity);
    part.peak(0, allocated, ts, deviceId);
    part.peak(1, reserved, ts, deviceId);
    part.peak(2, used, ts, deviceId);
  }

  /** Any event, decoded (the general path, and in-memory analysis). */
  addEvent(event: TelemetryEvent, line: number): void {
    const eventType = event.event_type;
    if (eventType === "sample") {
      this.addSample(
        event.session_id,
        event.timestamp_ns,
        line,
        event.rank,
        event.local_rank,
        event.pid,
        event.host,
        event.job_id,
        event.world_size,
        event.sampling_interval_ms,
        event.device_id,
        nullable(event.allocator_allocated_bytes),
        nullable(event.allocator_reserved_bytes),
        nullable(event.device_used_bytes),
        nullable(event.device_total_bytes),
        tensorsOf(event.metadata),
      );
      return;
    }
    const session = this.session(event.session_id);
    const ts = event.timestamp_ns;
    this.common(session, ts, () => evidenceOf(event), eventType === "stop");
    session.countType(eventType);
    const part = this.rank(session, event.rank);
    part.touch(ts);
    const allocated = nullable(event.allocator_allocated_bytes);
    const reserved = nullable(event.allocator_reserved_bytes);
    const used = nullable(event.device_used_bytes);
    part.peak(0, allocated, ts, event.device_id);
    part.peak(1, reserved, ts, event.device_id);
    part.peak(2, used, ts, event.device_id);
    if (eventType === "phase_enter" || eventType === "phase_exit") {
      const scope = event.metadata.phase_scope;
      if (scope !== undefined) {
        part.boundaries.push({
          timestampNs: ts,
          eventType,
          scope,
          line,
          allocated,
          reserved,
          used,
          tensors: tensorsOf(event.metadata),
        });
      }
    } else if (ALERT_EVENT_TYPES.has(eventType)) {
      if (part.alerts.length < DETAIL_CAP) {
        part.alerts.push({
          timestampNs: ts,
          eventType,
          context: event.context,
          oomReason: metadataString(event.metadata, "oom_reason"),
          used,
          allocated,
        });
      }
    } else if (eventType === "collector_degraded" || eventType === "collector_recovered") {
      if (part.health.length < DETAIL_CAP) {
        part.health.push({
          timestampNs: ts,
          eventType,
          collector: event.collector,
          context: event.context,
          error: metadataString(event.metadata, "collector_last_error"),
          status: metadataString(event.metadata, "collector_health_status"),
        });
      }
    }
  }

  /**
   * A fast-read line of another type whose details are not needed (allocation, peak, start...):
   * counted, its counters feed the peaks.
   */
  addPlain(
    sessionId: string,
    eventType: string,
    ts: bigint,
    rank: number,
    evidence: () => SessionEvidence,
    allocated: number,
    reserved: number,
    used: number,
    deviceId: number,
  ): void {
    const session = this.session(sessionId);
    this.common(session, ts, evidence, eventType === "stop");
    session.countType(eventType);
    const part = this.rank(session, rank);
    part.touch(ts);
    part.peak(0, allocated, ts, deviceId);
    part.peak(1, reserved, ts, deviceId);
    part.peak(2, used, ts, deviceId);
  }

  /** A fast-read phase boundary with its already parsed `phase_scope`. */
  addBoundary(
    sessionId: string,
    eventType: string,
    ts: bigint,
    rank: number,
    evidence: () => SessionEvidence,
    line: number,
    scope: JsonValue | undefined,
    allocated: number,
    reserved: number,
    used: number,
    tensors: number,
    deviceId: number,
  ): void {
    this.addPlain(sessionId, eventType, ts, rank, evidence, allocated, reserved, used, deviceId);
    if (scope === undefined) return;
    this.lastRank!.boundaries.push({ timestampNs: ts, eventType, scope, line, allocated, reserved, used, tensors });
  }

  warn(message: string, sessionId: string | null): void {
    this.aggregate.warnings.push({ message, sessionId });
  }

  finish(lineCount: number): SegmentAggregate {
    this.aggregate.lineCount = lineCount;
    for (const session of this.aggregate.sessions.values()) session.finish();
    return this.aggregate;
  }
}
