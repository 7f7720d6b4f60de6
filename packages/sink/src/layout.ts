import { readdirSync, statSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { InvalidConfigError } from "@stormlog/core";
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
  const rank = identity.rank ?? 0;
  if (!Number.isSafeInteger(rank) || rank < 0)
    throw new InvalidConfigError("rank", `must be an integer >= 0, got ${rank}`);
  const pid = identity.pid ?? process.pid;
  if (!Number.isSafeInteger(pid)) throw new InvalidConfigError("pid", `must be an integer, got ${pid}`);
  return join(root, `rank-${rank}-${safeName(identity.host ?? hostname())}-${pid}`);
}

/** True for names a sink directory holds: `manifest.json` or `segment-*.jsonl`. */
function marksSinkDirectory(name: string): boolean {
  return name === MANIFEST_FILENAME || isSegmentFilename(name);
}

/** True when `dir` is a sink directory itself (it holds a manifest or a segment). */
export function isSinkDirectorySync(dir: string): boolean {
  try {
    return readdirSync(dir).some(marksSinkDirectory);
  } catch {
    return false;
  }
}

/**
 * The sink directories at `path`: `[path]` when it is one, else its immediate sub-directories that
 * are (sorted by name), as the shared-root layout makes them. Empty when there are none. (Metadata
 * calls only, made blocking: see `resolveTelemetryInputSync`.)
 */
export async function discoverSinkDirectories(path: string): Promise<string[]> {
  return discoverSinkDirectoriesSync(path);
}

/** `discoverSinkDirectories`, blocking. */
export function discoverSinkDirectoriesSync(path: string): string[] {
  let names: string[];
  try {
    names = readdirSync(path);
  } catch {
    return [];
  }
  if (names.some(marksSinkDirectory)) return [path];
  return names
    .sort()
    .map((name) => join(path, name))
    .filter((child) => {
      try {
        return statSync(child).isDirectory() && isSinkDirectorySync(child);
      } catch {
        return false;
      }
    });
}
