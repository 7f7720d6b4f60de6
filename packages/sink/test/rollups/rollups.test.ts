import { readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { type JsonObject, type JsonValue, parseJson, stringifyJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { BASE_NS, sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync } from "../../src/directory/manifest.js";
import { buildTelemetryRollups, type RollupCoverage, TelemetrySink } from "../../src/index.js";
import { rollupCoverageFromManifest } from "../../src/rollups/payload.js";
import { tempDir } from "../helpers.js";

const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden/python-sink");

/** Paths differ by machine: keep file names only. The generation time differs by nature. */
function comparable(value: JsonValue): JsonValue {
  const copy = parseJson(stringifyJson(value)) as JsonObject;
  delete copy.generated_at_ns;
  for (const session of copy.sessions as JsonObject[]) {
    session.sources_loaded = (session.sources_loaded as string[]).map((path) => basename(path));
  }
  return copy;
}

describe("rollups.json", () => {
  // Cases whose rollups were written when their last session closed, so the directory still matches.
  it.each(["single-completed", "rollover-and-prune", "three-sessions-pruned"])(
    "%s: built as the reference built it",
    async (name) => {
      const dir = join(FIXTURES, name, "sink");
      const golden = parseJson(readFileSync(join(dir, "rollups.json"), "utf8")) as JsonObject;
      // Memory only: the fixtures stay as the reference wrote them.
      const ours = await buildTelemetryRollups(dir, {
        coverage: golden.coverage as unknown as RollupCoverage,
        segmentCache: "memory",
      });
      expect(comparable(ours)).toEqual(comparable(golden));
      // Same text too, once the time is set aside.
      const text = (value: JsonObject) =>
        stringifyJson({ ...value, generated_at_ns: 0 }, { sortKeys: true, indent: 2 });
      const oursText = text(ours).replace(/"[^"]*segment-(\d+)\.jsonl"/g, '"segment-$1.jsonl"');
      const goldenText = text(golden).replace(/"[^"]*segment-(\d+)\.jsonl"/g, '"segment-$1.jsonl"');
      expect(oursText.replace(/"sources_loaded": \[\n\s+"[^"]*sink"/g, "")).toBe(
        goldenText.replace(/"sources_loaded": \[\n\s+"[^"]*sink"/g, ""),
      );
    },
  );

  it("is written when a session closes, with the sink's coverage and pruning counters", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({
      rootDir: dir,
      handleProcessExit: false,
      flushEveryEvents: 10,
      rolloverMaxEvents: 20,
      retentionMaxFiles: 2,
      rollupWindowSeconds: 1,
    });
    sink.startSession({ session_id: "s", started_at_ns: BASE_NS });
    for (let i = 0; i < 75; i++) {
      const eventType =
        i === 30 ? "warning" : i === 40 ? "collector_degraded" : i === 50 ? "collector_recovered" : "sample";
      sink.append(sampleRecord("s", i, { eventType }));
    }
    await sink.close();
    const rollups = parseJson(readFileSync(join(dir, "rollups.json"), "utf8")) as JsonObject;
    const manifest = readManifestSync(dir)!;
    const coverage = rollupCoverageFromManifest(manifest, {
      segmentCount: 2,
      bytes: sink.getDiagnostics().pruned_bytes,
    });
    expect(rollups.coverage).toEqual(parseJson(stringifyJson(coverage as unknown as JsonObject)));
    const [session] = rollups.sessions as JsonObject[];
    expect(session).toMatchObject({
      event_count: 35,
      alerts: { total_count: 0 },
      collector_health: {
        transition_count: 2,
        degraded_count: 1,
        recovered_count: 1,
        degraded_time_ns: 1_000_000_000,
      },
    });
    // 1 s windows from the session's start; events 40..74 are 100 ms apart.
    expect((session!.windows as JsonObject[]).map((w) => [w.index, w.event_count])).toEqual([
      [4, 10],
      [5, 10],
      [6, 10],
      [7, 5],
    ]);
  });
});
