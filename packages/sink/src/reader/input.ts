/**
 * What a telemetry path holds, and how each of its lines becomes an event: the one place where the
 * reader (and analysis, which scans the same files its own way) learns the reference's input rules.
 */
import { lstatSync, readdirSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import {
  decodeTelemetryLine,
  normalizeTelemetryRecord,
  parseJson,
  type SourceLocation,
  type TelemetryEvent,
  TelemetryValidationError,
} from "@stormlog/core";
import { stableLegacySessionId } from "@stormlog/core/internal";
import { discoverSinkDirectoriesSync } from "../directory/layout.js";
import {
  isSegmentFilename,
  MANIFEST_FILENAME,
  readManifestSync,
  SEGMENT_SUFFIX,
  type SinkManifest,
} from "../directory/manifest.js";
import { settleAbandonedSessions } from "../directory/writer-lock.js";
import {
  fileSystemErrorCode,
  readingInput,
  TelemetryInputAccessError,
  TelemetrySourceError,
} from "../errors.js";
import { linkInsideInput } from "./links.js";
import {
  describeOOMDump,
  insideDump,
  OOM_DUMP_PREFIX,
  type OOMDumpInfo,
  readOOMDumpSync,
} from "./oom-dump.js";

/** What a path holds, for the loaders. */
export type TelemetryInputKind = "sink" | "sink-root" | "jsonl" | "json";

/** One segment (JSONL file) of an input, in reading order. */
export interface TelemetryInputSegment {
  readonly path: string;
  /** The manifest's session for it, the default for records without one. */
  readonly hint: string | null;
  /** Session id of records without one: the hint, else the directory's synthetic id. */
  readonly defaultSessionId: string;
  /** Events the manifest says were written to it (absent when the manifest does not list it). */
  readonly written?: number;
}

/** One sink directory of an input. */
export interface TelemetryInputPart {
  readonly dir: string;
  readonly manifest: SinkManifest | null;
  /** Why its `manifest.json` is no usable sink manifest (not JSON, wrong shape); absent when it is, or is absent. */
  readonly manifestProblem?: string;
  readonly segments: readonly TelemetryInputSegment[];
}

/** A resolved input: its kind and its segments, in the reference's reading order. */
export interface ResolvedTelemetryInput {
  readonly kind: TelemetryInputKind;
  /** The path as given; for an OOM dump folder, its `events.json` (what is read). */
  readonly path: string;
  /** Resolved absolute path (synthetic session ids of JSON files). */
  readonly absolute: string;
  readonly parts: readonly TelemetryInputPart[];
  /** `source` of summaries inferred from events (`artifact:<name>`). */
  readonly defaultSource: string;
  /** The source of sessions without a segment: the path as given for directories, else absolute. */
  readonly defaultSourcePath: string;
  /** Set when the path given is an OOM flight recorder's dump folder (read as its `events.json`). */
  readonly oomDump?: OOMDumpInfo;
}

/** `path` made absolute through its links (`realpath`); just made absolute when it cannot be resolved. */
export function resolveInputPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/**
 * The manifest of `dir`, unless it is a link out of the input, and why it is no usable sink
 * manifest (then `warn` says so, and what the reader does instead); file-system errors are typed.
 */
function readPartManifest(
  dir: string,
  root: string,
  warn: (message: string) => void,
): { manifest: SinkManifest | null; problem: string | null } {
  const file = join(dir, MANIFEST_FILENAME);
  try {
    if (lstatSync(file).isSymbolicLink() && linkInsideInput(file, root, warn) === null)
      return { manifest: null, problem: null };
  } catch (error) {
    const code = fileSystemErrorCode(error);
    if (code === "ENOENT" || code === "ENOTDIR") return { manifest: null, problem: null };
    throw TelemetryInputAccessError.wrap(file, error);
  }
  let problem: string | null = null;
  const manifest = readingInput(file, () =>
    readManifestSync(dir, {
      onWarning: (message) => warn(`${file}: ${message}`),
      onInvalid: (found) => {
        problem = found;
      },
    }),
  );
  if (problem !== null) {
    warn(
      `${file} is not a usable sink manifest (${problem}): the segment-*.jsonl files beside it are read ` +
        "without it, so sessions' statuses come from their events (no stop event reads as incomplete) " +
        "and what it says was written is not checked",
    );
  }
  return { manifest, problem };
}

/**
 * The warning for a segment listed a moment ago and gone when it was to be read: a live writer's
 * retention pruned it. Readers then read the input as if it had been listed after the pruning.
 */
export function removedWhileRead(segmentPath: string): string {
  return `${segmentPath}: removed while the input was read (retention pruned it); read without it`;
}

/**
 * What a segment lost: fewer events could be read from it than its manifest says were written (the
 * writers count a write only once it is done, so a live segment never reads short). The message
 * names both counts; null when nothing is missing or the manifest does not list the segment.
 */
export function segmentShortfall(segment: TelemetryInputSegment, read: number): string | null {
  const written = segment.written;
  if (written === undefined || read >= written) return null;
  return (
    `${segment.path}: ${read} of the ${written} events its manifest says were written could be read ` +
    `(${written - read} missing: the file was cut short, e.g. by a crash before its data reached the ` +
    "disk, or by an incomplete copy)"
  );
}

/** Says that a segment's name holds a directory or a special file, which is not read. */
function warnNotAFile(path: string, warn: (message: string) => void): void {
  warn(`${path}: a directory or special file (a FIFO, a device), not a segment file: not read`);
}

/** What is at `path` (undefined: nothing); file-system errors other than a missing file are typed. */
function statAt(path: string): ReturnType<typeof statSync> {
  return readingInput(path, () => statSync(path, { throwIfNoEntry: false }));
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
        if (entry !== undefined && !answer) warnNotAFile(join(dir, name), warn);
      } else {
        const target = linkInsideInput(join(dir, name), root, warn);
        const stats = target === null ? undefined : statAt(target);
        answer = stats?.isFile() === true;
        if (stats !== undefined && !answer) warnNotAFile(join(dir, name), warn);
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
  const { manifest: read, problem } = readPartManifest(dir, root, warn);
  const manifest = read === null ? null : { ...read, sessions: settleAbandonedSessions(read.sessions, dir) };
  const hints = new Map<string, string | null>();
  const written = new Map<string, number>();
  for (const segment of manifest?.segments ?? []) {
    hints.set(segment.filename, segment.session_id);
    written.set(segment.filename, segment.event_count);
  }
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
    const segment = { path: join(dir, name), hint, defaultSessionId: hint ?? fallback! };
    const count = written.get(name);
    return count === undefined ? segment : { ...segment, written: count };
  });
  return problem === null
    ? { dir, manifest, segments }
    : { dir, manifest, manifestProblem: problem, segments };
}

