/**
 * One rank of the job. Its identity comes from the launcher's environment (RANK, LOCAL_RANK,
 * WORLD_SIZE, TORCHELASTIC_RUN_ID), as from torchrun; it trains a small MLP and records into its
 * own directory under the shared sink root.
 */

import { tfjsCollector } from "@stormlog/adapter-tfjs";
import { sinkDirectoryForProcess } from "@stormlog/sink";
import { MemoryTracker } from "@stormlog/tracker";
import * as tf from "@tensorflow/tfjs";
import {
  type JobPlan,
  PLAN_ENV,
  SINK_ROOT_ENV,
  type StartMessage,
  type TrackMessage,
  type WorkerMessage,
} from "./protocol.js";

const FEATURES = 32;
const HIDDEN = 64;
const CLASSES = 8;
const BATCH = 32;

const plan = JSON.parse(process.env[PLAN_ENV] ?? "null") as JobPlan | null;
const sinkRoot = process.env[SINK_ROOT_ENV];
if (plan === null || sinkRoot === undefined || process.send === undefined) {
  console.error("worker.ts is started by launcher.ts: run `pnpm start` instead");
  process.exit(1);
}
const send = (message: WorkerMessage) => process.send?.(message);
/** The launcher's next message of `type`. */
const next = <T extends TrackMessage | StartMessage>(type: T["type"]) =>
  new Promise<T>((resolve) => {
    const listener = (message: T) => {
      if (message.type !== type) return;
      process.off("message", listener);
      resolve(message);
    };
    process.on("message", listener);
  });

tf.enableProdMode();
await tf.ready();

// One directory per process under the shared root: ranks write at the same time without locks.
const rank = Number(process.env.RANK ?? 0);
const sinkDir = sinkDirectoryForProcess(sinkRoot, { rank });
// The tracker reads RANK, LOCAL_RANK, WORLD_SIZE and TORCHELASTIC_RUN_ID from the environment.
// Only the tfjs collector: on the cpu backend the tensor bytes are this rank's "device". Schema v3
// records derive device_used_bytes from them (with the process collector, RSS would take over
// device_used), and device_used_bytes is what the cross-rank analysis compares. On GPUs, give each
// rank its own device and add the NVML collector of @stormlog/adapter-cuda.
const tracker = new MemoryTracker({
  collectors: [tfjsCollector(tf)],
  samplingIntervalMs: plan.samplingIntervalMs,
  sink: { rootDir: sinkDir },
});

const model = tf.sequential({
  layers: [
    tf.layers.dense({ units: HIDDEN, inputShape: [FEATURES], activation: "relu" }),
    tf.layers.dense({ units: CLASSES }),
  ],
});
const optimizer = tf.train.sgd(0.05);
const teacher = tf.randomNormal([FEATURES, CLASSES], 0, 1, "float32", 7);

const sleepUntil = (epochMs: number) =>
  new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, epochMs - Date.now())));

// Every rank starts tracking at one moment (see TrackMessage), and before reporting ready, so that
// its tracker (and its sink worker) is running when the synchronized steps begin.
const tracking = next<TrackMessage>("track");
send({ type: "loaded", rank });
await sleepUntil((await tracking).trackAtMs);
await tracker.start();

const starting = next<StartMessage>("start");
send({ type: "ready", rank });
const { startAtMs } = await starting;

await sleepUntil(startAtMs);

/** Buffers this rank keeps for the rest of the run (its gradient bucket). */
const kept: tf.Tensor[] = [];
const bufferStep = rank === plan.earlyRank ? plan.earlyStep : plan.bufferStep;
let peakTensorBytes = 0;

for (let step = 0; step < plan.steps; step++) {
  const train = tracker.enterPhase("train", { metadata: { step } });
  const { xs, ys } = tracker.phase("load_batch", () =>
    tf.tidy(() => {
      const x = tf.randomNormal([BATCH, FEATURES]);
      return { xs: x, ys: tf.oneHot(tf.argMax(tf.matMul(x, teacher), 1).toInt(), CLASSES) };
    }),
  );
  const forward = tracker.enterPhase("forward");
  let backward = forward;
  const { value: loss, grads } = optimizer.computeGradients(() => {
    const value = tf.losses.softmaxCrossEntropy(ys, model.apply(xs) as tf.Tensor) as tf.Scalar;
    forward.close();
    backward = tracker.enterPhase("backward");
    return value;
  });
  if (step === bufferStep) {
    // The gradient bucket of the all-reduce, allocated once and kept.
    kept.push(tf.zeros([plan.bufferBytes / 4], "float32"));
    // Read now, inside backward: on a loaded machine the step may overrun its 100 ms and leave no wait
    // for the sampler's timer before backward closes (the spike was then first seen outside any phase).
    await tracker.sampleNow();
  }
  // The all-reduce: every rank waits here for the slowest one, until the step's end.
  await sleepUntil(startAtMs + (step + 1) * plan.stepMs - 5);
  backward.close();
  tracker.phase("optimizer_step", () => {
    optimizer.applyGradients(grads);
    tf.dispose(grads);
  });
  tf.dispose([xs, ys, loss]);
  peakTensorBytes = Math.max(peakTensorBytes, tf.memory().numBytes);
  train.close();
  await sleepUntil(startAtMs + (step + 1) * plan.stepMs);
}

await tracker.stop();
tf.dispose(kept);
send({
  type: "done",
  rank,
  steps: plan.steps,
  sessionId: tracker.getSessionSummary()?.session_id ?? "",
  sinkDir,
  peakTensorBytes,
});
process.disconnect();
