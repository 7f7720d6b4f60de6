// A tensor made and disposed of inside one synchronous phase (an activation, a scratch buffer): no
// timer sample can run while the phase does, and its boundaries see the memory before and after.
// The tfjs collector's high-water mark puts it in that phase's peak and the session's, on the cpu and
// wasm backends, through the tracker, the sink and the analysis as a user runs them.
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { tfjsCollector } from "@stormlog/adapter-tfjs";
import { analyzeTelemetry } from "@stormlog/analysis";
import { loadTelemetrySessions } from "@stormlog/sink";
import { MemoryTracker } from "@stormlog/tracker";
import * as tf from "@tensorflow/tfjs";
import { setWasmPaths } from "@tensorflow/tfjs-backend-wasm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const SCRATCH_ELEMENTS = 6 * 1024 * 1024; // 24 MiB of float32
const STEPS = 4;

let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "stormlog-transient-"));
  const wasmPackage = createRequire(import.meta.url).resolve("@tensorflow/tfjs-backend-wasm/package.json");
  setWasmPaths(`${join(dirname(wasmPackage), "dist")}/`);
  tf.enableProdMode();
});
afterAll(async () => {
  await tf.setBackend("cpu");
  rmSync(work, { recursive: true, force: true });
});

describe.each(["cpu", "wasm"])(
  "a transient tensor inside a synchronous phase on the %s backend",
  (backend) => {
    it("is the phase's peak and the session's, in the analysis of the sink", async () => {
      expect(await tf.setBackend(backend)).toBe(true);
      await tf.ready();
      const weights = tf.ones([1024]);
      const sinkDir = join(work, backend);
      const tracker = new MemoryTracker({
        collectors: [tfjsCollector(tf)],
        samplingIntervalMs: 10,
        sink: { rootDir: sinkDir },
        handleProcessExit: false,
      });
      await tracker.start();
      const base = tf.memory().numBytes;
      for (let step = 0; step < STEPS; step++) {
        tracker.phase("step", () => {
          tracker.phase("forward", () => {
            const scratch = tf.fill([SCRATCH_ELEMENTS], step);
            const until = Date.now() + 30; // longer than the sampling interval: no sample gets in anyway
            while (Date.now() < until);
            scratch.dispose();
          });
          tracker.phase("backward", () => tf.tidy(() => tf.mul(weights, 2)).dispose());
        });
        await new Promise((resolve) => setTimeout(resolve, 15));
      }
      await tracker.stop();
      weights.dispose();

      const report = await analyzeTelemetry(sinkDir);
      const peak = (path: string) =>
        report.phases.find((phase) => phase.phase_path === path)?.peak_allocated_bytes?.value;
      // The scratch tensor on top of what was live: exactly tfjs's own count at its top.
      expect(peak("step / forward")).toBe(base + SCRATCH_ELEMENTS * 4);
      expect(peak("step")).toBe(base + SCRATCH_ELEMENTS * 4);
      // backward's own transient (its scalar 2 and the product), not forward's.
      expect(peak("step / backward")).toBe(base + 4 + 1024 * 4);
      expect(report.summary.peaks.allocator_allocated_bytes?.value).toBe(base + SCRATCH_ELEMENTS * 4);

      // In the sink: one high-water sample per forward, inside it, as any reader of samples sees them.
      const [session] = await loadTelemetrySessions(sinkDir);
      const events = session!.events;
      const marks = events.filter((event) => event.metadata.high_water_mark === true);
      const forwards = events.filter(
        (event) =>
          event.event_type === "phase_exit" &&
          (event.metadata.phase_scope as { path?: string[] }).path?.join(" / ") === "step / forward",
      );
      const inForward = marks.filter(
        (mark) => mark.allocator_allocated_bytes === base + SCRATCH_ELEMENTS * 4,
      );
      expect(inForward.map((mark) => mark.timestamp_ns)).toEqual(
        forwards.map((exit) => exit.timestamp_ns - 1n),
      );
      for (const mark of marks) expect(mark.event_type).toBe("sample");
    }, 60_000);
  },
);
