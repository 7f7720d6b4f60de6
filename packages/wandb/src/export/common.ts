/** What the tracking and diagnose exports share: settings, the run, session fields, files. */
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type JsonObject, type JsonValue, parseJson } from "@stormlog/core";
import { isPythonBlank, pythonStrip } from "@stormlog/core/internal";
import { readRegularFileSync } from "@stormlog/sink/internal";
import {
  WandbArtifact,
  type WandbClient,
  type WandbInitOptions,
  type WandbPayload,
  type WandbRun,
} from "../client.js";
import { WandbConfigError, WandbExportInputError } from "../errors.js";
import { checkRunId } from "../offline/writer.js";
import { isPyDict, PythonError, pathExists, pathName, purePath, pyGet, pyInt } from "../python/values.js";

/** W&B export settings, as the reference's `WandbExportConfig`. */
export interface WandbExportConfig {
  /** Export at all (default false: the export does nothing). */
  enabled?: boolean;
  /** Project (default `stormlog`). */
  project?: string | null;
  entity?: string | null;
  /** `online` or `offline`; passed to `init` only. */
  mode?: "online" | "offline" | null;
  /** Resume (or create) this run id (`resume: "allow"`). */
  runId?: string | null;
  /** Run name (default `<command>-<first 8 characters of the session id>`). */
  runName?: string | null;
  /** Group (default the session's job id). */
  group?: string | null;
  /** Job type (default the command name). */
  jobType?: string | null;
  /** Log the alerts, timeline and suggestion tables, the charts and the dashboard (default true). */
  logTables?: boolean;
  /** Log the output file, sink, OOM dump, attribution and dashboard files as artifacts (default false). */
  logArtifacts?: boolean;
  /** Log the attribution preview, tensor table and files (default false). */
  logAttribution?: boolean;
}

/** The settings with defaults applied. */
export interface ResolvedWandbConfig {
  readonly enabled: boolean;
  readonly project: string | null;
  readonly entity: string | null;
  readonly mode: "online" | "offline" | null;
  readonly runId: string | null;
  readonly runName: string | null;
  readonly group: string | null;
  readonly jobType: string | null;
  readonly logTables: boolean;
  readonly logArtifacts: boolean;
  readonly logAttribution: boolean;
}

/** Applies the defaults and checks `mode` (as the reference's config does) and the run id. Throws `WandbConfigError`. */
export function resolveWandbConfig(config: WandbExportConfig): ResolvedWandbConfig {
  const mode = config.mode ?? null;
  if (mode !== null && mode !== "online" && mode !== "offline") {
    throw new WandbConfigError(
      "mode",
      `must be 'online', 'offline', or omitted, got ${JSON.stringify(mode)}`,
    );
  }
  if (config.runId) checkRunId(config.runId);
  return {
    enabled: config.enabled ?? false,
    project: config.project ?? null,
    entity: config.entity ?? null,
    mode,
    runId: config.runId ?? null,
    runName: config.runName ?? null,
    group: config.group ?? null,
    jobType: config.jobType ?? null,
    logTables: config.logTables ?? true,
    logArtifacts: config.logArtifacts ?? false,
    logAttribution: config.logAttribution ?? false,
  };
}

/** The session fields the export reads (a `SessionSummary` has them; a manifest's may hold any JSON). */
export interface ExportSession {
  readonly session_id: string;
  readonly source: string;
  readonly status: string;
  readonly rank: JsonValue;
  readonly local_rank: JsonValue;
  readonly world_size: JsonValue;
  readonly job_id: JsonValue;
}

/** Python's `value[:8]` of a string: code points, not UTF-16 units. */
function firstCodePoints(value: string, count: number): string {
  return Array.from(value).slice(0, count).join("");
}

/** The run the export logs into: the active one (not finished afterwards) or a new one. */
export async function resolveRun(
  client: WandbClient,
  config: ResolvedWandbConfig,
  commandName: string,
  session: ExportSession | null,
): Promise<{ run: WandbRun; managed: boolean }> {
  const active = client.activeRun();
  if (active !== null) return { run: active, managed: false };
  const options: WandbInitOptions = { project: config.project || "stormlog" };
  const name =
    config.runName ||
    (session === null ? commandName : `${commandName}-${firstCodePoints(session.session_id, 8)}`);
  const group = config.group || defaultGroup(session);
  const jobType = config.jobType || commandName;
  const init: WandbInitOptions = {
    ...options,
    ...(config.entity !== null ? { entity: config.entity } : {}),
    ...(config.mode !== null ? { mode: config.mode } : {}),
    name,
    ...(group !== null ? { group } : {}),
    job_type: jobType,
    ...(config.runId !== null ? { id: config.runId, resume: "allow" as const } : {}),
  };
  return { run: await client.init(init), managed: true };
}

function defaultGroup(session: ExportSession | null): string | null {
  if (session === null || session.job_id === null || session.job_id === undefined) return null;
  // The reference passes the job id through as it is, text or not (a manifest may hold a number).
  return session.job_id as string;
}

/** `update_summary`: nothing for an empty payload. */
export async function updateSummary(run: WandbRun, payload: WandbPayload): Promise<void> {
  if (Object.keys(payload).length === 0) return;
  await run.updateSummary(payload);
}

/** The `stormlog_session_*` summary fields. */
export function sessionSummaryFields(session: ExportSession | null): Record<string, JsonValue> {
  if (session === null) return {};
  const fields: Record<string, JsonValue> = {
    stormlog_session_id: session.session_id,
    stormlog_session_source: session.source,
    stormlog_session_status: session.status,
    stormlog_rank: session.rank,
    stormlog_local_rank: session.local_rank,
    stormlog_world_size: session.world_size,
  };
  if (session.job_id !== null && session.job_id !== undefined) fields.stormlog_job_id = session.job_id;
  return fields;
}

