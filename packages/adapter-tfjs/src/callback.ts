import type { JsonObject, PhaseHost, PhaseScope } from "@stormlog/core";

/** Options of {@link stormlogCallback}. */
export interface StormlogCallbackOptions {
  /** Name of the per-epoch phase. Default `epoch`. */
  readonly epochPhase?: string;
  /** Name of the per-batch phase, or false for epoch phases only (many tiny batches). Default `batch`. */
  readonly batchPhase?: string | false;
  /** Name of a phase around the whole `fit()`, or false for none. Default false. */
  readonly trainPhase?: string | false;
}

/** Logs tfjs passes to callbacks (`{ batch, size }` at batch begin, losses and metrics at ends). */
export type TfjsCallbackLogs = Record<string, unknown>;

/**
 * A `model.fit()` / `model.fitDataset()` callback. It is shaped both as tfjs-layers'
 * `CustomCallbackArgs` (a plain object of hooks) and as a `BaseCallback` (`setParams`,
 * `setModel`), so it works alone or next to `tf.callbacks.earlyStopping()` in one array.
 * Its hooks ignore `this`, since tfjs calls them bound to its own wrapper.
 */
export interface StormlogFitCallback extends Disposable {
  onTrainBegin(logs?: TfjsCallbackLogs): Promise<void>;
  onTrainEnd(logs?: TfjsCallbackLogs): Promise<void>;
  onEpochBegin(epoch: number, logs?: TfjsCallbackLogs): Promise<void>;
  onEpochEnd(epoch: number, logs?: TfjsCallbackLogs): Promise<void>;
  onBatchBegin(batch: number, logs?: TfjsCallbackLogs): Promise<void>;
  onBatchEnd(batch: number, logs?: TfjsCallbackLogs): Promise<void>;
  setParams(params: unknown): void;
  setModel(model: unknown): void;
  /** Training parameters tfjs hands to `BaseCallback`s (epochs, samples, steps). */
  params: unknown;
  validationData: unknown;
  /** Closes the phases still open (after `fit()` threw). Also `using callback = ...`. */
  close(): void;
}

/**
 * Phases for the layers API without touching the training loop: each epoch runs in an `epoch`
 * phase with `{ epoch }` as attributes, and each batch in a `batch` phase inside it with
 * `{ epoch, batch, size }`.
 *
 * @example
 * await model.fit(xs, ys, { epochs: 3, callbacks: [stormlogCallback(tracker)] });
 */
export function stormlogCallback(
  host: PhaseHost,
  options: StormlogCallbackOptions = {},
): StormlogFitCallback {
  const epochPhase = options.epochPhase ?? "epoch";
  const batchPhase = options.batchPhase ?? "batch";
  const trainPhase = options.trainPhase ?? false;
  let trainScope: PhaseScope | undefined;
  let epochScope: PhaseScope | undefined;
  let batchScope: PhaseScope | undefined;
  let epochIndex: number | undefined;

  const closeBatch = () => {
    batchScope?.close();
    batchScope = undefined;
  };
  const closeEpoch = () => {
    closeBatch();
    epochScope?.close();
    epochScope = undefined;
  };
  const closeAll = () => {
    closeEpoch();
    trainScope?.close();
    trainScope = undefined;
  };

  return {
    params: {},
    validationData: undefined,
    setParams(params: unknown) {
      this.params = params;
    },
    setModel() {},
    async onTrainBegin() {
      closeAll();
      if (trainPhase !== false) trainScope = host.enterPhase(trainPhase);
    },
    async onTrainEnd() {
      closeAll();
    },
    async onEpochBegin(epoch: number) {
      closeEpoch();
      epochIndex = epoch;
      epochScope = host.enterPhase(epochPhase, { metadata: { epoch } });
    },
    async onEpochEnd() {
      closeEpoch();
    },
    async onBatchBegin(batch: number, logs?: TfjsCallbackLogs) {
      if (batchPhase === false) return;
      closeBatch();
      const metadata: JsonObject = { batch };
      if (epochIndex !== undefined) metadata.epoch = epochIndex;
      const size = logs?.size;
      if (typeof size === "number" && Number.isFinite(size)) metadata.size = size;
      batchScope = host.enterPhase(batchPhase, { metadata });
    },
    async onBatchEnd() {
      closeBatch();
    },
    close: closeAll,
    [Symbol.dispose]: closeAll,
  };
}
