import {
  closeSync,
  constants,
  promises as fsPromises,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  openSync,
  renameSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import {
  type JsonObject,
  type JsonValue,
  parseJson,
  type SessionSummary,
  stringifyJson,
} from "@stormlog/core";
import { sessionSummaryFromJson, sessionSummaryToJson } from "@stormlog/core/internal";
import { ManifestNoRoomInPlaceError } from "../errors.js";
import { readRegularFile, readRegularFileSync, WholeFileTooLargeError } from "../reader/regular-file.js";

/** Name of the manifest in a sink directory. */
export const MANIFEST_FILENAME = "manifest.json";
/** Temporary file the manifest is written to before the atomic rename (the reference's name). */
export const MANIFEST_TMP_FILENAME = "manifest.tmp";
/**
 * Temporary file of the blocking writes (startup, and the exit path). Not `manifest.tmp`: at
 * `process.exit()` an asynchronous write to `manifest.tmp` may still be running on libuv's thread
 * pool, and its bytes would land in the file the exit path had just renamed to `manifest.json`.
 */
export const MANIFEST_SYNC_TMP_FILENAME = "manifest.sync.tmp";
/** Segment file names: `segment-` + six-digit index + `.jsonl`. */
export const SEGMENT_PREFIX = "segment-";
export const SEGMENT_SUFFIX = ".jsonl";
/** Manifest schema version written (the reference's `SINK_SCHEMA_VERSION`). */
export const SINK_SCHEMA_VERSION = 2;
/** Manifest `format` string. */
export const SINK_FORMAT = "stormlog.append_only_telemetry_sink";

/** One JSONL segment as the manifest lists it (field names and order as the reference's). */
export interface SinkSegment {
  filename: string;
  event_count: number;
  size_bytes: number;
  closed: boolean;
  session_id: string | null;
}

/**
 * Records a session lost (this package's addition to the manifest, top-level key `session_losses`,
 * written only when something was lost: the reference's reader ignores unknown keys).
 */
export interface SinkSessionLoss {
  session_id: string;
  /** Every record lost: `dropped_io_error + dropped_queue_full`. */
  dropped_events: number;
  /** Lost because the disk failed (ENOSPC, EACCES, a deleted segment...). */
  dropped_io_error: number;
  /** Dropped by `append` because `maxQueueEvents` records were already waiting. */
  dropped_queue_full: number;
}

/** A parsed sink manifest: the sessions ledger and the segments list. */
export interface SinkManifest {
  schema_version: number;
  format: string;
  sessions: SessionSummary[];
  segments: SinkSegment[];
  /** What sessions lost, when the writer recorded it (absent in the reference's manifests). */
  session_losses?: SinkSessionLoss[];
}

/** `segment-000042.jsonl` for 42. */
export function segmentFilename(index: number): string {
  return `${SEGMENT_PREFIX}${String(index).padStart(6, "0")}${SEGMENT_SUFFIX}`;
}

/** True for names the reference's `segment-*.jsonl` glob finds. */
export function isSegmentFilename(name: string): boolean {
  return (
    name.startsWith(SEGMENT_PREFIX) &&
    name.endsWith(SEGMENT_SUFFIX) &&
    name.length >= 14 &&
    !name.includes("/")
  );
}

/** The numeric index of a segment name (`segment-000042.jsonl` is 42), as the reference computes it. */
export function segmentIndex(name: string): number | undefined {
  const stem = name.endsWith(SEGMENT_SUFFIX)
    ? name.slice(0, -SEGMENT_SUFFIX.length)
    : name.replace(/\.[^.]*$/, "");
  if (!stem.startsWith(SEGMENT_PREFIX)) return undefined;
  const digits = stem.slice(SEGMENT_PREFIX.length);
  return /^\d+$/.test(digits) ? Number(digits) : undefined;
}

/**
 * A manifest entry may only name a file inside its directory: a plain name, no separator, no `..`.
 * The reference joins whatever it finds (`root / filename`); this package refuses the rest.
 */
export function isSafeSegmentName(name: string): boolean {
  return (
    name.length > 0 &&
    name !== "." &&
    name !== ".." &&
    !name.includes("/") &&
    !name.includes("\\") &&
    !name.includes("\0") &&
    name !== MANIFEST_FILENAME
  );
}

/** Python's `int(x)` for a decoded JSON value, or undefined where it raises. */
function pythonInt(value: JsonValue | undefined): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? Math.trunc(value) : undefined;
  if (typeof value === "bigint") return Number(value);
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "string" && /^\s*[+-]?\d+(?:_\d+)*\s*$/.test(value))
    return Number(value.trim().replace(/_/g, ""));
  return undefined;
}

