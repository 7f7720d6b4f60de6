/**
 * The folder an OOM flight recorder writes (the tracker's `OOMFlightRecorder.dump`, as the Python
 * reference's): `oom_dump_<UTC>_<pid>_<backend>_<n>/` with `events.json` (the last records, legacy
 * tracker payloads), `metadata.json` (the failure), `environment.json` and a `manifest.json` that
 * describes the bundle, not a sink. The loaders read such a folder as its `events.json`.
 */
import { lstatSync, readdirSync, realpathSync } from "node:fs";
import { basename, join } from "node:path";
import { type JsonObject, type JsonValue, parseJson } from "@stormlog/core";
import { inputText } from "@stormlog/core/internal";
import { isSegmentFilename, MANIFEST_FILENAME } from "../directory/manifest.js";
import { fileSystemErrorCode, TelemetryInputAccessError } from "../errors.js";
import { linkInsideInput } from "./links.js";
import { readRegularFileSync, WholeFileTooLargeError } from "./regular-file.js";

/** Prefix of the dump folders' names. */
export const OOM_DUMP_PREFIX = "oom_dump_";
/** The dump's records. */
export const OOM_DUMP_EVENTS_FILENAME = "events.json";
/** The dump's failure description. */
export const OOM_DUMP_METADATA_FILENAME = "metadata.json";

/** What an OOM dump says about itself (null where its files do not say). */
export interface OOMDumpInfo {
  readonly dir: string;
  /** `<dir>/events.json`: what the loaders read. */
  readonly eventsPath: string;
  /** The classification, e.g. `message_pattern:out of memory`. */
  readonly reason: string | null;
  /** When it was written (`created_at_utc`, else the folder name's stamp), e.g. `2026-01-31T12:00:00Z`. */
  readonly createdAtUtc: string | null;
  /** `<type>: <message>` of the error that triggered it. */
  readonly error: string | null;
  /** Records the recorder kept (the ring's size at the OOM). */
  readonly eventCount: number | null;
  readonly backend: string | null;
  readonly sessionId: string | null;
}

/**
 * `<dir>/<name>` parsed, when it is a JSON object in a regular file inside the folder; null when it is
 * absent, not one, or a link out of the folder (`warn` says so). The recorder writes small regular files.
 */
function objectIn(dir: string, name: string, warn: (message: string) => void): JsonObject | null {
  const path = join(dir, name);
  let text: string;
  try {
    if (insideDump(dir, path, warn) === null) return null;
    text = readRegularFileSync(path);
  } catch (error) {
    const code = fileSystemErrorCode(error);
    if (code === "ENOENT" || code === "ENOTDIR") return null;
    if (code === "EISDIR" || code === "EFTYPE" || WholeFileTooLargeError.isInstance(error)) {
      warn(`${path} not read: ${code === undefined ? "larger than any dump writes" : "not a regular file"}`);
      return null;
    }
    throw TelemetryInputAccessError.wrap(path, error);
  }
  try {
    const value = parseJson(text);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/** `path` resolved, or null when it is a link that leads out of the dump folder (`warn` says so). */
export function insideDump(dir: string, path: string, warn: (message: string) => void): string | null {
  if (!lstatSync(path).isSymbolicLink()) return path;
  return linkInsideInput(path, realpathSync(dir), warn);
}

function text(value: JsonValue | undefined): string | null {
  return typeof value === "string" && value !== "" ? value : null;
}

function count(value: JsonValue | undefined): number | null {
  if (typeof value === "bigint") return Number(value);
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : null;
}

/** `oom_dump_20260131T120000Z_...` -> `2026-01-31T12:00:00Z`. */
function stampOfName(name: string): string | null {
  const match = /^oom_dump_(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z/.exec(name);
  return match ? `${match[1]}-${match[2]}-${match[3]}T${match[4]}:${match[5]}:${match[6]}Z` : null;
}

/**
 * The OOM dump at `dir`, or null when `dir` is not one: it must hold `events.json` and no segment,
 * and its `manifest.json` must be a bundle's (`bundle_name`) or its `metadata.json` name a `reason`.
 * `names` is the listing of `dir` when the caller has it; `warn` hears of its files left unread (links
 * out of the folder, special files). File-system errors other than a missing file are a
 * `TelemetryInputAccessError`.
 */
export function readOOMDumpSync(
  dir: string,
  names?: readonly string[],
  warn: (message: string) => void = () => undefined,
): OOMDumpInfo | null {
  if (names === undefined) {
    try {
      names = readdirSync(dir);
    } catch (error) {
      const code = fileSystemErrorCode(error);
      if (code === "ENOENT" || code === "ENOTDIR") return null;
      throw TelemetryInputAccessError.wrap(dir, error);
    }
  }
  if (!names.includes(OOM_DUMP_EVENTS_FILENAME) || names.some(isSegmentFilename)) return null;
  const manifest = names.includes(MANIFEST_FILENAME) ? objectIn(dir, MANIFEST_FILENAME, warn) : null;
  const metadata = names.includes(OOM_DUMP_METADATA_FILENAME)
    ? objectIn(dir, OOM_DUMP_METADATA_FILENAME, warn)
    : null;
  const isBundle = text(manifest?.bundle_name) !== null || text(metadata?.reason) !== null;
  if (!isBundle) return null;
  const type = text(metadata?.exception_type);
  const message = text(metadata?.exception_message);
  return {
    dir,
    eventsPath: join(dir, OOM_DUMP_EVENTS_FILENAME),
    reason: text(manifest?.reason) ?? text(metadata?.reason),
    createdAtUtc: text(manifest?.created_at_utc) ?? stampOfName(basename(dir)),
    error:
      type === null && message === null ? null : [type, message].filter((part) => part !== null).join(": "),
    eventCount: count(manifest?.event_count) ?? count(metadata?.captured_event_count),
    backend: text(manifest?.backend) ?? text(metadata?.backend),
    sessionId: text(manifest?.session_id) ?? text(metadata?.session_id),
  };
}

/** Errors can be long (a CUDA message lists every pool): the first line, cut at this length. */
const ERROR_SHOWN_CHARS = 160;

/**
 * The sentence the readers show for an OOM dump input: what it is (reason, error, when) and what
 * was read of it, the last records before the failure rather than the whole run.
 */
export function describeOOMDump(dump: OOMDumpInfo): string {
  const facts: string[] = [];
  if (dump.reason !== null) facts.push(`reason ${inputText(dump.reason)}`);
  if (dump.error !== null) {
    const line = dump.error.split("\n")[0]!;
    facts.push(line.length > ERROR_SHOWN_CHARS ? `${line.slice(0, ERROR_SHOWN_CHARS)}...` : line);
  }
  facts.push(dump.createdAtUtc === null ? "time unknown" : `written ${dump.createdAtUtc}`);
  const kept = dump.eventCount === null ? "the records" : `the ${dump.eventCount} records`;
  return (
    `${dump.dir} is an OOM flight recorder dump (${facts.join(", ")}): read ${kept} in its ` +
    `${OOM_DUMP_EVENTS_FILENAME}, the last the tracker kept before the OOM, not the whole run ` +
    "(the run's telemetry sink has the rest)"
  );
}
