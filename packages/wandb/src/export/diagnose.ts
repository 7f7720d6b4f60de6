/** The export of one diagnose bundle, call for call the reference's `export_diagnose_bundle_to_wandb`. */
import type { JsonObject, JsonValue } from "@stormlog/core";
import { type WandbCell, type WandbClient, WandbTable } from "../client.js";
import { DiagnoseBundleNotFoundError } from "../errors.js";
import {
  existingDir,
  isFloatAt,
  isPyDict,
  isPyInt,
  isPyNumber,
  pathName,
  pyGet,
  pyStrAt,
} from "../python/values.js";
import { logAttributionOutputs } from "./attribution.js";
import {
  logDirectoryArtifact,
  readJsonObjectIfExists,
  resolveRun,
  resolveWandbConfig,
  sessionFromManifest,
  sessionSlug,
  sessionSummaryFields,
  updateSummary,
  type WandbExportConfig,
} from "./common.js";

/** What a diagnose export is given. */
export interface DiagnoseExportInput {
  /** The CLI command name: the default run name prefix and job type (e.g. `stormlog-diagnose`). */
  commandName: string;
  /** The diagnose bundle folder (`manifest.json`, `diagnostic_summary.json`, ...). */
  artifactDir: string;
}

const DIAGNOSE_METRICS: readonly (readonly [string, string])[] = [
  ["allocated_bytes", "stormlog_allocated_bytes"],
  ["reserved_bytes", "stormlog_reserved_bytes"],
  ["peak_bytes", "stormlog_peak_bytes"],
  ["total_bytes", "stormlog_total_bytes"],
  ["utilization_ratio", "stormlog_utilization_ratio"],
  ["fragmentation_ratio", "stormlog_fragmentation_ratio"],
  ["num_ooms", "stormlog_num_ooms"],
];

function diagnoseMetrics(summary: JsonObject | null, manifest: JsonObject | null): Record<string, JsonValue> {
  if (summary === null) return {};
  const metrics: Record<string, JsonValue> = {};
  for (const [source, target] of DIAGNOSE_METRICS) {
    const value = pyGet(summary, source);
    if (isPyNumber(value) || typeof value === "boolean") metrics[target] = value;
  }
  const flags = pyGet(summary, "risk_flags");
  if (isPyDict(flags)) {
    for (const key of Object.keys(flags)) {
      const value = flags[key];
      if (typeof value === "boolean") metrics[`stormlog_risk_${key}`] = value;
    }
  }
  if (manifest !== null) {
    const risk = pyGet(manifest, "risk_detected");
    const exitCode = pyGet(manifest, "exit_code");
    if (typeof risk === "boolean") metrics.stormlog_risk_detected = risk;
    // Python's `isinstance(exit_code, int)` takes booleans too.
    if (typeof exitCode === "boolean" || isPyInt(exitCode, isFloatAt(manifest, "exit_code"))) {
      metrics.stormlog_exit_code = exitCode;
    }
  }
  return metrics;
}

function diagnoseSummaryFields(artifactDir: string, manifest: JsonObject | null): Record<string, JsonValue> {
  const fields: Record<string, JsonValue> = { stormlog_artifact_dir: pathName(artifactDir) };
  if (manifest !== null) {
    for (const [source, target] of [
      ["risk_detected", "stormlog_risk_detected"],
      ["native_history_enabled", "stormlog_native_history_enabled"],
      ["session_status", "stormlog_session_status"],
    ] as const) {
      const value = pyGet(manifest, source);
      if (value !== null && value !== undefined) fields[target] = value;
    }
  }
  return fields;
}

/**
 * Exports one diagnose bundle to W&B through `client`: `init` (unless a run is active), the summary,
 * the suggestions table (`logTables`), the bundle artifact (`logArtifacts`), the attribution outputs
 * (`logAttribution`), `finish`. Throws `DiagnoseBundleNotFoundError` before any call when the folder
 * is not there. Does nothing unless `config.enabled`.
 */
export async function exportDiagnoseBundleToWandb(
  config: WandbExportConfig,
  input: DiagnoseExportInput,
  client: WandbClient,
): Promise<void> {
  const settings = resolveWandbConfig(config);
  if (!settings.enabled) return;
  const bundleDir = input.artifactDir;
  if (existingDir(bundleDir) === null) throw new DiagnoseBundleNotFoundError(bundleDir);
  const manifest = readJsonObjectIfExists(`${bundleDir}/manifest.json`);
  const summary = readJsonObjectIfExists(`${bundleDir}/diagnostic_summary.json`);
  const session = sessionFromManifest(manifest, `${bundleDir}/manifest.json: session`);
  const { run, managed } = await resolveRun(client, settings, input.commandName, session);
  const slug = sessionSlug(session);
  try {
    await updateSummary(run, {
      ...diagnoseMetrics(summary, manifest),
      ...sessionSummaryFields(session),
      ...diagnoseSummaryFields(bundleDir, manifest),
    });
    if (settings.logTables && summary !== null) {
      const suggestions = pyGet(summary, "suggestions");
      if (Array.isArray(suggestions) && suggestions.length > 0) {
        const rows: WandbCell[][] = suggestions.map((_, index) => [index + 1, pyStrAt(suggestions, index)]);
        await run.log({ stormlog_diagnostic_suggestions: new WandbTable(["index", "suggestion"], rows) });
      }
    }
    if (settings.logArtifacts) {
      await logDirectoryArtifact(run, `stormlog-diagnose-${slug}`, "stormlog-diagnose", bundleDir);
    }
    if (settings.logAttribution) {
      await updateSummary(run, await logAttributionOutputs(run, bundleDir, slug, settings.logArtifacts));
    }
  } finally {
    if (managed) await run.finish();
  }
}
