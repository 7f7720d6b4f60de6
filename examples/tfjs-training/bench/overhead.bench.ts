/**
 * Wall-time overhead of tracking the example's training loop: the same custom loop (phases every
 * batch) timed without a tracker, with one writing a sink (tfjs + process collectors, 100 ms
 * sampling: the goal's setting; the sink on its worker thread), with the sink written on the
 * training thread instead, and with the tracker writing nothing, in the same process, the rounds in
 * a balanced order of the four so drift on a shared machine cancels out. Goal: <= 1 % with the sink.
 *
 *   pnpm --filter tfjs-training bench            (ROUNDS=36 STEPS=100 EMPTY_STEPS=2000 by default: ~10 min)
 *
 * A plain script rather than mitata: mitata runs one benchmark after the other, and a 1 % difference
 * needs the two measured side by side.
 * On a machine whose speed drifts over seconds (a shared VM), segments scatter too much to resolve
 * 1 %: `bench:steps` (interleaved.bench.ts) times step against step instead.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type PerformanceEntry, PerformanceObserver, constants as perfConstants } from "node:perf_hooks";
import type { PhaseHost } from "@stormlog/core";
import { noopPhaseHost } from "@stormlog/phases";
import { trainCustomLoop, yieldToEventLoop } from "../src/train.js";
import { benchTracker, benchTraining, bootstrapInterval } from "./setup.js";

/** `global.gc` when node runs with --expose-gc (the bench script passes it). */
const collectGarbage = (globalThis as { gc?: () => void }).gc;
// Each tracked segment is a whole session (start, first segment file, manifest): 100 steps (~2 s
// here) keep that one-time cost from passing for a per-step one, which a 20-step segment did (~2 %).
// 16 rounds scattered by several percent from run to run on the shared VM; 36 resolve about 1 %.
const ROUNDS = Number(process.env.ROUNDS ?? 36);
const STEPS = Number(process.env.STEPS ?? 100);

const { tf, packageName, config, model, optimizer, data } = await benchTraining(STEPS);
const sinkDir = mkdtempSync(join(tmpdir(), "stormlog-overhead-"));
const tracker = benchTracker(tf, { sinkDir });
// The sink written on the training thread instead of a worker (`sinkThread: "main"`), to compare.
const mainThreadSinkDir = mkdtempSync(join(tmpdir(), "stormlog-overhead-main-"));
const trackerWithMainThreadSink = benchTracker(tf, { sinkDir: mainThreadSinkDir, sinkThread: "main" });
// The same tracker without a sink: splits the overhead between tracking and writing.
const trackerWithoutSink = benchTracker(tf);

/** Wall, process CPU and main-thread on-CPU milliseconds of one segment, and its collections. */
interface Timing {
  wall: number;
  cpu: number;
  /** Time the training thread itself ran (NaN where /proc has no schedstat). */
  thread: number;
  /** Full (mark-compact) collections during the segment, and young-generation ones. */
  majorGcs: number;
  minorGcs: number;
}

const collections: { kind: number; start: number }[] = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
    if (kind !== undefined) collections.push({ kind, start: entry.startTime });
  }
}).observe({ entryTypes: ["gc"] });
/** Collections of a kind that started in [from, to] (the observer reports them a tick later). */
async function collectionsBetween(kind: number, from: number, to: number): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 0));
  return collections.filter((entry) => entry.kind === kind && entry.start >= from && entry.start <= to)
    .length;
}

const SCHEDSTAT = `/proc/${process.pid}/task/${process.pid}/schedstat`;
/**
 * Nanoseconds the main thread has spent on a CPU (Linux schedstat). Unlike wall time it does not
 * count the time other processes on a shared machine took the CPU from us, so it resolves 1 %.
 */
function threadCpuMs(): number {
  try {
    return Number(readFileSync(SCHEDSTAT, "utf8").split(" ")[0]) / 1e6;
  } catch {
    return Number.NaN;
  }
}

type Mode = "untracked" | "sink" | "sink on main" | "no sink";
const MODES: readonly Mode[] = ["untracked", "sink", "sink on main", "no sink"];
const trackerOf = (mode: Mode) =>
  mode === "sink"
    ? tracker
    : mode === "sink on main"
      ? trackerWithMainThreadSink
      : mode === "no sink"
        ? trackerWithoutSink
        : null;

/** One timed segment of `STEPS` training steps; the tracker starts and stops outside the timing. */
async function segment(mode: Mode): Promise<Timing> {
  const active = trackerOf(mode);
  const host: PhaseHost = active ?? noopPhaseHost;
  await active?.start();
  // Each segment starts from a collected heap, so garbage left by the previous one (a tracker's
  // stop reads the sink back for rollups.json) is not charged to this one.
  collectGarbage?.();
  const cpuStart = process.cpuUsage();
  const threadStart = threadCpuMs();
  const started = performance.now();
  await trainCustomLoop(tf, host, model, optimizer, data, config);
  const wall = performance.now() - started;
  const thread = threadCpuMs() - threadStart;
  const cpu = process.cpuUsage(cpuStart);
  await active?.stop();
  const ended = started + wall;
  return {
    wall,
    cpu: (cpu.user + cpu.system) / 1000,
    thread,
    majorGcs: await collectionsBetween(perfConstants.NODE_PERFORMANCE_GC_MAJOR, started, ended),
    minorGcs: await collectionsBetween(perfConstants.NODE_PERFORMANCE_GC_MINOR, started, ended),
  };
}

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

