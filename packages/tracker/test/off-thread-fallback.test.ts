import { loadTelemetrySessions } from "@stormlog/sink";
import { expect, it, vi } from "vitest";
import { ONE_PHASE_SESSION, temporaryDirectories, trackerWithSink, trackOnePhase } from "./helpers.js";

// A platform where worker threads cannot start (the worker reports an error at once).
vi.mock("node:worker_threads", async (importOriginal) => {
  // Imported here: the factory runs before the file's imports.
  const { EventEmitter } = await import("node:events");
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
  return { ...(await importOriginal<typeof import("node:worker_threads")>()), Worker: FailingWorker };
});

const tempDir = temporaryDirectories("stormlog-fallback-");

it("writes the sink on the training thread when its worker cannot start", async () => {
  const root = `${tempDir()}/sink`;
  const { tracker, warnings } = trackerWithSink(root);
  await trackOnePhase(tracker);

  expect(warnings).toEqual([expect.stringContaining("writing the sink on the training thread instead")]);
  const sessions = await loadTelemetrySessions(root);
  expect(sessions[0]?.summary.status).toBe("completed");
  expect(sessions[0]?.events.map((event) => event.event_type)).toEqual(ONE_PHASE_SESSION);
});
