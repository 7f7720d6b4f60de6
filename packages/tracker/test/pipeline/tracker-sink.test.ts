import { readFileSync } from "node:fs";
import { join } from "node:path";
import { InvalidConfigError } from "@stormlog/core";
import { loadTelemetrySessions, TelemetrySink } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import type { StopOptions } from "../../src/index.js";
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

  it("records why tracking stopped in the stop record, and refuses bad stop options before stopping", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    await tracker.start();
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    for (const bad of [
      { reason: 3 },
      { metadata: [1] },
      { metadata: { at: () => 1 } },
      { metadata: cyclic },
      { metadata: { at: new Date(0) } },
      { metadata: { seen: new Map() } },
      { metadata: { nested: [1, { gone: undefined }] } },
      "stop",
    ] as unknown as StopOptions[]) {
      const error = await tracker.stop(bad).catch((caught: unknown) => caught);
      expect(InvalidConfigError.isInstance(error)).toBe(true);
      expect((error as Error).message).toMatch(/^Invalid option 'stop(\.reason|\.metadata)?': expected /);
      expect(tracker.isTracking).toBe(true);
    }
    // The tracker's own keys win a clash: a caller cannot fake the collector's health.
    await tracker.stop({
      reason: "exited with code 3",
      metadata: { workload_exit_code: 3, epoch: 2n ** 64n, collector_health_status: "fake" },
    });
    const [session] = await loadTelemetrySessions(root);
    const stop = session!.events.at(-1)!;
    expect(stop.event_type).toBe("stop");
    expect(stop.metadata).toMatchObject({
      stop_reason: "exited with code 3",
      workload_exit_code: 3,
      epoch: 2n ** 64n,
      collector_health_status: "healthy",
    });
    expect(session!.summary.status).toBe("completed");
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
