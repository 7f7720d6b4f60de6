/**
 * The figures of one session's rollup, gathered from events in any order and mergeable: a tally
 * made from one segment's events can be written down (`toData`) and absorbed into another
 * (`absorb`), and the result is the tally of both segments' events read in a row. Ties are broken
 * by reading order, a key (timestamp, segment position, line index), as the reference's sort over
 * the loaded events does.
 */
import type { JsonObject, JsonValue, TelemetryEvent } from "@stormlog/core";
import {
  markFloat,
  pythonFormatFixed,
  pythonStr,
  type SessionEventLike,
  sessionEventLikeOf,
} from "@stormlog/core/internal";

const ALERT_TYPES: ReadonlySet<string> = new Set(["warning", "critical", "error"]);
const TRANSITION_TYPES: ReadonlySet<string> = new Set(["collector_degraded", "collector_recovered"]);
const PEAK_COUNTERS = ["allocator_allocated_bytes", "allocator_reserved_bytes", "device_used_bytes"] as const;

/** Where an event stands in reading order: the segment's position in the input, the line's in it. */
export interface ReadingPosition {
  readonly ord: number;
  readonly idx: number;
}

/** True when (ts, a) comes before (otherTs, b) in the reference's stable timestamp sort. */
function before(ts: bigint, a: ReadingPosition, otherTs: bigint, b: ReadingPosition): boolean {
  if (ts !== otherTs) return ts < otherTs;
  return a.ord !== b.ord ? a.ord < b.ord : a.idx < b.idx;
}

function big(value: JsonValue | undefined): bigint {
  return BigInt(value as number | bigint);
}

function bigOrNull(value: JsonValue | undefined): bigint | null {
  return value === null || value === undefined ? null : big(value);
}

/** The reference's `normalize_text_dimension` (for the values alert classification reads). */
function normalizeTextDimension(value: JsonValue | undefined): string {
  if (value === null || value === undefined) return "unknown";
  const text = (typeof value === "object" ? JSON.stringify(value) : pythonStr(value)).trim().toLowerCase();
  if (text === "") return "unknown";
  return text
    .replace(/0x[0-9a-fA-F]+/g, "<hex>")
    .replace(/(?<!\w)\d+(?:\.\d+)?%?(?!\w)/g, "<num>")
    .replace(/\s+/g, " ");
}

function isAlert(event: TelemetryEvent): boolean {
  return (
    ALERT_TYPES.has(event.event_type) || ALERT_TYPES.has(normalizeTextDimension(event.metadata.severity))
  );
}

function severityOf(event: TelemetryEvent): string {
  const severity = event.metadata.severity;
  if (typeof severity === "string" && severity.trim() !== "") return normalizeTextDimension(severity);
  if (event.event_type === "critical" || event.event_type === "error") return "critical";
  if (event.event_type === "warning") return "warning";
  return "info";
}

function isOom(event: TelemetryEvent): boolean {
  return (
    event.event_type === "error" && ("oom_reason" in event.metadata || "oom_dump_path" in event.metadata)
  );
}

function addCount(counts: Map<string, number>, key: string, n: number): void {
  counts.set(key, (counts.get(key) ?? 0) + n);
}

function sortedCounts(counts: Map<string, number>): JsonObject {
  const out: JsonObject = {};
  for (const key of [...counts.keys()].sort()) out[key] = counts.get(key)!;
  return out;
}

/** The first peak in timestamp order wins ties, as the reference's strict `>` over sorted events. */
class Peak {
  value: number | null = null;
  ts = 0n;
  at: ReadingPosition = { ord: 0, idx: 0 };
  rank: number | null = null;
  deviceId: number | null = null;

  offer(
    value: number | null,
    ts: bigint,
    at: ReadingPosition,
    rank: number | null,
    deviceId: number | null,
  ): void {
    if (value === null) return;
    if (
      this.value === null ||
      value > this.value ||
      (value === this.value && before(ts, at, this.ts, this.at))
    ) {
      this.value = value;
      this.ts = ts;
      this.at = at;
      this.rank = rank;
      this.deviceId = deviceId;
    }
  }

  toData(): JsonValue {
    return this.value === null ? null : [this.value, this.ts, this.at.idx, this.rank, this.deviceId];
  }

  absorb(data: JsonValue | undefined, ord: number): void {
    if (!Array.isArray(data)) return;
    const [value, ts, idx, rank, deviceId] = data as [number, bigint, number, number | null, number | null];
    this.offer(value, big(ts), { ord, idx }, rank, deviceId);
  }

