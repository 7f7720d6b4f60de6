/**
 * The fused scan: works out which segment files an input holds (as the sink reader does) and reads
 * each one once, in chunks, into a `SegmentAggregate`. Canonical lines take the byte-level fast
 * path (`fast-line.ts`); every other line is decoded exactly as `@stormlog/sink`'s reader decodes it.
 */
import { closeSync, openSync, readSync, realpathSync, statSync } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import {
  decodeTelemetryLine,
  JsonlDecodeError,
  type JsonObject,
  normalizeTelemetryRecord,
  parseJson,
  type SourceLocation,
  stableLegacySessionId,
  type TelemetryEvent,
  TelemetryValidationError,
} from "@stormlog/core";
import {
  discoverSinkDirectories,
  isSegmentFilename,
  MANIFEST_FILENAME,
  readManifest,
  SEGMENT_SUFFIX,
  type SinkManifest,
  TelemetrySourceError,
} from "@stormlog/sink";
import { Accumulator, type SegmentAggregate } from "./aggregate.js";
import { CanonicalLineReader } from "./fast-line.js";

/** What a path holds: a sink directory, a root of sink directories, one JSONL file, or a JSON document. */
export type InputKind = "sink" | "sink-root" | "jsonl" | "json";

/** One segment (JSONL file) of the input, in reading order. */
export interface InputSegment {
  readonly path: string;
  /** The manifest's session for it, the default for records without one. */
  readonly hint: string | null;
  /** Session id of records without one (the hint, else the directory's synthetic id). */
  readonly defaultSessionId: string;
}

/** One sink directory of the input. */
export interface InputPart {
  readonly dir: string;
  readonly manifest: SinkManifest | null;
  readonly segments: readonly InputSegment[];
}

/** A resolved input: its kind and its segments, as `@stormlog/sink`'s reader would read them. */
export interface ResolvedInput {
  readonly kind: InputKind;
  readonly path: string;
  /** Resolved absolute path. */
  readonly absolute: string;
  readonly parts: readonly InputPart[];
  /** `source` of summaries inferred from events (`artifact:<name>`). */
  readonly defaultSource: string;
}

function resolvedPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

async function sinkPart(
  dir: string,
  only: string | null,
  fallbackSessionId: string,
  warn: (m: string) => void,
) {
  const manifest = await readManifest(dir, { onWarning: warn });
  const hints = new Map<string, string | null>();
  for (const segment of manifest?.segments ?? []) hints.set(segment.filename, segment.session_id);
  let names: string[];
  if (only !== null) {
    names = [only];
  } else {
    const onDisk = (await readdir(dir, { withFileTypes: true }))
      .filter((entry) => entry.isFile() && isSegmentFilename(entry.name))
      .map((entry) => entry.name);
    const listed: string[] = [];
    for (const segment of manifest?.segments ?? []) {
      try {
        if ((await stat(join(dir, segment.filename))).isFile()) listed.push(segment.filename);
      } catch {
        // Listed but gone (pruned): skipped, as the reader does.
      }
    }
    names = [...new Set([...listed, ...onDisk])].sort();
  }
  const segments = names.map((name): InputSegment => {
    const hint = hints.get(name) ?? null;
    return { path: join(dir, name), hint, defaultSessionId: hint ?? fallbackSessionId };
  });
  return { dir, manifest, segments };
}

/**
 * Works out what `path` is, with the sink reader's rules: a sink directory, a root whose
 * sub-directories are sinks, a `manifest.json`, a `.jsonl` segment (with its directory's ledger),
 * or any other file, read as a JSON document. Throws `TelemetrySourceError` for a missing path or
 * a directory without sinks.
 */
export async function resolveInput(
  path: string,
  warn: (message: string) => void = () => undefined,
): Promise<ResolvedInput> {
  let info: Awaited<ReturnType<typeof stat>>;
  try {
    info = await stat(path);
  } catch (error) {
    throw new TelemetrySourceError(path, "No telemetry input here: the path does not exist", {
      cause: error,
    });
  }
  const absolute = resolvedPath(path);
  const defaultSource = `artifact:${basename(path) || absolute}`;
  if (info.isDirectory()) {
    const dirs = await discoverSinkDirectories(path);
    if (dirs.length === 0) {
      throw new TelemetrySourceError(
        path,
        "Not a sink directory (no manifest.json or segment-*.jsonl) and no sink directory inside it",
      );
    }
    const parts: InputPart[] = [];
    for (const dir of dirs)
      parts.push(await sinkPart(dir, null, stableLegacySessionId([resolvedPath(dir), "sink"]), warn));
    const kind: InputKind = dirs.length === 1 && dirs[0] === path ? "sink" : "sink-root";
    return { kind, path, absolute, parts, defaultSource };
  }
  const name = basename(path);
  const parent = dirname(path);
  const fallback = stableLegacySessionId([absolute, "sink"]);
  if (name === MANIFEST_FILENAME) {
    return {
      kind: "sink",
      path,
      absolute,
      parts: [await sinkPart(parent, null, fallback, warn)],
      defaultSource,
    };
  }
  if (name.endsWith(SEGMENT_SUFFIX)) {
    return {
      kind: "jsonl",
      path,
      absolute,
      parts: [await sinkPart(parent, name, fallback, warn)],
      defaultSource,
    };
  }
  return { kind: "json", path, absolute, parts: [], defaultSource };
}