/** The reference's `_coerce_manifest_int`: bad or too small values become the default. */
function coerceManifestInt(value: JsonValue | undefined, fallback: number, minimum: number): number {
  const coerced = pythonInt(value);
  if (coerced === undefined || coerced < minimum) return fallback;
  return coerced;
}

/** Python's `bool(x)`. */
function pythonTruthy(value: JsonValue | undefined): boolean {
  if (value === undefined || value === null || value === false || value === 0 || value === 0n || value === "")
    return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === "object") return Object.keys(value).length > 0;
  return !Number.isNaN(value);
}

function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Options of the manifest readers. */
export interface ManifestReadOptions {
  /** Told about entries that were skipped (malformed, or naming a file outside the directory). */
  onWarning?: (message: string) => void;
  /**
   * Told, once, why the text is no usable sink manifest (not JSON, not an object, no `segments`
   * list...). It is still read as leniently as the reference reads it: unparsable means absent.
   */
  onInvalid?: (problem: string) => void;
}

/** `a list`, `a string`... for the messages about a manifest of the wrong shape. */
function jsonKind(value: JsonValue): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  if (typeof value === "bigint") return "a number";
  return `a ${typeof value}`;
}

/**
 * Parses manifest text leniently, as the reference's `read_telemetry_sink_manifest`: unparsable or
 * non-object text gives `null` (treated as absent), bad integers take defaults, malformed entries
 * are skipped, a `schema_version` below 2 has no ledger. Entries naming a file outside the
 * directory are refused (and reported).
 */
