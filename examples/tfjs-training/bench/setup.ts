/** What both benchmarks train and how they track it: the example's model, and the goal's tracker settings. */
import { tfjsCollector } from "@stormlog/adapter-tfjs";
import type { Scheduler } from "@stormlog/core";
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

/** The goal's sampling interval. */
export const BENCH_SAMPLING_INTERVAL_MS = 100;

/** Where a bench tracker writes, and the timers it runs on. */
export interface BenchTrackerOptions {
  /** The sink's root directory; none: the tracker writes nothing. */
  readonly sinkDir?: string;
  readonly sinkThread?: "worker" | "main";
  readonly scheduler?: Scheduler;
}

/** A tracker as the overhead goal sets it: tfjs and process collectors, 100 ms sampling, a sink when given. */
export function benchTracker(tf: TfNamespace, options: BenchTrackerOptions = {}): MemoryTracker {
  const { sinkDir, sinkThread = "worker", scheduler } = options;
  return new MemoryTracker({
    collectors: [tfjsCollector(tf), processCollector()],
    samplingIntervalMs: BENCH_SAMPLING_INTERVAL_MS,
    ...(sinkDir === undefined ? {} : { sink: { rootDir: sinkDir }, sinkThread }),
    ...(scheduler === undefined ? {} : { scheduler }),
  });
}
