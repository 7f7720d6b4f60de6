/**
 * Where a segment's tallies are kept between rollup builds: in this process's memory and in a
 * hidden sidecar directory of the sink (`.stormlog-rollups/segment-NNNNNN.json`). The Python
 * reference never looks there (it globs `segment-*.jsonl` in the sink directory itself), nor do our
 * loaders (`reader/input.ts` lists files of the directory, `directory/layout.ts` needs a manifest or a
 * segment).
 * An entry is used only while its segment has the same name, size, times and inode it was read
 * with, and for the same decoding and window options; anything else is read again.
 */
import { promises as fsPromises, statSync } from "node:fs";
import { join } from "node:path";
import { type JsonObject, parseJson, stringifyJson } from "@stormlog/core";
import { nodeCrypto } from "@stormlog/core/internal";
import { isSegmentFilename, SEGMENT_SUFFIX } from "../directory/manifest.js";
import { resolveInputPath } from "../reader/input.js";

/** The sidecar directory of per-segment rollup tallies in a sink directory. */
export const ROLLUP_CACHE_DIRNAME = ".stormlog-rollups";
const CACHE_FORMAT = "stormlog.rollup_segment_tally";
// 2: lines end at `\r` too (universal newlines), as the reference reads them.
const CACHE_VERSION = 2;
/** Entries kept in memory (a few sinks' retained segments). */
const MEMORY_ENTRIES = 512;

/** Where tallies are cached: memory and the sidecar (default), memory only, or nowhere. */
export type RollupSegmentCacheMode = "disk" | "memory" | "off";

/** A segment file's identity on disk; any write, truncation or replacement changes it. */
export function segmentFileStamp(path: string): string | null {
  try {
    const info = statSync(path, { bigint: true });
    return `${info.size}:${info.mtimeNs}:${info.ctimeNs}:${info.ino}`;
  } catch {
    return null;
  }
}

function cacheFilename(segmentFilename: string): string {
  return `${segmentFilename.slice(0, -SEGMENT_SUFFIX.length)}.json`;
}

const memory = new Map<string, { key: string; data: JsonObject }>();

function remember(path: string, key: string, data: JsonObject): void {
  memory.delete(path);
  memory.set(path, { key, data });
  if (memory.size > MEMORY_ENTRIES) memory.delete(memory.keys().next().value!);
}

/** Forgets what this process holds in memory (the sidecar stays). */
export function clearRollupSegmentMemory(): void {
  memory.clear();
}

function sha256(text: string): string {
  return nodeCrypto().createHash("sha256").update(text).digest("hex");
}

/** The segment tallies of one sink directory's cache. */
export class SegmentTallyCache {
  private readonly cacheDir: string;
  /** Absolute, so the memory entries of one directory reached by two spellings are one. */
  private readonly memoryPrefix: string;

  constructor(
    private readonly sinkDir: string,
    private readonly mode: RollupSegmentCacheMode,
  ) {
    this.cacheDir = join(sinkDir, ROLLUP_CACHE_DIRNAME);
    this.memoryPrefix = join(resolveInputPath(sinkDir), ROLLUP_CACHE_DIRNAME);
  }

  /** The tallies stored for `segmentFilename` under `key`, from memory or the sidecar; null when none fits. */
  async get(
    segmentFilename: string,
    key: string,
  ): Promise<{ data: JsonObject; from: "memory" | "disk" } | null> {
    if (this.mode === "off") return null;
    const name = cacheFilename(segmentFilename);
    const held = memory.get(join(this.memoryPrefix, name));
    if (held !== undefined && held.key === key) return { data: held.data, from: "memory" };
    if (this.mode !== "disk") return null;
    let text: string;
    try {
      text = await fsPromises.readFile(join(this.cacheDir, name), "utf8");
    } catch {
      return null;
    }
    const data = parseEntry(text, key);
    if (data === null) return null;
    remember(join(this.memoryPrefix, name), key, data);
    return { data, from: "disk" };
  }

  /** Stores tallies; a sidecar that cannot be written (read-only or full disk) is left as it is. */
  async put(segmentFilename: string, key: string, data: JsonObject): Promise<void> {
    if (this.mode === "off") return;
    const name = cacheFilename(segmentFilename);
    remember(join(this.memoryPrefix, name), key, data);
    if (this.mode !== "disk") return;
    const body = stringifyJson(data);
    const header = stringifyJson({ format: CACHE_FORMAT, version: CACHE_VERSION, key, sha256: sha256(body) });
    const target = join(this.cacheDir, name);
    const tmp = `${target}.${process.pid}.${nodeCrypto().randomUUID().replace(/-/g, "")}.tmp`;
    try {
      await fsPromises.mkdir(this.cacheDir, { recursive: true });
      // A cache: no fsync. A torn or stale file fails its check and the segment is read again.
      await fsPromises.writeFile(tmp, `${header}\n${body}\n`, "utf8");
      await fsPromises.rename(tmp, target);
    } catch {
      await fsPromises.unlink(tmp).catch(() => undefined);
    }
  }

  /**
   * Removes the sidecar entries of segments that are gone (pruned, or removed by hand); memory
   * entries simply age out. Failures are ignored.
   */
  async forgetRemovedSegments(): Promise<void> {
    if (this.mode !== "disk") return;
    let names: string[];
    try {
      names = await fsPromises.readdir(this.cacheDir);
    } catch {
      return;
    }
    for (const name of names) {
      if (!isCacheFilename(name)) continue;
      const segment = `${name.slice(0, -".json".length)}${SEGMENT_SUFFIX}`;
      const gone = await fsPromises.stat(join(this.sinkDir, segment)).then(
        () => false,
        (error: NodeJS.ErrnoException) => error.code === "ENOENT",
      );
      if (gone) await fsPromises.unlink(join(this.cacheDir, name)).catch(() => undefined);
    }
  }
}

function isCacheFilename(name: string): boolean {
  return name.endsWith(".json") && isSegmentFilename(`${name.slice(0, -".json".length)}${SEGMENT_SUFFIX}`);
}

/** The data of a sidecar entry when it is whole, ours, and made under `key`; null otherwise. */
function parseEntry(text: string, key: string): JsonObject | null {
  const newline = text.indexOf("\n");
  if (newline < 0) return null;
  try {
    const header = parseJson(text.slice(0, newline));
    if (typeof header !== "object" || header === null || Array.isArray(header)) return null;
    if (header.format !== CACHE_FORMAT || header.version !== CACHE_VERSION || header.key !== key) return null;
    const body = text.slice(newline + 1).replace(/\n$/, "");
    if (header.sha256 !== sha256(body)) return null;
    const data = parseJson(body);
    return typeof data === "object" && data !== null && !Array.isArray(data) ? data : null;
  } catch {
    return null;
  }
}