  toJson(): JsonObject {
    return {
      value: this.value,
      timestamp_ns: this.value === null ? null : this.ts,
      rank: this.rank,
      device_id: this.deviceId,
    };
  }
}

class Counters {
  readonly peaks = PEAK_COUNTERS.map(() => new Peak());

  observe(event: TelemetryEvent, at: ReadingPosition): void {
    for (let i = 0; i < PEAK_COUNTERS.length; i++) {
      this.peaks[i]!.offer(event[PEAK_COUNTERS[i]!], event.timestamp_ns, at, event.rank, event.device_id);
    }
  }

  toData(): JsonValue[] {
    return this.peaks.map((peak) => peak.toData());
  }

  absorb(data: JsonValue | undefined, ord: number): void {
    const list = data as JsonValue[];
    for (let i = 0; i < this.peaks.length; i++) this.peaks[i]!.absorb(list[i], ord);
  }

  toJson(): JsonObject {
    const out: JsonObject = {};
    PEAK_COUNTERS.forEach((name, i) => {
      out[name] = this.peaks[i]!.toJson();
    });
    return out;
  }
}

/** A value seen at a point of reading order; the earliest or the latest of them is kept. */
interface Stamped<T> {
  ts: bigint;
  at: ReadingPosition;
  value: T;
}

function earliest<T>(current: Stamped<T> | null, ts: bigint, at: ReadingPosition, value: T): Stamped<T> {
  return current === null || before(ts, at, current.ts, current.at) ? { ts, at, value } : current;
}

function latest<T>(current: Stamped<T> | null, ts: bigint, at: ReadingPosition, value: T): Stamped<T> {
  return current === null || !before(ts, at, current.ts, current.at) ? { ts, at, value } : current;
}

function stampedData<T extends JsonValue>(stamped: Stamped<T> | null): JsonValue {
  return stamped === null ? null : [stamped.ts, stamped.at.idx, stamped.value];
}

function absorbStamped<T>(
  data: JsonValue | undefined,
  ord: number,
  keep: (ts: bigint, at: ReadingPosition, value: T) => void,
): void {
  if (!Array.isArray(data)) return;
  keep(big(data[0]), { ord, idx: data[1] as number }, data[2] as T);
}

class RankTally {
  events = 0;
  samples = 0;
  first: Stamped<[number, number]> | null = null;
  last: bigint | null = null;
  readonly counters = new Counters();
  gapFirst: Stamped<number> | null = null;
  gapLatest: Stamped<number> | null = null;
  gapPeak: number | null = null;

  constructor(readonly rank: number) {}

  observe(event: TelemetryEvent, at: ReadingPosition): void {
    const ts = event.timestamp_ns;
    this.events++;
    this.first = earliest(this.first, ts, at, [event.local_rank, event.world_size]);
    if (this.last === null || ts > this.last) this.last = ts;
    this.counters.observe(event, at);
    if (event.event_type !== "sample") return;
    this.samples++;
    if (event.device_used_bytes === null || event.allocator_reserved_bytes === null) return;
    this.observeGap(ts, at, event.device_used_bytes - event.allocator_reserved_bytes);
  }

  private observeGap(ts: bigint, at: ReadingPosition, bytes: number): void {
    this.gapFirst = earliest(this.gapFirst, ts, at, bytes);
    this.gapLatest = latest(this.gapLatest, ts, at, bytes);
    this.peakGap(bytes);
  }

  toData(): JsonObject {
    return {
      rank: this.rank,
      events: this.events,
      samples: this.samples,
      first: stampedData(this.first),
      last: this.last,
      counters: this.counters.toData(),
      gap_first: stampedData(this.gapFirst),
      gap_latest: stampedData(this.gapLatest),
      gap_peak: this.gapPeak,
    };
  }

  absorb(data: JsonObject, ord: number): void {
    this.events += data.events as number;
    this.samples += data.samples as number;
    absorbStamped<[number, number]>(data.first, ord, (ts, at, value) => {
      this.first = earliest(this.first, ts, at, value);
    });
    const last = bigOrNull(data.last);
    if (last !== null && (this.last === null || last > this.last)) this.last = last;
    this.counters.absorb(data.counters, ord);
    absorbStamped<number>(data.gap_first, ord, (ts, at, value) => {
      this.gapFirst = earliest(this.gapFirst, ts, at, value);
    });
    absorbStamped<number>(data.gap_latest, ord, (ts, at, value) => {
      this.gapLatest = latest(this.gapLatest, ts, at, value);
    });
    this.peakGap(data.gap_peak as number | null);
  }

