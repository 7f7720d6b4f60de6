/**
 * What a telemetry path holds, and how each of its lines becomes an event: the one place where the
 * reader (and analysis, which scans the same files its own way) learns the reference's input rules.
 */
import { lstatSync, readdirSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import {
  decodeTelemetryLine,
  JsonlDecodeError,
  normalizeTelemetryRecord,
  parseJson,
  type SourceLocation,
  stableLegacySessionId,
  type TelemetryEvent,
  TelemetryValidationError,
} from "@stormlog/core";
import {
  fileSystemErrorCode,
  readingInput,
  TelemetryInputAccessError,
  TelemetrySourceError,
} from "./errors.js";
import { discoverSinkDirectoriesSync } from "./layout.js";
import { linkInsideInput } from "./links.js";
import {
  isSegmentFilename,
  MANIFEST_FILENAME,
  readManifestSync,
  SEGMENT_SUFFIX,
  type SinkManifest,
} from "./manifest.js";
import { settleAbandonedSessions } from "./writer-lock.js";

/** What a path holds, for the loaders. */
export type TelemetryInputKind = "sink" | "sink-root" | "jsonl" | "json";

/** One segment (JSONL file) of an input, in reading order. */
export interface TelemetryInputSegment {
  readonly path: string;
  /** The manifest's session for it, the default for records without one. */
  readonly hint: string | null;
  /** Session id of records without one: the hint, else the directory's synthetic id. */
  readonly defaultSessionId: string;
}

/** One sink directory of an input. */
export interface TelemetryInputPart {
  readonly dir: string;
  readonly manifest: SinkManifest | null;
  readonly segments: readonly TelemetryInputSegment[];
}

/** A resolved input: its kind and its segments, in the reference's reading order. */
export interface ResolvedTelemetryInput {
  readonly kind: TelemetryInputKind;
  readonly path: string;
  /** Resolved absolute path (synthetic session ids of JSON files). */
  readonly absolute: string;
  readonly parts: readonly TelemetryInputPart[];
  /** `source` of summaries inferred from events (`artifact:<name>`). */
  readonly defaultSource: string;
  /** The source of sessions without a segment: the path as given for directories, else absolute. */
  readonly defaultSourcePath: string;
}

/** `path` made absolute through its links (`realpath`); just made absolute when it cannot be resolved. */
export function resolveInputPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/** The manifest of `dir`, unless it is a link out of the input; file-system errors are typed. */
function readPartManifest(
  dir: string,
  root: string,
  warn: (message: string) => void,
): ReturnType<typeof readManifestSync> {
  const file = join(dir, MANIFEST_FILENAME);
  try {
    if (lstatSync(file).isSymbolicLink() && linkInsideInput(file, root, warn) === null) return null;
  } catch (error) {
    const code = fileSystemErrorCode(error);
    if (code === "ENOENT" || code === "ENOTDIR") return null;
    throw TelemetryInputAccessError.wrap(file, error);
  }
  return readingInput(file, () => readManifestSync(dir, { onWarning: warn }));
}

/** True for a regular file; file-system errors other than a missing file are typed. */
function isFileAt(path: string): boolean {
  return readingInput(path, () => statSync(path, { throwIfNoEntry: false })?.isFile() === true);
}

/**
 * The names in `dir`, and which can be read as segments: regular files, and links to regular
 * files inside the input (a link out of it is skipped with a warning).
 */
function readableFiles(
  dir: string,
  root: string,
  warn: (message: string) => void,
): { names: string[]; readable: (name: string) => boolean } {
  const entries = readingInput(dir, () => readdirSync(dir, { withFileTypes: true }));
  const byName = new Map(entries.map((entry) => [entry.name, entry]));
  const known = new Map<string, boolean>();
  const readable = (name: string): boolean => {
    let answer = known.get(name);
    if (answer === undefined) {
      const entry = byName.get(name);
      if (entry === undefined || !entry.isSymbolicLink()) {
        answer = entry?.isFile() === true;
      } else {
        const target = linkInsideInput(join(dir, name), root, warn);
        answer = target !== null && isFileAt(target);
      }
      known.set(name, answer);
    }
    return answer;
  };
  return { names: [...byName.keys()], readable };
}

function sinkPart(
  dir: string,
  only: string | null,
  fallbackSessionId: () => string,
  warn: (message: string) => void,
  root: string,
): TelemetryInputPart {
  if (linkInsideInput(dir, root, warn) === null) return { dir, manifest: null, segments: [] };
  const read = readPartManifest(dir, root, warn);
  const manifest = read === null ? null : { ...read, sessions: settleAbandonedSessions(read.sessions) };
  const hints = new Map<string, string | null>();
  for (const segment of manifest?.segments ?? []) hints.set(segment.filename, segment.session_id);
  let names: string[];
  if (only !== null) {
    names = [only];
  } else {
    const { names: inDir, readable } = readableFiles(dir, root, warn);
    const onDisk = inDir.filter((name) => isSegmentFilename(name) && readable(name));
    // Listed but gone (pruned, or never written): the reference skips it too.
    const listed = (manifest?.segments ?? []).map((segment) => segment.filename).filter(readable);
    names = [...new Set([...listed, ...onDisk])].sort();
  }
  // The directory's synthetic id (a realpath and a hash) only where a segment has no manifest hint.
  let fallback: string | undefined;
  const segments = names.map((name): TelemetryInputSegment => {
    const hint = hints.get(name) ?? null;
    if (hint === null && fallback === undefined) fallback = fallbackSessionId();
    return { path: join(dir, name), hint, defaultSessionId: hint ?? fallback! };
  });
  return { dir, manifest, segments };
}

/**
 * Works out what `path` is: a sink directory, a root whose sub-directories are sinks, a
 * `manifest.json`, a `.jsonl` segment (with its directory's ledger and hints, as the reference), or
 * any other file, read as a JSON document. Throws `TelemetrySourceError` for a missing path or a
 * directory without sinks.
 */
export async function resolveTelemetryInput(
  path: string,
  warn: (message: string) => void = () => undefined,
): Promise<ResolvedTelemetryInput> {
  return resolveTelemetryInputSync(path, warn);
}

/**
 * `resolveTelemetryInput`, blocking. It only lists directories, stats files and reads manifests: a
 * 64-rank root takes a few milliseconds this way, where the same calls through the thread pool cost a
 * fresh CLI process several times that (measured: the warm `stormlog analyze` path).
 */
export function resolveTelemetryInputSync(
  path: string,
  warn: (message: string) => void = () => undefined,
): ResolvedTelemetryInput {
  let info: ReturnType<typeof statSync>;
  try {
    info = statSync(path);
  } catch (error) {
    if (fileSystemErrorCode(error) !== "ENOENT") throw TelemetryInputAccessError.wrap(path, error);
    throw new TelemetrySourceError(path, "No telemetry input here: the path does not exist", {
      cause: error,
    });
  }
  const absolute = resolveInputPath(path);
  const defaultSource = `artifact:${basename(path) || absolute}`;
  if (info.isDirectory()) {
    const dirs = discoverSinkDirectoriesSync(path, warn);
    if (dirs.length === 0) {
      throw new TelemetrySourceError(
        path,
        "Not a sink directory (no manifest.json or segment-*.jsonl) and no sink directory inside it",
      );
    }
    const parts = dirs.map((dir) =>
      sinkPart(dir, null, () => stableLegacySessionId([resolveInputPath(dir), "sink"]), warn, absolute),
    );
    const kind = dirs.length === 1 && dirs[0] === path ? "sink" : "sink-root";
    return { kind, path, absolute, parts, defaultSource, defaultSourcePath: path };
  }
  const name = basename(path);
  const parent = dirname(path);
  const fallback = () => stableLegacySessionId([absolute, "sink"]);
  // The input is the directory the file names: links out of it are not followed.
  const root = resolveInputPath(parent);
  if (name === MANIFEST_FILENAME) {
    const parts = [sinkPart(parent, null, fallback, warn, root)];
    return { kind: "sink", path, absolute, parts, defaultSource, defaultSourcePath: path };
  }
  if (name.endsWith(SEGMENT_SUFFIX)) {
    const parts = [sinkPart(parent, name, fallback, warn, root)];
    return { kind: "jsonl", path, absolute, parts, defaultSource, defaultSourcePath: absolute };
  }
  return { kind: "json", path, absolute, parts: [], defaultSource, defaultSourcePath: absolute };
}

/** How lines are decoded: the loaders' `strict`, `permissiveLegacy` and `upgradeTo` options. */
export interface LineDecodeOptions {
  readonly strict?: boolean;
  readonly permissiveLegacy?: boolean;
  readonly upgradeTo?: 3 | 4;
}

/**
 * One segment line to an event: core's fast canonical decoder first, the reference's conversion
 * rules (legacy records, v2, sessionless lines get `defaultSessionId`) otherwise.
 */
export function decodeTelemetryEventLine(
  text: string,
  location: SourceLocation,
  defaultSessionId: string,
  options: LineDecodeOptions = {},
): TelemetryEvent {
  const strict = options.strict !== false;
  if (options.upgradeTo !== 4) {
    try {
      const record = decodeTelemetryLine(text, { strict, location });
      if (record.schema_version !== 2) return record;
    } catch (error) {
      if (!TelemetryValidationError.isInstance(error)) throw error;
      // Not a canonical record (legacy, sessionless v3...): the conversion below says what is wrong.
    }
  }
  const value = parseJson(text, location);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new JsonlDecodeError("Telemetry record must be an object", { location });
  }
  return normalizeTelemetryRecord(value, {
    defaultSessionId,
    permissiveLegacy: options.permissiveLegacy !== false,
    strict,
    location,
    upgradeTo: options.upgradeTo ?? 3,
  });
}
