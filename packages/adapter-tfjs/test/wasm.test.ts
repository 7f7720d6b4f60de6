import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { describeCollectorContract } from "@stormlog/core/testing";
import * as tf from "@tensorflow/tfjs";
import { setWasmPaths } from "@tensorflow/tfjs-backend-wasm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wasmHeapBytes } from "../src/collector.js";
import { tfjsCollector } from "../src/index.js";
import { asyncPhases } from "./support/async-phases.js";

// In Node the wasm backend loads its .wasm files from disk: point it at the installed package.
const require = createRequire(import.meta.url);
const wasmDir = join(dirname(require.resolve("@tensorflow/tfjs-backend-wasm/package.json")), "dist");

beforeAll(async () => {
  setWasmPaths(`${wasmDir}/`);
  expect(await tf.setBackend("wasm")).toBe(true);
  await tf.ready();
});

afterAll(async () => {
  await tf.setBackend("cpu");
});

describeCollectorContract("tfjs on the wasm backend", () => tfjsCollector(tf), { describe, it });

describe("tfjsCollector on the wasm backend", () => {
  it("reports the wasm heap as reserved: it grows for a large tensor and does not shrink", () => {
    const collector = tfjsCollector(tf);
    expect(collector.backendName).toBe("wasm");
    expect(collector.deviceId).toBe(-1);
    expect(collector.capabilities).toMatchObject({
      backend: "tfjs-wasm",
      sampling_source: "tf.memory+wasm_heap",
      supports_allocator_reserved: true,
    });
    const before = collector.readSync();
    if (before.kind !== "full") throw new Error("expected a full sample");
    const heapBefore = before.reading.allocator_reserved_bytes!;
    expect(heapBefore).toBe(wasmHeapBytes(tf.backend()));

    // A tensor larger than the whole heap forces it to grow.
    const elements = heapBefore / 4 + 1024 * 1024;
    const big = tf.zeros([elements]);
    const during = collector.readSync();
    big.dispose();
    const after = collector.readSync();
    if (during.kind !== "full" || after.kind !== "full") throw new Error("expected full samples");

    expect(during.reading.allocator_allocated_bytes! - before.reading.allocator_allocated_bytes!).toBe(
      elements * 4,
    );
    expect(during.reading.allocator_reserved_bytes!).toBeGreaterThan(heapBefore);
    expect(during.reading.allocator_reserved_bytes!).toBeGreaterThanOrEqual(
      during.reading.allocator_allocated_bytes!,
    );
    // Freed tensors go back to the wasm allocator, never to the OS: allocated drops, reserved stays.
    expect(after.reading.allocator_allocated_bytes).toBe(before.reading.allocator_allocated_bytes);
    expect(after.reading.allocator_reserved_bytes).toBe(during.reading.allocator_reserved_bytes);
    const sampled = collector.sample();
    if (sampled.kind === "failure") throw new Error(sampled.error);
    expect(sampled.metadata).toMatchObject({ tfjs_backend: "wasm", tfjs_unreliable: false });
  });

  it("sees a tensor made and disposed of between two readings (takeHighWater)", () => {
    const collector = tfjsCollector(tf);
    try {
      const before = collector.readSync();
      if (before.kind === "failure") throw new Error(before.error);
      expect(collector.takeHighWater()).toBeNull();
      tf.tidy(() => tf.mul(tf.ones([1 << 20]), 2)).dispose();
      const after = collector.readSync();
      if (after.kind === "failure") throw new Error(after.error);
      expect(after.reading.allocator_allocated_bytes).toBe(before.reading.allocator_allocated_bytes);
      // The ones and their product (4 MiB each) and the scalar 2 were live together.
      expect(collector.takeHighWater()).toEqual({
        allocator_allocated_bytes: before.reading.allocator_allocated_bytes! + (8 << 20) + 4,
      });
    } finally {
      collector.close();
    }
  });

  it("turns partial when the backend is switched to one without reserved memory", async () => {
    const collector = tfjsCollector(tf);
    await tf.setBackend("cpu");
    try {
      const result = collector.sample();
      expect(result).toMatchObject({ kind: "partial", missing: ["allocator_reserved_bytes"] });
      if (result.kind === "partial") {
        expect(result.reason).toMatch(/backend changed from wasm to cpu/);
        expect(result.reading.allocator_allocated_bytes).toBeGreaterThanOrEqual(0);
      }
    } finally {
      await tf.setBackend("wasm");
    }
    expect(collector.sample().kind).toBe("full");
  });
});

describe("birth-phase attribution on the wasm backend", () => {
  it("attributes wasm tensors to their birth phase and drops them when disposed", async () => {
    const phases = asyncPhases();
    const collector = tfjsCollector(tf);
    collector.bindPhases(phases);
    const leaked: tf.Tensor[] = [];
    const live = () => {
      const sampled = collector.sample();
      if (sampled.kind === "failure") throw new Error(sampled.error);
      expect(sampled.metadata?.tfjs_attribution).toBe("birth_phase");
      return sampled.metadata?.tfjs_live_by_phase as Record<string, { tensors: number; bytes: number }>;
    };
    try {
      for (let step = 1; step <= 3; step++) {
        await phases.phase("train", async () => {
          const batch = phases.phase("load_batch", () => tf.randomNormal([32, 16]));
          await new Promise<void>((resolve) => setImmediate(resolve));
          phases.phase("backward", () => {
            tf.tidy(() => {
              leaked.push(tf.keep(tf.zeros([64, 64])));
              tf.matMul(batch, batch, true).sum();
            });
          });
          batch.dispose();
        });
        expect(live()).toEqual({
          "train / backward": {
            tensors: step,
            bytes: step * 64 * 64 * 4,
            largest: [{ dtype: "float32", shape: [64, 64], bytes: step * 64 * 64 * 4, count: step }],
          },
        });
      }
      tf.dispose(leaked);
      expect(live()).toEqual({});
    } finally {
      collector.close();
    }
  });
});

describe("wasmHeapBytes", () => {
  it("is undefined for objects that are not the wasm backend", () => {
    expect(wasmHeapBytes(undefined)).toBeUndefined();
    expect(wasmHeapBytes({})).toBeUndefined();
    expect(wasmHeapBytes({ wasm: { HEAPU8: new Uint8Array(16) } })).toBe(16);
  });
});
