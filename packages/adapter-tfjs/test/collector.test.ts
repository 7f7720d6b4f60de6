import { describeCollectorContract } from "@stormlog/core/testing";
import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import {
  TFJS_COLLECTOR_NAME,
  type TfEngineState,
  type TfMemoryInfo,
  type TfNamespace,
  tfjsCollector,
} from "../src/index.js";
import { useCpuBackend } from "./support/cpu-backend.js";

beforeAll(async () => {
  await useCpuBackend();
  await tf.ready();
});

/** A `tf` namespace whose backend is tfjs-node's `tensorflow`, memory() shaped as that backend returns it. */
function nodeBackendNamespace(state: { numBytes: number; numTensors: number; gpu?: boolean }): TfNamespace {
  return {
    getBackend: () => "tensorflow",
    backend: () => ({ isGPUPackage: state.gpu === true, isUsingGpuDevice: state.gpu === true }),
    memory: (): TfMemoryInfo => ({
      unreliable: true,
      reasons: [
        "The reported memory is an upper bound. Due to automatic garbage collection, the true allocated memory may be less.",
      ],
      numBytes: state.numBytes,
      numTensors: state.numTensors,
      numDataBuffers: state.numTensors,
    }),
  };
}

/** A `tf` namespace whose backend is WebGL, memory() shaped as backend_webgl returns it. */
function webglNamespace(state: { inUse: number; allocated: number; free: number }): TfNamespace {
  return {
    getBackend: () => "webgl",
    backend: () => ({}),
    memory: () => ({
      unreliable: false,
      numBytesInGPU: state.inUse,
      numBytesInGPUAllocated: state.allocated,
      numBytesInGPUFree: state.free,
      numBytes: state.inUse + 100,
      numTensors: 3,
      numDataBuffers: 3,
    }),
  };
}

describeCollectorContract("tfjs on the cpu backend", () => tfjsCollector(tf), { describe, it });
describeCollectorContract(
  "tfjs on tfjs-node's tensorflow backend (shape)",
  () => tfjsCollector(nodeBackendNamespace({ numBytes: 4096, numTensors: 2 })),
  { describe, it },
);
describeCollectorContract(
  "tfjs on tfjs-node-gpu's tensorflow backend (shape)",
  () => tfjsCollector(nodeBackendNamespace({ numBytes: 4096, numTensors: 2, gpu: true })),
  { describe, it },
);
describeCollectorContract(
  "tfjs on the webgl backend (shape)",
  () => tfjsCollector(webglNamespace({ inUse: 1000, allocated: 5000, free: 4000 })),
  { describe, it },
);

describe("tfjsCollector on the cpu backend", () => {
  it("reports tf.memory().numBytes as allocated and declares reserved unsupported", () => {
    const collector = tfjsCollector(tf);
    expect(collector.name).toBe(TFJS_COLLECTOR_NAME);
    expect(collector.backendName).toBe("cpu");
    expect(collector.deviceId).toBe(-1);
    expect(collector.capabilities).toMatchObject({
      backend: "tfjs-cpu",
      sampling_source: "tf.memory",
      supports_allocator_allocated: true,
      supports_allocator_reserved: false,
      supports_device_used: false,
    });
    const before = collector.readSync();
    const t = tf.zeros([256, 256]);
    const after = collector.readSync();
    if (before.kind !== "full" || after.kind !== "full") throw new Error("expected full samples");
    expect(after.reading.allocator_allocated_bytes! - before.reading.allocator_allocated_bytes!).toBe(
      256 * 256 * 4,
    );
    expect(after.reading).not.toHaveProperty("allocator_reserved_bytes");
    expect((after.metadata!.tfjs_num_tensors as number) - (before.metadata!.tfjs_num_tensors as number)).toBe(
      1,
    );
    // A boundary read carries the counts only: phases write two records each.
    expect(Object.keys(after.metadata!).sort()).toEqual(["tfjs_num_data_buffers", "tfjs_num_tensors"]);
    // The cpu backend calls its own numbers an upper bound (garbage collection): surfaced, not hidden.
    const sampled = collector.sample();
    if (sampled.kind === "failure") throw new Error(sampled.error);
    expect(sampled.metadata).toMatchObject({ tfjs_backend: "cpu", tfjs_unreliable: true });
    expect(sampled.metadata?.tfjs_unreliable_reasons).toEqual([expect.stringMatching(/upper bound/)]);
    t.dispose();
    const disposed = collector.sample();
    if (disposed.kind !== "full") throw new Error("expected a full sample");
    expect(disposed.reading.allocator_allocated_bytes).toBe(before.reading.allocator_allocated_bytes);
  });

  it("surfaces tfjs's unreliable flag and reasons for string tensors", () => {
    const collector = tfjsCollector(tf);
    const s = tf.tensor(["hello", "stormlog"]);
    const result = collector.sample();
    s.dispose();
    expect(result.kind).toBe("full");
    if (result.kind !== "full") return;
    expect(result.metadata?.tfjs_unreliable).toBe(true);
    expect(result.metadata?.tfjs_unreliable_reasons).toContainEqual(expect.stringMatching(/string tensors/));
  });

  it("fails, without throwing, when tf.memory() throws", () => {
    const broken: TfNamespace = {
      getBackend: () => "cpu",
      backend: () => ({}),
      memory: () => {
        throw new Error("Backend 'wasm' has not yet been initialized");
      },
    };
    const collector = tfjsCollector(broken);
    const result = collector.sample();
    expect(result).toMatchObject({ kind: "failure" });
    if (result.kind === "failure") expect(result.error).toMatch(/await tf.ready\(\)/);
    expect(collector.availability()).toMatchObject({ available: false });
  });

  it("accepts an explicit device id and name", () => {
    const collector = tfjsCollector(tf, { deviceId: 3, name: "stormlog.tfjs_custom" });
    expect(collector.deviceId).toBe(3);
    expect(collector.capabilities.telemetry_collector).toBe("stormlog.tfjs_custom");
  });
});

