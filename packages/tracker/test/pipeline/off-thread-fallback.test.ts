import { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import { loadTelemetrySessions } from "@stormlog/sink";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ONE_PHASE_SESSION, temporaryDirectories, trackerWithSink, trackOnePhase } from "../helpers.js";

// A platform where worker threads cannot start (the worker reports an error at once). Stormlog loads
// `node:worker_threads` when it first starts one (`nodeWorkerThreads` of core), through Node's own
// `require`: the module object it gets is this one, whose `Worker` the test replaces.
const workerThreads = createRequire(import.meta.url)(
  "node:worker_threads",
) as typeof import("node:worker_threads");
class FailingWorker extends EventEmitter {
  constructor() {
    super();
    queueMicrotask(() => this.emit("error", new Error("worker threads are not available here")));
  }
  postMessage(): void {}
  ref(): void {}
  unref(): void {}
  terminate(): Promise<number> {
    return Promise.resolve(1);
  }
}
const RealWorker = workerThreads.Worker;
beforeAll(() => {
  (workerThreads as { Worker: unknown }).Worker = FailingWorker;
});
afterAll(() => {
  (workerThreads as { Worker: unknown }).Worker = RealWorker;
});

const tempDir = temporaryDirectories("stormlog-fallback-");

it("writes the sink on the training thread when its worker cannot start", async () => {
  const root = `${tempDir()}/sink`;
  const sinkWarnings: string[] = [];
  const { tracker, warnings } = trackerWithSink(root, { logger: { warn: (m) => sinkWarnings.push(m) } });
  await trackOnePhase(tracker);

  expect(warnings).toEqual([expect.stringContaining("writing the sink on the training thread instead")]);
  // The sink says why its worker failed, and what to pass to skip it.
  expect(sinkWarnings).toEqual([
    `the telemetry sink's worker thread failed (worker threads are not available here); pass sinkThread: "main" to MemoryTracker to write the sink on the training thread`,
  ]);
  const sessions = await loadTelemetrySessions(root);
  expect(sessions[0]?.summary.status).toBe("completed");
  expect(sessions[0]?.events.map((event) => event.event_type)).toEqual(ONE_PHASE_SESSION);
});
