import { closeSync, promises as fsPromises, fsyncSync, openSync } from "node:fs";
import { join } from "node:path";
import {
  type Clock,
  type JsonObject,
  type JsonValue,
  markFloat,
  nodeCrypto,
  pythonFormatFixed,
  pythonStr,
  sessionSummaryToJson,
  stringifyJson,
  systemClock,
  type TelemetryEvent,
} from "@stormlog/core";
import { MANIFEST_FILENAME, readManifest, type SinkManifest } from "./manifest.js";
import { iterateTelemetryEvents, type ReadOptions, summarizeTelemetrySessions } from "./reader.js";

/** Name of the rollup sidecar in a sink directory. */
export const ROLLUP_FILENAME = "rollups.json";
/** `format` of the rollup sidecar. */
export const ROLLUP_FORMAT = "stormlog.telemetry_rollups";
/** Rollup schema version written. */
export const ROLLUP_SCHEMA_VERSION = 1;

const ALERT_TYPES: ReadonlySet<string> = new Set(["warning", "critical", "error"]);
const TRANSITION_TYPES: ReadonlySet<string> = new Set(["collector_degraded", "collector_recovered"]);
const PEAK_COUNTERS = ["allocator_allocated_bytes", "allocator_reserved_bytes", "device_used_bytes"] as const;

/** The retained raw evidence a rollup file covers (the reference's `RollupCoverage`). */
export interface RollupCoverage {
  retained_segment_filenames: string[];
  retained_segment_count: number;
  retained_event_count: number;
  retained_bytes: number;
  pruned_segment_count: number | null;
  pruned_bytes: number | null;
}