describe("tfjsCollector on tfjs-node's tensorflow backend (memory() shape)", () => {
  it("reports numBytes as allocated, reserved unsupported, and the unreliable reasons", () => {
    const state = { numBytes: 8192, numTensors: 4 };
    const collector = tfjsCollector(nodeBackendNamespace(state));
    expect(collector.capabilities).toMatchObject({
      backend: "tfjs-tensorflow",
      supports_allocator_reserved: false,
    });
    expect(collector.deviceId).toBe(-1);
    const result = collector.sample();
    expect(result).toMatchObject({
      kind: "full",
      reading: { allocator_allocated_bytes: 8192 },
      metadata: { tfjs_backend: "tensorflow", tfjs_num_tensors: 4, tfjs_unreliable: true },
    });
    if (result.kind === "full") {
      expect(result.metadata?.tfjs_unreliable_reasons).toEqual([expect.stringMatching(/garbage collection/)]);
    }
    state.numBytes = 0;
    expect(collector.readSync()).toMatchObject({ reading: { allocator_allocated_bytes: 0 } });
  });

  it("hands out the same reasons array while tfjs gives the same reasons (the sink names it by reference)", () => {
    const reasons = ["first reason"];
    const namespace: TfNamespace = {
      ...nodeBackendNamespace({ numBytes: 0, numTensors: 0 }),
      memory: () => ({
        unreliable: true,
        reasons: [...reasons],
        numBytes: 0,
        numTensors: 0,
        numDataBuffers: 0,
      }),
    };
    const collector = tfjsCollector(namespace);
    const reasonsOf = (result: ReturnType<typeof collector.sample>) =>
      result.kind === "full" ? result.metadata?.tfjs_unreliable_reasons : undefined;
    const first = reasonsOf(collector.sample());
    expect(reasonsOf(collector.sample())).toBe(first);
    reasons.push("second reason");
    const changed = reasonsOf(collector.sample());
    expect(changed).not.toBe(first);
    expect(changed).toEqual(["first reason", "second reason"]);
    expect(first).toEqual(["first reason"]);
  });

  it("uses device 0 when tfjs-node-gpu placed ops on a GPU, so NVML readings merge with it", () => {
    expect(tfjsCollector(nodeBackendNamespace({ numBytes: 0, numTensors: 0, gpu: true })).deviceId).toBe(0);
  });

  it("fails rather than report a non-count numBytes", () => {
    const collector = tfjsCollector(nodeBackendNamespace({ numBytes: Number.NaN, numTensors: 0 }));
    expect(collector.sample()).toMatchObject({ kind: "failure" });
  });
});

