/** The export of one tracking session, call for call the reference's `export_tracking_run_to_wandb`. */
import type { JsonObject, JsonValue, SessionSummary } from "@stormlog/core";
import { type WandbClient, WandbHtml, WandbLineSeries, type WandbRun, WandbTable } from "../client.js";
import {
  existingDir,
  existingFile,
  isPyNumber,
  pathName,
  pathParent,
  purePath,
  pyGet,
} from "../python/values.js";
import { logAttributionOutputs } from "./attribution.js";
import {
  type ExportSession,
  logDirectoryArtifact,
  logFileArtifact,
  materializeHtmlFile,
  resolveRun,
  resolveWandbConfig,
  sessionSlug,
  sessionSummaryFields,
  updateSummary,
  type WandbExportConfig,
} from "./common.js";
import { trackingDashboardHtml } from "./dashboard.js";
import {
  ALERT_COLUMNS,
  alertRows,
  type ExportEvent,
  type TimelineRow,
  trackingTimelineRows,
} from "./timeline.js";

/** What a tracking export is given. */
export interface TrackingExportInput {
  /** The CLI command name: the default run name prefix and job type (e.g. `stormlog-track`). */
  commandName: string;
  /** The session's summary, or null (no session fields, run name = command name). */
  sessionSummary: SessionSummary | null;
  /**
   * The tracker statistics (`peak_memory`, `total_events`, ...). Values that are not numbers or
   * booleans are left out of the metrics, as the reference does.
   */
  stats: Readonly<JsonObject>;
  /** The session's events, sorted by time. */
  events: readonly ExportEvent[];
  /** The tracking output file (logged as an artifact; the dashboard is written beside it). */
  outputPath?: string | null;
  /** The telemetry sink folder (an artifact; the dashboard's folder when there is no output file). */
  telemetrySinkDir?: string | null;
  /** An OOM dump folder (an artifact; the attribution folder when none is given). */
  oomDumpPath?: string | null;
  /** A folder of PyTorch attribution files. */
  attributionBundleDir?: string | null;
}

const METRIC_NAMES: readonly (readonly [string, string])[] = [
  ["stormlog_peak_memory_bytes", "peak_memory"],
  ["stormlog_total_events", "total_events"],
  ["stormlog_alert_count", "alert_count"],
  ["stormlog_current_memory_allocated_bytes", "current_memory_allocated"],
  ["stormlog_current_memory_reserved_bytes", "current_memory_reserved"],
  ["stormlog_memory_utilization_percent", "memory_utilization_percent"],
  ["stormlog_total_allocations", "total_allocations"],
  ["stormlog_total_deallocations", "total_deallocations"],
  ["stormlog_total_allocation_bytes", "total_allocation_bytes"],
  ["stormlog_total_deallocation_bytes", "total_deallocation_bytes"],
  ["stormlog_tracking_duration_seconds", "tracking_duration_seconds"],
  ["stormlog_allocations_per_second", "allocations_per_second"],
  ["stormlog_bytes_allocated_per_second", "bytes_allocated_per_second"],
  ["stormlog_history_retained_events", "history_retained_events"],
  ["stormlog_history_dropped_events", "history_dropped_events"],
  ["stormlog_sink_rollover_count", "rollover_count"],
  ["stormlog_sink_pruned_segment_count", "pruned_segment_count"],
  ["stormlog_sink_pruned_bytes", "pruned_bytes"],
  ["stormlog_sink_retained_files", "final_retained_files"],
  ["stormlog_sink_retained_bytes", "final_retained_bytes"],
];

/** The `stormlog_*` metrics: statistics that are numbers or booleans. */
export function trackingMetrics(stats: Readonly<JsonObject>): Record<string, JsonValue> {
  const metrics: Record<string, JsonValue> = {};
  for (const [key, statsKey] of METRIC_NAMES) {
    const value = pyGet(stats as JsonObject, statsKey);
    if (isPyNumber(value) || typeof value === "boolean") metrics[key] = value;
  }
  return metrics;
}

function trackingSummaryFields(
  stats: Readonly<JsonObject>,
  outputPath: string | null,
): Record<string, JsonValue> {
  const fields: Record<string, JsonValue> = {};
  for (const [source, target] of [
    ["backend", "stormlog_backend"],
    ["collector_health_status", "stormlog_collector_health_status"],
    ["collector_last_error", "stormlog_collector_last_error"],
    ["session_status", "stormlog_session_status"],
  ] as const) {
    const value = pyGet(stats as JsonObject, source);
    if (value !== null && value !== undefined) fields[target] = value;
  }
  const outputFile = existingFile(outputPath);
  if (outputFile !== null) fields.stormlog_output_file = pathName(outputFile);
  return fields;
}

function seriesFor(
  rows: readonly TimelineRow[],
  key: "allocated_bytes" | "reserved_bytes" | "device_used_bytes" | "utilization_percent",
): number[] {
  return rows.map((row) => {
    const value = row[key];
    return value === null ? Number.NaN : Number(value);
  });
}

const TIMELINE_COLUMNS = [
  "sample_index",
  "elapsed_seconds",
  "event_type",
  "memory_allocated_bytes",
  "memory_reserved_bytes",
  "memory_change_bytes",
  "device_used_bytes",
  "utilization_percent",
  "context",
  "rank",
] as const;

