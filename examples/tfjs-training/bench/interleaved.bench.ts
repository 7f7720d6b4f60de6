/**
 * Tracking overhead measured step against step: one tracker session runs throughout (the goal's
 * setting: tfjs + process collectors, 100 ms sampling, the sink on), and consecutive training steps
 * alternate between tracked and untracked, in pairs whose order alternates (ABBA).
 *
 *   pnpm --filter tfjs-training bench:steps     (PAIRS=3000 per mode; MODES=aa,sink,main,none: ~10 min)
 *
 * Why: on a shared VM a training step's time switches between regimes (here ~20 ms and ~33 ms per
 * step, each lasting one to several seconds), so two segments of 100 steps timed seconds apart
 * differ by 10-30 % and `bench`'s per-segment ratio scatters by a percent or more from run to run.
 * Two steps timed one after the other almost always run in the same regime.
 *
 * A tracked step sends its phases to the tracker, and the tracker's timers (sampling, hand-overs to
 * the sink's worker) run only in tracked steps: a timer that comes due in an untracked step waits
 * for the next tracked one (~20 ms late). The tracked half thus carries all of the session's timer
 * work while being half of the steps, so the estimate of tracking every step is
 *   (sum tracked - sum untracked - timer work / 2) / sum untracked,
 * where timer work is the callbacks' own time; what they leave behind (cold caches) stays in the
 * tracked steps in full, which errs towards more overhead. Pairs where one step took 25 % more
 * than the other straddle a regime switch or a full collection, which tracking (under 0.5 ms per
 * step) does not cause; the estimate is printed without them (the figure to read) and over all
 * pairs. The A/A line (no tracker, both steps alike) shows what the method reads when there is
 * nothing to find. What pairing cannot see: the sink's worker slowing the training core through
 * shared caches and garbage the tracker leaves (collected in whichever step comes next); `bench`
 * times whole segments and counts collections.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PhaseHost, Scheduler, TimerHandle } from "@stormlog/core";
import { noopPhaseHost } from "@stormlog/phases";
import type { MemoryTracker } from "@stormlog/tracker";
import { trainCustomLoop } from "../src/train.js";
import { benchTracker, benchTraining } from "./setup.js";

const PAIRS = Number(process.env.PAIRS ?? 3000);
const WARM_UP_STEPS = 100;
/** |log(tracked / untracked)| above this: a regime switch or a full collection, not tracking. */
const OUTLIER_LOG_RATIO = Math.log(1.25);

/** The system scheduler, except that timers coming due while closed wait for `open()`. */
class SteppedScheduler implements Scheduler {
  private isOpen = false;
  private readonly waiting = new Set<() => void>();
  /** Milliseconds spent in timer callbacks so far. */
  workMs = 0;

  setTimeout(callback: () => void, delayMs: number): TimerHandle {
    const fire = () => {
      this.waiting.delete(fire);
      const started = performance.now();
      callback();
      this.workMs += performance.now() - started;
    };
    const timer = setTimeout(() => (this.isOpen ? fire() : this.waiting.add(fire)), delayMs);
    timer.unref();
    return { timer, fire };
  }

  clearTimeout(handle: TimerHandle): void {
    const { timer, fire } = handle as { timer: ReturnType<typeof setTimeout>; fire: () => void };
    clearTimeout(timer);
    this.waiting.delete(fire);
  }

  /** Lets timers run, first those that came due while closed. */
  open(): void {
    this.isOpen = true;
    for (const fire of [...this.waiting]) fire();
  }

  close(): void {
    this.isOpen = false;
  }
}

const { tf, packageName, config, model, optimizer, data } = await benchTraining(1);
const oneStep = { ...config, epochs: 1, batchesPerEpoch: 1 };

/** One step's wall time, and the tracker's timer work inside it. */
async function timedStep(host: PhaseHost, scheduler: SteppedScheduler | null): Promise<[number, number]> {
  const workBefore = scheduler?.workMs ?? 0;
  const started = performance.now();
  // Timers fire in the yield that ends a step; those that waited, at the start of a tracked one.
  scheduler?.open();
  await trainCustomLoop(tf, host, model, optimizer, data, oneStep);
  const elapsed = performance.now() - started;
  scheduler?.close();
  return [elapsed, (scheduler?.workMs ?? 0) - workBefore];
}

/** Per pair: the tracked step, the untracked step, the timer work in the tracked step (ms). */
interface Pairs {
  tracked: Float64Array;
  untracked: Float64Array;
  timerWork: Float64Array;
}

