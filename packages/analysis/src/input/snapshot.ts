/**
 * File fingerprints (size, mtime, ctime, inode, device), and an input's snapshot: the fingerprint of
 * every directory and file its analysis depends on, taken before the input is resolved. When every
 * entry of a stored snapshot is unchanged, nothing was added, removed, rewritten or appended (a
 * directory's mtime and ctime change with its entries), so the result stored for it still holds and
 * a warm analysis skips listing directories and parsing manifests.
 *
 * A file changed within RACY_NS of its fingerprint may change again without its times showing it
 * (the file system's timestamp granularity). Such a racy entry carries a check of its content as
 * well (`contentCheck`: a hash of its first and last 64 KiB and of blocks spread between them; for
 * a directory, of its entries' names), taken before the file is read and compared again on every
 * later use: an append changes the size, a rewrite the bytes the check reads. So a freshly written
 * input is stored and reused at once instead of being scanned again until it is two seconds old.
 */
import { type BigIntStats, closeSync, type Dirent, readdirSync, readSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { openRegularFileSync } from "@stormlog/core/internal";
import { MANIFEST_FILENAME, readingInput, resolveInputPath, SEGMENT_SUFFIX } from "@stormlog/sink/internal";

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

/** Bytes read at each end of a racy file, and at each of SPREAD_BLOCKS offsets between them. */
const END_BYTES = 64 << 10;
const SPREAD_BYTES = 4 << 10;
const SPREAD_BLOCKS = 16;
let checkBuffer: Buffer | null = null;

/**
 * A check of the content of the file at `path` of `size` bytes: its size, and a hash of its first
 * and last 64 KiB and of 16 blocks of 4 KiB spread evenly between them (about 200 KiB read, well
 * under a millisecond). Null when it cannot be read.
 */
export function contentCheck(path: string, size: number): string | null {
  let fd: number;
  try {
    fd = openRegularFileSync(path);
  } catch {
    return null;
  }
  try {
    checkBuffer ??= Buffer.allocUnsafe(END_BYTES);
    const buffer = checkBuffer;
    const hash = new ByteHash();
    const take = (position: number, length: number): void => {
      const read = readSync(fd, buffer, 0, Math.min(length, buffer.length), position);
      hash.add(buffer, read);
    };
    if (size <= 2 * END_BYTES) {
      for (let position = 0; position < size; position += END_BYTES) take(position, END_BYTES);
    } else {
      take(0, END_BYTES);
      const stride = Math.floor((size - 2 * END_BYTES) / (SPREAD_BLOCKS + 1));
      for (let k = 1; k <= SPREAD_BLOCKS; k++) take(END_BYTES + k * stride, SPREAD_BYTES);
      take(size - END_BYTES, END_BYTES);
    }
    return `${size}:${hash.hex()}`;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/** A check of a directory's entries: a hash of their names, sorted (`skipName` left out). */
export function namesCheck(path: string, skipName: string): string | null {
  let names: string[];
  try {
    names = readdirSync(path).filter((name) => name !== skipName);
  } catch {
    return null;
  }
  const hash = new ByteHash();
  hash.add(Buffer.from(names.sort().join("\n"), "utf8"));
  return `${names.length}:${hash.hex()}`;
}

/** Two 32-bit multiply-xor lanes over bytes (not cryptographic: it tells versions of one file apart). */
class ByteHash {
  private h1 = 0x9e3779b1;
  private h2 = 0x85ebca77;
  private count = 0;

  add(bytes: Uint8Array, length = bytes.length): void {
    let h1 = this.h1;
    let h2 = this.h2;
    for (let i = 0; i < length; i++) {
      const k = bytes[i]!;
      h1 = Math.imul(h1 ^ k, 0x01000193);
      h2 = Math.imul(h2 ^ k, 0x5bd1e995) ^ (h2 >>> 15);
    }
    this.h1 = h1;
    this.h2 = h2;
    this.count += length;
  }

  hex(): string {
    const h1 = Math.imul(this.h1 ^ (this.h1 >>> 16), 0x85ebca6b) ^ this.count;
    const h2 = Math.imul(this.h2 ^ (this.h2 >>> 13), 0xc2b2ae35);
    return `${(h1 >>> 0).toString(16).padStart(8, "0")}${(h2 >>> 0).toString(16).padStart(8, "0")}`;
  }
}

/** Separates a racy entry's fingerprint from its content check in a snapshot. */
const CHECK_MARK = "#";

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
  /**
   * A file given through a link into another directory: its resolution reads the link's directory
   * (the manifest beside it), which `base` is not, so it is not snapshotted.
   */
  readonly linked: boolean;
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
  const base = kind === "dir" ? absolute : dirname(absolute);
  const linked = kind !== "dir" && resolveInputPath(dirname(path)) !== base;
  return { kind, absolute, base, size: info.size, linked };
}

/** Fingerprints of an input's directories and files. */
export interface InputSnapshot {
  /** Paths relative to the index base (`""` is the base) with their fingerprint text, in walk order. */
  readonly entries: readonly (readonly [string, string])[];
  /** The input's bytes on disk (the reference's "File size"), the index left out. */
  readonly sizeBytes: number;
  /**
   * False when the entries do not cover everything the analysis depends on (a link, an unreadable
   * directory, too many entries, a JSON document) or a racy entry's content could not be checked:
   * then it must not be stored.
   */
  readonly reusable: boolean;
}

/** Files beside a segment that its analysis reads (the session ledger, the pruning counters). */
const SEGMENT_SIDECARS = [MANIFEST_FILENAME, "rollups.json"] as const;

/**
 * The snapshot of the input at `location`, skipping `skipName` (the index directory). A directory
 * is walked whole; for a manifest, its directory and the files directly in it are what its
 * resolution reads; for a segment, the segment and the files beside it that its analysis reads
 * (other files beside it, such as a report written there, do not change its analysis). A JSON
 * document has no index: only its size.
 */
export function snapshotInput(location: InputLocation, skipName: string): InputSnapshot {
  const { kind, base } = location;
  const nowNs = BigInt(Date.now()) * 1_000_000n;
  const entries: [string, string][] = [];
  if (kind === "json") return { entries, sizeBytes: location.size, reusable: false };
  let reusable = !location.linked;
  const note = (relativePath: string, print: Fingerprint | null, isDirectory = false): void => {
    if (print === null || entries.length >= MAX_SNAPSHOT_ENTRIES) reusable = false;
    let text = printText(print);
    if (print !== null && isRacy(print, nowNs)) {
      const path = relativePath === "" ? base : join(base, relativePath);
      const check = isDirectory ? namesCheck(path, skipName) : contentCheck(path, print.size);
      if (check === null) reusable = false;
      text += `${CHECK_MARK}${isDirectory ? "d" : "f"}${check}`;
    }
    entries.push([relativePath, text]);
  };
  if (kind === "jsonl") {
    const own = basename(location.absolute);
    const print = fingerprint(location.absolute);
    note(own, print);
    // Absent sidecars are noted as such ("-"): one that appears changes the analysis.
    for (const name of SEGMENT_SIDECARS) {
      const sidecar = fingerprint(join(base, name));
      if (sidecar === null) entries.push([name, printText(null)]);
      else note(name, sidecar);
    }
    return { entries, sizeBytes: print?.size ?? location.size, reusable };
  }
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
    note("", fingerprint(base), true);
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
    note(relativeDir, fingerprint(dir), true);
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

/**
 * True when every entry of a stored snapshot still has its fingerprint, and each racy one its
 * content check (`skipName`: as given to `snapshotInput`).
 */
export function snapshotHolds(
  base: string,
  entries: readonly (readonly [string, string])[],
  skipName: string,
): boolean {
  for (const [relativePath, stored] of entries) {
    const path = relativePath === "" ? base : join(base, relativePath);
    const print = fingerprint(path);
    const text = printText(print);
    const mark = stored.indexOf(CHECK_MARK);
    if (mark < 0) {
      if (text !== stored) return false;
      continue;
    }
    if (print === null || stored.slice(0, mark) !== text) return false;
    const check = stored[mark + 1] === "d" ? namesCheck(path, skipName) : contentCheck(path, print.size);
    if (check === null || stored.slice(mark + 2) !== check) return false;
  }
  return true;
}
