import type { PhaseContextLike } from "@stormlog/core";
import { bench, group, run, summary } from "mitata";
import { type TfTrackedTensor, tfjsCollector } from "../src/index.js";

// Birth-phase attribution's own cost per tensor (goal < 100 ns), without tfjs's: two engines of
// tfjs's shape whose tracking is two counters, one wrapped for the whole run and one never, 100 live
// tensors rolling (each new tensor disposes the one made 100 before). Two copies of the same code,
// so that each keeps its own type feedback; both run side by side in steady state (no re-patching).
const TENSORS = 100;
const context: PhaseContextLike = { currentPhasePath: () => "train / backward" };

interface BareState {
  numBytes: number;
  numTensors: number;
  numDataBuffers: number;
}
class BareTensor implements TfTrackedTensor {
  readonly dataId = {};
  constructor(
    readonly id: number,
    readonly shape: number[],
    readonly size: number,
    readonly dtype = "float32",
  ) {}
}
let nextId = 0;
class PlainEngine {
  backendName = "cpu";
  state: BareState = { numBytes: 0, numTensors: 0, numDataBuffers: 0 };
  trackTensor(tensor: TfTrackedTensor, _backend: unknown): void {
    this.state.numTensors++;
    this.state.numBytes += tensor.size * 4;
  }
  disposeTensor(tensor: TfTrackedTensor): void {
    this.state.numTensors--;
    this.state.numBytes -= tensor.size * 4;
  }
}
class WrappedEngine {
  backendName = "cpu";
  state: BareState = { numBytes: 0, numTensors: 0, numDataBuffers: 0 };
  trackTensor(tensor: TfTrackedTensor, _backend: unknown): void {
    this.state.numTensors++;
    this.state.numBytes += tensor.size * 4;
  }
  disposeTensor(tensor: TfTrackedTensor): void {
    this.state.numTensors--;
    this.state.numBytes -= tensor.size * 4;
  }
}
const plain = new PlainEngine();
const wrapped = new WrappedEngine();
const plainRing: (BareTensor | undefined)[] = new Array(TENSORS);
const wrappedRing: (BareTensor | undefined)[] = new Array(TENSORS);
function plainChurn(): void {
  for (let i = 0; i < TENSORS; i++) {
    const tensor = new BareTensor(nextId++, [2, 2], 4);
    plain.trackTensor(tensor, undefined);
    const old = plainRing[i];
    if (old !== undefined) plain.disposeTensor(old);
    plainRing[i] = tensor;
  }
}
function wrappedChurn(): void {
  for (let i = 0; i < TENSORS; i++) {
    const tensor = new BareTensor(nextId++, [2, 2], 4);
    wrapped.trackTensor(tensor, undefined);
    const old = wrappedRing[i];
    if (old !== undefined) wrapped.disposeTensor(old);
    wrappedRing[i] = tensor;
  }
}
const collector = tfjsCollector(
  {
    getBackend: () => "cpu",
    backend: () => ({}),
    memory: () => ({ ...wrapped.state }),
    engine: () => wrapped,
  },
  { attribution: true },
);
collector.bindPhases(context);

const OFF = "tfjs/attribution off: 100 x track+dispose, bare engine";
const ON = "tfjs/attribution on: 100 x track+dispose, bare engine";
group(`the wrappers alone: ${TENSORS} tensors tracked and disposed on a bare engine`, () => {
  summary(() => {
    bench(OFF, () => plainChurn());
    bench(ON, () => wrappedChurn());
  });
});

const results = await run();
const p50 = new Map<string, number>();
for (const trial of results.benchmarks) for (const r of trial.runs) if (r.stats) p50.set(r.name, r.stats.p50);
const off = (p50.get(OFF) ?? Number.NaN) / TENSORS;
const on = (p50.get(ON) ?? Number.NaN) / TENSORS;
console.log(
  `mitata medians: ${off.toFixed(1)} ns off, ${on.toFixed(1)} ns on per tensor: +${(on - off).toFixed(1)} ns`,
);

// Interleaved rounds (ABBA), CPU time: the median per-round difference.
const ROUNDS = Number(process.env.ROUNDS ?? 15);
const REPEAT = 5000;
const offRounds: number[] = [];
const onRounds: number[] = [];
const time = (work: () => void): number => {
  const start = process.cpuUsage();
  for (let i = 0; i < REPEAT; i++) work();
  const used = process.cpuUsage(start);
  return ((used.user + used.system) * 1000) / REPEAT / TENSORS;
};
for (let round = 0; round < ROUNDS; round++) {
  if (round % 2 === 0) {
    onRounds.push(time(wrappedChurn));
    offRounds.push(time(plainChurn));
  } else {
    offRounds.push(time(plainChurn));
    onRounds.push(time(wrappedChurn));
  }
}
const median = (list: readonly number[]): number => {
  const sorted = [...list].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
console.log(
  `interleaved, ${ROUNDS} rounds, CPU time: ${median(offRounds).toFixed(1)} ns off, ${median(onRounds).toFixed(1)} ns on per tensor; ` +
    `+${median(onRounds.map((v, i) => v - (offRounds[i] as number))).toFixed(1)} ns per tensor`,
);
collector.close();