console.log(`tfjs ${packageName} (${tf.getBackend()}), ${ROUNDS} rounds of ${STEPS} steps per mode`);
// Warm-up: kernels, allocator, JIT, the sink worker.
for (const mode of MODES) await segment(mode);

const timings: Record<Mode, Timing[]> = { untracked: [], sink: [], "sink on main": [], "no sink": [] };
// A balanced Latin square of the four modes: over four rounds each mode runs in each position once
// and follows each other mode once, so drift and carry-over cancel out.
const ORDERS: readonly (readonly Mode[])[] = [0, 1, 3, 2].map((_, row) =>
  [0, 1, 3, 2].map((column) => MODES[(column + row) % MODES.length] as Mode),
);
for (let round = 0; round < ROUNDS; round++)
  for (const mode of ORDERS[round % ORDERS.length]!) timings[mode].push(await segment(mode));
const untrackedTimings = timings.untracked;
const trackedTimings = timings.sink;
const quantile = (values: readonly number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};
/** 90 % bootstrap interval of the median (fixed seed: the same rounds give the same interval). */
const medianInterval = (values: readonly number[]) => bootstrapInterval(values, median, 2000);
const percent = (ratio: number) => `${((ratio - 1) * 100).toFixed(2)} %`;
const phasesPerStep = 5; // train, load_batch, forward, backward, optimizer_step

/** One line per measure: the median of the per-round ratios, its 90 % interval, and the quartiles. */
function report(label: string, pick: (timing: Timing) => number, tracked = trackedTimings): void {
  const ratios = tracked.map((t, i) => pick(t) / pick(untrackedTimings[i]!));
  if (ratios.some((ratio) => !Number.isFinite(ratio))) return;
  const [low, high] = medianInterval(ratios);
  console.log(
    `${label.padEnd(34)} ${percent(median(ratios)).padStart(8)}  (90 % interval ${percent(low)} .. ${percent(high)}; ` +
      `p25 ${percent(quantile(ratios, 0.25))}, p75 ${percent(quantile(ratios, 0.75))})`,
  );
}

const wallOf = (timings: Timing[]) => median(timings.map((t) => t.wall));
console.log(
  `untracked: median ${wallOf(untrackedTimings).toFixed(1)} ms, tracked: ${wallOf(trackedTimings).toFixed(1)} ms ` +
    `per ${STEPS} steps; ${phasesPerStep * STEPS} phases and ~${Math.round(wallOf(trackedTimings) / 100)} samples ` +
    "per tracked segment",
);
console.log("overhead with the sink, median of per-round ratios tracked/untracked:");
report("wall time", (t) => t.wall);
// The training thread's own CPU time: what tracking costs the loop, without the time other
// processes on a shared machine took (wall time's noise). The sink's disk writes run on libuv's
// threads and are in the process CPU line only.
report("training thread on-CPU time", (t) => t.thread);
report("process CPU time (all threads)", (t) => t.cpu);
console.log('overhead with the sink written on the training thread (sinkThread: "main"):');
report("wall time", (t) => t.wall, timings["sink on main"]);
report("training thread on-CPU time", (t) => t.thread, timings["sink on main"]);
console.log("overhead without a sink (the same tracker, nothing written):");
report("wall time", (t) => t.wall, timings["no sink"]);
report("training thread on-CPU time", (t) => t.thread, timings["no sink"]);
const meanOf = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
console.log(
  "collections per segment (mean), full / young: " +
    MODES.map(
      (mode) =>
        `${mode} ${meanOf(timings[mode].map((t) => t.majorGcs)).toFixed(2)} / ${meanOf(timings[mode].map((t) => t.minorGcs)).toFixed(0)}`,
    ).join(", "),
);

// Stormlog's own work per step, without the model: the same phases (train with its metadata, and
// four inside it), the same tracker and sink, empty phase bodies, many steps per segment. Wall time
// of a model step varies by several percent from one segment to the next on a shared machine; this
// cost does not, so it bounds the overhead more tightly than the ratio above.
const EMPTY_STEPS = Number(process.env.EMPTY_STEPS ?? 2000);
async function emptySteps(host: PhaseHost): Promise<number> {
  const started = performance.now();
  for (let step = 0; step < EMPTY_STEPS; step++) {
    host.phase(
      "train",
      () => {
        host.phase("load_batch", () => step);
        host.enterPhase("forward").close();
        host.enterPhase("backward").close();
        host.phase("optimizer_step", () => step);
      },
      { metadata: { epoch: 0, step } },
    );
    await yieldToEventLoop();
  }
  return performance.now() - started;
}
const perStepCosts: number[] = [];
for (let round = 0; round < 10; round++) {
  collectGarbage?.();
  const untracked = await emptySteps(noopPhaseHost);
  await tracker.start();
  collectGarbage?.();
  const tracked = await emptySteps(tracker);
  await tracker.stop();
  perStepCosts.push(((tracked - untracked) / EMPTY_STEPS) * 1000);
}
const costUs = median(perStepCosts);
console.log(
  `tracking work per step (${phasesPerStep} phases, ${2 * phasesPerStep} records, sampling, sink), empty phase bodies: ` +
    `median ${costUs.toFixed(1)} us (quartiles ${quantile(perStepCosts, 0.25).toFixed(1)} .. ${quantile(perStepCosts, 0.75).toFixed(1)} us) ` +
    `= ${((costUs / 1000 / (wallOf(untrackedTimings) / STEPS)) * 100).toFixed(2)} % of the example's untracked step`,
);

rmSync(sinkDir, { recursive: true, force: true });
rmSync(mainThreadSinkDir, { recursive: true, force: true });
