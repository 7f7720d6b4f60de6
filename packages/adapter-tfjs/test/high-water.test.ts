// The tfjs collector's high-water mark: the engine's byte count at its highest between two of the
// tracker's readings, so that a tensor made and disposed of inside a synchronous phase is seen.
import * as tf from "@tensorflow/tfjs";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { type TfjsCollector, type TfNamespace, type TfTrackedTensor, tfjsCollector } from "../src/index.js";
import { useCpuBackend } from "./support/cpu-backend.js";
import { NativeShapedEngine } from "./support/native-shaped-engine.js";

beforeAll(async () => {
  await useCpuBackend();
  await tf.ready();
});

const open: TfjsCollector[] = [];
afterEach(() => {
  for (const collector of open.splice(0)) collector.close();
});

function collector(options: Parameters<typeof tfjsCollector>[1] = {}, ns: TfNamespace = tf): TfjsCollector {
  const created = tfjsCollector(ns, options);
  open.push(created);
  return created;
}

const MB = 1 << 20;

describe("takeHighWater on the cpu backend", () => {
  it("returns the bytes of a tensor made and disposed of since the last call, once", () => {
    const c = collector();
    const base = tf.memory().numBytes;
    expect(c.takeHighWater()).toBeNull();
    const big = tf.zeros([4 * MB]); // 16 MiB
    big.dispose();
    expect(c.takeHighWater()).toEqual({ allocator_allocated_bytes: base + 16 * MB });
    // A new window: nothing happened in it.
    expect(c.takeHighWater()).toBeNull();
  });

  it("finds the highest of several transients, including those made by kernels", () => {
    const c = collector();
    const base = tf.memory().numBytes;
    c.takeHighWater();
    tf.tidy(() => {
      const a = tf.ones([MB]); // 4 MiB
      const b = tf.add(a, a); // 4 MiB more
      return tf.sum(b);
    }).dispose();
    tf.zeros([MB / 2]).dispose();
    // a, b and the sum's scalar output (tidy keeps it) live together at the top.
    expect(c.takeHighWater()).toEqual({ allocator_allocated_bytes: base + 8 * MB + 4 });
  });

  it("returns null where a reading at either end of the window shows the top", () => {
    const c = collector();
    c.takeHighWater();
    const kept = tf.zeros([MB]);
    // Rose and stayed: the reading now shows it.
    expect(c.takeHighWater()).toBeNull();
    kept.dispose();
    // Fell: the previous reading showed it.
    expect(c.takeHighWater()).toBeNull();
  });

  it("keeps a window per collector: each sees a transient in its own window", () => {
    const first = collector();
    const second = collector();
    const base = tf.memory().numBytes;
    first.takeHighWater();
    second.takeHighWater();
    tf.zeros([MB]).dispose();
    expect(first.takeHighWater()).toEqual({ allocator_allocated_bytes: base + 4 * MB });
    tf.zeros([MB / 4]).dispose();
    // The second's window began before both transients; the first's only before the smaller one.
    expect(second.takeHighWater()).toEqual({ allocator_allocated_bytes: base + 4 * MB });
    expect(first.takeHighWater()).toEqual({ allocator_allocated_bytes: base + MB });
  });

  it("starts a collector's window when it is made: an earlier transient is not its own", () => {
    const early = collector();
    const base = tf.memory().numBytes;
    early.takeHighWater();
    tf.zeros([MB]).dispose();
    const late = collector();
    expect(late.takeHighWater()).toBeNull();
    expect(early.takeHighWater()).toEqual({ allocator_allocated_bytes: base + 4 * MB });
  });

  it("returns null without attribution (the engine is left alone) and once closed", () => {
    const off = collector({ attribution: false });
    tf.zeros([MB]).dispose();
    expect(off.takeHighWater()).toBeNull();
    const on = collector();
    on.close();
    tf.zeros([MB]).dispose();
    expect(on.takeHighWater()).toBeNull();
  });
});

describe("takeHighWater on an engine shaped like tfjs-node's", () => {
  it("follows the byte count of the engine tfjs-node registers its backend with", () => {
    const engine = new NativeShapedEngine();
    const c = collector(
      {},
      {
        getBackend: () => "tensorflow",
        backend: () => ({ isUsingGpuDevice: true }),
        memory: () => ({ ...engine.state }),
        engine: () => engine,
      },
    );
    const tensor = (id: number, size: number): TfTrackedTensor => ({
      id,
      dtype: "float32",
      shape: [size],
      size,
      dataId: {},
    });
    const weights = tensor(1, 1000);
    engine.trackTensor(weights);
    expect(c.takeHighWater()).toBeNull();
    const activations = [tensor(2, 5000), tensor(3, 5000)];
    for (const t of activations) engine.trackTensor(t);
    for (const t of activations) engine.disposeTensor(t);
    expect(c.takeHighWater()).toEqual({ allocator_allocated_bytes: 44_000 });
    // engine.reset() gives the engine a new state: its count starts again, and a top reached before
    // the reset still belongs to the window open across it, once.
    const scratch = tensor(4, 20_000);
    engine.trackTensor(scratch);
    engine.disposeTensor(scratch);
    engine.state = { numBytes: 0, numTensors: 0, numDataBuffers: 0 };
    engine.trackTensor(tensor(5, 10));
    expect(c.takeHighWater()).toEqual({ allocator_allocated_bytes: 84_000 });
    engine.trackTensor(tensor(6, 10));
    expect(c.takeHighWater()).toBeNull();
  });
});