export function parseManifest(text: string, options: ManifestReadOptions = {}): SinkManifest | null {
  let payload: JsonValue;
  try {
    payload = parseJson(text);
  } catch (error) {
    const detail = (error as Error).message.split("\n")[0]!;
    options.onInvalid?.(text.trim() === "" ? "empty" : `not JSON: ${detail}`);
    return null;
  }
  if (!isPlainObject(payload)) {
    options.onInvalid?.(`the JSON is ${jsonKind(payload)}, not an object`);
    return null;
  }
  const schemaVersion = coerceManifestInt(payload.schema_version ?? 1, 1, 1);
  const formatValue = payload.format;
  const format = typeof formatValue === "string" && formatValue !== "" ? formatValue : SINK_FORMAT;

  // A shape the reference reads as an empty ledger and segment list: said once, then read as it does.
  const shape: string[] = [];
  if (payload.segments === undefined) shape.push('no "segments" list');
  else if (!Array.isArray(payload.segments))
    shape.push(`"segments" is ${jsonKind(payload.segments)}, not a list`);
  if (payload.sessions !== undefined && !Array.isArray(payload.sessions))
    shape.push(`"sessions" is ${jsonKind(payload.sessions)}, not a list`);
  if (shape.length > 0) options.onInvalid?.(shape.join("; "));

  const sessions: SessionSummary[] = [];
  const rawSessions = payload.sessions;
  // Each entry left out is said, with its index and what follows (the reference drops it silently).
  const skipped = (entry: string, why: string, then: string) =>
    options.onWarning?.(`manifest entry ${entry} skipped (${why}): ${then}`);
  const notObject = (raw: JsonValue) => `${jsonKind(raw)}, not an object`;
  if (schemaVersion >= 2 && Array.isArray(rawSessions)) {
    for (const [index, raw] of rawSessions.entries()) {
      const then = "its session's status comes from its events instead";
      if (!isPlainObject(raw)) {
        skipped(`sessions[${index}]`, notObject(raw), then);
        continue;
      }
      try {
        sessions.push(sessionSummaryFromJson(raw));
      } catch (error) {
        skipped(`sessions[${index}]`, (error as Error).message, then);
      }
    }
  }

  const segments: SinkSegment[] = [];
  const rawSegments = payload.segments;
  if (Array.isArray(rawSegments)) {
    for (const [index, raw] of rawSegments.entries()) {
      const then = "the segment files are still read, unchecked against it";
      if (!isPlainObject(raw)) {
        skipped(`segments[${index}]`, notObject(raw), then);
        continue;
      }
      const filename = raw.filename;
      if (typeof filename !== "string") {
        skipped(
          `segments[${index}]`,
          filename === undefined ? 'no "filename"' : `"filename" is ${jsonKind(filename)}`,
          then,
        );
        continue;
      }
      if (!isSafeSegmentName(filename)) {
        options.onWarning?.(
          `manifest segment entry ${JSON.stringify(filename)} refused: it names a file outside the sink directory`,
        );
        continue;
      }
      const sessionId = raw.session_id;
      segments.push({
        filename,
        event_count: coerceManifestInt(raw.event_count ?? 0, 0, 0),
        size_bytes: coerceManifestInt(raw.size_bytes ?? 0, 0, 0),
        closed: pythonTruthy(raw.closed ?? false),
        session_id: typeof sessionId === "string" ? sessionId : null,
      });
    }
  }
  const sessionLosses: SinkSessionLoss[] = [];
  const rawLosses = payload.session_losses;
  if (Array.isArray(rawLosses)) {
    for (const [index, raw] of rawLosses.entries()) {
      const then = "the records it says were lost are not counted";
      if (!isPlainObject(raw)) {
        skipped(`session_losses[${index}]`, notObject(raw), then);
        continue;
      }
      if (typeof raw.session_id !== "string" || raw.session_id === "") {
        skipped(`session_losses[${index}]`, "session_id must be a non-empty string", then);
        continue;
      }
      const io = coerceManifestInt(raw.dropped_io_error ?? 0, 0, 0);
      const queueFull = coerceManifestInt(raw.dropped_queue_full ?? 0, 0, 0);
      sessionLosses.push({
        session_id: raw.session_id,
        dropped_events: io + queueFull,
        dropped_io_error: io,
        dropped_queue_full: queueFull,
      });
    }
  }
  return {
    schema_version: schemaVersion,
    format,
    sessions,
    segments,
    ...(sessionLosses.length > 0 ? { session_losses: sessionLosses } : {}),
  };
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}

/** Reads `<dir>/manifest.json`; `null` when absent or unparsable. */
export function readManifestSync(dir: string, options: ManifestReadOptions = {}): SinkManifest | null {
  let text: string;
  try {
    text = readRegularFileSync(join(dir, MANIFEST_FILENAME), "utf8-lenient");
  } catch (error) {
    return unreadManifest(error, options);
  }
  return parseManifest(text, options);
}

/**
 * A manifest that could not be read: null when absent, or when no manifest could be there (a directory, a
 * special file, too large: said through `onInvalid`); other errors are rethrown.
 */
function unreadManifest(error: unknown, options: ManifestReadOptions): null {
  if (isMissing(error)) return null;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === "EISDIR" || code === "EFTYPE") {
    options.onInvalid?.(
      code === "EISDIR" ? "a directory, not a file" : "not a regular file (a FIFO or device)",
    );
    return null;
  }
  if (WholeFileTooLargeError.isInstance(error)) {
    options.onInvalid?.(`${Math.round(error.sizeBytes / 2 ** 20)} MiB, more than any manifest holds`);
    return null;
  }
  throw error;
}

