import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { stormlogCallback } from "../src/index.js";
import { useCpuBackend } from "./support/cpu-backend.js";
import { recordingHost } from "./support/recording-host.js";

beforeAll(async () => {
  await useCpuBackend();
  await tf.ready();
});

function tinyModel(): tf.Sequential {
  const model = tf.sequential();
  model.add(tf.layers.dense({ units: 1, inputShape: [2] }));
  model.compile({ optimizer: "sgd", loss: "meanSquaredError" });
  return model;
}

describe("stormlogCallback with model.fit", () => {
  it("opens an epoch phase per epoch and a batch phase per batch with their indices", async () => {
    const host = recordingHost();
    const model = tinyModel();
    const xs = tf.randomNormal([10, 2]);
    const ys = tf.randomNormal([10, 1]);
    await model.fit(xs, ys, { epochs: 2, batchSize: 4, verbose: 0, callbacks: [stormlogCallback(host)] });

    expect(host.entered()).toEqual([
      "epoch",
      "epoch / batch",
      "epoch / batch",
      "epoch / batch",
      "epoch",
      "epoch / batch",
      "epoch / batch",
      "epoch / batch",
    ]);
    const enters = host.boundaries.filter((b) => b.type === "enter");
    expect(enters.map((b) => b.attributes)).toEqual([
      { epoch: 0 },
      { batch: 0, epoch: 0 },
      { batch: 1, epoch: 0 },
      { batch: 2, epoch: 0 },
      { epoch: 1 },
      { batch: 0, epoch: 1 },
      { batch: 1, epoch: 1 },
      { batch: 2, epoch: 1 },
    ]);
    // Every phase closed, each batch before its epoch.
    expect(host.openPaths()).toEqual([]);
    expect(host.boundaries.filter((b) => b.type === "exit")).toHaveLength(8);
    expect(host.boundaries.slice(0, 8).map((b) => `${b.type} ${b.path.join(" / ")}`)).toEqual([
      "enter epoch",
      "enter epoch / batch",
      "exit epoch / batch",
      "enter epoch / batch",
      "exit epoch / batch",
      "enter epoch / batch",
      "exit epoch / batch",
      "exit epoch",
    ]);
    tf.dispose([xs, ys]);
    model.dispose();
  });

  it("works next to a tfjs BaseCallback in the same array, and with a train phase", async () => {
    const host = recordingHost();
    const model = tinyModel();
    const xs = tf.randomNormal([8, 2]);
    const ys = tf.randomNormal([8, 1]);
    const earlyStop = tf.callbacks.earlyStopping({ monitor: "loss", patience: 50 });
    await model.fit(xs, ys, {
      epochs: 2,
      batchSize: 8,
      verbose: 0,
      callbacks: [earlyStop, stormlogCallback(host, { trainPhase: "fit", batchPhase: "step" })],
    });
    expect(host.entered()).toEqual([
      "fit",
      "fit / epoch",
      "fit / epoch / step",
      "fit / epoch",
      "fit / epoch / step",
    ]);
    expect(host.openPaths()).toEqual([]);
    tf.dispose([xs, ys]);
    model.dispose();
  });

  it("records the batch size that fitDataset passes at batch begin", async () => {
    const host = recordingHost();
    const model = tinyModel();
    const data = tf.data
      .array([...Array(5).keys()].map((i) => ({ xs: [i, i + 1], ys: [i] })))
      .map((d) => {
        const { xs, ys } = d as { xs: number[]; ys: number[] };
        return { xs: tf.tensor1d(xs), ys: tf.tensor1d(ys) };
      })
      .batch(3);
    await model.fitDataset(data, { epochs: 1, verbose: 0, callbacks: [stormlogCallback(host)] });
    expect(host.boundaries.filter((b) => b.type === "enter").map((b) => b.attributes)).toEqual([
      { epoch: 0 },
      { batch: 0, epoch: 0, size: 3 },
      { batch: 1, epoch: 0, size: 2 },
    ]);
    expect(host.openPaths()).toEqual([]);
    model.dispose();
  });

  it("opens epoch phases only when batch phases are off (fitDataset)", async () => {
    const host = recordingHost();
    const model = tinyModel();
    const data = tf.data
      .array([...Array(6).keys()].map((i) => ({ xs: [i, i + 1], ys: [i] })))
      .map((d) => {
        const { xs, ys } = d as { xs: number[]; ys: number[] };
        return { xs: tf.tensor1d(xs), ys: tf.tensor1d(ys) };
      })
      .batch(3);
    await model.fitDataset(data, {
      epochs: 3,
      verbose: 0,
      callbacks: stormlogCallback(host, { batchPhase: false }),
    });
    expect(host.entered()).toEqual(["epoch", "epoch", "epoch"]);
    expect(host.boundaries.filter((b) => b.type === "enter").map((b) => b.attributes)).toEqual([
      { epoch: 0 },
      { epoch: 1 },
      { epoch: 2 },
    ]);
    expect(host.openPaths()).toEqual([]);
    model.dispose();
  });

  it("closes the phases left open when fit() throws, on close() or dispose", async () => {
    const host = recordingHost();
    const callback = stormlogCallback(host);
    await callback.onEpochBegin(0);
    await callback.onBatchBegin(0, { batch: 0, size: 32 });
    expect(host.openPaths()).toEqual(["epoch", "epoch / batch"]);
    {
      using _scope = callback;
    }
    expect(host.openPaths()).toEqual([]);
    callback.close();
    expect(host.boundaries.filter((b) => b.type === "exit")).toHaveLength(2);
  });

  it("ignores `this`, since tfjs calls the hooks bound to its own wrapper", async () => {
    const host = recordingHost();
    const { onEpochBegin, onEpochEnd } = stormlogCallback(host);
    await onEpochBegin.call(undefined, 5);
    expect(host.openPaths()).toEqual(["epoch"]);
    await onEpochEnd.call(undefined, 5);
    expect(host.openPaths()).toEqual([]);
  });
});
