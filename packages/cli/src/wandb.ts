/**
 * The W&B flags of `track`, `export --format wandb` and `diagnose` (the Python Stormlog's flags, plus
 * `--wandb-dir`), and the exports they run: an offline run directory always (what `wandb sync`
 * uploads), streamed to a live run as well when the W&B JS SDK and an API key are there.
 */
import { mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type JsonObject, type JsonValue, stringifyJson } from "@stormlog/core";
import { sessionSummaryToJson } from "@stormlog/core/internal";
import { loadTelemetrySessions, summarizeTelemetrySessions } from "@stormlog/sink";
import type { WandbClient, WandbExportConfig } from "@stormlog/wandb";
import { type CommandHelp, choice, type OptionSpec, type ParsedArgs, stringFlag } from "./args.js";
import { shown, terminalWhole } from "./format.js";
import type { CliIo } from "./io.js";

/**
 * `@stormlog/wandb`, with protobufjs behind it (about 50 modules), loaded by the commands that export
 * to W&B only: loaded at every start it cost every other command ~10 ms (a warm `analyze` does ~35 ms
 * of its own work).
 */
function loadWandb(): Promise<typeof import("@stormlog/wandb")> {
  return import("@stormlog/wandb");
}

/** The flags, as the reference names them. */
export const WANDB_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  wandb: {
    type: "boolean",
    description:
      "Export to Weights & Biases when done: a W&B offline run (for `wandb sync`), live too if possible.",
  },
  "wandb-project": { type: "string", value: "NAME", description: "W&B project.", default: "stormlog" },
  "wandb-entity": { type: "string", value: "NAME", description: "W&B entity or team." },
  "wandb-mode": {
    type: "string",
    value: "online|offline",
    description:
      "online: also stream to a live run (needs @wandb/sdk and WANDB_API_KEY); offline: no network.",
    default: "online",
  },
  "wandb-run-id": { type: "string", value: "ID", description: "Resume (or create) this W&B run id." },
  "wandb-name": {
    type: "string",
    value: "NAME",
    description: "Run name (default: <command>-<session id prefix>).",
  },
  "wandb-group": { type: "string", value: "NAME", description: "Run group (default: the session's job id)." },
  "wandb-job-type": { type: "string", value: "TYPE", description: "Job type (default: the command name)." },
  "wandb-log-artifacts": {
    type: "boolean",
    description: "Log the output, sink, OOM dump and dashboard files as W&B artifacts.",
  },
  "wandb-log-attribution": {
    type: "boolean",
    description: "Log attribution previews and tensor tables when an attribution folder is there.",
  },
  "wandb-dir": {
    type: "string",
    value: "DIR",
    description: "Where wandb/offline-run-<time>-<id>/ is written (default: the current directory).",
  },
};

/** The flags on a usage line. */
export const WANDB_USAGE =
  "[--wandb] [--wandb-project NAME] [--wandb-entity NAME] [--wandb-mode online|offline] [--wandb-run-id ID] " +
  "[--wandb-name NAME] [--wandb-group NAME] [--wandb-job-type TYPE] [--wandb-log-artifacts] " +
  "[--wandb-log-attribution] [--wandb-dir DIR]";

/** The reference's `_normalized_optional_string`: trimmed, empty as unset. */
function optionalText(args: ParsedArgs, name: string): string | null {
  const value = stringFlag(args, name)?.trim();
  return value ? value : null;
}

/** True when `--wandb` was given. */
export function wandbRequested(args: ParsedArgs): boolean {
  return args.values.wandb === true;
}

interface WandbSettings {
  readonly config: WandbExportConfig;
  readonly mode: "online" | "offline" | null;
  readonly dir: string;
}

/** The export settings from the flags (the reference's `wandb_config_from_namespace`). */
export async function wandbSettings(
  help: CommandHelp,
  args: ParsedArgs,
  cwd: string,
): Promise<WandbSettings> {
  const mode =
    args.values["wandb-mode"] === undefined ? null : choice(help, args, "wandb-mode", ["online", "offline"]);
  const config: WandbExportConfig = {
    enabled: wandbRequested(args),
    project: optionalText(args, "wandb-project"),
    entity: optionalText(args, "wandb-entity"),
    mode,
    runId: optionalText(args, "wandb-run-id"),
    runName: optionalText(args, "wandb-name"),
    group: optionalText(args, "wandb-group"),
    jobType: optionalText(args, "wandb-job-type"),
    logArtifacts: args.values["wandb-log-artifacts"] === true,
    logAttribution: args.values["wandb-log-attribution"] === true,
  };
  // Checks the run id now: a bad one is refused before the command runs.
  (await loadWandb()).resolveWandbConfig(config);
  return { config, mode, dir: resolve(cwd, stringFlag(args, "wandb-dir") ?? ".") };
}

