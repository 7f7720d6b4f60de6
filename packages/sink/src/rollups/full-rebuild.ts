import type { Clock, JsonObject } from "@stormlog/core";
import { readManifest } from "../directory/manifest.js";
import { iterateTelemetryEvents, type ReadOptions, summarizeTelemetrySessions } from "../reader/reader.js";
import { type RollupCoverage, rollupCoverageFromManifest, rollupPayload } from "./payload.js";
import { SessionTally } from "./tally.js";

/**
 * The rollups of any telemetry input rebuilt from scratch, in two streaming passes (the loaders'
 * session summaries, then every event): what each session close did before rollups were kept per
 * segment. Used for JSON documents (which have no segments), and as the reference the incremental
 * build is tested and benchmarked against.
 */
export async function rebuildTelemetryRollups(
  path: string,
  options: ReadOptions & { windowNs: bigint; coverage?: RollupCoverage; clock?: Clock },
): Promise<JsonObject> {
  const manifest = await readManifest(path);
  const sessions = await summarizeTelemetrySessions(path, options);
  const tallies = new Map<string, SessionTally>();
  for (const info of sessions) {
    const id = info.summary.session_id;
    tallies.set(
      id,
      new SessionTally(id, { startNs: info.summary.started_at_ns, windowNs: options.windowNs }),
    );
  }
  let idx = 0;
  for await (const event of iterateTelemetryEvents(path, { ...options, onWarning: () => undefined })) {
    tallies.get(event.session_id)?.observe(event, { ord: 0, idx: idx++ });
  }
  return rollupPayload({
    manifest,
    windowNs: options.windowNs,
    coverage: options.coverage ?? rollupCoverageFromManifest(manifest),
    clock: options.clock,
    sessions: sessions.map((info) => ({
      summary: info.summary,
      sources: info.sources,
      warnings: info.warnings,
      tally: tallies.get(info.summary.session_id)!,
    })),
  });
}