async function logTrackingVisualizations(
  run: WandbRun,
  rows: readonly TimelineRow[],
  slug: string,
  dashboardRoot: string | null,
  allowArtifactLogging: boolean,
): Promise<Record<string, JsonValue>> {
  if (rows.length === 0) return {};
  await run.log({
    stormlog_memory_timeline_table: new WandbTable(
      TIMELINE_COLUMNS,
      rows.map((row) => [
        row.sample_index,
        row.elapsed_seconds,
        row.event_type,
        row.allocated_bytes,
        row.reserved_bytes,
        row.change_bytes,
        row.device_used_bytes,
        row.utilization_percent,
        row.context,
        row.rank,
      ]),
    ),
  });
  const elapsed = rows.map((row) => row.elapsed_seconds);
  const keys: string[] = [];
  const ys: number[][] = [];
  for (const key of ["allocated_bytes", "reserved_bytes", "device_used_bytes"] as const) {
    const values = seriesFor(rows, key);
    if (values.some((value) => !Number.isNaN(value))) {
      keys.push(key);
      ys.push(values);
    }
  }
  if (keys.length > 0) {
    await run.log({
      stormlog_memory_timeline_plot: new WandbLineSeries(
        elapsed,
        ys,
        keys,
        "Stormlog Memory Timeline",
        "Elapsed Seconds",
      ),
    });
  }
  const utilization = seriesFor(rows, "utilization_percent");
  if (utilization.some((value) => !Number.isNaN(value))) {
    await run.log({
      stormlog_memory_utilization_plot: new WandbLineSeries(
        elapsed,
        [utilization],
        ["utilization_percent"],
        "Stormlog Memory Utilization",
        "Elapsed Seconds",
      ),
    });
  }
  const html = trackingDashboardHtml(rows);
  await run.log({ stormlog_tracking_dashboard: new WandbHtml(html) });
  if (!allowArtifactLogging) return {};
  const path = materializeHtmlFile(html, "stormlog_tracking_dashboard.html", dashboardRoot);
  await logFileArtifact(run, `stormlog-tracking-dashboard-${slug}`, "stormlog-tracking-dashboard", path);
  return { stormlog_tracking_dashboard_file: pathName(path) };
}

/**
 * Exports one completed tracking session to W&B through `client`, making the reference's calls in
 * its order: `init` (unless a run is active), the summary, one `log` per timeline point, the tables,
 * charts and dashboard (`logTables`), the artifacts (`logArtifacts`), the attribution outputs
 * (`logAttribution`), `finish`. Does nothing unless `config.enabled`.
 */
export async function exportTrackingRunToWandb(
  config: WandbExportConfig,
  input: TrackingExportInput,
  client: WandbClient,
): Promise<void> {
  const settings = resolveWandbConfig(config);
  if (!settings.enabled) return;
  const rows = trackingTimelineRows(input.events);
  const session: ExportSession | null = input.sessionSummary;
  const { run, managed } = await resolveRun(client, settings, input.commandName, session);
  const slug = sessionSlug(session);
  const outputPath = input.outputPath ?? null;
  const attributionBundleDir = input.attributionBundleDir ?? null;
  const outputFile = existingFile(outputPath);
  const sinkDir = existingDir(input.telemetrySinkDir);
  const oomDir = existingDir(input.oomDumpPath);
  const attributionDir = existingDir(attributionBundleDir) ?? oomDir;
  try {
    await updateSummary(run, {
      ...trackingMetrics(input.stats),
      stormlog_chart_point_count: rows.length,
      ...sessionSummaryFields(session),
      ...trackingSummaryFields(input.stats, outputPath),
    });
    for (const row of rows) {
      const payload: Record<string, JsonValue> = {};
      const entries: [string, number | bigint | null][] = [
        ["stormlog_timeline_elapsed_seconds", row.elapsed_seconds],
        ["stormlog_timeline_allocated_bytes", row.allocated_bytes],
        ["stormlog_timeline_reserved_bytes", row.reserved_bytes],
        ["stormlog_timeline_change_bytes", row.change_bytes],
        ["stormlog_timeline_device_used_bytes", row.device_used_bytes],
        ["stormlog_timeline_utilization_percent", row.utilization_percent],
      ];
      for (const [key, value] of entries) if (value !== null) payload[key] = value;
      if (Object.keys(payload).length > 0) await run.log(payload);
    }
    if (settings.logTables) {
      const alerts = alertRows(input.events);
      if (alerts.length > 0) await run.log({ stormlog_alerts: new WandbTable(ALERT_COLUMNS, alerts) });
      const dashboardRoot = outputFile !== null ? pathParent(outputFile) : sinkDir;
      await updateSummary(
        run,
        await logTrackingVisualizations(run, rows, slug, dashboardRoot, settings.logArtifacts),
      );
    }
    if (settings.logArtifacts) {
      if (outputFile !== null) {
        await logFileArtifact(run, `stormlog-track-output-${slug}`, "stormlog-track-output", outputFile);
      }
      if (sinkDir !== null) {
        await logDirectoryArtifact(
          run,
          `stormlog-telemetry-sink-${slug}`,
          "stormlog-telemetry-sink",
          sinkDir,
        );
      }
      if (oomDir !== null) {
        await logDirectoryArtifact(run, `stormlog-oom-dump-${slug}`, "stormlog-oom-dump", oomDir);
      }
      if (
        attributionBundleDir !== null &&
        attributionDir !== null &&
        (oomDir === null || purePath(attributionDir) !== purePath(oomDir))
      ) {
        await logDirectoryArtifact(
          run,
          `stormlog-attribution-bundle-${slug}`,
          "stormlog-attribution-bundle",
          attributionDir,
        );
      }
    }
    if (settings.logAttribution && attributionDir !== null) {
      await updateSummary(run, await logAttributionOutputs(run, attributionDir, slug, settings.logArtifacts));
    }
  } finally {
    if (managed) await run.finish();
  }
}
