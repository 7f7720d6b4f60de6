import { closeSync, promises as fsPromises, fsyncSync, openSync } from "node:fs";
import { join } from "node:path";
import { type Clock, type JsonObject, stringifyJson } from "@stormlog/core";
import { nodeCrypto } from "@stormlog/core/internal";
import type { ReadOptions } from "../reader/reader.js";
import { buildRollupsIncrementally, type SegmentTallySource } from "./incremental.js";
import { ROLLUP_FILENAME, type RollupCoverage } from "./payload.js";
import type { RollupSegmentCacheMode } from "./segment-cache.js";

export type { SegmentTallySource } from "./incremental.js";
export {
  ROLLUP_FILENAME,
  ROLLUP_FORMAT,
  ROLLUP_SCHEMA_VERSION,
  type RollupCoverage,
  rollupCoverageFromManifest,
} from "./payload.js";
export { ROLLUP_CACHE_DIRNAME, type RollupSegmentCacheMode } from "./segment-cache.js";

/** Options of `buildTelemetryRollups`. */
export interface RollupOptions extends ReadOptions {
  /** Window width in seconds (default 60, the reference's). */
  windowSeconds?: number;
  /** Coverage to record (default: from the directory's manifest, without pruning counters). */
  coverage?: RollupCoverage;
  clock?: Clock;
  /**
   * Where each segment's tallies are kept for the next build: `disk` (default: this process's
   * memory and `.stormlog-rollups/` in the sink directory, which the Python reference ignores),
   * `memory`, or `off` (every segment is read).
   */
  segmentCache?: RollupSegmentCacheMode;
  /** Told, for each segment, whether its tallies were read from the file or taken from a cache. */
  onSegmentTally?: (segmentPath: string, from: SegmentTallySource) => void;
}

/**
 * The reference's `rollups.json` payload for a sink directory (`build_telemetry_rollups` over
 * `load_telemetry_sessions`): per session its counts, peaks, alerts, collector health, OOM markers,
 * per-rank hidden-gap figures and fixed windows from the session's start. Built from per-segment
 * tallies merged in reading order; a closed segment never changes, so its tallies are cached and
 * a build after a session close reads only the segments written since (O(new bytes), not
 * O(retained bytes)). The result is the same as a rebuild from every event.
 */
export async function buildTelemetryRollups(dir: string, options: RollupOptions = {}): Promise<JsonObject> {
  const windowNs = BigInt(Math.round((options.windowSeconds ?? 60) * 1e9));
  if (windowNs <= 0n) throw new RangeError("windowSeconds must be > 0");
  return buildRollupsIncrementally(dir, {
    ...options,
    windowNs,
    segmentCache: options.segmentCache ?? "disk",
  });
}

/**
 * Writes `rollups.json` as the reference does: sorted keys, indent 2, through a unique temporary
 * file that is fsynced, renamed over the old one, and the directory fsynced. Returns its path.
 */
export async function writeTelemetryRollups(dir: string, rollups: JsonObject): Promise<string> {
  const target = join(dir, ROLLUP_FILENAME);
  const tmp = join(
    dir,
    `${ROLLUP_FILENAME}.${process.pid}.${nodeCrypto().randomUUID().replace(/-/g, "")}.tmp`,
  );
  const handle = await fsPromises.open(tmp, "w", 0o666);
  try {
    await handle.writeFile(`${stringifyJson(rollups, { sortKeys: true, indent: 2 })}\n`, "utf8");
    await handle.sync();
  } catch (error) {
    await handle.close();
    await fsPromises.unlink(tmp).catch(() => undefined);
    throw error;
  }
  await handle.close();
  await fsPromises.rename(tmp, target);
  try {
    const fd = openSync(dir, "r");
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Not every platform can fsync a directory; the rename is done either way.
  }
  return target;
}