/** Coverage from a manifest's segments, with the pruning counters of the sink that wrote it. */
export function rollupCoverageFromManifest(
  manifest: Pick<SinkManifest, "segments"> | null,
  pruned: { segmentCount?: number | null; bytes?: number | null } = {},
): RollupCoverage {
  const segments = manifest?.segments ?? [];
  return {
    retained_segment_filenames: segments.map((segment) => segment.filename),
    retained_segment_count: segments.length,
    retained_event_count: segments.reduce((sum, segment) => sum + segment.event_count, 0),
    retained_bytes: segments.reduce((sum, segment) => sum + segment.size_bytes, 0),
    pruned_segment_count: pruned.segmentCount ?? null,
    pruned_bytes: pruned.bytes ?? null,
  };
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

/** Order of two events in the reference's sorted list: timestamp, then reading order. */
function before(ts: bigint, index: number, otherTs: bigint, otherIndex: number): boolean {
  return ts < otherTs || (ts === otherTs && index < otherIndex);
}

/** The first peak in timestamp order wins ties, as the reference's strict `>` over sorted events. */
class Peak {
  value: number | null = null;
  ts = 0n;
  index = 0;
  rank: number | null = null;
  deviceId: number | null = null;

  observe(value: number | null, event: TelemetryEvent, index: number): void {
    if (value === null) return;
    if (
      this.value === null ||
      value > this.value ||
      (value === this.value && before(event.timestamp_ns, index, this.ts, this.index))
    ) {
      this.value = value;
      this.ts = event.timestamp_ns;
      this.index = index;
      this.rank = event.rank;
      this.deviceId = event.device_id;
    }
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

  observe(event: TelemetryEvent, index: number): void {
    for (let i = 0; i < PEAK_COUNTERS.length; i++)
      this.peaks[i]!.observe(event[PEAK_COUNTERS[i]!], event, index);
  }

  toJson(): JsonObject {
    const out: JsonObject = {};
    PEAK_COUNTERS.forEach((name, i) => {
      out[name] = this.peaks[i]!.toJson();
    });
    return out;
  }
}

class RankTally {
  events = 0;
  samples = 0;
  first: { ts: bigint; index: number; localRank: number; worldSize: number } | null = null;
  last: bigint | null = null;
  readonly counters = new Counters();
  gapFirst: { ts: bigint; index: number; bytes: number } | null = null;
  gapLatest: { ts: bigint; index: number; bytes: number } | null = null;
  gapPeak: number | null = null;

  observe(event: TelemetryEvent, index: number): void {
    const ts = event.timestamp_ns;
    this.events++;
    if (this.first === null || before(ts, index, this.first.ts, this.first.index)) {
      this.first = { ts, index, localRank: event.local_rank, worldSize: event.world_size };
    }
    if (this.last === null || ts > this.last) this.last = ts;
    this.counters.observe(event, index);
    if (event.event_type !== "sample") return;
    this.samples++;
    if (event.device_used_bytes === null || event.allocator_reserved_bytes === null) return;
    const bytes = event.device_used_bytes - event.allocator_reserved_bytes;
    if (this.gapFirst === null || before(ts, index, this.gapFirst.ts, this.gapFirst.index))
      this.gapFirst = { ts, index, bytes };
    if (this.gapLatest === null || !before(ts, index, this.gapLatest.ts, this.gapLatest.index)) {
      this.gapLatest = { ts, index, bytes };
    }
    this.gapPeak = this.gapPeak === null ? bytes : Math.max(this.gapPeak, bytes);
  }

  toJson(rank: number): JsonObject {
    const first = this.gapFirst;
    const latest = this.gapLatest;
    const out: JsonObject = {
      rank,
      local_rank: this.first?.localRank ?? 0,
      world_size: this.first?.worldSize ?? 1,
      event_count: this.events,
      sample_count: this.samples,
      first_timestamp_ns: this.first?.ts ?? null,
      last_timestamp_ns: this.last,
      counters: this.counters.toJson(),
      hidden_gap_first_bytes: first?.bytes ?? null,
      hidden_gap_latest_bytes: latest?.bytes ?? null,
      hidden_gap_peak_bytes: this.gapPeak,
      hidden_gap_delta_bytes: first && latest ? latest.bytes - first.bytes : null,
      hidden_gap_drift_bytes_per_second: null,
    };
    if (first && latest && latest.ts - first.ts > 0n) {
      const seconds = Number(latest.ts - first.ts) / 1e9;
      // round(x, 6) as Python rounds: correctly rounded decimal digits.
      out.hidden_gap_drift_bytes_per_second = Number(
        pythonFormatFixed((latest.bytes - first.bytes) / seconds, 6),
      );
      markFloat(out, "hidden_gap_drift_bytes_per_second");
    }
    return out;
  }
}

class WindowTally {
  events = 0;
  samples = 0;
  readonly ranks = new Set<number>();
  readonly counters = new Counters();
  alerts = 0;
  transitions = 0;
  ooms = 0;

  constructor(
    readonly index: bigint,
    readonly startNs: bigint,
    readonly endNs: bigint,
  ) {}

  observe(event: TelemetryEvent, index: number): void {
    this.events++;
    this.ranks.add(event.rank);
    this.counters.observe(event, index);
    if (event.event_type === "sample") this.samples++;
    if (isAlert(event)) this.alerts++;
    if (TRANSITION_TYPES.has(event.event_type)) this.transitions++;
    if (isOom(event)) this.ooms++;
  }

  toJson(): JsonObject {
    return {
      index: this.index,
      start_ns: this.startNs,
      end_ns: this.endNs,
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

/** One session's figures, gathered from its events in any order (only the transitions are kept). */
class SessionTally {
  events = 0;
  samples = 0;
  first: bigint | null = null;
  last: bigint | null = null;
  readonly counters = new Counters();
  alertTotal = 0;
  readonly severities = new Map<string, number>();
  readonly alertTypes = new Map<string, number>();
  readonly transitions: { ts: bigint; index: number; degraded: boolean }[] = [];
  lastStatus: { ts: bigint; index: number; status: string } | null = null;
  oomMarkers = 0;
  oomEvents = 0;
  readonly bundlePaths = new Set<string>();
  readonly ranks = new Map<number, RankTally>();
  readonly windows = new Map<bigint, WindowTally>();

  constructor(
    readonly startNs: bigint,
    readonly windowNs: bigint,
  ) {}

  observe(event: TelemetryEvent, index: number): void {
    const ts = event.timestamp_ns;
    this.events++;
    if (this.first === null || ts < this.first) this.first = ts;
    if (this.last === null || ts > this.last) this.last = ts;
    this.counters.observe(event, index);
    if (event.event_type === "sample") this.samples++;
    if (isAlert(event)) {
      this.alertTotal++;
      const severity = severityOf(event);
      this.severities.set(severity, (this.severities.get(severity) ?? 0) + 1);
      this.alertTypes.set(event.event_type, (this.alertTypes.get(event.event_type) ?? 0) + 1);
    }
    this.observeHealth(event, index);
    if (isOom(event)) {
      this.oomMarkers++;
      this.oomEvents++;
      const path = event.metadata.oom_dump_path;
      if (typeof path === "string" && path.trim() !== "") this.bundlePaths.add(path);
    }
    let rank = this.ranks.get(event.rank);
    if (rank === undefined) {
      rank = new RankTally();
      this.ranks.set(event.rank, rank);
    }
    rank.observe(event, index);
    const windowIndex = ts <= this.startNs ? 0n : (ts - this.startNs) / this.windowNs;
    let window = this.windows.get(windowIndex);
    if (window === undefined) {
      const start = this.startNs + windowIndex * this.windowNs;
      window = new WindowTally(windowIndex, start, start + this.windowNs);
      this.windows.set(windowIndex, window);
    }
    window.observe(event, index);
  }

  private observeHealth(event: TelemetryEvent, index: number): void {
    const ts = event.timestamp_ns;
    let status: string | null = null;
    if (TRANSITION_TYPES.has(event.event_type)) {
      const degraded = event.event_type === "collector_degraded";
      this.transitions.push({ ts, index, degraded });
      status = degraded ? "degraded" : "healthy";
    } else {
      const value = event.metadata.collector_health_status;
      if (typeof value === "string" && value.trim() !== "") status = value.trim().toLowerCase();
    }
    if (
      status !== null &&
      (this.lastStatus === null || !before(ts, index, this.lastStatus.ts, this.lastStatus.index))
    ) {
      this.lastStatus = { ts, index, status };
    }
  }

  healthJson(terminalNs: bigint | null): JsonObject {
    const transitions = [...this.transitions].sort((a, b) => (before(a.ts, a.index, b.ts, b.index) ? -1 : 1));
    let degradedSince: bigint | null = null;
    let degradedTime = 0n;
    let degraded = 0;
    for (const transition of transitions) {
      if (transition.degraded) {
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
      last_status: this.lastStatus?.status ?? null,
    };
  }
}

function sortedCounts(counts: Map<string, number>): JsonObject {
  const out: JsonObject = {};
  for (const key of [...counts.keys()].sort()) out[key] = counts.get(key)!;
  return out;
}

/** Options of `buildTelemetryRollups`. */
export interface RollupOptions extends ReadOptions {
  /** Window width in seconds (default 60, the reference's). */
  windowSeconds?: number;
  /** Coverage to record (default: from the directory's manifest, without pruning counters). */
  coverage?: RollupCoverage;
  clock?: Clock;
}

/**
 * The reference's `rollups.json` payload for a sink directory (`build_telemetry_rollups` over
 * `load_telemetry_sessions`), built in two streaming passes without holding the events: per session
 * its counts, peaks, alerts, collector health, OOM markers, per-rank hidden-gap figures and fixed
 * windows from the session's start.
 */
export async function buildTelemetryRollups(dir: string, options: RollupOptions = {}): Promise<JsonObject> {
  const windowNs = BigInt(Math.round((options.windowSeconds ?? 60) * 1e9));
  if (windowNs <= 0n) throw new RangeError("windowSeconds must be > 0");
  const manifest = await readManifest(dir);
  const sessions = await summarizeTelemetrySessions(dir, options);
  const tallies = new Map<string, SessionTally>();
  for (const info of sessions)
    tallies.set(info.summary.session_id, new SessionTally(info.summary.started_at_ns, windowNs));
  let index = 0;
  for await (const event of iterateTelemetryEvents(dir, { ...options, onWarning: () => undefined })) {
    tallies.get(event.session_id)?.observe(event, index++);
  }
  const ordered = [...sessions].sort((a, b) =>
    a.summary.started_at_ns !== b.summary.started_at_ns
      ? a.summary.started_at_ns < b.summary.started_at_ns
        ? -1
        : 1
      : a.summary.session_id < b.summary.session_id
        ? -1
        : 1,
  );
  return {
    schema_version: ROLLUP_SCHEMA_VERSION,
    format: ROLLUP_FORMAT,
    generated_at_ns: (options.clock ?? systemClock).nowNs(),
    source_manifest: manifest === null ? null : MANIFEST_FILENAME,
    source_manifest_schema_version: manifest?.schema_version ?? null,
    window_duration_ns: windowNs,
    coverage: { ...(options.coverage ?? rollupCoverageFromManifest(manifest)) },
    sessions: ordered.map((info) => {
      const tally = tallies.get(info.summary.session_id)!;
      return {
        session: sessionSummaryToJson(info.summary),
        event_count: tally.events,
        sample_count: tally.samples,
        first_timestamp_ns: tally.first,
        last_timestamp_ns: tally.last,
        source_count: info.sources.length,
        sources_loaded: [...info.sources].sort(),
        warnings: info.warnings,
        counters: tally.counters.toJson(),
        alerts: {
          total_count: tally.alertTotal,
          severity_counts: sortedCounts(tally.severities),
          event_type_counts: sortedCounts(tally.alertTypes),
        },
        collector_health: tally.healthJson(info.summary.ended_at_ns || tally.last),
        oom: {
          marker_count: tally.oomMarkers,
          event_count: tally.oomEvents,
          bundle_path_count: tally.bundlePaths.size,
        },
        ranks: [...tally.ranks.keys()]
          .sort((a, b) => a - b)
          .map((rank) => tally.ranks.get(rank)!.toJson(rank)),
        windows: [...tally.windows.keys()]
          .sort((a, b) => (a < b ? -1 : 1))
          .map((key) => tally.windows.get(key)!.toJson()),
      };
    }),
  };
}

/**
 * Writes `rollups.json` as the reference does: sorted keys, indent 2, through a unique temporary
 * file that is fsynced, renamed over the old one, and the directory fsynced. Returns its path.
 */
export async function writeTelemetryRollups(dir: string, rollups: JsonObject): Promise<string> {
  const target = join(dir, ROLLUP_FILENAME);
  const tmp = join(
    dir,
    `${ROLLUP_FILENAME}.${process.pid}.${nodeCrypto().randomUUID().replace(/-/g, "")}.tmp`,
  );
  const handle = await fsPromises.open(tmp, "w", 0o666);
  try {
    await handle.writeFile(`${stringifyJson(rollups, { sortKeys: true, indent: 2 })}\n`, "utf8");
    await handle.sync();
  } catch (error) {
    await handle.close();
    await fsPromises.unlink(tmp).catch(() => undefined);
    throw error;
  }
  await handle.close();
  await fsPromises.rename(tmp, target);
  try {
    const fd = openSync(dir, "r");
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Not every platform can fsync a directory; the rename is done either way.
  }
  return target;
}
