import { type Clock, type JsonObject, type SessionSummary, systemClock } from "@stormlog/core";
import { sessionSummaryToJson } from "@stormlog/core/internal";
import { MANIFEST_FILENAME, type SinkManifest } from "../directory/manifest.js";
import type { SessionTally } from "./tally.js";

/** Name of the rollup sidecar in a sink directory. */
export const ROLLUP_FILENAME = "rollups.json";
/** `format` of the rollup sidecar. */
export const ROLLUP_FORMAT = "stormlog.telemetry_rollups";
/** Rollup schema version written. */
export const ROLLUP_SCHEMA_VERSION = 1;

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

/** One session of a rollup: what the loaders say of it, and its tally. */
export interface RolledSession {
  readonly summary: SessionSummary;
  readonly sources: readonly string[];
  readonly warnings: readonly string[];
  readonly tally: SessionTally;
}

/** The `rollups.json` payload (the reference's `build_telemetry_rollups`), sessions by start then id. */
export function rollupPayload(options: {
  manifest: SinkManifest | null;
  windowNs: bigint;
  coverage: RollupCoverage;
  clock: Clock | undefined;
  sessions: readonly RolledSession[];
}): JsonObject {
  const { manifest } = options;
  const ordered = [...options.sessions].sort((a, b) =>
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
    window_duration_ns: options.windowNs,
    coverage: { ...options.coverage },
    sessions: ordered.map(({ summary, sources, warnings, tally }) => {
      const figures = tally.figuresJson(summary.ended_at_ns, summary.started_at_ns, options.windowNs);
      return {
        session: sessionSummaryToJson(summary),
        event_count: figures.event_count!,
        sample_count: figures.sample_count!,
        first_timestamp_ns: figures.first_timestamp_ns!,
        last_timestamp_ns: figures.last_timestamp_ns!,
        source_count: sources.length,
        sources_loaded: [...sources].sort(),
        warnings: [...warnings],
        counters: figures.counters!,
        alerts: figures.alerts!,
        collector_health: figures.collector_health!,
        oom: figures.oom!,
        ranks: figures.ranks!,
        windows: figures.windows!,
      };
    }),
  };
}