/** Reads `<dir>/manifest.json` without blocking; `null` when absent or unparsable. */
export async function readManifest(
  dir: string,
  options: ManifestReadOptions = {},
): Promise<SinkManifest | null> {
  let text: string;
  try {
    text = await readRegularFile(join(dir, MANIFEST_FILENAME), "utf8-lenient");
  } catch (error) {
    return unreadManifest(error, options);
  }
  return parseManifest(text, options);
}

/** The manifest's session order, the reference's: `(started_at_ns, session_id)`. */
export function compareManifestSessions(a: SessionSummary, b: SessionSummary): number {
  if (a.started_at_ns !== b.started_at_ns) return a.started_at_ns < b.started_at_ns ? -1 : 1;
  return a.session_id < b.session_id ? -1 : a.session_id > b.session_id ? 1 : 0;
}

/**
 * The sessions a writer's ledger no longer lists: ended ones that own no listed segment (retention
 * deleted their records, or they wrote none), beyond the `keep` newest of them. The reference lists
 * every session forever, so a directory reused by a session per job grew a manifest that each
 * session's start read, recovered and rewrote whole. `isOpen`: sessions this writer has not ended.
 */
export function sessionsPastRetention(
  sessions: Iterable<SessionSummary>,
  segments: readonly SinkSegment[],
  keep: number,
  isOpen: (sessionId: string) => boolean,
): SessionSummary[] {
  const owners = new Set<string | null>();
  for (const segment of segments) owners.add(segment.session_id);
  const empty: SessionSummary[] = [];
  for (const summary of sessions) {
    const id = summary.session_id;
    if (summary.status !== "running" && !owners.has(id) && !isOpen(id)) empty.push(summary);
  }
  if (empty.length <= keep) return [];
  return empty.sort(compareManifestSessions).slice(0, empty.length - keep);
}

/**
 * The manifest text exactly as the reference writes it: `json.dumps(payload, indent=2) + "\n"`,
 * keys in the reference's order, sessions sorted by `(started_at_ns, session_id)`; then
 * `session_losses` (ours) when some session lost records.
 */
export function serializeManifest(
  sessions: Iterable<SessionSummary>,
  segments: readonly SinkSegment[],
  losses: Iterable<SinkSessionLoss> = [],
): string {
  const ordered = [...sessions].sort(compareManifestSessions);
  const payload: JsonObject = {
    schema_version: SINK_SCHEMA_VERSION,
    format: SINK_FORMAT,
    sessions: ordered.map(sessionSummaryToJson),
    segments: segments.map((segment) => ({
      filename: segment.filename,
      event_count: segment.event_count,
      size_bytes: segment.size_bytes,
      closed: segment.closed,
      session_id: segment.session_id,
    })),
  };
  const lost = [...losses].filter((loss) => loss.dropped_events > 0);
  if (lost.length > 0) {
    payload.session_losses = lost.map((loss) => ({
      session_id: loss.session_id,
      dropped_events: loss.dropped_events,
      dropped_io_error: loss.dropped_io_error,
      dropped_queue_full: loss.dropped_queue_full,
    }));
  }
  return `${stringifyJson(payload, { indent: 2 })}\n`;
}

/** Writes the manifest through `manifest.sync.tmp` and an atomic rename, blocking (startup and exit paths). */
export function writeManifestTextSync(dir: string, text: string, fsync: boolean): void {
  const tmp = join(dir, MANIFEST_SYNC_TMP_FILENAME);
  const fd = openSync(tmp, "w", 0o666);
  try {
    writeSync(fd, text, null, "utf8");
    if (fsync) fsyncSync(fd);
  } catch (error) {
    // A half-written copy would keep holding the space a full disk needs for the next try.
    closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {}
    throw error;
  }
  closeSync(fd);
  renameSync(tmp, join(dir, MANIFEST_FILENAME));
}

