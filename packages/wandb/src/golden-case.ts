/**
 * Runs the export on a folder laid out as the golden cases recorded from the Python reference
 * (`input/config.json`, `stats.json`, a sink folder, artifact sources): what the replay script and
 * the tests run.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  type JsonObject,
  type JsonValue,
  parseJson,
  type SessionSummary,
  type TelemetryEvent,
} from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import type { WandbClient } from "./client.js";
import type { WandbExportConfig } from "./export/common.js";
import { exportDiagnoseBundleToWandb } from "./export/diagnose.js";
import { exportTrackingRunToWandb } from "./export/tracking.js";
import { isPyDict, pyGet } from "./python/values.js";

/** The settings and flags of a case's `config.json`. */
export interface GoldenCaseConfig {
  readonly kind: "tracking" | "diagnose";
  readonly commandName: string;
  readonly wandb: WandbExportConfig;
  readonly activeRun: boolean;
  readonly raw: JsonObject;
}

function text(value: JsonValue | undefined): string | null {
  return typeof value === "string" ? value : null;
}

function flag(value: JsonValue | undefined): boolean | undefined {
  return typeof value === "boolean" ? value : undefined;
}

/** Reads `<inputDir>/config.json`. */
export function readGoldenCaseConfig(inputDir: string): GoldenCaseConfig {
  const raw = parseJson(readFileSync(join(inputDir, "config.json"), "utf8"));
  if (!isPyDict(raw)) throw new TypeError(`${join(inputDir, "config.json")} is not a JSON object`);
  const settings = pyGet(raw, "wandb_config");
  const w: JsonObject = isPyDict(settings) ? settings : {};
  const mode = text(pyGet(w, "mode"));
  const wandb: WandbExportConfig = {
    enabled: flag(pyGet(w, "enabled")) ?? false,
    project: text(pyGet(w, "project")),
    entity: text(pyGet(w, "entity")),
    mode: mode as WandbExportConfig["mode"],
    runId: text(pyGet(w, "run_id")),
    runName: text(pyGet(w, "run_name")),
    group: text(pyGet(w, "group")),
    jobType: text(pyGet(w, "job_type")),
    ...(flag(pyGet(w, "log_tables")) === undefined
      ? {}
      : { logTables: flag(pyGet(w, "log_tables")) as boolean }),
    ...(flag(pyGet(w, "log_artifacts")) === undefined
      ? {}
      : { logArtifacts: flag(pyGet(w, "log_artifacts")) as boolean }),
    ...(flag(pyGet(w, "log_attribution")) === undefined
      ? {}
      : { logAttribution: flag(pyGet(w, "log_attribution")) as boolean }),
  };
  return {
    kind: pyGet(raw, "kind") === "diagnose" ? "diagnose" : "tracking",
    commandName: text(pyGet(raw, "command_name")) ?? "stormlog",
    wandb,
    activeRun: pyGet(raw, "active_run") === true,
    raw,
  };
}

/** The events and summary of one session of a sink folder, as the reference's loader gives them. */
export async function loadCaseSession(
  sinkDir: string,
  sessionId: string | null,
): Promise<{ events: TelemetryEvent[]; summary: SessionSummary | null }> {
  const sessions = await loadTelemetrySessions(sinkDir);
  const session =
    sessionId === null
      ? sessions[0]
      : sessions.find((candidate) => candidate.summary.session_id === sessionId);
  if (session === undefined) return { events: [], summary: null };
  return { events: session.events, summary: session.summary };
}

/** Runs the case's export (tracking or diagnose) in `inputDir` against `client`. */
export async function runGoldenCaseExport(inputDir: string, client: WandbClient): Promise<GoldenCaseConfig> {
  const config = readGoldenCaseConfig(inputDir);
  const raw = config.raw;
  const at = (key: string): string | null => {
    const value = text(pyGet(raw, key));
    return value === null ? null : `${inputDir}/${value}`;
  };
  if (config.kind === "diagnose") {
    await exportDiagnoseBundleToWandb(
      config.wandb,
      { commandName: config.commandName, artifactDir: at("artifact_dir") ?? inputDir },
      client,
    );
    return config;
  }
  const stats = parseJson(readFileSync(join(inputDir, "stats.json"), "utf8"));
  const eventsDir = at("events_sink_dir");
  const loaded =
    eventsDir === null
      ? { events: [], summary: null }
      : await loadCaseSession(eventsDir, text(pyGet(raw, "session_id")));
  await exportTrackingRunToWandb(
    config.wandb,
    {
      commandName: config.commandName,
      sessionSummary: pyGet(raw, "session_summary") === "from_sink" ? loaded.summary : null,
      stats: isPyDict(stats) ? stats : {},
      events: loaded.events,
      outputPath: at("output_path"),
      telemetrySinkDir: at("telemetry_sink_dir"),
      oomDumpPath: at("oom_dump_path"),
      attributionBundleDir: at("attribution_bundle_dir"),
    },
    client,
  );
  return config;
}
