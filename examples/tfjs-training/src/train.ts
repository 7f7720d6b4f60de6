import type { PhaseHost, PhaseScope } from "@stormlog/core";
import { stormlogCallback } from "@stormlog/adapter-tfjs";
import type { TfNamespace } from "./tfjs.js";

type Tensor = ReturnType<TfNamespace["tensor"]>;
type LayersModel = ReturnType<TfNamespace["sequential"]>;
type Optimizer = ReturnType<TfNamespace["train"]["adam"]>;

/** Sizes of the training job. The defaults train in about a second on one CPU core. */
export interface TrainConfig {
  readonly epochs: number;
  readonly batchesPerEpoch: number;
  readonly batchSize: number;
  readonly features: number;
  readonly hidden: number;
  readonly classes: number;
  /** Forget to dispose the standardised inputs in `forward` (the bug the analysis should find). */
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

/** One batch: inputs and one-hot labels. The caller disposes both. */
export interface Batch {
  readonly xs: Tensor;
  readonly ys: Tensor;
}

/**
 * Synthetic classification data: Gaussian inputs labelled by a fixed random linear "teacher", so
 * the model has something real to learn and the loss goes down.
 */
export class SyntheticData {
  private readonly teacher: Tensor;

  constructor(
    private readonly tf: TfNamespace,
    private readonly config: TrainConfig,
  ) {
    this.teacher = tf.randomNormal([config.features, config.classes], 0, 1, "float32", 42);
  }

  /** A fresh batch (the caller disposes it). */
  nextBatch(): Batch {
    const { tf, config } = this;
    return tf.tidy(() => {
      const xs = tf.randomNormal([config.batchSize, config.features], 2, 3);
      const labels = tf.argMax(tf.matMul(xs, this.teacher), 1);
      return { xs, ys: tf.oneHot(labels.toInt(), config.classes) };
    });
  }

  /** `count` examples at once, for `model.fit`. */
  dataset(count: number): Batch {
    const { tf, config } = this;
    return tf.tidy(() => {
      const xs = tf.randomNormal([count, config.features], 2, 3);
      const labels = tf.argMax(tf.matMul(xs, this.teacher), 1);
      return { xs, ys: tf.oneHot(labels.toInt(), config.classes) };
    });
  }

  dispose(): void {
    this.teacher.dispose();
  }
}

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
  const { xs, ys } = host.phase("load_batch", () => data.nextBatch());

  const forward = host.enterPhase("forward");
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
    const value = tf.losses.softmaxCrossEntropy(ys, logits) as ReturnType<TfNamespace["scalar"]>;
    forward.close();
    backward = host.enterPhase("backward");
    return value;
  });
  backward?.close();

  host.phase("optimizer_step", () => {
    optimizer.applyGradients(grads);
    tf.dispose(grads);
  });

  tf.dispose([xs, ys]);
  if (!config.leak) features.dispose(); // with --leak this line is "forgotten"
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
  const { xs, ys } = data.dataset(config.batchSize * config.batchesPerEpoch);
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
        { onEpochEnd: async (epoch, logs) => onEpoch?.(epoch, Number(logs?.loss ?? Number.NaN)) },
      ],
    });
  } finally {
    tf.dispose([xs, ys]);
  }
}
