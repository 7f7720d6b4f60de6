import { AsyncLocalStorage } from "node:async_hooks";
import type { PhaseContextLike } from "@stormlog/core";
import * as tf from "@tensorflow/tfjs";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { type TfjsCollector, tfjsCollector } from "../src/index.js";

// What birth-phase attribution costs (goal < 100 ns per tensor created and disposed), off and on
// side by side on the cpu backend: (a) per tensor, (b) a small training step. mitata's medians
// first, then interleaved rounds (off/on alternating ABBA, so both see the same machine state; CPU
// time, as the machines are shared) with the median per-round difference and ratio. The wrappers
// alone, on an engine that does nothing else, are timed in attribution-hook.bench.ts, a process of
// their own so that their engine does not share the wrappers' type feedback with tfjs's.
await tf.setBackend("cpu");
tf.enableProdMode();

// Stand-ins for the tracker's recorder: a sync phase stack, and an async phase found through
// AsyncLocalStorage (what `PhaseRecorder.currentPhasePath()` does inside an async phase; the real
// lookups are timed in packages/phases/bench/current-path.bench.ts).
let syncPath = "train / backward";
const syncContext: PhaseContextLike = { currentPhasePath: () => syncPath };
const storage = new AsyncLocalStorage<{ readonly path: string }>();
const asyncContext: PhaseContextLike = { currentPhasePath: () => storage.getStore()?.path ?? "" };
const asyncStore = { path: "train / load_batch" };

const TENSORS = 100;
const values = new Float32Array([1, 2, 3, 4]);
/** 100 tensors created (engine.makeTensor) and disposed. */
function churn(): void {
  for (let i = 0; i < TENSORS; i++) tf.tensor1d(values).dispose();
}
/** 100 kernel outputs (tf.add inside tf.tidy): the path training steps take. */
const a = tf.ones([4]);
function kernels(): void {
  tf.tidy(() => {
    let y = a;
    for (let i = 0; i < TENSORS; i++) y = tf.add(y, 1);
    do_not_optimize(y);
  });
}

// A small training step: MLP 64 -> 128 -> 128 -> 10, batch 64, Adam, phases switched as a tracker would.
const model = tf.sequential({
  layers: [
    tf.layers.dense({ units: 128, inputShape: [64], activation: "relu" }),
    tf.layers.dense({ units: 128, activation: "relu" }),
    tf.layers.dense({ units: 10 }),
  ],
});
const optimizer = tf.train.adam(0.01);
const xs = tf.randomNormal([64, 64]);
const ys = tf.oneHot(tf.randomUniform([64], 0, 10, "int32"), 10).asType("float32");
function trainStep(): void {
  syncPath = "train / forward";
  const { value, grads } = optimizer.computeGradients(() => {
    const loss = tf.losses.softmaxCrossEntropy(ys, model.apply(xs) as tf.Tensor) as tf.Scalar;
    syncPath = "train / backward";
    return loss;
  });
  syncPath = "train / optimizer_step";
  optimizer.applyGradients(Object.entries(grads).map(([name, tensor]) => ({ name, tensor })));
  tf.dispose(grads);
  value.dispose();
  syncPath = "train / backward";
}
for (let i = 0; i < 20; i++) trainStep();
// Tensors one step creates (each asks the context for its phase once): what the step pays for.
let births = 0;
const counting = tfjsCollector(tf, { attribution: true });
counting.bindPhases({
  currentPhasePath: () => {
    births++;
    return syncPath;
  },
});
trainStep();
counting.close();
const TENSORS_PER_STEP = births;

/** A collector with attribution on, bound to `context` (the caller closes it). */
function attributed(context: PhaseContextLike): TfjsCollector {
  const collector = tfjsCollector(tf, { attribution: true });
  collector.bindPhases(context);
  return collector;
}

const OFF_TENSOR = "tfjs/attribution off: 100 x tensor1d+dispose";
const ON_TENSOR = "tfjs/attribution on: 100 x tensor1d+dispose";
const ON_TENSOR_ASYNC = "tfjs/attribution on, async phase: 100 x tensor1d+dispose";
const OFF_KERNEL = "tfjs/attribution off: 100 x add in tidy";
const ON_KERNEL = "tfjs/attribution on: 100 x add in tidy";
const OFF_STEP = "tfjs/attribution off: train step";
const ON_STEP = "tfjs/attribution on: train step";

/**
 * A bench of `work` with attribution off or on. Switching re-patches the engine's prototype, which
 * sends tfjs's callers back to unoptimised code: each bench first runs `warm` rounds untimed.
 */
function measured(attribution: PhaseContextLike | null, work: () => void, warm: number) {
  return function* () {
    const collector = attribution === null ? undefined : attributed(attribution);
    for (let i = 0; i < warm; i++) work();
    yield work;
    collector?.close();
  };
}

group(`(a) ${TENSORS} tensors created and disposed, cpu backend`, () => {
  summary(() => {
    bench(OFF_TENSOR, measured(null, churn, 500));
    bench(ON_TENSOR, measured(syncContext, churn, 500));
    bench(
      ON_TENSOR_ASYNC,
      measured(asyncContext, () => storage.run(asyncStore, churn), 500),
    );
  });
});

group(`(a) ${TENSORS} kernel outputs in tf.tidy, cpu backend`, () => {
  summary(() => {
    bench(OFF_KERNEL, measured(null, kernels, 200));
    bench(ON_KERNEL, measured(syncContext, kernels, 200));
  });
});

