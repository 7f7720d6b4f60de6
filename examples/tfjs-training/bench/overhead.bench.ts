/**
 * Wall-time overhead of tracking the example's training loop: the same custom loop (phases every
 * batch) timed without a tracker and with one (tfjs + process collectors, 100 ms sampling, sink on),
 * in the same process, in alternating rounds (ABBA) so drift on a shared machine cancels out.
 * Goal: <= 1 %.
 *
 *   pnpm --filter tfjs-training bench            (ROUNDS=30 STEPS=20 by default)
 *
 * A plain script rather than mitata: mitata runs one benchmark after the other, and a 1 % difference
 * needs the two measured side by side.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tfjsCollector } from "@stormlog/adapter-tfjs";
import type { PhaseHost } from "@stormlog/core";
import { noopPhaseHost } from "@stormlog/phases";
import { MemoryTracker, processCollector } from "@stormlog/tracker";
import { loadTensorFlow } from "../src/tfjs.js";
import {
  buildModel,
  DEFAULT_CONFIG,
  SyntheticData,
  type TrainConfig,
  trainCustomLoop,
} from "../src/train.js";

const ROUNDS = Number(process.env.ROUNDS ?? 30);
const STEPS = Number(process.env.STEPS ?? 20);

const { tf, packageName } = await loadTensorFlow();
const config: TrainConfig = { ...DEFAULT_CONFIG, epochs: 1, batchesPerEpoch: STEPS };
const model = buildModel(tf, config);
const optimizer = tf.train.adam(0.01);
const data = new SyntheticData(tf, config);
const sinkDir = mkdtempSync(join(tmpdir(), "stormlog-overhead-"));
const tracker = new MemoryTracker({
  collectors: [tfjsCollector(tf), processCollector()],
  samplingIntervalMs: 100,
  sink: { rootDir: sinkDir },
});

/** Wall and CPU milliseconds of one segment. */
interface Timing {
  wall: number;
  cpu: number;
}

/** One timed segment of `STEPS` training steps; the tracker starts and stops outside the timing. */
async function segment(tracked: boolean): Promise<Timing> {
  const host: PhaseHost = tracked ? tracker : noopPhaseHost;
  if (tracked) await tracker.start();
  const cpuStart = process.cpuUsage();
  const started = performance.now();
  await trainCustomLoop(tf, host, model, optimizer, data, config);
  const wall = performance.now() - started;
  const cpu = process.cpuUsage(cpuStart);
  if (tracked) await tracker.stop();
  return { wall, cpu: (cpu.user + cpu.system) / 1000 };
}

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

console.log(`tfjs ${packageName} (${tf.getBackend()}), ${ROUNDS} rounds of ${STEPS} steps per mode`);
await segment(false); // warm-up: kernels, allocator, JIT
await segment(true);

const untrackedTimings: Timing[] = [];
const trackedTimings: Timing[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? [false, true] : [true, false];
  for (const withTracker of order)
    (withTracker ? trackedTimings : untrackedTimings).push(await segment(withTracker));
}
const untracked = untrackedTimings.map((t) => t.wall);
const tracked = trackedTimings.map((t) => t.wall);
const ratios = tracked.map((t, i) => t / untracked[i]!);
const cpuRatios = trackedTimings.map((t, i) => t.cpu / untrackedTimings[i]!.cpu);
const quantile = (values: readonly number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};
const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);
const phasesPerStep = 5; // train, load_batch, forward, backward, optimizer_step

console.log(`untracked: median ${median(untracked).toFixed(1)} ms per ${STEPS} steps`);
console.log(`tracked:   median ${median(tracked).toFixed(1)} ms per ${STEPS} steps`);
console.log(
  `overhead: ${((median(ratios) - 1) * 100).toFixed(2)} % (median of per-round ratios), ` +
    `${((sum(tracked) / sum(untracked) - 1) * 100).toFixed(2)} % (total time); ` +
    `${phasesPerStep * STEPS} phases and ~${Math.round(median(tracked) / 100)} samples per segment`,
);
console.log(
  `per-round ratio tracked/untracked: p25 ${quantile(ratios, 0.25).toFixed(4)}, ` +
    `median ${median(ratios).toFixed(4)}, p75 ${quantile(ratios, 0.75).toFixed(4)}`,
);
console.log(
  `CPU time overhead (the process's own, less sensitive to other load): ` +
    `${((median(cpuRatios) - 1) * 100).toFixed(2)} % (median of per-round ratios)`,
);

rmSync(sinkDir, { recursive: true, force: true });