  peakGap(bytes: number | null): void {
    if (bytes !== null) this.gapPeak = this.gapPeak === null ? bytes : Math.max(this.gapPeak, bytes);
  }

  toJson(): JsonObject {
    const first = this.gapFirst;
    const latestGap = this.gapLatest;
    const out: JsonObject = {
      rank: this.rank,
      local_rank: this.first?.value[0] ?? 0,
      world_size: this.first?.value[1] ?? 1,
      event_count: this.events,
      sample_count: this.samples,
      first_timestamp_ns: this.first?.ts ?? null,
      last_timestamp_ns: this.last,
      counters: this.counters.toJson(),
      hidden_gap_first_bytes: first?.value ?? null,
      hidden_gap_latest_bytes: latestGap?.value ?? null,
      hidden_gap_peak_bytes: this.gapPeak,
      hidden_gap_delta_bytes: first && latestGap ? latestGap.value - first.value : null,
      hidden_gap_drift_bytes_per_second: null,
    };
    if (first && latestGap && latestGap.ts - first.ts > 0n) {
      const seconds = Number(latestGap.ts - first.ts) / 1e9;
      // round(x, 6) as Python rounds: correctly rounded decimal digits.
      out.hidden_gap_drift_bytes_per_second = Number(
        pythonFormatFixed((latestGap.value - first.value) / seconds, 6),
      );
      markFloat(out, "hidden_gap_drift_bytes_per_second");
    }
    return out;
  }
}

/** Events of one fixed window (its bounds follow from the session's start, set at output). */
class WindowTally {
  events = 0;
  samples = 0;
  readonly ranks = new Set<number>();
  readonly counters = new Counters();
  alerts = 0;
  transitions = 0;
  ooms = 0;

  constructor(readonly index: bigint) {}

  observe(event: TelemetryEvent, at: ReadingPosition): void {
    this.events++;
    this.ranks.add(event.rank);
    this.counters.observe(event, at);
    if (event.event_type === "sample") this.samples++;
    if (isAlert(event)) this.alerts++;
    if (TRANSITION_TYPES.has(event.event_type)) this.transitions++;
    if (isOom(event)) this.ooms++;
  }

  toData(): JsonObject {
    return {
      index: this.index,
      events: this.events,
      samples: this.samples,
      ranks: [...this.ranks],
      counters: this.counters.toData(),
      alerts: this.alerts,
      transitions: this.transitions,
      ooms: this.ooms,
    };
  }

  absorb(data: JsonObject, ord: number): void {
    this.events += data.events as number;
    this.samples += data.samples as number;
    for (const rank of data.ranks as number[]) this.ranks.add(rank);
    this.counters.absorb(data.counters, ord);
    this.alerts += data.alerts as number;
    this.transitions += data.transitions as number;
    this.ooms += data.ooms as number;
  }

  toJson(startNs: bigint, windowNs: bigint): JsonObject {
    const start = startNs + this.index * windowNs;
    return {
      index: this.index,
      start_ns: start,
      end_ns: start + windowNs,
      event_count: this.events,
      sample_count: this.samples,
      rank_count: this.ranks.size,
      counters: this.counters.toJson(),
      alert_count: this.alerts,
      collector_transition_count: this.transitions,
      oom_count: this.ooms,
    };
  }
}

function identityData(identity: SessionEventLike): JsonObject {
  return { ...identity };
}

function identityFrom(data: JsonObject): SessionEventLike {
  return {
    timestamp_ns: big(data.timestamp_ns),
    event_type: data.event_type as string,
    host: data.host as string,
    pid: data.pid as number,
    job_id: data.job_id as string | null,
    rank: data.rank as number,
    local_rank: data.local_rank as number,
    world_size: data.world_size as number,
  };
}

/**
 * One session's figures: those of the loaders (count, first event and last `stop` for a summary
 * the ledger lacks, whether a segment is its source) and those of its rollup. Windows
 * are counted from `startNs`; a tally absorbs only data counted from the same start.
 */