/** PAIRS pairs of steps, ABBA; `tracker` null is the A/A run (both steps untracked). */
async function pairedRun(tracker: MemoryTracker | null, scheduler: SteppedScheduler | null): Promise<Pairs> {
  await tracker?.start();
  const trackedHost: PhaseHost = tracker ?? noopPhaseHost;
  for (let step = 0; step < WARM_UP_STEPS; step++)
    await timedStep(step % 2 ? trackedHost : noopPhaseHost, step % 2 ? scheduler : null);
  const pairs: Pairs = {
    tracked: new Float64Array(PAIRS),
    untracked: new Float64Array(PAIRS),
    timerWork: new Float64Array(PAIRS),
  };
  for (let pair = 0; pair < PAIRS; pair++) {
    let tracked: [number, number];
    if (pair % 2 === 0) {
      tracked = await timedStep(trackedHost, scheduler);
      pairs.untracked[pair] = (await timedStep(noopPhaseHost, null))[0];
    } else {
      pairs.untracked[pair] = (await timedStep(noopPhaseHost, null))[0];
      tracked = await timedStep(trackedHost, scheduler);
    }
    [pairs.tracked[pair], pairs.timerWork[pair]] = tracked;
  }
  scheduler?.open();
  await tracker?.stop();
  return pairs;
}

/** The overhead of tracking every step, estimated from the given pairs (see the file's comment). */
function estimate(pairs: Pairs, indices: readonly number[]): number {
  let tracked = 0;
  let untracked = 0;
  let timerWork = 0;
  for (const i of indices) {
    tracked += pairs.tracked[i]!;
    untracked += pairs.untracked[i]!;
    timerWork += pairs.timerWork[i]!;
  }
  return (tracked - untracked - timerWork / 2) / untracked;
}

/** The estimate and its 90 % bootstrap interval over pairs (fixed seed). */
function withInterval(pairs: Pairs, indices: readonly number[]): [number, number, number] {
  let seed = 0x9e3779b9;
  const random = () => {
    seed = (seed * 1664525 + 1013904223) >>> 0;
    return seed / 2 ** 32;
  };
  const estimates: number[] = [];
  for (let b = 0; b < 1000; b++)
    estimates.push(
      estimate(
        pairs,
        indices.map(() => indices[Math.floor(random() * indices.length)]!),
      ),
    );
  estimates.sort((a, b) => a - b);
  return [estimate(pairs, indices), estimates[50]!, estimates[949]!];
}

const percent = (value: number) => `${(value * 100).toFixed(2)} %`;
const median = (values: Float64Array) => [...values].sort((a, b) => a - b)[values.length >> 1]!;

const sinkDir = mkdtempSync(join(tmpdir(), "stormlog-steps-"));
const mainSinkDir = mkdtempSync(join(tmpdir(), "stormlog-steps-main-"));
const MODES: Record<string, [string, () => Promise<Pairs>]> = {
  aa: ["A/A (nothing tracked)", () => pairedRun(null, null)],
  sink: [
    "sink (worker thread)",
    () => {
      const scheduler = new SteppedScheduler();
      return pairedRun(benchTracker(tf, { sinkDir, scheduler }), scheduler);
    },
  ],
  main: [
    "sink on the training thread",
    () => {
      const scheduler = new SteppedScheduler();
      return pairedRun(benchTracker(tf, { sinkDir: mainSinkDir, sinkThread: "main", scheduler }), scheduler);
    },
  ],
  none: [
    "no sink",
    () => {
      const scheduler = new SteppedScheduler();
      return pairedRun(benchTracker(tf, { scheduler }), scheduler);
    },
  ],
};
const selected = (process.env.MODES ?? "aa,sink,main,none").split(",").map((mode) => mode.trim());
for (const mode of selected) {
  if (!(mode in MODES))
    throw new Error(`unknown mode "${mode}" in MODES; use any of ${Object.keys(MODES).join(",")}`);
}

console.log(
  `tfjs ${packageName} (${tf.getBackend()}): ${PAIRS} pairs of steps per mode, tracked and untracked alternating ` +
    "(ABBA); overhead of tracking every step, estimated from the pairs (see the file's comment), 90 % bootstrap interval",
);
for (const mode of selected) {
  const [label, run] = MODES[mode]!;
  const pairs = await run();
  const all = Array.from(pairs.tracked, (_, i) => i);
  const kept = all.filter(
    (i) => Math.abs(Math.log(pairs.tracked[i]! / pairs.untracked[i]!)) <= OUTLIER_LOG_RATIO,
  );
  const [value, low, high] = withInterval(pairs, kept);
  const [allValue, allLow, allHigh] = withInterval(pairs, all);
  const wall = pairs.tracked.reduce((a, b) => a + b, 0) + pairs.untracked.reduce((a, b) => a + b, 0);
  const timerWork = pairs.timerWork.reduce((a, b) => a + b, 0);
  console.log(
    `${label.padEnd(28)} ${percent(value).padStart(7)} (${percent(low)} .. ${percent(high)}), ` +
      `${PAIRS - kept.length} pairs over 25 % left out; all pairs ${percent(allValue)} (${percent(allLow)} .. ${percent(allHigh)}); ` +
      `median step ${median(pairs.untracked).toFixed(2)} ms untracked, ${median(pairs.tracked).toFixed(2)} ms tracked; ` +
      `timer work ${percent(timerWork / wall)} of the run's wall time`,
  );
}
rmSync(sinkDir, { recursive: true, force: true });
rmSync(mainSinkDir, { recursive: true, force: true });