/** One line to an event, exactly as the sink reader decodes it (fast canonical decoder, then conversion). */
export function decodeLine(text: string, location: SourceLocation, defaultSessionId: string): TelemetryEvent {
  try {
    const record = decodeTelemetryLine(text, { strict: true, location });
    if (record.schema_version !== 2) return record;
  } catch (error) {
    if (!TelemetryValidationError.isInstance(error)) throw error;
    // Not a canonical record (legacy, sessionless v3...): the conversion below says what is wrong.
  }
  const value = parseJson(text, location);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new JsonlDecodeError("Telemetry record must be an object", { location });
  }
  return normalizeTelemetryRecord(value, {
    defaultSessionId,
    permissiveLegacy: true,
    strict: true,
    location,
    upgradeTo: 3,
  });
}

/** Chunk size of segment reads; memory stays bounded by this plus the longest line. */
const CHUNK_BYTES = 4 << 20;

/** Event types whose details only the general path keeps (alerts, health): rare, decoded in full. */
const DETAILED_TYPES: ReadonlySet<string> = new Set([
  "warning",
  "critical",
  "error",
  "collector_degraded",
  "collector_recovered",
]);

/**
 * Scans one JSONL segment into an aggregate. `onBytes` is told about progress (bytes read so far).
 * Throws the reader's errors for a malformed line; a final line cut short (no newline) that does
 * not parse is dropped with a warning, as the reader does.
 */
export async function scanSegment(
  segment: InputSegment,
  onBytes?: (bytes: number) => void,
): Promise<SegmentAggregate> {
  return scanSegmentSync(segment, onBytes);
}

/** `scanSegment`, blocking (it reads synchronously anyway: the scan is CPU-bound). */
export function scanSegmentSync(segment: InputSegment, onBytes?: (bytes: number) => void): SegmentAggregate {
  const path = segment.path;
  let expected = 256;
  try {
    // Sample lines are ~300-700 bytes: size the first rank's columns so that they rarely grow.
    expected = Math.max(256, Math.ceil(statSync(path).size / 600));
  } catch {
    // Reported by the open below.
  }
  const accumulator = new Accumulator(expected);
  const reader = new CanonicalLineReader();
  let lastSession: string | null = segment.hint;
  let lineNumber = 0;
  let stopped = false;

  const slow = (buf: Buffer, start: number, end: number, terminated: boolean): void => {
    const text = buf.toString("utf8", start, end);
    if (text.trim().length === 0) return;
    const location = { file: path, line: lineNumber };
    let event: TelemetryEvent;
    try {
      event = decodeLine(text, location, segment.defaultSessionId);
    } catch (error) {
      if (!terminated && JsonlDecodeError.isInstance(error)) {
        accumulator.warn(
          `${path}:${lineNumber}: dropped a final line cut short (${text.length} characters, no newline)`,
          lastSession,
        );
        stopped = true;
        return;
      }
      throw error;
    }
    lastSession = event.session_id;
    accumulator.addEvent(event, lineNumber);
  };

  const line = (buf: Buffer, start: number, end: number, terminated: boolean): void => {
    lineNumber++;
    if (end > start && buf[end - 1] === 0x0d) end--;
    if (end === start) return;
    if (buf[start] !== 0x7b || !reader.read(buf, start, end)) {
      slow(buf, start, end, terminated);
      return;
    }
    const eventType = reader.eventType;
    lastSession = reader.sessionId;
    if (eventType === "sample") {
      accumulator.addLine(reader, lineNumber);
      return;
    }
    if (DETAILED_TYPES.has(eventType)) {
      slow(buf, start, end, terminated);
      return;
    }
    if (eventType === "phase_enter" || eventType === "phase_exit") {
      if (reader.metadataInexact) {
        // Floats or long integers in the metadata: the exact parser keeps their marks and digits.
        slow(buf, start, end, terminated);
        return;
      }
      const metadata = reader.metadataEmpty
        ? {}
        : (JSON.parse(buf.toString("latin1", reader.metadataStart, reader.metadataEnd)) as JsonObject);
      accumulator.addBoundaryLine(reader, lineNumber, metadata.phase_scope);
      return;
    }
    accumulator.addLine(reader, lineNumber);
  };

  // Synchronous reads: the scan is CPU-bound, and a round trip through the thread pool per chunk
  // only adds latency (much of it on a loaded machine).
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    throw new TelemetrySourceError(path, "Cannot read the telemetry segment", { cause: error });
  }
  try {
    let buf = Buffer.allocUnsafe(CHUNK_BYTES);
    let filled = 0;
    let position = 0;
    for (;;) {
      if (filled === buf.length) {
        // One line longer than the buffer: grow it.
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, filled);
        buf = bigger;
      }
      const bytesRead = readSync(fd, buf, filled, buf.length - filled, position);
      position += bytesRead;
      const end = filled + bytesRead;
      if (bytesRead === 0) {
        if (end > 0 && !stopped) line(buf, 0, end, false);
        break;
      }
      const view = end === buf.length ? buf : buf.subarray(0, end);
      let start = 0;
      for (;;) {
        const newline = view.indexOf(10, start);
        if (newline === -1) break;
        line(buf, start, newline, true);
        if (stopped) break;
        start = newline + 1;
      }
      if (stopped) break;
      buf.copy(buf, 0, start, end);
      filled = end - start;
      onBytes?.(position);
    }
  } finally {
    closeSync(fd);
  }
  return accumulator.finish(lineNumber);
}

/** Aggregates in-memory events (one batch, storage order = array order). */
export function aggregateEvents(events: Iterable<TelemetryEvent>): SegmentAggregate {
  const accumulator = new Accumulator();
  let line = 0;
  for (const event of events) accumulator.addEvent(event, ++line);
  return accumulator.finish(line);
}
