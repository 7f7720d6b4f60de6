/**
 * File fingerprints (size, mtime, ctime, inode, device), and an input's snapshot: the fingerprint of
 * every directory and file its analysis depends on, taken before the input is resolved. When every
 * entry of a stored snapshot is unchanged, nothing was added, removed, rewritten or appended (a
 * directory's mtime and ctime change with its entries), so the result stored for it still holds and
 * a warm analysis skips listing directories and parsing manifests.
 */
import { type BigIntStats, type Dirent, readdirSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { MANIFEST_FILENAME, readingInput, resolveInputPath, SEGMENT_SUFFIX } from "@stormlog/sink";

/** A file modified this recently may still change within the file system's timestamp granularity. */
export const RACY_NS = 2_000_000_000n;
/** Inputs with more entries than this are not snapshotted (each warm run would stat them all). */
export const MAX_SNAPSHOT_ENTRIES = 20_000;

/** What identifies one version of a file. */
export interface Fingerprint {
  size: number;
  mtimeNs: string;
  ctimeNs: string;
  ino: string;
  dev: string;
}

function toFingerprint(info: BigIntStats): Fingerprint {
  return {
    size: Number(info.size),
    mtimeNs: info.mtimeNs.toString(),
    ctimeNs: info.ctimeNs.toString(),
    ino: info.ino.toString(),
    dev: info.dev.toString(),
  };
}

/** Blocking on purpose: a stat is microseconds, a thread-pool round trip per file costs more (warm CLI path). */
export function fingerprint(path: string): Fingerprint | null {
  const info = readingInput(path, () => statSync(path, { bigint: true, throwIfNoEntry: false }));
  return info === undefined ? null : toFingerprint(info);
}

/** A fingerprint as one string (`-` for a missing file). */
export const printText = (print: Fingerprint | null): string =>
  print === null ? "-" : `${print.size}:${print.mtimeNs}:${print.ctimeNs}:${print.ino}:${print.dev}`;

export const sameFingerprint = (a: Fingerprint, b: Fingerprint): boolean =>
  a.size === b.size &&
  a.mtimeNs === b.mtimeNs &&
  a.ctimeNs === b.ctimeNs &&
  a.ino === b.ino &&
  a.dev === b.dev;

/** True when the file was modified or changed within RACY_NS of `nowNs`. */
export function isRacy(print: Fingerprint | null, nowNs: bigint): boolean {
  return (
    print !== null && (nowNs - BigInt(print.mtimeNs) < RACY_NS || nowNs - BigInt(print.ctimeNs) < RACY_NS)
  );
}

/** What an input path is, as the sink's resolution tells them apart. */
export type InputPathKind = "dir" | "manifest" | "jsonl" | "json";

/** Where an input is: its kind, real path, and the directory its index is based on. */
export interface InputLocation {
  readonly kind: InputPathKind;
  readonly absolute: string;
  /** The real path of a directory input; the real path's directory for a file. */
  readonly base: string;
  readonly size: number;
}

/** The location of the input at `path`, or null when nothing is there. */
export function locateInput(path: string): InputLocation | null {
  // A link loop, a permission: the typed error, not the sink resolution's "does not exist".
  const info = readingInput(path, () => statSync(path, { throwIfNoEntry: false }));
  if (info === undefined) return null;
  const absolute = resolveInputPath(path);
  const name = basename(path);
  const kind: InputPathKind = info.isDirectory()
    ? "dir"
    : name === MANIFEST_FILENAME
      ? "manifest"
      : name.endsWith(SEGMENT_SUFFIX)
        ? "jsonl"
        : "json";
  return { kind, absolute, base: kind === "dir" ? absolute : dirname(absolute), size: info.size };
}

/** Fingerprints of an input's directories and files. */
export interface InputSnapshot {
  /** Paths relative to the index base (`""` is the base) with their fingerprint text, in walk order. */
  readonly entries: readonly (readonly [string, string])[];
  /** The input's bytes on disk (the reference's "File size"), the index left out. */
  readonly sizeBytes: number;
  /**
   * False when the entries do not cover everything the analysis depends on (a link, an unreadable
   * directory, too many entries, a JSON document) or something changed within RACY_NS: then it must
   * not be stored.
   */
  readonly reusable: boolean;
}

/**
 * The snapshot of the input at `location`, skipping `skipName` (the index directory). A directory
 * is walked whole; for a segment or a manifest, its directory and the files directly in it are what
 * its resolution reads. A JSON document has no index: only its size.
 */
export function snapshotInput(location: InputLocation, skipName: string): InputSnapshot {
  const { kind, base } = location;
  const nowNs = BigInt(Date.now()) * 1_000_000n;
  const entries: [string, string][] = [];
  if (kind === "json") return { entries, sizeBytes: location.size, reusable: false };
  let reusable = true;
  const note = (relativePath: string, print: Fingerprint | null): void => {
    if (print === null || isRacy(print, nowNs) || entries.length >= MAX_SNAPSHOT_ENTRIES) reusable = false;
    entries.push([relativePath, printText(print)]);
  };
  const list = (dir: string): Dirent[] => {
    try {
      return readdirSync(dir, { withFileTypes: true });
    } catch {
      reusable = false;
      return [];
    }
  };
  if (kind !== "dir") {
    const own = basename(location.absolute);
    let sizeBytes = location.size;
    note("", fingerprint(base));
    for (const entry of list(base)) {
      if (entry.isSymbolicLink()) reusable = false;
      else if (entry.isFile()) {
        const print = fingerprint(join(base, entry.name));
        note(entry.name, print);
        if (entry.name === own && print !== null) sizeBytes = print.size;
      }
    }
    return { entries, sizeBytes, reusable };
  }
  let sizeBytes = 0;
  const walk = (dir: string, relativeDir: string): void => {
    note(relativeDir, fingerprint(dir));
    for (const entry of list(dir)) {
      if (entry.name === skipName) continue;
      const relativePath = relativeDir === "" ? entry.name : `${relativeDir}/${entry.name}`;
      const child = join(dir, entry.name);
      if (entry.isDirectory()) walk(child, relativePath);
      else if (entry.isFile()) {
        const print = fingerprint(child);
        note(relativePath, print);
        sizeBytes += print?.size ?? 0;
      } else if (entry.isSymbolicLink()) {
        // Changes behind a link do not show in this tree's fingerprints.
        reusable = false;
      }
    }
  };
  walk(base, "");
  return { entries, sizeBytes, reusable };
}

/** True when every entry of a stored snapshot still has its fingerprint. */
export function snapshotHolds(base: string, entries: readonly (readonly [string, string])[]): boolean {
  for (const [relativePath, print] of entries) {
    if (printText(fingerprint(relativePath === "" ? base : join(base, relativePath))) !== print) return false;
  }
  return true;
}
