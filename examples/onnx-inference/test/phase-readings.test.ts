import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInstrumentedSession } from "@stormlog/adapter-onnxruntime";
import type { MemoryCollector, SampleResult, TelemetryEvent } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { MemoryTracker, processCollector } from "@stormlog/tracker";
import * as ort from "onnxruntime-node";
import { afterEach, describe, expect, it } from "vitest";
import { buildMlpModel } from "../src/model.js";

// An onnxruntime-node session tracked with the process collector alone (RSS, no readSync()): the
// adapter's phases ask for readings, so their records carry RSS read at their enter and exit.

const MiB = 1024 * 1024;
/** Wide layers, so that a large batch takes tens of MB of activations and output. */
const SHAPE = { inputs: 64, hidden: 1024, outputs: 1024 };
/** Outputs kept for the whole test: the memory a run allocated stays resident. */
const kept: unknown[] = [];

const dirs: string[] = [];
afterEach(() => {
  kept.length = 0;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function feeds(batch: number): { x: ort.Tensor } {
  const data = new Float32Array(batch * SHAPE.inputs);
  for (let i = 0; i < data.length; i++) data[i] = Math.sin(i);
  return { x: new ort.Tensor("float32", data, [batch, SHAPE.inputs]) };
}

/** A tracker with `collector` only and a sink; no sample falls inside the test's phases. */
function trackerWith(collector: MemoryCollector): { tracker: MemoryTracker; root: string } {
  const root = mkdtempSync(join(tmpdir(), "stormlog-onnx-readings-"));
  dirs.push(root);
  const tracker = new MemoryTracker({
    collectors: [collector],
    samplingIntervalMs: 60_000,
    sink: { rootDir: root, handleProcessExit: false },
    handleProcessExit: false,
    registerGlobal: false,
    alerts: false,
    env: false,
  });
  return { tracker, root };
}

/** The sink's phase records by phase path, in order. */
async function phaseRecords(root: string): Promise<Map<string, TelemetryEvent[]>> {
  const [session] = await loadTelemetrySessions(root);
  const byPath = new Map<string, TelemetryEvent[]>();
  for (const event of session?.events ?? []) {
    if (event.event_type !== "phase_enter" && event.event_type !== "phase_exit") continue;
    const path = (event.metadata.phase_scope as { path: string[] }).path.join(" / ");
    byPath.set(path, [...(byPath.get(path) ?? []), event]);
  }
  return byPath;
}

/** exit - enter of allocator_allocated_bytes for each occurrence of a phase (records in pairs). */
function growthPerOccurrence(records: readonly TelemetryEvent[]): number[] {
  const growth: number[] = [];
  for (let i = 0; i + 1 < records.length; i += 2) {
    const enter = records[i] as TelemetryEvent;
    const exit = records[i + 1] as TelemetryEvent;
    expect([enter.event_type, exit.event_type]).toEqual(["phase_enter", "phase_exit"]);
    growth.push((exit.allocator_allocated_bytes as number) - (enter.allocator_allocated_bytes as number));
  }
  return growth;
}

describe("onnxruntime phases carry RSS read at their boundaries", () => {
  it("run, create and release records are boundary readings that show the runs' growth", async () => {
    const collector = processCollector();
    const { tracker, root } = trackerWith(collector);
    await tracker.start();
    const inputs = [feeds(1), feeds(8192), feeds(1)];
    await tracker.phase("serve", async () => {
      const session = await createInstrumentedSession(ort, buildMlpModel(SHAPE), undefined, tracker, {
        name: "mlp",
      });
      // A large batch (32 MB of hidden activations in the arena, 32 MB of output kept) between small ones.
      for (const input of inputs) kept.push(await session.run(input));
      await session.release();
    });
    await tracker.stop();
    collector.close();

    const phases = await phaseRecords(root);
    const runs = phases.get("serve / onnx:mlp / run") ?? [];
    expect(runs).toHaveLength(6);
    for (const path of ["serve / onnx:mlp / run", "serve / onnx:mlp / create", "serve / onnx:mlp / release"])
      for (const record of phases.get(path) ?? [])
        expect(record.metadata.phase_counters).toBe("boundary_read");
    for (const record of phases.get("serve / onnx:mlp") ?? [])
      expect(record.metadata.phase_counters).toBe("boundary_read");
    expect(phases.get("serve / onnx:mlp / create")).toHaveLength(2);
    expect(phases.get("serve / onnx:mlp / release")).toHaveLength(2);

    const growth = growthPerOccurrence(runs);
    // The large batch's run grew the process by tens of MB, and its records say so.
    expect(growth[1]).toBeGreaterThan(32 * MiB);
    expect(growth[1]).toBeGreaterThan((growth[0] as number) + 32 * MiB);
    // Readings differ across runs: the third starts where the second ended, not at a sample.
    const enters = runs.filter((r) => r.event_type === "phase_enter").map((r) => r.allocator_allocated_bytes);
    expect(enters[2]).toBeGreaterThan((enters[0] as number) + 32 * MiB);

    // The user's own phase did not ask: the last sample's counters, the same at enter and exit.
    const serve = phases.get("serve") ?? [];
    expect(serve.map((r) => r.metadata.phase_counters)).toEqual(["last_sample", "last_sample"]);
    expect(growthPerOccurrence(serve)).toEqual([0]);
  }, 60_000);

  it("keeps the last sample's counters, and runs on, when the on-demand read throws", async () => {
    const rss = processCollector();
    const failing: MemoryCollector = {
      specificationVersion: rss.specificationVersion,
      name: rss.name,
      deviceId: rss.deviceId,
      capabilities: rss.capabilities,
      availability: () => rss.availability(),
      sample: () => rss.sample(),
      readOnDemand(): SampleResult {
        throw new Error("statm went away");
      },
    };
    const { tracker, root } = trackerWith(failing);
    await tracker.start();
    const session = await createInstrumentedSession(ort, buildMlpModel(SHAPE), undefined, tracker, {
      name: "mlp",
    });
    kept.push(await session.run(feeds(4096)));
    await session.release();
    await tracker.stop();
    rss.close();

    const phases = await phaseRecords(root);
    const records = [...phases.values()].flat();
    expect(records.length).toBeGreaterThanOrEqual(12);
    const counters = new Set(records.map((r) => r.allocator_allocated_bytes));
    for (const record of records) expect(record.metadata.phase_counters).toBe("last_sample");
    // Every record has the start-up sample's RSS.
    expect(counters.size).toBe(1);
  }, 60_000);
});
