import { AsyncLocalStorage } from "node:async_hooks";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { PhaseContextLike } from "@stormlog/core";
import * as tf from "@tensorflow/tfjs";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { type TfjsCollector, tfjsCollector } from "../src/index.js";

// What birth-phase attribution costs on the cpu backend (goal < 100 ns per tensor created and
// disposed), off and on side by side: (a) per tensor, (b) a small training step.
// 1. mitata's medians, off then on in this process.
// 2. Separate processes, off and on alternating (ABBA, PROCESSES of each): switching attribution
//    re-patches the engine's prototype, which sends tfjs's callers back to unoptimised code and
//    leaves them less optimised than a process that never switches, so each process keeps one mode
//    throughout, as a training job does. CPU time per round; the medians over processes.
// The wrappers alone, on an engine that does nothing else, are timed in attribution-hook.bench.ts.
// On a shared machine pin it for steadier figures: nice -n -15 taskset -c 1 node ... <this file>.
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
/** 100 kernel outputs (tf.add inside tf.tidy; each also makes and disposes the scalar 1). */
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

/** A collector with attribution on, bound to `context` (the caller closes it). */
function attributed(context: PhaseContextLike): TfjsCollector {
  const collector = tfjsCollector(tf, { attribution: true });
  collector.bindPhases(context);
  return collector;
}

