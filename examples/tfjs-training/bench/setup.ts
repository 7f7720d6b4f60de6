/** What both benchmarks train and how they track it: the example's model, and the goal's tracker settings. */
import { tfjsCollector } from "@stormlog/adapter-tfjs";
import { MemoryTracker, processCollector } from "@stormlog/tracker";
import { loadTensorFlow, type TfNamespace } from "../src/tfjs.js";
import { buildModel, DEFAULT_CONFIG, SyntheticData, type TrainConfig } from "../src/train.js";

/** The example's model, optimizer and data, for one epoch of `steps` batches. */
export async function benchTraining(steps: number) {
  const { tf, packageName } = await loadTensorFlow();
  const config: TrainConfig = { ...DEFAULT_CONFIG, epochs: 1, batchesPerEpoch: steps };
  const model = buildModel(tf, config);
  return {
    tf,
    packageName,
    config,
    model,
    optimizer: tf.train.adam(0.01),
    data: new SyntheticData(tf, config),
  };
}

/** A tracker as the overhead goal sets it: tfjs and process collectors, 100 ms sampling, a sink when given (on `sinkThread`). */
export function benchTracker(
  tf: TfNamespace,
  sinkDir?: string,
  sinkThread: "worker" | "main" = "worker",
): MemoryTracker {
  return new MemoryTracker({
    collectors: [tfjsCollector(tf), processCollector()],
    samplingIntervalMs: 100,
    ...(sinkDir === undefined ? {} : { sink: { rootDir: sinkDir }, sinkThread }),
  });
}