/**
 * The OOM dumps directly in `dir`, newest name first (their names start with the UTC time), for the
 * error about a folder of dumps.
 */
function oomDumpsIn(dir: string): string[] {
  const names = readingInput(dir, () => readdirSync(dir));
  return names
    .filter((name) => name.startsWith(OOM_DUMP_PREFIX) && readOOMDumpSync(join(dir, name)) !== null)
    .sort()
    .reverse();
}

/**
 * Works out what `path` is: a sink directory, a root whose sub-directories are sinks, a
 * `manifest.json`, a `.jsonl` segment (with its directory's ledger and hints, as the reference), an
 * OOM flight recorder's dump folder (read as its `events.json`; `warn` says what it is), or any
 * other file, read as a JSON document. `warn` also hears of a manifest that is no sink manifest (its
 * segments are then read without it). Throws `TelemetrySourceError` for a missing path, a directory
 * without sinks, or a sink directory with nothing to read (an unusable manifest and no segment).
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
  if (info.isDirectory()) {
    const dump = readOOMDumpSync(path, undefined, warn);
    if (dump !== null) {
      warn(describeOOMDump(dump));
      const events = readingInput(dump.eventsPath, () => insideDump(path, dump.eventsPath, warn));
      if (events === null)
        throw new TelemetrySourceError(
          dump.eventsPath,
          "Not read: the dump's events.json leads out of its folder; copy the file into the folder to read it",
        );
      return { ...resolveTelemetryInputSync(dump.eventsPath, warn), oomDump: dump };
    }
  }
  const absolute = resolveInputPath(path);
  const defaultSource = `artifact:${basename(path) || absolute}`;
  if (info.isDirectory()) {
    const dirs = discoverSinkDirectoriesSync(path, warn);
    if (dirs.length === 0) {
      const dumps = oomDumpsIn(path);
      if (dumps.length > 0) {
        throw new TelemetrySourceError(
          path,
          `Not a sink directory: it holds ${dumps.length} OOM flight recorder dump${dumps.length === 1 ? "" : "s"}; ` +
            `pass one of them, e.g. the newest: ${join(path, dumps[0]!)}`,
        );
      }
      throw new TelemetrySourceError(
        path,
        "Not a sink directory (no manifest.json or segment-*.jsonl) and no sink directory inside it",
      );
    }
    const parts = dirs.map((dir) =>
      sinkPart(dir, null, () => stableLegacySessionId([resolveInputPath(dir), "sink"]), warn, absolute),
    );
    const kind = dirs.length === 1 && dirs[0] === path ? "sink" : "sink-root";
    if (kind === "sink") unreadable(path, parts[0]!);
    return { kind, path, absolute, parts, defaultSource, defaultSourcePath: path };
  }
  const name = basename(path);
  const parent = dirname(path);
  const fallback = () => stableLegacySessionId([absolute, "sink"]);
  // The input is the directory the file names: links out of it are not followed.
  const root = resolveInputPath(parent);
  if (name === MANIFEST_FILENAME) {
    const parts = [sinkPart(parent, null, fallback, warn, root)];
    unreadable(path, parts[0]!);
    return { kind: "sink", path, absolute, parts, defaultSource, defaultSourcePath: path };
  }
  if (name.endsWith(SEGMENT_SUFFIX)) {
    const parts = [sinkPart(parent, name, fallback, warn, root)];
    return { kind: "jsonl", path, absolute, parts, defaultSource, defaultSourcePath: absolute };
  }
  return { kind: "json", path, absolute, parts: [], defaultSource, defaultSourcePath: absolute };
}

/**
 * A sink directory whose manifest is no sink manifest and that holds no segment has nothing to read:
 * a `TelemetrySourceError` rather than an empty report (another tool's folder with a manifest.json).
 */
function unreadable(path: string, part: TelemetryInputPart): void {
  if (
    part.manifestProblem === undefined ||
    part.segments.length > 0 ||
    (part.manifest?.sessions.length ?? 0) > 0
  )
    return;
  throw new TelemetrySourceError(
    path,
    `Nothing to read: ${join(part.dir, MANIFEST_FILENAME)} is not a sink manifest (${part.manifestProblem}) ` +
      "and there is no segment-*.jsonl beside it",
  );
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
    // JSON, but no record: refused even as a final line without newline (the reference raises there).
    const got = Array.isArray(value) ? "an array" : value === null ? "null" : `a ${typeof value}`;
    throw new TelemetryValidationError(`A telemetry record must be a JSON object, got ${got}`, { location });
  }
  return normalizeTelemetryRecord(value, {
    defaultSessionId,
    permissiveLegacy: options.permissiveLegacy !== false,
    strict,
    location,
    upgradeTo: options.upgradeTo ?? 3,
  });
}