/** Runs `body` with a client; then says where the offline runs are and how to upload them. */
async function withClient(
  io: CliIo,
  settings: WandbSettings,
  command: string,
  body: (client: WandbClient) => Promise<void>,
): Promise<void> {
  const { WandbOfflineClient, WandbStreamingClient, loadOnlineSdk } = await loadWandb();
  const offline = new WandbOfflineClient({ dir: settings.dir });
  let client: WandbClient = offline;
  let online = false;
  if (settings.mode !== "offline") {
    const availability = await loadOnlineSdk(io.env);
    if (availability.available) {
      client = new WandbStreamingClient(offline, availability.sdk, (error) =>
        io.stderr.write(
          `stormlog ${command}: W&B live run: ${error instanceof Error ? error.message : String(error)}\n`,
        ),
      );
      online = true;
    } else if (settings.mode === "online") {
      io.stderr.write(`stormlog ${command}: W&B online streaming is off: ${availability.reason}\n`);
    }
  }
  await body(client);
  for (const run of offline.runs) {
    io.stderr.write(
      `W&B offline run: ${terminalWhole(run.runDir)}${online ? " (history and summary also streamed live)" : ""}\n` +
        `Upload it (tables, HTML, artifacts${online ? "" : ", history, summary"}) with: ${terminalWhole(run.syncCommand())}\n`,
    );
  }
}

