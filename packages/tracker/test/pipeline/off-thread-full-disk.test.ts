// The sink's worker meeting a really full filesystem (a small tmpfs the test mounts; the suite runs as
// root) with a burst beyond its sink's queue: the worker must not wait on the disk in a loop that
// keeps its retry timer from running, and `stop()` must end the session, counting what was lost.
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  FILLER,
  fill,
  smallFilesystem,
  unmountSmallFilesystems,
} from "../../../sink/test/support/full-filesystem.js";
import { trackerWithSink } from "../helpers.js";

afterEach(unmountSmallFilesystems);

const within = <T>(promise: Promise<T>, ms: number): Promise<T | "timed out"> =>
  Promise.race([promise, new Promise<"timed out">((resolve) => setTimeout(() => resolve("timed out"), ms))]);

describe("a sink on a worker thread, on a full disk", () => {
  it("stops within seconds after a burst beyond its queue, and records the session incomplete with its losses", async () => {
    const dir = smallFilesystem(1024);
    const root = join(dir, "sink");
    const { tracker } = trackerWithSink(root, {
      maxQueueEvents: 200,
      flushEveryEvents: 10,
      failureBackoffSeconds: 0.05,
      failureBackoffMaxSeconds: 0.2,
    });
    await tracker.start();
    fill(dir);
    // 6000 records: 60 times what the worker's sink reads before it waits for the disk (100).
    const phases = 3000;
    for (let i = 0; i < phases; i++) tracker.phase("step", () => undefined);
    // Let the worker meet the full disk with the burst in its ring.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await within(tracker.stop(), 15_000)).toBeUndefined();
    expect(tracker.getSessionSummary()?.status).toBe("incomplete");
    // Space returns: the manifest on disk says what was lost.
    rmSync(join(dir, FILLER));
    const manifest = JSON.parse(readFileSync(join(root, "manifest.json"), "utf8")) as {
      sessions: { status: string }[];
      session_losses: { dropped_events: number }[];
    };
    expect(manifest.sessions.at(-1)?.status).toBe("incomplete");
    expect(manifest.session_losses[0]?.dropped_events).toBeGreaterThan(0);
  });
});