export class SessionTally {
  events = 0;
  samples = 0;
  firstTs: bigint | null = null;
  lastTs: bigint | null = null;
  readonly counters = new Counters();
  alertTotal = 0;
  readonly severities = new Map<string, number>();
  readonly alertTypes = new Map<string, number>();
  readonly transitions: Stamped<boolean>[] = [];
  lastStatus: Stamped<string> | null = null;
  oomMarkers = 0;
  oomEvents = 0;
  readonly bundlePaths = new Set<string>();
  readonly ranks = new Map<number, RankTally>();
  readonly windows = new Map<bigint, WindowTally>();
  firstEvent: Stamped<SessionEventLike> | null = null;
  lastStop: Stamped<SessionEventLike> | null = null;
  /** A segment of this tally is one of the session's sources (it had events of it, or was its empty segment). */
  sourced = false;

  /** `grid`: where windows start and how wide they are, for `observe` (a tally that only absorbs needs none). */
  constructor(
    readonly sessionId: string,
    private readonly grid: { readonly startNs: bigint; readonly windowNs: bigint } | null = null,
  ) {}

  observe(event: TelemetryEvent, at: ReadingPosition): void {
    const ts = event.timestamp_ns;
    this.events++;
    this.sourced = true;
    if (this.firstTs === null || ts < this.firstTs) this.firstTs = ts;
    if (this.lastTs === null || ts > this.lastTs) this.lastTs = ts;
    if (this.firstEvent === null || before(ts, at, this.firstEvent.ts, this.firstEvent.at))
      this.firstEvent = { ts, at, value: sessionEventLikeOf(event) };
    if (event.event_type === "stop") this.lastStop = latest(this.lastStop, ts, at, sessionEventLikeOf(event));
    this.counters.observe(event, at);
    if (event.event_type === "sample") this.samples++;
    if (isAlert(event)) {
      this.alertTotal++;
      addCount(this.severities, severityOf(event), 1);
      addCount(this.alertTypes, event.event_type, 1);
    }
    this.observeHealth(event, at);
    if (isOom(event)) {
      this.oomMarkers++;
      this.oomEvents++;
      const path = event.metadata.oom_dump_path;
      if (typeof path === "string" && path.trim() !== "") this.bundlePaths.add(path);
    }
    this.rankTally(event.rank).observe(event, at);
    const { startNs, windowNs } = this.grid!;
    this.windowTally(ts <= startNs ? 0n : (ts - startNs) / windowNs).observe(event, at);
  }

  private rankTally(rank: number): RankTally {
    let tally = this.ranks.get(rank);
    if (tally === undefined) {
      tally = new RankTally(rank);
      this.ranks.set(rank, tally);
    }
    return tally;
  }

  private windowTally(index: bigint): WindowTally {
    let tally = this.windows.get(index);
    if (tally === undefined) {
      tally = new WindowTally(index);
      this.windows.set(index, tally);
    }
    return tally;
  }

  private observeHealth(event: TelemetryEvent, at: ReadingPosition): void {
    const ts = event.timestamp_ns;
    let status: string | null = null;
    if (TRANSITION_TYPES.has(event.event_type)) {
      const degraded = event.event_type === "collector_degraded";
      this.transitions.push({ ts, at, value: degraded });
      status = degraded ? "degraded" : "healthy";
    } else {
      const value = event.metadata.collector_health_status;
      if (typeof value === "string" && value.trim() !== "") status = value.trim().toLowerCase();
    }
    if (status !== null) this.lastStatus = latest(this.lastStatus, ts, at, status);
  }

  /** The plain form a segment's tally is cached in; `absorb` reads it back. */
  toData(): JsonObject {
    return {
      session_id: this.sessionId,
      // Windows were counted from this start; absorbing needs the same one.
      window_start_ns: this.events > 0 ? (this.grid?.startNs ?? null) : null,
      events: this.events,
      samples: this.samples,
      first_ts: this.firstTs,
      last_ts: this.lastTs,
      counters: this.counters.toData(),
      alert_total: this.alertTotal,
      severities: [...this.severities],
      alert_types: [...this.alertTypes],
      transitions: this.transitions.map((t) => [t.ts, t.at.idx, t.value]),
      last_status: stampedData(this.lastStatus),
      oom_markers: this.oomMarkers,
      oom_events: this.oomEvents,
      bundle_paths: [...this.bundlePaths],
      ranks: [...this.ranks.values()].map((rank) => rank.toData()),
      windows: [...this.windows.values()].map((window) => window.toData()),
      first_event:
        this.firstEvent === null
          ? null
          : [this.firstEvent.ts, this.firstEvent.at.idx, identityData(this.firstEvent.value)],
      last_stop:
        this.lastStop === null
          ? null
          : [this.lastStop.ts, this.lastStop.at.idx, identityData(this.lastStop.value)],
      sourced: this.sourced,
    };
  }