function median(list: readonly number[]): number {
  const sorted = [...list].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** CPU time (GC threads included; the machines are shared) of `repeat` runs of `work`, in ns per run. */
function cpuNs(work: () => void, repeat: number): number {
  const start = process.cpuUsage();
  for (let i = 0; i < repeat; i++) work();
  const used = process.cpuUsage(start);
  return ((used.user + used.system) * 1000) / repeat;
}

/** What one child process measured in its mode. */
interface ChildResult {
  /** Median ns per tensor created and disposed. */
  tensor: number;
  /** Median ms per training step. */
  step: number;
  /** Tensors one step creates. */
  tensorsPerStep: number;
}

const CHILD_MODE = process.env.STORMLOG_ATTRIBUTION_BENCH_MODE;
if (CHILD_MODE === "on" || CHILD_MODE === "off") {
  let births = 0;
  if (CHILD_MODE === "on") {
    tfjsCollector(tf, { attribution: true }).bindPhases({
      currentPhasePath: () => {
        births++;
        return syncPath;
      },
    });
  }
  for (let i = 0; i < 1000; i++) churn();
  for (let i = 0; i < 20; i++) trainStep();
  const tensor = median(Array.from({ length: 15 }, () => cpuNs(churn, 200) / TENSORS));
  births = 0;
  trainStep();
  const tensorsPerStep = births;
  const step = median(Array.from({ length: 8 }, () => cpuNs(trainStep, 5) / 1e6));
  const result: ChildResult = { tensor, step, tensorsPerStep };
  console.log(`attribution-child ${JSON.stringify(result)}`);
  process.exit(0);
}

for (let i = 0; i < 20; i++) trainStep();

/** A bench of `work` with attribution off or on; it first runs `warm` rounds untimed after the switch. */
function measured(attribution: PhaseContextLike | null, work: () => void, warm: number) {
  return function* () {
    const collector = attribution === null ? undefined : attributed(attribution);
    for (let i = 0; i < warm; i++) work();
    yield work;
    collector?.close();
  };
}

const OFF_TENSOR = "tfjs/attribution off: 100 x tensor1d+dispose";
const ON_TENSOR = "tfjs/attribution on: 100 x tensor1d+dispose";
const ON_TENSOR_ASYNC = "tfjs/attribution on, async phase: 100 x tensor1d+dispose";
const OFF_KERNEL = "tfjs/attribution off: 100 x add in tidy";
const ON_KERNEL = "tfjs/attribution on: 100 x add in tidy";
const OFF_STEP = "tfjs/attribution off: train step";
const ON_STEP = "tfjs/attribution on: train step";

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

// sample() groups every live tensor: its cost with 10 000 live tensors in 10 phases. When the live
// tensors are those of the last sample it returns the last result without grouping; a tensor made or
// disposed between samples (a leak, a step caught midway) makes it group them all.
function sampled(change: boolean) {
  return function* () {
    const collector = attributed(syncContext);
    const kept: tf.Tensor[] = [];
    for (let i = 0; i < 10_000; i++) {
      syncPath = `phase ${i % 10}`;
      kept.push(tf.zeros([(i % 7) + 1, 8]));
    }
    syncPath = "train / backward";
    let extra: tf.Tensor | undefined;
    yield () => {
      if (change) {
        if (extra === undefined) extra = tf.zeros([4]);
        else {
          extra.dispose();
          extra = undefined;
        }
      }
      return collector.sample();
    };
    extra?.dispose();
    tf.dispose(kept);
    collector.close();
  };
}
group("sample() with 10 000 live tensors", () => {
  bench("tfjs/sample() with attribution, 10 000 live tensors, unchanged", sampled(false));
  bench("tfjs/sample() with attribution, 10 000 live tensors, one more or fewer each time", sampled(true));
});

const results = await run();

const p50 = new Map<string, number>();
for (const trial of results.benchmarks) for (const r of trial.runs) if (r.stats) p50.set(r.name, r.stats.p50);
const at = (name: string) => p50.get(name) ?? Number.NaN;
const perTensor = (on: string, off: string) => `+${((at(on) - at(off)) / TENSORS).toFixed(1)} ns`;
const ratio = (on: string, off: string) => (at(on) / at(off)).toFixed(3);
console.log("1. mitata medians, attribution off then on in one process:");
console.log(
  `  (a) tensor1d+dispose: ${(at(OFF_TENSOR) / TENSORS).toFixed(0)} ns off, ${perTensor(ON_TENSOR, OFF_TENSOR)} per tensor ` +
    `(ratio ${ratio(ON_TENSOR, OFF_TENSOR)}), in an async phase ${perTensor(ON_TENSOR_ASYNC, OFF_TENSOR)}`,
);
console.log(
  `  (a) add in tidy: ${(at(OFF_KERNEL) / TENSORS).toFixed(0)} ns off, ${perTensor(ON_KERNEL, OFF_KERNEL)} per kernel (2 tensors; ratio ${ratio(ON_KERNEL, OFF_KERNEL)})`,
);
console.log(
  `  (b) train step: ${(at(OFF_STEP) / 1e6).toFixed(2)} ms off, ${(at(ON_STEP) / 1e6).toFixed(2)} ms on (ratio ${ratio(ON_STEP, OFF_STEP)})`,
);

// 2. Separate processes, one mode each, ABBA.
const PROCESSES = Number(process.env.PROCESSES ?? 2);
const self = fileURLToPath(import.meta.url);
const children: Record<"off" | "on", ChildResult[]> = { off: [], on: [] };
for (let i = 0; i < PROCESSES; i++) {
  for (const mode of i % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const)) {
    const env: NodeJS.ProcessEnv = { ...process.env, STORMLOG_ATTRIBUTION_BENCH_MODE: mode };
    delete env.STORMLOG_BENCH_OUT;
    const child = spawnSync(process.execPath, [...process.execArgv, self], { env, encoding: "utf8" });
    const line = child.stdout.split("\n").find((text) => text.startsWith("attribution-child "));
    if (line === undefined) throw new Error(`the ${mode} process failed: ${child.stderr}`);
    children[mode].push(JSON.parse(line.slice("attribution-child ".length)) as ChildResult);
  }
}
const offTensor = median(children.off.map((r) => r.tensor));
const onTensor = median(children.on.map((r) => r.tensor));
const offStep = median(children.off.map((r) => r.step));
const onStep = median(children.on.map((r) => r.step));
const perStep = children.on[0]?.tensorsPerStep ?? 0;
console.log(`2. separate processes (${PROCESSES} of each, ABBA), CPU time, medians:`);
console.log(
  `  (a) tensor1d+dispose: ${offTensor.toFixed(0)} ns off, ${onTensor.toFixed(0)} ns on: +${(onTensor - offTensor).toFixed(1)} ns per tensor ` +
    `(ratio ${(onTensor / offTensor).toFixed(3)})`,
);
console.log(
  `  (b) train step: ${offStep.toFixed(2)} ms off, ${onStep.toFixed(2)} ms on (ratio ${(onStep / offStep).toFixed(4)}); ` +
    `${perStep} tensors per step: at the (a) difference ${(((onTensor - offTensor) * perStep) / 1000).toFixed(1)} us, ` +
    `${((((onTensor - offTensor) * perStep) / (offStep * 1e6)) * 100).toFixed(3)} % of a step`,
);

tf.dispose([a, xs, ys]);
