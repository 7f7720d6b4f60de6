/**
 * An index's stored results, read without the analysis: where an input's index lives (`locateIndex`),
 * whether the snapshot stored there still vouches for the input, file for file (`vouchedIndex`), and
 * the renderings stored for such a state (`readStoredRendering`). `SegmentIndex` (`index-cache.ts`)
 * builds on these; so does the CLI's start, which prints a stored rendering before it loads the
 * analysis at all (a warm `stormlog analyze` spent ~50 ms of its ~110 loading the CLI's bundle). So
 * this module imports nothing of the analysis but the snapshot's file checks.
 */
import { lstatSync } from "node:fs";
import { homedir } from "node:os";
import { basename, join } from "node:path";
import { readRegularFileSync } from "@stormlog/sink/internal";
import { DETAIL_CAP } from "../input/aggregate.js";
import { type InputLocation, locateInput, snapshotHolds } from "../input/snapshot.js";
import { PACKAGE_VERSION } from "../version.js";

/** Directory the index is written to, beside the input. */
export const INDEX_DIRNAME = ".stormlog-index";
/** Bumped whenever what an aggregate or a stored report holds, or how it is computed, changes. */
export const INDEX_VERSION = 16;
/** Environment variable naming the cache directory for indexes. */
export const CACHE_DIR_ENV = "STORMLOG_CACHE_DIR";

/** Everything an aggregate depends on besides the segment's bytes. */
export const SETTINGS = JSON.stringify({
  version: INDEX_VERSION,
  detailCap: DETAIL_CAP,
  strict: true,
  permissiveLegacy: true,
  upgradeTo: 3,
});

/**
 * The first `length` (<= 32) hex digits of a 128-bit hash of `text` (four multiply-xor lanes, then
 * a final mix: cyrb128). It names index files and keys stored reports; nothing here needs a
 * cryptographic hash, and `node:crypto` costs a warm `stormlog analyze` ~5 ms just to load.
 */
export function hashText(text: string, length: number): string {
  let h1 = 1779033703;
  let h2 = 3144134277;
  let h3 = 1013904242;
  let h4 = 2773480762;
  for (let i = 0; i < text.length; i++) {
    const k = text.charCodeAt(i);
    h1 = h2 ^ Math.imul(h1 ^ k, 597399067);
    h2 = h3 ^ Math.imul(h2 ^ k, 2869860233);
    h3 = h4 ^ Math.imul(h3 ^ k, 951274213);
    h4 = h1 ^ Math.imul(h4 ^ k, 2716044179);
  }
  h1 = Math.imul(h3 ^ (h1 >>> 18), 597399067);
  h2 = Math.imul(h4 ^ (h2 >>> 22), 2869860233);
  h3 = Math.imul(h1 ^ (h3 >>> 17), 951274213);
  h4 = Math.imul(h2 ^ (h4 >>> 19), 2716044179);
  h1 ^= h2 ^ h3 ^ h4;
  h2 ^= h1;
  h3 ^= h1;
  h4 ^= h1;
  const hex = (value: number) => (value >>> 0).toString(16).padStart(8, "0");
  return `${hex(h1)}${hex(h2)}${hex(h3)}${hex(h4)}`.slice(0, length);
}

/** The user cache directory for indexes. */
function userCacheDir(): string {
  const env = process.env[CACHE_DIR_ENV];
  if (env) return env;
  const xdg = process.env.XDG_CACHE_HOME;
  return join(xdg || join(homedir(), ".cache"), "stormlog");
}

/** Where an input's index lives: base directory, catalog and snapshot file names, candidate index directories. */
export interface IndexPlace {
  readonly base: string;
  readonly catalog: string;
  readonly snapshot: string;
  readonly dirs: readonly string[];
  /** The directory was named (`cacheDir`, `STORMLOG_CACHE_DIR`): no other is tried. */
  readonly explicit: boolean;
}

/** Where the index of the input at `location` lives (beside it, else in the user cache directory). */
export function locateIndex(location: InputLocation, cacheDir: string | undefined): IndexPlace {
  const { base } = location;
  const suffix = location.kind === "jsonl" ? `-${basename(location.absolute)}.json` : ".json";
  const names = { catalog: `index${suffix}`, snapshot: `inputs${suffix}` };
  const cached = (root: string): string => join(root, hashText(base, 16));
  const explicit = cacheDir ?? process.env[CACHE_DIR_ENV];
  if (explicit) return { base, ...names, dirs: [cached(explicit)], explicit: true };
  const beside = join(base, INDEX_DIRNAME);
  // An index directory (or its segments) that is a symbolic link would have the index written, and
  // stale files deleted, wherever it points: the user cache directory is used instead.
  if (isLink(beside) || isLink(join(beside, "segments")))
    return { base, ...names, dirs: [cached(userCacheDir())], explicit: false };
  return { base, ...names, dirs: [beside, cached(userCacheDir())], explicit: false };
}