/** The session id as artifact names use it: runs of other characters become `-`. */
export function sessionSlug(session: ExportSession | null): string {
  const raw = session === null ? "session" : session.session_id;
  const slug = raw.replace(/[^a-zA-Z0-9._-]+/g, "-");
  return slug || "session";
}

/** `read_json_if_exists`: an object, or null when missing, unreadable or not an object. */
export function readJsonObjectIfExists(path: string): JsonObject | null {
  if (!pathExists(path)) return null;
  let bytes: Buffer;
  try {
    // Never waits on a FIFO or device named like the file (the reference would): those read as unreadable.
    bytes = readRegularFileSync(purePath(path), null);
  } catch {
    return null;
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    // Python's read_text raises UnicodeDecodeError here, which the reference does not catch.
    throw new WandbExportInputError("UnicodeDecodeError", "the file is not valid UTF-8", path);
  }
  let payload: JsonValue;
  try {
    payload = parseJson(text);
  } catch {
    return null;
  }
  return isPyDict(payload) ? payload : null;
}

/** Runs `fn`, turning what Python would raise into a `WandbExportInputError` naming `where`. */
export function pythonStep<T>(where: string, fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (error instanceof PythonError) throw new WandbExportInputError(error.pythonType, error.message, where);
    throw error;
  }
}

/** `session_summary_from_dict` of a manifest's `session`, or null where the reference gets a `ValueError`. */
export function sessionFromManifest(manifest: JsonObject | null, where: string): ExportSession | null {
  if (manifest === null) return null;
  const payload = pyGet(manifest, "session");
  if (!isPyDict(payload)) return null;
  try {
    return sessionFromDict(payload);
  } catch (error) {
    if (error instanceof PythonError && error.pythonType === "ValueError") return null;
    if (error instanceof PythonError) throw new WandbExportInputError(error.pythonType, error.message, where);
    throw error;
  }
}

const SESSION_STATUSES = new Set(["running", "completed", "interrupted", "incomplete"]);

function nonBlankText(payload: JsonObject, field: string): string {
  const value = pyGet(payload, field);
  if (typeof value !== "string" || isPythonBlank(value)) {
    throw new PythonError("ValueError", `${field} must be a non-empty string`);
  }
  return value;
}

function sessionFromDict(payload: JsonObject): ExportSession {
  const sessionId = nonBlankText(payload, "session_id");
  const source = nonBlankText(payload, "source");
  const rawStatus = pyGet(payload, "status");
  if (typeof rawStatus !== "string" || isPythonBlank(rawStatus)) {
    throw new PythonError("ValueError", "session status must be a non-empty string");
  }
  const status = pythonStrip(rawStatus).toLowerCase();
  if (!SESSION_STATUSES.has(status))
    throw new PythonError("ValueError", `Unsupported session status: ${rawStatus}`);
  const int = (field: string, fallback: JsonValue): bigint => {
    const present = Object.hasOwn(payload, field);
    return pyInt(present ? payload[field] : fallback);
  };
  const started = pyGet(payload, "started_at_ns");
  if (started === null || started === undefined)
    throw new PythonError("ValueError", "started_at_ns must be present");
  int("started_at_ns", null);
  const ended = pyGet(payload, "ended_at_ns");
  if (ended !== null && ended !== undefined) int("ended_at_ns", null);
  nonBlankText(payload, "host");
  int("pid", -1);
  const jobId = pyGet(payload, "job_id") ?? null;
  const rank = int("rank", 0);
  const localRank = int("local_rank", 0);
  const worldSize = int("world_size", 1);
  const small = (value: bigint): JsonValue =>
    value >= -BigInt(Number.MAX_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(value)
      : value;
  return {
    session_id: sessionId,
    source,
    status,
    rank: small(rank),
    local_rank: small(localRank),
    world_size: small(worldSize > 1n ? worldSize : 1n),
    job_id: jobId,
  };
}

/** Builds and logs an artifact of one file (`log_file_artifact`). */
export async function logFileArtifact(
  run: WandbRun,
  name: string,
  type: string,
  path: string,
): Promise<void> {
  const artifact = new WandbArtifact(name, type);
  await artifact.addFile(path, pathName(path));
  await run.logArtifact(artifact);
}

/** Builds and logs an artifact of one folder (`log_directory_artifact`). */
export async function logDirectoryArtifact(
  run: WandbRun,
  name: string,
  type: string,
  path: string,
): Promise<void> {
  const artifact = new WandbArtifact(name, type);
  await artifact.addDir(path, pathName(path));
  await run.logArtifact(artifact);
}

/** The prefix of the temporary folders a dashboard lands in when there is no output folder. */
export const TEMP_DIR_PREFIX = "stormlog-wandb-";

/** Writes an HTML file into `root` (created), or into a new private temporary folder. */
export function materializeHtmlFile(html: string, fileName: string, root: string | null): string {
  if (root !== null) {
    mkdirSync(purePath(root), { recursive: true });
    const target = `${root}/${fileName}`;
    writeFileSync(purePath(target), html, "utf8");
    return target;
  }
  const dir = mkdtempSync(join(tmpdir(), TEMP_DIR_PREFIX));
  const target = join(dir, fileName);
  writeFileSync(target, html, "utf8");
  chmodSync(target, 0o600);
  return target;
}
