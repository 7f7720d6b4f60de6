/** What both benchmarks train and how they track it: the example's model, and the goal's tracker settings. */

import { join } from "node:path";
import { pathToFileURL } from "node:url";
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
  /** The tfjs collector's birth-phase attribution and the tracker's leak alerts (default: on, as for users). */
  readonly leakEvidence?: boolean;
  /** The tfjs collector's birth-phase attribution alone (default: `leakEvidence`). */
  readonly attribution?: boolean;
  /** The tracker's leak alerts alone (default: `leakEvidence`). */
  readonly leakAlerts?: boolean;
}

/** What a bench tracker is made of: this checkout's packages, or another checkout's (`baseTrackerKit`). */
export interface TrackerKit {
  readonly MemoryTracker: typeof MemoryTracker;
  readonly processCollector: typeof processCollector;
  readonly tfjsCollector: typeof tfjsCollector;
}

export const thisTrackerKit: TrackerKit = { MemoryTracker, processCollector, tfjsCollector };

/**
 * The tracker, process collector and tfjs collector of another checkout of this repository (its own
 * sources, resolving their dependencies from its own node_modules), to measure side by side.
 */
export async function baseTrackerKit(root: string): Promise<TrackerKit> {
  const load = (path: string) => import(pathToFileURL(join(root, path)).href);
  const tracker = await load("packages/tracker/src/index.ts");
  const tfjs = await load("packages/adapter-tfjs/src/index.ts");
  return {
    MemoryTracker: tracker.MemoryTracker,
    processCollector: tracker.processCollector,
    tfjsCollector: tfjs.tfjsCollector,
  };
}

/** A tracker as the overhead goal sets it: tfjs and process collectors, 100 ms sampling, a sink when given. */
export function benchTracker(
  tf: TfNamespace,
  options: BenchTrackerOptions = {},
  kit: TrackerKit = thisTrackerKit,
): MemoryTracker {
  const { sinkDir, sinkThread = "worker", scheduler, leakEvidence = true } = options;
  const { attribution = leakEvidence, leakAlerts = leakEvidence } = options;
  const { MemoryTracker, processCollector, tfjsCollector } = kit;
  return new MemoryTracker({
    collectors: [tfjsCollector(tf, { attribution }), processCollector()],
    // Judged on the worker, as with the real timers (the bench's scheduler would make it "main");
    // another checkout's tracker may not know the option.
    leakAlerts: leakAlerts && kit === thisTrackerKit ? { judgeOn: "worker" } : leakAlerts,
    samplingIntervalMs: BENCH_SAMPLING_INTERVAL_MS,
    ...(sinkDir === undefined ? {} : { sink: { rootDir: sinkDir }, sinkThread }),
    ...(scheduler === undefined ? {} : { scheduler }),
  });
}

/**
 * A 90 % bootstrap interval of `statistic` over `values` (resampled with replacement), with a fixed
 * seed so that the same measurements always give the same interval.
 */
export function bootstrapInterval<T>(
  values: readonly T[],
  statistic: (sample: readonly T[]) => number,
  resamples = 1000,
): [number, number] {
  let seed = 0x9e3779b9;
  const random = () => {
    seed = (seed * 1664525 + 1013904223) >>> 0;
    return seed / 2 ** 32;
  };
  const results: number[] = [];
  for (let b = 0; b < resamples; b++)
    results.push(statistic(values.map(() => values[Math.floor(random() * values.length)]!)));
  results.sort((a, b) => a - b);
  return [results[Math.floor(0.05 * resamples)]!, results[Math.floor(0.95 * resamples)]!];
}
