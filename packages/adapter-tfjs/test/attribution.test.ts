import type { JsonObject, SampleResult } from "@stormlog/core";
import * as tf from "@tensorflow/tfjs";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  type LivePhaseTensors,
  type TfjsCollector,
  type TfjsCollectorOptions,
  type TfNamespace,
  type TfTrackedTensor,
  tfjsCollector,
} from "../src/index.js";
import { asyncPhases } from "./support/async-phases.js";
import { useCpuBackend } from "./support/cpu-backend.js";
import { NativeShapedEngine } from "./support/native-shaped-engine.js";

/** The engine's own methods, read before any collector of this file wraps them. */
let engineMethods: { trackTensor: unknown; disposeTensor: unknown };
beforeAll(async () => {
  await useCpuBackend();
  await tf.ready();
  const engine = tf.engine();
  engineMethods = { trackTensor: engine.trackTensor, disposeTensor: engine.disposeTensor };
});

const open: TfjsCollector[] = [];
const kept: tf.Tensor[] = [];
afterEach(() => {
  for (const collector of open.splice(0)) collector.close();
  tf.dispose(kept.splice(0));
});

function collector(options: TfjsCollectorOptions = {}, ns: TfNamespace = tf): TfjsCollector {
  const created = tfjsCollector(ns, options);
  open.push(created);
  return created;
}

function metadataOf(result: SampleResult): JsonObject {
  if (result.kind === "failure") throw new Error(result.error);
  return result.metadata ?? {};
}

/** `tfjs_live_by_phase` of a sample. */
function live(c: TfjsCollector): Record<string, LivePhaseTensors> {
  const metadata = metadataOf(c.sample());
  expect(metadata.tfjs_attribution).toBe("birth_phase");
  return metadata.tfjs_live_by_phase as unknown as Record<string, LivePhaseTensors>;
}