describe("tfjsCollector's boundary read from the engine's counts", () => {
  /** The real `tf` on cpu, counting `memory()` calls. */
  function countingNamespace(): { namespace: TfNamespace; memoryCalls: () => number } {
    let calls = 0;
    const namespace: TfNamespace = {
      getBackend: () => tf.getBackend(),
      backend: () => tf.backend(),
      engine: () => tf.engine(),
      memory: () => {
        calls++;
        return tf.memory() as TfMemoryInfo;
      },
    };
    return { namespace, memoryCalls: () => calls };
  }

  it("reads what tf.memory() reports, on cpu, without calling it", () => {
    const { namespace, memoryCalls } = countingNamespace();
    const collector = tfjsCollector(namespace);
    const kept = [tf.zeros([64, 64]), tf.ones([3])];
    const viaMemory = tf.memory();
    const callsBefore = memoryCalls();
    const read = collector.readSync();
    expect(memoryCalls()).toBe(callsBefore);
    expect(read).toEqual({
      kind: "full",
      reading: { allocator_allocated_bytes: viaMemory.numBytes },
      metadata: { tfjs_num_tensors: viaMemory.numTensors, tfjs_num_data_buffers: viaMemory.numDataBuffers },
    });
    tf.dispose(kept);
    const after = collector.readSync();
    expect(after).toMatchObject({
      reading: { allocator_allocated_bytes: viaMemory.numBytes - (64 * 64 + 3) * 4 },
      metadata: { tfjs_num_tensors: viaMemory.numTensors - 2 },
    });
    // Samples keep reading tf.memory(): they carry the backend's notes.
    collector.sample();
    expect(memoryCalls()).toBe(callsBefore + 1);
  });

  it("goes back to tf.memory() once the backend is another, and when closed", () => {
    const engine = {
      backendName: "tensorflow" as string | null,
      state: { numBytes: 10, numTensors: 1, numDataBuffers: 1 },
    };
    const memoryState = { numBytes: 99, numTensors: 9 };
    const namespace: TfNamespace = { ...nodeBackendNamespace(memoryState), engine: () => engine };
    const collector = tfjsCollector(namespace);
    expect(collector.readSync()).toMatchObject({ reading: { allocator_allocated_bytes: 10 } });
    engine.backendName = "wasm";
    expect(collector.readSync()).toMatchObject({ reading: { allocator_allocated_bytes: 99 } });
    engine.backendName = "tensorflow";
    collector.close?.();
    expect(collector.readSync()).toMatchObject({ kind: "failure" });
  });

  it("uses tf.memory() where the engine has no counts, and on backends that add their own (webgl)", () => {
    const withoutCounts: TfNamespace = {
      ...nodeBackendNamespace({ numBytes: 7, numTensors: 1 }),
      engine: () => ({ backendName: "tensorflow", state: undefined as unknown as TfEngineState }),
    };
    expect(tfjsCollector(withoutCounts).readSync()).toMatchObject({
      reading: { allocator_allocated_bytes: 7 },
    });
    const webgl: TfNamespace = {
      ...webglNamespace({ inUse: 1000, allocated: 5000, free: 4000 }),
      engine: () => ({ backendName: "webgl", state: { numBytes: 1, numTensors: 1, numDataBuffers: 1 } }),
    };
    expect(tfjsCollector(webgl).readSync()).toMatchObject({
      reading: { allocator_allocated_bytes: 1100, allocator_reserved_bytes: 5000 },
      metadata: { tfjs_gpu_bytes_in_use: 1000 },
    });
  });
});

describe("tfjsCollector on the webgl backend (memory() shape)", () => {
  it("reports allocated textures as reserved and the in-use/free split in metadata", () => {
    const state = { inUse: 1000, allocated: 5000, free: 4000 };
    const collector = tfjsCollector(webglNamespace(state));
    expect(collector.deviceId).toBe(0);
    expect(collector.capabilities).toMatchObject({
      backend: "tfjs-webgl",
      sampling_source: "tf.memory+webgl_textures",
      supports_allocator_reserved: true,
    });
    expect(collector.sample()).toMatchObject({
      kind: "full",
      reading: { allocator_allocated_bytes: 1100, allocator_reserved_bytes: 5000 },
      metadata: { tfjs_gpu_bytes_in_use: 1000, tfjs_gpu_bytes_free: 4000 },
    });
    // Bytes grow while tensor counts stay flat: the texture cache (tensorflow/tfjs#4129).
    state.allocated = 9000;
    state.free = 8000;
    expect(collector.sample()).toMatchObject({ reading: { allocator_reserved_bytes: 9000 } });
  });

  it("reports a partial sample when the backend stops exposing allocated textures", () => {
    const ns = webglNamespace({ inUse: 10, allocated: 20, free: 10 });
    const collector = tfjsCollector(ns);
    const memory = ns.memory;
    ns.memory = () => ({ ...memory(), numBytesInGPUAllocated: undefined });
    const result = collector.sample();
    expect(result).toMatchObject({ kind: "partial", missing: ["allocator_reserved_bytes"] });
    if (result.kind === "partial") expect(result.reason).toMatch(/webgl_textures/);
  });
});