/** The reference's tracker statistics keys (`peak_memory`, ...) from our camelCase statistics. */
export function statisticsForWandb(statistics: object): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(statistics)) {
    if (value === undefined || (Array.isArray(value) && value.some((item) => typeof item === "object")))
      continue;
    if (typeof value === "object" && value !== null && !Array.isArray(value)) continue;
    out[key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`)] = value as JsonValue;
  }
  return out;
}

/** `track --wandb`: exports the session just recorded. */
export async function exportTrackedSession(
  io: CliIo,
  help: CommandHelp,
  args: ParsedArgs,
  input: { sinkDir: string; sessionId: string | undefined; statistics: object; outputPath?: string | null },
): Promise<void> {
  const settings = await wandbSettings(help, args, io.cwd);
  const sessions = await loadTelemetrySessions(input.sinkDir);
  const session =
    sessions.find((candidate) => candidate.summary.session_id === input.sessionId) ?? sessions[0] ?? null;
  const { exportTrackingRunToWandb } = await loadWandb();
  await withClient(io, settings, help.name, (client) =>
    exportTrackingRunToWandb(
      settings.config,
      {
        commandName: "stormlog-track",
        sessionSummary: session?.summary ?? null,
        stats: statisticsForWandb(input.statistics),
        events: session?.events ?? [],
        outputPath: input.outputPath ?? null,
        telemetrySinkDir: input.sinkDir,
      },
      client,
    ),
  );
}

/** The statistics a recorded session gives after the fact (no tracker to ask). */
function statisticsOfEvents(
  events: readonly {
    event_type: string;
    allocator_allocated_bytes: number | null;
    allocator_reserved_bytes: number | null;
    timestamp_ns: bigint;
  }[],
  status: string,
): JsonObject {
  let peak: number | null = null;
  let alerts = 0;
  for (const event of events) {
    const allocated = event.allocator_allocated_bytes;
    if (allocated !== null && (peak === null || allocated > peak)) peak = allocated;
    if (event.event_type === "warning" || event.event_type === "critical" || event.event_type === "error")
      alerts++;
  }
  const first = events[0];
  const last = events[events.length - 1];
  return {
    ...(peak === null ? {} : { peak_memory: peak }),
    total_events: events.length,
    alert_count: alerts,
    ...(last?.allocator_allocated_bytes == null
      ? {}
      : { current_memory_allocated: last.allocator_allocated_bytes }),
    ...(last?.allocator_reserved_bytes == null
      ? {}
      : { current_memory_reserved: last.allocator_reserved_bytes }),
    ...(first === undefined || last === undefined
      ? {}
      : { tracking_duration_seconds: Number(last.timestamp_ns - first.timestamp_ns) / 1e9 }),
    session_status: status,
  };
}

/** The sink's retained segments (`final_retained_files`, `final_retained_bytes`), when `path` is a sink folder. */
function retainedSegments(path: string): JsonObject {
  try {
    if (!statSync(path).isDirectory()) return {};
    const segments = readdirSync(path).filter((name) => /^segment-\d+\.jsonl$/.test(name));
    let bytes = 0;
    for (const name of segments) bytes += statSync(join(path, name)).size;
    return { final_retained_files: segments.length, final_retained_bytes: bytes };
  } catch {
    return {};
  }
}

/** `export <sink> --format wandb`: exports a recorded session after the fact. */
export async function exportRecordedSession(
  io: CliIo,
  help: CommandHelp,
  args: ParsedArgs,
  path: string,
  sessionId: string | undefined,
): Promise<number> {
  const settings = await wandbSettings(help, args, io.cwd);
  const sessions = await loadTelemetrySessions(path);
  const session =
    sessionId === undefined
      ? (sessions.find((candidate) => candidate.eventCount > 0) ?? sessions[0])
      : sessions.find((candidate) => candidate.summary.session_id === sessionId);
  if (session === undefined) {
    io.stderr.write(
      `stormlog ${help.name}: no session${sessionId === undefined ? "" : ` ${shown(sessionId)}`} in ${shown(path)}\n`,
    );
    return 1;
  }
  const { exportTrackingRunToWandb } = await loadWandb();
  await withClient(io, settings, help.name, (client) =>
    exportTrackingRunToWandb(
      { ...settings.config, enabled: true },
      {
        commandName: "stormlog-export",
        sessionSummary: session.summary,
        stats: { ...statisticsOfEvents(session.events, session.summary.status), ...retainedSegments(path) },
        events: session.events,
        telemetrySinkDir: path,
      },
      client,
    ),
  );
  return 0;
}

function timestampName(now: Date): string {
  const two = (value: number) => String(value).padStart(2, "0");
  return (
    `${now.getUTCFullYear()}${two(now.getUTCMonth() + 1)}${two(now.getUTCDate())}-` +
    `${two(now.getUTCHours())}${two(now.getUTCMinutes())}${two(now.getUTCSeconds())}`
  );
}

/**
 * `diagnose --wandb`: exports the diagnose bundle `--wandb-bundle DIR` (a folder the Python
 * Stormlog's diagnose wrote, or one of ours; a missing folder is an error, as in the reference), or
 * else writes a bundle of this diagnosis (`stormlog-diagnose-<time>/`: manifest, summary, the
 * rendered diagnosis) and exports it.
 */
export async function exportDiagnosis(
  io: CliIo,
  help: CommandHelp,
  args: ParsedArgs,
  input: { path: string; sessionId: string | undefined; text: string; exitCode: number; risk: boolean },
): Promise<void> {
  const settings = await wandbSettings(help, args, io.cwd);
  const given = stringFlag(args, "wandb-bundle");
  let bundleDir: string;
  if (given !== undefined) {
    bundleDir = resolve(io.cwd, given);
  } else {
    bundleDir = resolve(io.cwd, `stormlog-diagnose-${timestampName(new Date())}`);
    const sessions = await summarizeTelemetrySessions(input.path);
    const session =
      (input.sessionId === undefined
        ? sessions.find((candidate) => candidate.eventCount > 0)
        : sessions.find((candidate) => candidate.summary.session_id === input.sessionId)) ?? sessions[0];
    mkdirSync(bundleDir, { recursive: true });
    const manifest: JsonObject = {
      schema_version: 2,
      bundle_name: bundleDir.split(/[\\/]/).pop() ?? "stormlog-diagnose",
      created_at_utc: new Date().toISOString(),
      reason: "diagnose",
      source: input.path,
      risk_detected: input.risk,
      exit_code: input.exitCode,
      ...(session === undefined
        ? {}
        : { session: sessionSummaryToJson(session.summary), session_status: session.summary.status }),
      files: ["manifest.json", "diagnostic_summary.json", "diagnosis.txt"],
    };
    writeFileSync(resolve(bundleDir, "manifest.json"), `${stringifyJson(manifest, { indent: 2 })}\n`);
    writeFileSync(
      resolve(bundleDir, "diagnostic_summary.json"),
      `${stringifyJson({ risk_flags: { memory_risk: input.risk }, suggestions: [] }, { indent: 2 })}\n`,
    );
    writeFileSync(resolve(bundleDir, "diagnosis.txt"), input.text);
  }
  const { exportDiagnoseBundleToWandb } = await loadWandb();
  await withClient(io, settings, help.name, (client) =>
    exportDiagnoseBundleToWandb(
      { ...settings.config, enabled: true },
      { commandName: "stormlog-diagnose", artifactDir: bundleDir },
      client,
    ),
  );
}

/** `--wandb-bundle`, for `diagnose`. */
export const WANDB_BUNDLE_OPTION: Readonly<Record<string, OptionSpec>> = {
  "wandb-bundle": {
    type: "string",
    value: "DIR",
    description: "With --wandb: export this diagnose bundle folder instead of writing one.",
  },
};
