import { readFileSync } from "node:fs";
import { join } from "node:path";
import { loadTelemetrySessions, TelemetrySink } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import {
  full,
  makeTracker,
  ONE_PHASE_SESSION,
  reading,
  SequencedCollector,
  temporaryDirectories,
  trackerWithSink,
  trackOnePhase,
} from "../helpers.js";

const tempDir = temporaryDirectories("stormlog-tracker-");

describe("with the real TelemetrySink", () => {
  it("writes a completed session the loaders read back, from sink options", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    await trackOnePhase(tracker);

    const sessions = await loadTelemetrySessions(root);
    expect(sessions).toHaveLength(1);
    const session = sessions[0];
    expect(session?.summary.status).toBe("completed");
    expect(session?.summary.source).toBe("stormlog.tracker");
    expect(session?.summary.session_id).toBe(tracker.getSessionSummary()?.session_id);
    expect(session?.events.map((e) => e.event_type)).toEqual(ONE_PHASE_SESSION);
    const line = readFileSync(join(root, "segment-000001.jsonl"), "utf8").split("\n")[2] ?? "";
    expect(line).toContain('"event_type": "sample"');
    expect(line).toContain('"collector_next_retry_epoch_s": null');
    expect(tracker.getStatistics().finalRetainedFiles).toBe(1);

    // A second session in the same directory: the sink is created again at start.
    await tracker.start();
    await tracker.stop();
    expect(await loadTelemetrySessions(root)).toHaveLength(2);
  });

  it("uses a sink instance without closing it for good", async () => {
    const root = join(tempDir(), "sink");
    const sink = new TelemetrySink({ rootDir: root, handleProcessExit: false });
    const { tracker } = makeTracker(
      [new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))])],
      { sink },
    );
    await tracker.start();
    await tracker.stop();
    await tracker.start();
    await tracker.stop();
    const sessions = await loadTelemetrySessions(root);
    expect(sessions.map((s) => s.summary.status)).toEqual(["completed", "completed"]);
    expect(sessions.every((s) => s.events.at(-1)?.event_type === "stop")).toBe(true);
  });
});