/**
 * Writes the manifest through `manifest.tmp` and an atomic rename, off the event loop's thread.
 * `stillCurrent` is asked right before the rename: a write overtaken by a newer one (the exit path's
 * synchronous close) must not replace it with older content.
 */
export async function writeManifestText(
  dir: string,
  text: string,
  fsync: boolean,
  stillCurrent: () => boolean = () => true,
): Promise<void> {
  const tmp = join(dir, MANIFEST_TMP_FILENAME);
  const handle = await fsPromises.open(tmp, "w", 0o666);
  try {
    await handle.writeFile(text, "utf8");
    if (fsync) await handle.sync();
  } catch (error) {
    // A half-written copy would keep holding the space a full disk needs for the next try.
    await handle.close().catch(() => undefined);
    await fsPromises.unlink(tmp).catch(() => undefined);
    throw error;
  }
  await handle.close();
  if (!stillCurrent()) {
    // Overtaken: its copy would stay beside the manifest for good (nothing else renames it).
    await fsPromises.unlink(tmp).catch(() => undefined);
    return;
  }
  await fsPromises.rename(tmp, join(dir, MANIFEST_FILENAME));
}

// In place: read-write, never through a link planted where the manifest was (O_NOFOLLOW where it exists).
const IN_PLACE_FLAGS = constants.O_RDWR | (constants.O_NOFOLLOW ?? 0);

/** The bytes a file can take without the file system giving it more space: its size, or its blocks. */
function roomInFile(size: number, blocks: number): number {
  return Math.max(size, Number.isFinite(blocks) ? blocks * 512 : 0);
}

/** Writes all of `data` at `position`, or throws (a short write on a full disk is ENOSPC). */
function writeAllAt(fd: number, path: string, data: Buffer, position: number): void {
  for (let offset = 0; offset < data.length; ) {
    const written = writeSync(fd, data, offset, data.length - offset, position + offset);
    if (written <= 0) throw new ManifestNoRoomInPlaceError(path, data.length, offset);
    offset += written;
  }
}

/**
 * Overwrites `manifest.json` in place, only within the space its file already holds (unless `grow`:
 * a directory that refuses new files, on a disk with room): the last resort on a full disk, where not
 * even the temporary copy fits, and in a read-only directory whose manifest is still writable. Synchronous, so that no write of it is
 * still on the thread pool when another one starts. A shorter text is padded with spaces to the
 * file's length (JSON allows them), so nothing is truncated; a longer one (within the file's blocks)
 * first writes what goes past the old end, and a refusal there cuts it off again, leaving the old
 * manifest whole. Only overwriting the old bytes can still fail midway (a copy-on-write file system
 * may need space even for that, or a crash): recovery then rebuilds the manifest from the segments.
 */
export function rewriteManifestInPlaceSync(dir: string, text: string, fsync: boolean, grow = false): void {
  const path = join(dir, MANIFEST_FILENAME);
  const data = Buffer.from(text, "utf8");
  const fd = openSync(path, IN_PLACE_FLAGS);
  try {
    const { size, blocks } = fstatSync(fd);
    const room = roomInFile(size, blocks);
    if (!grow && data.length > room) throw new ManifestNoRoomInPlaceError(path, data.length, room);
    if (data.length <= size) {
      const padded = Buffer.alloc(size, 0x20);
      data.copy(padded);
      writeAllAt(fd, path, padded, 0);
    } else {
      try {
        writeAllAt(fd, path, data.subarray(size), size);
      } catch (error) {
        ftruncateSync(fd, size);
        throw error;
      }
      writeAllAt(fd, path, data.subarray(0, size), 0);
    }
    if (fsync) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