  /** Adds a segment's tally (`toData`), the segment being `ord`-th in reading order. */
  absorb(data: JsonObject, ord: number): void {
    this.events += data.events as number;
    this.samples += data.samples as number;
    const first = bigOrNull(data.first_ts);
    if (first !== null && (this.firstTs === null || first < this.firstTs)) this.firstTs = first;
    const last = bigOrNull(data.last_ts);
    if (last !== null && (this.lastTs === null || last > this.lastTs)) this.lastTs = last;
    this.counters.absorb(data.counters, ord);
    this.alertTotal += data.alert_total as number;
    for (const [key, n] of data.severities as [string, number][]) addCount(this.severities, key, n);
    for (const [key, n] of data.alert_types as [string, number][]) addCount(this.alertTypes, key, n);
    for (const [ts, idx, degraded] of data.transitions as [bigint, number, boolean][])
      this.transitions.push({ ts: big(ts), at: { ord, idx }, value: degraded });
    absorbStamped<string>(data.last_status, ord, (ts, at, status) => {
      this.lastStatus = latest(this.lastStatus, ts, at, status);
    });
    this.oomMarkers += data.oom_markers as number;
    this.oomEvents += data.oom_events as number;
    for (const path of data.bundle_paths as string[]) this.bundlePaths.add(path);
    for (const rank of data.ranks as JsonObject[]) this.rankTally(rank.rank as number).absorb(rank, ord);
    for (const window of data.windows as JsonObject[])
      this.windowTally(big(window.index)).absorb(window, ord);
    absorbStamped<JsonObject>(data.first_event, ord, (ts, at, identity) => {
      if (this.firstEvent === null || before(ts, at, this.firstEvent.ts, this.firstEvent.at))
        this.firstEvent = { ts, at, value: identityFrom(identity) };
    });
    absorbStamped<JsonObject>(data.last_stop, ord, (ts, at, identity) => {
      if (this.lastStop === null || !before(ts, at, this.lastStop.ts, this.lastStop.at))
        this.lastStop = { ts, at, value: identityFrom(identity) };
    });
    if (data.sourced === true) this.sourced = true;
  }

  /** The rollup's `collector_health`: degraded time runs from each degradation to the next recovery. */
  healthJson(terminalNs: bigint | null): JsonObject {
    const transitions = [...this.transitions].sort((a, b) => (before(a.ts, a.at, b.ts, b.at) ? -1 : 1));
    let degradedSince: bigint | null = null;
    let degradedTime = 0n;
    let degraded = 0;
    for (const transition of transitions) {
      if (transition.value) {
        degraded++;
        degradedSince = transition.ts;
      } else {
        if (degradedSince !== null && transition.ts > degradedSince)
          degradedTime += transition.ts - degradedSince;
        degradedSince = null;
      }
    }
    if (degradedSince !== null && terminalNs !== null && terminalNs > degradedSince)
      degradedTime += terminalNs - degradedSince;
    return {
      transition_count: transitions.length,
      degraded_count: degraded,
      recovered_count: transitions.length - degraded,
      degraded_time_ns: degradedTime,
      last_status: this.lastStatus?.value ?? null,
    };
  }

  /** The rollup figures of the session (all but `session`, sources and warnings); windows from `startNs`. */
  figuresJson(endedAtNs: bigint | null, startNs: bigint, windowNs: bigint): JsonObject {
    return {
      event_count: this.events,
      sample_count: this.samples,
      first_timestamp_ns: this.firstTs,
      last_timestamp_ns: this.lastTs,
      counters: this.counters.toJson(),
      alerts: {
        total_count: this.alertTotal,
        severity_counts: sortedCounts(this.severities),
        event_type_counts: sortedCounts(this.alertTypes),
      },
      collector_health: this.healthJson(endedAtNs || this.lastTs),
      oom: {
        marker_count: this.oomMarkers,
        event_count: this.oomEvents,
        bundle_path_count: this.bundlePaths.size,
      },
      ranks: [...this.ranks.keys()].sort((a, b) => a - b).map((rank) => this.ranks.get(rank)!.toJson()),
      windows: [...this.windows.keys()]
        .sort((a, b) => (a < b ? -1 : 1))
        .map((key) => this.windows.get(key)!.toJson(startNs, windowNs)),
    };
  }
}