group("(b) training step: MLP 64-128-128-10, batch 64, Adam, cpu backend", () => {
  summary(() => {
    bench(OFF_STEP, measured(null, trainStep, 10));
    bench(ON_STEP, measured(syncContext, trainStep, 10));
  });
});

// sample() groups every live tensor: its cost with 10 000 live tensors in 10 phases.
group("sample() with 10 000 live tensors", () => {
  bench("tfjs/sample() with attribution, 10 000 live tensors", function* () {
    const collector = attributed(syncContext);
    const kept: tf.Tensor[] = [];
    for (let i = 0; i < 10_000; i++) {
      syncPath = `phase ${i % 10}`;
      kept.push(tf.zeros([(i % 7) + 1, 8]));
    }
    syncPath = "train / backward";
    yield () => collector.sample();
    tf.dispose(kept);
    collector.close();
  });
});

const results = await run();

function median(list: readonly number[]): number {
  const sorted = [...list].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

const p50 = new Map<string, number>();
for (const trial of results.benchmarks) for (const r of trial.runs) if (r.stats) p50.set(r.name, r.stats.p50);
const at = (name: string) => p50.get(name) ?? Number.NaN;
const perTensor = (on: string, off: string) => `+${((at(on) - at(off)) / TENSORS).toFixed(1)} ns`;
const ratio = (on: string, off: string) => (at(on) / at(off)).toFixed(3);
console.log("mitata medians, attribution on vs off:");
console.log(
  `  (a) tensor1d+dispose: ${(at(OFF_TENSOR) / TENSORS).toFixed(0)} ns off, ${perTensor(ON_TENSOR, OFF_TENSOR)} per tensor ` +
    `(ratio ${ratio(ON_TENSOR, OFF_TENSOR)}), in an async phase ${perTensor(ON_TENSOR_ASYNC, OFF_TENSOR)}`,
);
console.log(
  `  (a) add in tidy: ${(at(OFF_KERNEL) / TENSORS).toFixed(0)} ns off, ${perTensor(ON_KERNEL, OFF_KERNEL)} per tensor (ratio ${ratio(ON_KERNEL, OFF_KERNEL)})`,
);
console.log(
  `  (b) train step: ${(at(OFF_STEP) / 1e6).toFixed(2)} ms off, ${(at(ON_STEP) / 1e6).toFixed(2)} ms on (ratio ${ratio(ON_STEP, OFF_STEP)}); ` +
    `${TENSORS_PER_STEP} tensors per step, at the (a) cost per tensor ${((((at(ON_TENSOR) - at(OFF_TENSOR)) / TENSORS) * TENSORS_PER_STEP) / 1000).toFixed(1)} us, ` +
    `${((((at(ON_TENSOR) - at(OFF_TENSOR)) / TENSORS) * TENSORS_PER_STEP * 100) / at(OFF_STEP)).toFixed(3)} % of a step`,
);

// Interleaved rounds: the same work timed with attribution off and on, alternating ABBA, in CPU time.
// Each switch re-patches the engine's prototype, which sends tfjs's callers back to unoptimised code
// for a while: each round runs its work untimed, then timed (50 000 tensors, or 10 steps).
const ROUNDS = Number(process.env.ROUNDS ?? 12);
interface Rounds {
  readonly off: number[];
  readonly on: number[];
}
function interleaved(work: () => void, repeat: number): Rounds {
  const rounds: Rounds = { off: [], on: [] };
  const time = (attribution: boolean): number => {
    const collector = attribution ? attributed(syncContext) : undefined;
    // Untimed first: after the switch tfjs's callers of the patched methods are optimised again.
    for (let i = 0; i < repeat; i++) work();
    // Process CPU time (GC threads included), not wall time: the machines are shared.
    const start = process.cpuUsage();
    for (let i = 0; i < repeat; i++) work();
    const used = process.cpuUsage(start);
    collector?.close();
    return ((used.user + used.system) * 1000) / repeat;
  };
  for (let round = 0; round < ROUNDS; round++) {
    const onFirst = round % 2 === 0;
    const first = time(onFirst);
    const second = time(!onFirst);
    rounds.on.push(onFirst ? first : second);
    rounds.off.push(onFirst ? second : first);
  }
  return rounds;
}
const difference = (r: Rounds) => median(r.on.map((v, i) => v - (r.off[i] as number)));
const ratioOf = (r: Rounds) => median(r.on.map((v, i) => v / (r.off[i] as number)));
const churnRounds = interleaved(churn, 500);
const stepRounds = interleaved(trainStep, 10);
console.log(`interleaved, ${ROUNDS} rounds, CPU time (medians per round):`);
console.log(
  `  (a) tensor1d+dispose: ${(median(churnRounds.off) / TENSORS).toFixed(1)} ns off, ${(median(churnRounds.on) / TENSORS).toFixed(1)} ns on per tensor; ` +
    `+${(difference(churnRounds) / TENSORS).toFixed(1)} ns per tensor, ratio ${ratioOf(churnRounds).toFixed(3)}`,
);
console.log(
  `  (b) train step: ${(median(stepRounds.off) / 1e6).toFixed(2)} ms off, ${(median(stepRounds.on) / 1e6).toFixed(2)} ms on; ` +
    `ratio ${ratioOf(stepRounds).toFixed(4)} (${((ratioOf(stepRounds) - 1) * 100).toFixed(2)} %)`,
);

tf.dispose([a, xs, ys]);