/** Live tensors per path, for compact assertions. */
function counts(c: TfjsCollector): Record<string, number> {
  return Object.fromEntries(Object.entries(live(c)).map(([path, value]) => [path, value.tensors]));
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("birth-phase attribution on the cpu backend", () => {
  it("attributes tensors to the phase they were born in, through nested sync and async phases", async () => {
    const phases = asyncPhases();
    const c = collector();
    c.bindPhases(phases);
    expect(c.attribution).toBe(true);

    kept.push(tf.zeros([2]));
    await phases.phase("train", async () => {
      kept.push(tf.zeros([3]));
      phases.phase("load_batch", () => kept.push(tf.zeros([4]), tf.ones([4])));
      await tick();
      // Two async phases running at once: each keeps its own path across its awaits.
      await Promise.all([
        phases.phase("forward", async () => {
          await tick();
          kept.push(tf.zeros([5]));
          await tick();
          kept.push(tf.zeros([5]));
        }),
        phases.phase("backward", async () => {
          kept.push(tf.zeros([6]));
          await tick();
          phases.phase("clip", () => kept.push(tf.zeros([7])));
          await tick();
          kept.push(tf.zeros([6]));
        }),
      ]);
      kept.push(tf.zeros([8]));
    });

    expect(counts(c)).toEqual({
      "": 1,
      train: 2,
      "train / load_batch": 2,
      "train / forward": 2,
      "train / backward": 2,
      "train / backward / clip": 1,
    });
    const byPath = live(c);
    expect(byPath["train / forward"]).toEqual({
      tensors: 2,
      bytes: 40,
      largest: [{ dtype: "float32", shape: [5], bytes: 40, count: 2 }],
    });
    expect(byPath.train?.largest.map((group) => group.shape)).toEqual([[8], [3]]);
    // Every live tensor of the engine is accounted for once.
    const total = Object.values(byPath).reduce((sum, value) => sum + value.tensors, 0);
    expect(total).toBe(kept.length);
  });

  it("drops tensors disposed by dispose(), tf.tidy and tf.dispose, and keeps survivors under their birth phase", () => {
    let path = "";
    const c = collector();
    c.bindPhases({ currentPhasePath: () => path });

    path = "step / forward";
    const single = tf.zeros([16]);
    const pair = [tf.zeros([16]), tf.ones([16])];
    // tidy disposes its intermediates; what it returns lives on.
    const result = tf.tidy(() => tf.add(tf.mul(single, 2), tf.ones([16])).sum());
    const survivor = tf.ones([32]);
    expect(counts(c)).toEqual({ "step / forward": 5 });

    path = "step / backward";
    single.dispose();
    tf.dispose(pair);
    expect(counts(c)).toEqual({ "step / forward": 2 });
    result.dispose();

    // A tensor kept across steps stays under the phase it was born in, whatever runs later.
    for (const phase of ["step / optimizer", "next / forward", ""]) {
      path = phase;
      tf.tidy(() => {
        tf.square(survivor).sum();
      });
      expect(live(c)).toEqual({
        "step / forward": {
          tensors: 1,
          bytes: 128,
          largest: [{ dtype: "float32", shape: [32], bytes: 128, count: 1 }],
        },
      });
    }
    survivor.dispose();
    expect(live(c)).toEqual({});
  });

  it("reports at most three (dtype, shape) groups per phase, largest total bytes first", () => {
    const c = collector();
    c.bindPhases({ currentPhasePath: () => "train / backward" });
    kept.push(tf.zeros([2048, 2048]));
    kept.push(tf.zeros([1024, 1024]), tf.zeros([1024, 1024]), tf.zeros([1024, 1024]));
    kept.push(tf.zeros([100, 10], "int32"));
    kept.push(...Array.from({ length: 5 }, () => tf.zeros([10, 10], "bool")));
    kept.push(tf.zeros([3]));

    const phase = live(c)["train / backward"];
    expect(phase).toEqual({
      tensors: 11,
      bytes: 2048 * 2048 * 4 + 3 * 1024 * 1024 * 4 + 100 * 10 * 4 + 5 * 100 + 12,
      largest: [
        { dtype: "float32", shape: [2048, 2048], bytes: 2048 * 2048 * 4, count: 1 },
        { dtype: "float32", shape: [1024, 1024], bytes: 3 * 1024 * 1024 * 4, count: 3 },
        { dtype: "int32", shape: [100, 10], bytes: 4000, count: 1 },
      ],
    });
    // The groups follow disposal: the single large tensor goes, the three smaller ones now lead.
    kept.shift()?.dispose();
    expect(live(c)["train / backward"]?.largest[0]).toEqual({
      dtype: "float32",
      shape: [1024, 1024],
      bytes: 3 * 1024 * 1024 * 4,
      count: 3,
    });
    expect(live(c)["train / backward"]?.largest[2]).toEqual({
      dtype: "bool",
      shape: [10, 10],
      bytes: 500,
      count: 5,
    });
  });

  it("counts the bytes tfjs counts: strings as written, high ranks with their whole shape", () => {
    const c = collector();
    c.bindPhases({ currentPhasePath: () => "tokenize" });
    const before = tf.memory().numBytes;
    kept.push(tf.tensor(["abc", "de"]), tf.zeros([1, 2, 1, 2, 1, 2, 3]), tf.complex([1, 2], [3, 4]));
    const phase = live(c).tokenize;
    const engineBytes = tf.memory().numBytes - before;
    // complex64 inputs are tracked tensors of their own and counted once, as tfjs does.
    expect(phase?.bytes).toBe(engineBytes);
    expect(phase?.largest).toContainEqual({ dtype: "string", shape: [2], bytes: 5, count: 1 });
    expect(phase?.largest).toContainEqual({
      dtype: "float32",
      shape: [1, 2, 1, 2, 1, 2, 3],
      bytes: 96,
      count: 1,
    });
  });

  it("keeps a variable under its birth phase when assign() replaces its value", () => {
    let path = "build";
    const c = collector();
    c.bindPhases({ currentPhasePath: () => path });
    const weights = tf.variable(tf.zeros([8, 8]));
    kept.push(weights);
    path = "train / optimizer_step";
    tf.tidy(() => weights.assign(tf.ones([8, 8])));
    // The variable keeps `build`; the zeros it was made from were never disposed (a leak of `build`).
    expect(counts(c)).toEqual({ build: 2 });
    expect(live(c).build?.largest).toEqual([{ dtype: "float32", shape: [8, 8], bytes: 512, count: 2 }]);
  });

  it("shows a tensor leaked in backward growing each step, and none for a loader whose tensor the step disposes", () => {
    const phases = asyncPhases();
    const c = collector();
    c.bindPhases(phases);
    const leaked: tf.Tensor[] = [];
    const history: Record<string, LivePhaseTensors>[] = [];
    for (let step = 0; step < 5; step++) {
      phases.phase("train", () => {
        const batch = phases.phase("load_batch", () => tf.randomNormal([64, 32]));
        const loss = phases.phase("backward", () =>
          tf.tidy(() => {
            leaked.push(tf.keep(tf.zeros([256, 256]))); // the leak: kept forever, one per step
            return tf.mean(tf.square(batch));
          }),
        );
        batch.dispose(); // the parent disposes what the loader returned: not a leak
        loss.dispose();
      });
      history.push(live(c));
    }
    kept.push(...leaked);
    expect(history.map((sample) => sample["train / backward"]?.tensors)).toEqual([1, 2, 3, 4, 5]);
    expect(history.map((sample) => sample["train / backward"]?.bytes)).toEqual(
      [1, 2, 3, 4, 5].map((n) => n * 256 * 256 * 4),
    );
    expect(history.at(-1)?.["train / backward"]?.largest).toEqual([
      { dtype: "float32", shape: [256, 256], bytes: 5 * 256 * 256 * 4, count: 5 },
    ]);
    expect(history.every((sample) => sample["train / load_batch"] === undefined)).toBe(true);
    expect(history.every((sample) => sample.train === undefined)).toBe(true);
  });

  it("keeps phase boundaries cheap: readSync() carries no attribution", () => {
    const c = collector();
    c.bindPhases({ currentPhasePath: () => "forward" });
    kept.push(tf.zeros([4]));
    const boundary = metadataOf(c.readSync());
    expect(boundary.tfjs_live_by_phase).toBeUndefined();
    expect(boundary.tfjs_attribution).toBeUndefined();
    const sampled = metadataOf(c.sample());
    expect(sampled.tfjs_attribution).toBe("birth_phase");
    expect(Object.keys(sampled.tfjs_live_by_phase as JsonObject)).toEqual(["forward"]);
  });

  it("puts tensors under '' before any phase is bound, and leaves the engine alone when off", () => {
    const c = collector();
    kept.push(tf.zeros([4]));
    expect(counts(c)).toEqual({ "": 1 });

    c.close();
    const off = collector({ attribution: false });
    expect(off.attribution).toBe(false);
    expect(tf.engine().trackTensor).toBe(engineMethods.trackTensor);
    const metadata = metadataOf(off.sample());
    expect(metadata.tfjs_live_by_phase).toBeUndefined();
    expect(metadata.tfjs_attribution).toBeUndefined();
  });

  it("wraps the engine once for several collectors and restores it when the last one closes", () => {
    const engine = tf.engine();
    const first = collector();
    const wrapped = engine.trackTensor;
    expect(wrapped).not.toBe(engineMethods.trackTensor);
    // Wrapped where tfjs defines it (the prototype): the engine's own shape is left as it is.
    expect(Object.hasOwn(engine, "trackTensor")).toBe(false);
    const second = collector();
    expect(engine.trackTensor).toBe(wrapped);
    first.bindPhases({ currentPhasePath: () => "a" });
    second.bindPhases({ currentPhasePath: () => "b" });
    kept.push(tf.zeros([4]));
    // One record per tensor, whichever collector reads it; the last bound context names the phase.
    expect(counts(first)).toEqual({ b: 1 });
    expect(counts(second)).toEqual({ b: 1 });

    second.close();
    expect(engine.trackTensor).toBe(wrapped);
    kept.push(tf.zeros([4]));
    // The closed collector's context no longer names phases; the remaining one's does.
    expect(counts(first)).toEqual({ a: 1, b: 1 });

    first.close();
    first.close();
    expect(engine.trackTensor).toBe(engineMethods.trackTensor);
    expect(engine.disposeTensor).toBe(engineMethods.disposeTensor);
    expect(Object.hasOwn(engine, "trackTensor")).toBe(false);
    expect(Object.hasOwn(engine, "disposeTensor")).toBe(false);
    expect(first.sample().kind).toBe("failure");

    // A fresh collector starts from the tensors born after it.
    const third = collector();
    expect(counts(third)).toEqual({});
  });

  it("never throws into training: a failing phase context stops attribution and samples say why", () => {
    const c = collector();
    c.bindPhases({
      currentPhasePath: () => {
        throw new Error("no phase here");
      },
    });
    const t = tf.zeros([4]);
    kept.push(t, tf.add(t, 1));
    expect(tf.memory().numTensors).toBeGreaterThanOrEqual(2);
    const metadata = metadataOf(c.sample());
    expect(metadata.tfjs_attribution_error).toMatch(/no phase here/);
    expect(metadata.tfjs_live_by_phase).toBeUndefined();
    expect(metadata.tfjs_num_tensors).toBe(tf.memory().numTensors);
  });

  it("says why when asked for attribution on a build without an engine, and samples still work", () => {
    const ns: TfNamespace = {
      getBackend: () => "tensorflow",
      backend: () => ({}),
      memory: () => ({ numBytes: 0, numTensors: 0, numDataBuffers: 0 }),
    };
    expect(collector({}, ns).attribution).toBe(false);
    expect(metadataOf(collector({}, ns).sample()).tfjs_attribution_error).toBeUndefined();
    const asked = collector({ attribution: true }, ns);
    expect(metadataOf(asked.sample()).tfjs_attribution_error).toMatch(/tf\.engine\(\) is not available/);
  });

  it("works on any engine of the same shape (tfjs-node's tensorflow backend uses tfjs-core's engine)", () => {
    // tfjs-node registers its backend with the same Engine class: only the backend differs.
    const FakeEngine = NativeShapedEngine;
    const engine = new FakeEngine();
    const original = FakeEngine.prototype.trackTensor;
    const originalDispose = FakeEngine.prototype.disposeTensor;
    const ns: TfNamespace = {
      getBackend: () => "tensorflow",
      backend: () => ({ isUsingGpuDevice: false }),
      memory: () => ({ ...engine.state }),
      engine: () => engine,
    };
    const c = collector({}, ns);
    c.bindPhases({ currentPhasePath: () => "infer" });
    const tensor = (id: number): TfTrackedTensor => ({
      id,
      dtype: "float32",
      shape: [2, 3],
      size: 6,
      dataId: {},
    });
    const tensors = Array.from({ length: 3000 }, (_, i) => tensor(i));
    for (const t of tensors) engine.trackTensor(t);
    for (const t of tensors.slice(0, 2000)) engine.disposeTensor(t);
    expect(engine.state.numTensors).toBe(1000);
    expect(live(c)).toEqual({
      infer: {
        tensors: 1000,
        bytes: 24_000,
        largest: [{ dtype: "float32", shape: [2, 3], bytes: 24_000, count: 1000 }],
      },
    });
    expect(FakeEngine.prototype.trackTensor).not.toBe(original);
    c.close();
    expect(FakeEngine.prototype.trackTensor).toBe(original);

    // Two engines of one class: each collector sees its own engine's tensors only, and the
    // prototype gets its methods back whichever collector closes first.
    for (const closeFirst of [0, 1]) {
      const engines = [new FakeEngine(), new FakeEngine()];
      const collectors = engines.map((e, i) => {
        const made = collector({}, { ...ns, memory: () => ({ ...e.state }), engine: () => e });
        made.bindPhases({ currentPhasePath: () => `engine ${i}` });
        return made;
      });
      engines[0]?.trackTensor(tensor(10_000));
      engines[1]?.trackTensor(tensor(10_001));
      engines[1]?.trackTensor(tensor(10_002));
      expect(collectors.map((made) => counts(made))).toEqual([{ "engine 0": 1 }, { "engine 1": 2 }]);
      collectors[closeFirst]?.close();
      engines[1 - closeFirst]?.trackTensor(tensor(10_003));
      expect(counts(collectors[1 - closeFirst] as TfjsCollector)[`engine ${1 - closeFirst}`]).toBe(
        closeFirst === 0 ? 3 : 2,
      );
      collectors[1 - closeFirst]?.close();
      expect(FakeEngine.prototype.trackTensor).toBe(original);
      expect(FakeEngine.prototype.disposeTensor).toBe(originalDispose);
    }
  });
});

/** An engine of tfjs's shape whose tensors the test makes by id, and a collector attributing on it. */
function fakeEngine() {
  class Engine {
    backendName = "cpu";
    state = { numBytes: 0, numTensors: 0, numDataBuffers: 0 };
    trackTensor(_tensor: TfTrackedTensor): void {
      this.state.numTensors++;
    }
    disposeTensor(_tensor: TfTrackedTensor): void {
      this.state.numTensors--;
    }
  }
  const engine = new Engine();
  const ns: TfNamespace = {
    getBackend: () => "cpu",
    backend: () => ({}),
    memory: () => ({ ...engine.state }),
    engine: () => engine,
  };
  const tensor = (id: number, shape: number[] = [2, 3]): TfTrackedTensor => ({
    id,
    dtype: "float32",
    shape,
    size: shape.reduce((product, dim) => product * dim, 1),
    dataId: {},
  });
  return { engine, ns, tensor };
}

describe("birth-phase attribution's table of live tensors (tensor ids in order, as tfjs makes them)", () => {
  it("keeps a long-lived tensor whose slot a much newer id takes, and an older id that arrives after a newer one", () => {
    const { engine, ns, tensor } = fakeEngine();
    let path = "build";
    const c = collector({}, ns);
    c.bindPhases({ currentPhasePath: () => path });
    // Ids 2^20 apart share a slot in any table of up to 2^20 slots.
    const apart = 1 << 20;
    const weights = Array.from({ length: 8 }, (_, i) => tensor(i, [i + 1]));
    for (const w of weights) engine.trackTensor(w);
    path = "step";
    const newer = Array.from({ length: 8 }, (_, i) => tensor(5 * apart + i, [4, 4]));
    for (const t of newer) engine.trackTensor(t);
    // Older than the newer tensors in its slot, tracked after them (an engine that numbers otherwise).
    const late = tensor(3 * apart, [7]);
    engine.trackTensor(late);
    expect(live(c)).toEqual({
      step: {
        tensors: 9,
        bytes: 8 * 64 + 28,
        largest: [
          { dtype: "float32", shape: [4, 4], bytes: 512, count: 8 },
          { dtype: "float32", shape: [7], bytes: 28, count: 1 },
        ],
      },
      build: {
        tensors: 8,
        bytes: 4 * 36,
        largest: [
          { dtype: "float32", shape: [8], bytes: 32, count: 1 },
          { dtype: "float32", shape: [7], bytes: 28, count: 1 },
          { dtype: "float32", shape: [6], bytes: 24, count: 1 },
        ],
      },
    });

    // Variable.assign() on a displaced tensor: disposed and tracked again, it keeps its birth phase.
    engine.disposeTensor(weights[7] as TfTrackedTensor);
    engine.trackTensor(weights[7] as TfTrackedTensor);
    for (const t of newer) engine.disposeTensor(t);
    engine.disposeTensor(late);
    expect(counts(c)).toEqual({ build: 8 });
    for (const w of weights.slice(0, 6)) engine.disposeTensor(w);
    expect(live(c)).toEqual({
      build: {
        tensors: 2,
        bytes: 60,
        largest: [
          { dtype: "float32", shape: [8], bytes: 32, count: 1 },
          { dtype: "float32", shape: [7], bytes: 28, count: 1 },
        ],
      },
    });
    // A new tensor reuses the slot of a disposed one; the ones displaced from it stay.
    path = "next";
    engine.trackTensor(tensor(9 * apart + 7, [1]));
    expect(counts(c)).toEqual({ build: 2, next: 1 });
  });

  it("stays exact while the table grows: thousands of long-lived tensors under a stream of short-lived ones", () => {
    const { engine, ns, tensor } = fakeEngine();
    let path = "build";
    const c = collector({}, ns);
    c.bindPhases({ currentPhasePath: () => path });
    let id = 0;
    const weights = Array.from({ length: 5000 }, () => tensor(id++, [4]));
    for (const w of weights) engine.trackTensor(w);
    path = "step";
    const window: TfTrackedTensor[] = [];
    for (let i = 0; i < 30_000; i++) {
      const t = tensor(id++, [3]);
      engine.trackTensor(t);
      window.push(t);
      if (window.length > 50) engine.disposeTensor(window.shift() as TfTrackedTensor);
      // Every 1000th tensor lives on, as a leak would.
      if (i % 1000 === 0) window.pop();
    }
    expect(live(c)).toEqual({
      build: {
        tensors: 5000,
        bytes: 80_000,
        largest: [{ dtype: "float32", shape: [4], bytes: 80_000, count: 5000 }],
      },
      step: {
        tensors: 80,
        bytes: 80 * 12,
        largest: [{ dtype: "float32", shape: [3], bytes: 80 * 12, count: 80 }],
      },
    });
    for (const w of weights) engine.disposeTensor(w);
    for (const t of window) engine.disposeTensor(t);
    expect(counts(c)).toEqual({ step: 30 });
  });
});

describe("live() returns its previous result while it stays the same", () => {
  it("returns the same object until the live tensors change, then a new one that keeps unchanged phases' objects", () => {
    let path = "build";
    const c = collector();
    c.bindPhases({ currentPhasePath: () => path });
    const weights = tf.variable(tf.zeros([8, 8]));
    kept.push(weights);
    path = "train";
    kept.push(tf.ones([4]));
    const first = live(c);
    expect(live(c)).toBe(first);

    // A step: tensors made and disposed, a variable assigned: the same live tensors.
    tf.tidy(() => {
      weights.assign(tf.add(weights, 1));
      tf.square(tf.ones([16]));
    });
    expect(live(c)).toBe(first);

    // One more live tensor: a new result; the phase it did not touch keeps its object.
    const extra = tf.zeros([4]);
    const second = live(c);
    expect(second).not.toBe(first);
    expect(second.train?.tensors).toBe(2);
    expect(second.build).toBe(first.build);
    expect(live(c)).toBe(second);

    // Back to the first tensors: equal to the first result, but not the previous call's, so a new object.
    extra.dispose();
    const third = live(c);
    expect(third).not.toBe(second);
    expect(third).toEqual(first);
    expect(live(c)).toBe(third);
  });

  it("compares the new result with the previous one when the tensors changed but the result did not", () => {
    let path = "tokenize";
    const c = collector();
    c.bindPhases({ currentPhasePath: () => path });
    // A string's bytes are read from tfjs at each sample: the result is computed and compared.
    kept.push(tf.tensor(["abc", "de"]), tf.zeros([3]));
    const first = live(c);
    path = "train";
    tf.dispose(tf.ones([3]));
    const disposedAndMadeAgain = tf.zeros([5]);
    disposedAndMadeAgain.dispose();
    expect(live(c)).toBe(first);
    // The same ids tracked again with another shape (a fake engine may): a new result.
    const { engine, ns, tensor } = fakeEngine();
    const fake = collector({}, ns);
    fake.bindPhases({ currentPhasePath: () => "infer" });
    engine.trackTensor(tensor(1, [2, 3]));
    const before = live(fake);
    engine.disposeTensor(tensor(1, [2, 3]));
    engine.trackTensor(tensor(1, [3, 2]));
    const after = live(fake);
    expect(after).not.toBe(before);
    expect(after.infer?.largest).toEqual([{ dtype: "float32", shape: [3, 2], bytes: 24, count: 1 }]);
  });
});
