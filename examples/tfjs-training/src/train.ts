import { stormlogCallback } from "@stormlog/adapter-tfjs";
import type { PhaseHost, PhaseScope } from "@stormlog/core";
import type { Logs, Optimizer, Scalar, Sequential, Tensor } from "@tensorflow/tfjs";
import type { TfNamespace } from "./tfjs.js";

type LayersModel = Sequential;

/** Sizes of the training job. The defaults train in about a second on one CPU core. */
export interface TrainConfig {
  readonly epochs: number;
  readonly batchesPerEpoch: number;
  readonly batchSize: number;
  readonly features: number;
  readonly hidden: number;
  readonly classes: number;
  /**
   * Plant a real leak: `backward` keeps a copy of a gradient in a global array every step (the bug
   * the analysis should find), while `load_batch` makes the batch's tensors itself and hands them to
   * the step, which disposes them (memory that looks kept at the loader's exit, but is not a leak).
   */
  readonly leak: boolean;
}

/** The example's default job. */
export const DEFAULT_CONFIG: TrainConfig = {
  epochs: 3,
  batchesPerEpoch: 25,
  batchSize: 64,
  features: 64,
  hidden: 128,
  classes: 10,
  leak: false,
};

/** One batch as a data loader hands it over: plain arrays, row-major. */
export interface Batch {
  readonly x: Float32Array;
  readonly y: Float32Array;
}

/**
 * Synthetic classification data: Gaussian inputs labelled by a fixed random linear "teacher", so
 * the model has something real to learn and the loss goes down. Deterministic (seeded).
 */
export class SyntheticData {
  private readonly teacher: Float32Array;
  private state: number;

  constructor(
    private readonly tf: TfNamespace,
    private readonly config: TrainConfig,
    seed = 42,
  ) {
    this.state = seed >>> 0;
    this.teacher = this.gaussian(config.features * config.classes, 0, 1);
  }

  /** A fresh batch of `config.batchSize` examples. */
  nextBatch(rows = this.config.batchSize): Batch {
    const { features, classes } = this.config;
    const x = this.gaussian(rows * features, 2, 3);
    const y = new Float32Array(rows * classes);
    for (let r = 0; r < rows; r++) {
      let best = 0;
      let bestScore = Number.NEGATIVE_INFINITY;
      for (let c = 0; c < classes; c++) {
        let score = 0;
        for (let f = 0; f < features; f++) score += x[r * features + f]! * this.teacher[f * classes + c]!;
        if (score > bestScore) {
          bestScore = score;
          best = c;
        }
      }
      y[r * classes + best] = 1;
    }
    return { x, y };
  }

  /** `rows` examples as tensors, for `model.fit` (the caller disposes them). */
  tensors(rows: number): { xs: Tensor; ys: Tensor } {
    const { x, y } = this.nextBatch(rows);
    return {
      xs: this.tf.tensor2d(x, [rows, this.config.features]),
      ys: this.tf.tensor2d(y, [rows, this.config.classes]),
    };
  }

  /** Normal numbers (Box-Muller over a linear congruential generator). */
  private gaussian(count: number, mean: number, std: number): Float32Array {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) {
      const u = (this.next() + 1) / (2 ** 32 + 1);
      const v = this.next() / 2 ** 32;
      out[i] = mean + std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
    }
    return out;
  }

  private next(): number {
    this.state = (Math.imul(this.state, 1664525) + 1013904223) >>> 0;
    return this.state;
  }
}

/** The batch as tensors (the caller disposes them). */
function batchTensors(tf: TfNamespace, batch: Batch, config: TrainConfig): { xs: Tensor; ys: Tensor } {
  return {
    xs: tf.tensor2d(batch.x, [config.batchSize, config.features]),
    ys: tf.tensor2d(batch.y, [config.batchSize, config.classes]),
  };
}

/** With --leak: gradient copies kept "for debugging" and never disposed, one per step. */
export const keptGradients: Tensor[] = [];

/** A small MLP: features -> hidden -> hidden -> classes (logits). */
export function buildModel(tf: TfNamespace, config: TrainConfig): LayersModel {
  return tf.sequential({
    layers: [
      tf.layers.dense({ units: config.hidden, inputShape: [config.features], activation: "relu" }),
      tf.layers.dense({ units: config.hidden, activation: "relu" }),
      tf.layers.dense({ units: config.classes }),
    ],
  });
}