function isLink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

/** What `inputs*.json` holds: the input's snapshot when its results were stored, and their state. */
export interface StoredSnapshot {
  format: string;
  version: number;
  settings: string;
  kind: InputLocation["kind"];
  absolute: string;
  state: string;
  segment_count: number;
  size_bytes: number;
  entries: [string, string][];
}

export const SNAPSHOT_FORMAT = "stormlog.analysis_inputs";

/** The JSON object in `dir/name` when it has the array `listKey` (catalog, snapshot); else null. */
export function readIndexFile<T extends object>(dir: string, name: string, listKey: keyof T): T | null {
  try {
    const value = JSON.parse(readRegularFileSync(join(dir, name))) as T | null;
    if (typeof value !== "object" || value === null || !Array.isArray(value[listKey])) return null;
    return value;
  } catch {
    return null;
  }
}

/** An index whose stored snapshot still holds: its stored results describe the input as it is. */
export interface VouchedIndex {
  readonly place: IndexPlace;
  readonly dir: string;
  readonly snapshot: StoredSnapshot;
}

/**
 * The index of the input at `location` when its stored snapshot (this version's, these settings')
 * still holds, file for file: its stored results can be read without resolving the input (no
 * directory listed, no manifest parsed, no catalog read). Null otherwise.
 */
export function vouchedIndex(
  location: InputLocation,
  options: { readonly index: boolean; readonly cacheDir?: string },
): VouchedIndex | null {
  if (!options.index || location.kind === "json") return null;
  const place = locateIndex(location, options.cacheDir);
  for (const dir of place.dirs) {
    const snapshot = readIndexFile<StoredSnapshot>(dir, place.snapshot, "entries");
    if (snapshot === null) continue;
    const usable =
      snapshot.format === SNAPSHOT_FORMAT &&
      snapshot.version === INDEX_VERSION &&
      snapshot.settings === SETTINGS &&
      snapshot.kind === location.kind &&
      snapshot.absolute === location.absolute &&
      snapshotHolds(place.base, snapshot.entries, INDEX_DIRNAME);
    return usable ? { place, dir, snapshot } : null;
  }
  return null;
}

/** The names of stored result files: `report-<state's first 24 digits>-<view's hash>.json`. */
export const STORED_RESULT_NAME = /^report-[0-9a-f]{24}-[0-9a-f]{8}\.json$/;

/** How the names of results stored for the input's `state` begin (any view). */
export function storedResultPrefix(state: string): string {
  return `report-${state.slice(0, 24)}-`;
}

/** The file a result stored for `view` of the input's `state` is kept in. */
export function storedResultFile(dir: string, state: string, view: string): string {
  return join(dir, `${storedResultPrefix(state)}${hashText(view, 8)}.json`);
}

/** The stamp a result stored for `view` of the input's `state` carries. */
export function storedResultStamp(state: string, view: string): string {
  return `${state}|${view}`;
}

/**
 * The rendering stored in index directory `dir` for `view` of the input's `state` (written as its
 * stamp's line, then the text), else null.
 */
export function readRenderingIn(dir: string, state: string, view: string): string | null {
  let text: string;
  try {
    text = readRegularFileSync(storedResultFile(dir, state, view));
  } catch {
    return null;
  }
  const head = `${storedResultStamp(state, view)}\n`;
  return text.startsWith(head) ? text.slice(head.length) : null;
}

/** How an analysis is rendered (`renderTelemetryAnalysis`): what a stored rendering is keyed by, besides the input. */
export interface RenderingChoice {
  readonly format: "txt" | "json";
  readonly color: boolean;
  readonly sessionId?: string;
}

/**
 * The view a rendering of the input at `path` (as given) is stored under: the text names the input's
 * size, which the index's state leaves out (files beside the sinks); renderings by another version of
 * this package are not used.
 */
export function renderingView(choice: RenderingChoice, path: string, sizeBytes: number): string {
  const { format, color, sessionId } = choice;
  return JSON.stringify(["render", PACKAGE_VERSION, format, color, sessionId ?? null, path, sizeBytes]);
}

/** Options of `readStoredRendering`: the rendering's, and where the index may be. */
export interface StoredRenderingOptions extends RenderingChoice {
  /** false: no index is read (`--no-index`): there is no stored rendering either. */
  readonly index: boolean;
  readonly cacheDir?: string;
}

/**
 * `renderTelemetryAnalysis(path, options)` when its index holds that rendering of the input as it is
 * now (vouched for by the stored snapshot), read without the analysis; else null.
 */
export function readStoredRendering(path: string, options: StoredRenderingOptions): string | null {
  const location = locateInput(path);
  const vouched = location === null ? null : vouchedIndex(location, options);
  if (vouched === null) return null;
  const { dir, snapshot } = vouched;
  return readRenderingIn(dir, snapshot.state, renderingView(options, path, snapshot.size_bytes));
}
