import { lstatSync, readdirSync, realpathSync, type Stats, statSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { InvalidConfigError } from "@stormlog/core";
import { fileSystemErrorCode, TelemetryInputAccessError } from "../errors.js";
import { linkInsideInput } from "../reader/links.js";
import { readOOMDumpSync } from "../reader/oom-dump.js";
import { isSegmentFilename, MANIFEST_FILENAME } from "./manifest.js";

/** Who writes a sink directory under a shared root. */
export interface ProcessSinkIdentity {
  /** The process's global rank (default 0). */
  rank?: number;
  /** Default: this machine's host name. */
  host?: string;
  /** Default: this process's pid. */
  pid?: number;
}

function safeName(text: string): string {
  const cleaned = text.replace(/[^A-Za-z0-9_.-]/g, "_").replace(/^\.+/, "_");
  return cleaned === "" ? "unknown" : cleaned.slice(0, 64);
}

/**
 * The directory one process writes under a shared sink root: `<root>/rank-<rank>-<host>-<pid>`.
 * Each is an ordinary sink directory (the Python reference reads it as is); no two live processes
 * share one, so ranks of a job (or several jobs) can write under one root at the same time without
 * locks. Readers given the root load every directory in it.
 */
export function sinkDirectoryForProcess(root: string, identity: ProcessSinkIdentity = {}): string {
  return join(root, writerDirectoryName({ ...identity, rank: identity.rank ?? 0 }));
}

/**
 * The name of one process's directory: `rank-<rank>-<host>-<pid>`, or `writer-<host>-<pid>` when the
 * rank is unknown (a process moved beside a directory's live writer, see `claimSinkDirectory`).
 */
export function writerDirectoryName(identity: ProcessSinkIdentity): string {
  const { rank } = identity;
  if (rank !== undefined && (!Number.isSafeInteger(rank) || rank < 0))
    throw new InvalidConfigError("rank", `must be an integer >= 0, got ${rank}`);
  const pid = identity.pid ?? process.pid;
  if (!Number.isSafeInteger(pid)) throw new InvalidConfigError("pid", `must be an integer, got ${pid}`);
  const who = `${safeName(identity.host ?? hostname())}-${pid}`;
  return rank === undefined ? `writer-${who}` : `rank-${rank}-${who}`;
}

/** True for names a sink directory holds: `manifest.json` or `segment-*.jsonl`. */
function marksSinkDirectory(name: string): boolean {
  return name === MANIFEST_FILENAME || isSegmentFilename(name);
}

/**
 * The names in `dir`; none when it is not there or not a directory. Other file-system errors (a
 * permission) are a `TelemetryInputAccessError`: an unreadable directory is not "no sink".
 */
function listDirectory(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch (error) {
    const code = fileSystemErrorCode(error);
    if (code === "ENOENT" || code === "ENOTDIR") return [];
    throw TelemetryInputAccessError.wrap(dir, error);
  }
}

/** True when `dir` is a sink directory itself (it holds a manifest or a segment). */
export function isSinkDirectorySync(dir: string): boolean {
  return listDirectory(dir).some(marksSinkDirectory);
}

/**
 * The sink directories at `path`: `path` itself when it is one, and the sub-directories that are
 * (sorted by name): the shared-root layout, and the processes that wrote beside a directory's live
 * writer (see `claimSinkDirectory`). Empty when there are none. A sub-directory that is a symbolic
 * link out of `path` is not followed, nor is an OOM dump folder (`warn` says so). (Metadata calls
 * only, made blocking: see `resolveTelemetryInputSync`.)
 */
export async function discoverSinkDirectories(
  path: string,
  warn: (message: string) => void = () => undefined,
): Promise<string[]> {
  return discoverSinkDirectoriesSync(path, warn);
}

/** `discoverSinkDirectories`, blocking. */
export function discoverSinkDirectoriesSync(
  path: string,
  warn: (message: string) => void = () => undefined,
): string[] {
  const names = listDirectory(path);
  let root: string | undefined;
  const realRoot = (): string => {
    root ??= realpathSync(path);
    return root;
  };
  const inside = names
    .filter((name) => !marksSinkDirectory(name))
    .sort()
    .map((name) => join(path, name))
    .filter((child) => isSinkSubdirectory(realRoot, child, warn));
  return names.some(marksSinkDirectory) ? [path, ...inside] : inside;
}

/**
 * True when `child` is a sink directory, or a link to one inside the input (a link out of it is
 * not followed: `warn` says so). A link loop is a `TelemetryInputAccessError`; a name gone since
 * the listing, or a dangling link, is no sink.
 */
function isSinkSubdirectory(realRoot: () => string, child: string, warn: (message: string) => void): boolean {
  let info: Stats;
  let target = child;
  try {
    info = lstatSync(child);
    if (info.isSymbolicLink()) {
      target = realpathSync(child);
      info = statSync(target);
    }
  } catch (error) {
    if (fileSystemErrorCode(error) === "ENOENT") return false;
    throw TelemetryInputAccessError.wrap(child, error);
  }
  if (!info.isDirectory()) return false;
  const names = listDirectory(target);
  if (!names.some(marksSinkDirectory)) return false;
  // Its manifest.json is the bundle's: read as a sink it would be an empty one.
  if (readOOMDumpSync(target, names) !== null) {
    warn(`${child} not read: it is an OOM flight recorder dump, not a sink; pass it on its own to read it`);
    return false;
  }
  if (target === child) return true;
  // A link back to the input itself: the input is read already.
  return target !== realRoot() && linkInsideInput(child, realRoot(), warn) !== null;
}