/** Lets timers run (the tracker's sampler among them) between steps of a synchronous backend. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** What a training run reports per epoch. */
export type EpochLogger = (epoch: number, loss: number) => void;

/**
 * The custom training loop: every step runs in `train` with four phases inside,
 * `load_batch`, `forward`, `backward` and `optimizer_step`. `host` is the tracker (or any phase host).
 */
export async function trainCustomLoop(
  tf: TfNamespace,
  host: PhaseHost,
  model: LayersModel,
  optimizer: Optimizer,
  data: SyntheticData,
  config: TrainConfig,
  onEpoch?: EpochLogger,
): Promise<void> {
  for (let epoch = 0; epoch < config.epochs; epoch++) {
    let lastLoss = Number.NaN;
    for (let batch = 0; batch < config.batchesPerEpoch; batch++) {
      const step = epoch * config.batchesPerEpoch + batch;
      const loss = host.phase("train", () => trainStep(tf, host, model, optimizer, data, config), {
        metadata: { epoch, step },
      });
      if (batch === config.batchesPerEpoch - 1) lastLoss = (await loss.data())[0] ?? Number.NaN;
      loss.dispose();
      await yieldToEventLoop();
    }
    onEpoch?.(epoch, lastLoss);
  }
}

/** One step of the custom loop; returns the loss (the caller disposes it). */
function trainStep(
  tf: TfNamespace,
  host: PhaseHost,
  model: LayersModel,
  optimizer: Optimizer,
  data: SyntheticData,
  config: TrainConfig,
): Tensor {
  // With --leak the loader makes the tensors itself; the step disposes them once backward is done.
  const loaded = host.phase("load_batch", () => {
    const batch = data.nextBatch();
    return config.leak ? batchTensors(tf, batch, config) : batch;
  });

  const forward = host.enterPhase("forward");
  const { xs, ys } = "xs" in loaded ? loaded : batchTensors(tf, loaded, config);
  // An intermediate tensor: the inputs standardised per batch. It must be disposed by hand.
  const features = tf.tidy(() => {
    const { mean, variance } = tf.moments(xs, 0);
    return tf.div(tf.sub(xs, mean), tf.sqrt(tf.add(variance, 1e-6)));
  });
  let backward: PhaseScope | undefined;
  // computeGradients runs the function (the forward pass), then backpropagates through it:
  // the phase switches from forward to backward where the function returns.
  const { value: loss, grads } = optimizer.computeGradients(() => {
    const logits = model.apply(features) as Tensor;
    const value = tf.losses.softmaxCrossEntropy(ys, logits) as Scalar;
    forward.close();
    backward = host.enterPhase("backward");
    return value;
  });
  // The bug --leak plants: a copy of the first layer's gradient kept every step, never disposed.
  const firstGradient = Object.values(grads)[0];
  if (config.leak && firstGradient !== undefined) keptGradients.push(firstGradient.clone());
  features.dispose();
  backward?.close();
  // The batch is not needed once the gradients exist: the step disposes it, wherever it was made.
  tf.dispose([xs, ys]);

  host.phase("optimizer_step", () => {
    optimizer.applyGradients(grads);
    tf.dispose(grads);
  });
  return loss;
}

/**
 * The same model trained through `model.fit`, with the adapter's callback: phases `fit`,
 * `fit / epoch` and `fit / epoch / batch`, without touching tfjs's loop.
 */
export async function trainWithFit(
  tf: TfNamespace,
  host: PhaseHost,
  model: LayersModel,
  data: SyntheticData,
  config: TrainConfig,
  onEpoch?: EpochLogger,
): Promise<void> {
  const { xs, ys } = data.tensors(config.batchSize * config.batchesPerEpoch);
  model.compile({
    optimizer: tf.train.adam(0.01),
    loss: (labels: Tensor, logits: Tensor) => tf.losses.softmaxCrossEntropy(labels, logits),
  });
  try {
    await model.fit(xs, ys, {
      epochs: Math.max(1, config.epochs - 1),
      batchSize: config.batchSize,
      shuffle: false,
      verbose: 0,
      callbacks: [
        stormlogCallback(host, { trainPhase: "fit" }),
        {
          onEpochEnd: async (epoch: number, logs?: Logs) =>
            onEpoch?.(epoch, Number(logs?.loss ?? Number.NaN)),
        },
      ],
    });
  } finally {
    tf.dispose([xs, ys]);
  }
}
