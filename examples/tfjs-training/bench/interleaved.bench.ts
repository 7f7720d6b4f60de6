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
 * A tracked step sends its phases to the tracker; the tracker's timers run only at the start of a
 * tracked step (a timer that came due waits for it, ~20 ms at most), so the sampling ticks, the
 * hand-overs to the sink's worker and the worker's work they start (a few ms, beside the step)
 * all fall in tracked steps. Records come from tracked steps only, so per-record work is what
 * tracking every step would cost per step; sampling ticks come as often as in a fully tracked run,
 * which puts all of them in half the steps. Hence the estimate of tracking every step:
 *   (sum tracked - sum untracked - sampling ticks' time / 2) / sum untracked,
 * which errs towards more overhead (what a tick leaves behind, cold caches, and the hand-overs'
 * fixed cost still count twice). Pairs where one step took 25 % more than the other straddle a
 * regime switch or a full collection, which tracking (under 0.5 ms per step) does not cause; the
 * estimate is printed without them (the figure to read; how many of them had the tracked step
 * slower shows that they are left out evenly) and over all pairs. The A/A line (no tracker, both
 * steps alike) shows what the method reads when there is nothing to find. What pairing cannot see:
 * garbage the tracker leaves, collected in whichever step comes next; `bench` times whole segments
 * and counts collections.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PhaseHost, Scheduler, TimerHandle } from "@stormlog/core";
import { noopPhaseHost } from "@stormlog/phases";
import type { MemoryTracker } from "@stormlog/tracker";
import { trainCustomLoop } from "../src/train.js";
import { BENCH_SAMPLING_INTERVAL_MS, benchTracker, benchTraining, bootstrapInterval } from "./setup.js";

const PAIRS = Number(process.env.PAIRS ?? 3000);
const WARM_UP_STEPS = 100;
/** |log(tracked / untracked)| above this: a regime switch or a full collection, not tracking. */
const OUTLIER_LOG_RATIO = Math.log(1.25);

/**
 * The system scheduler, except that a timer coming due waits for `runDue()`, called at the start of
 * each tracked step, so the tracker's timer work and the sink worker's work it starts both fall in
 * tracked steps. Time spent in callbacks is summed, sampling ticks apart.
 */
class SteppedScheduler implements Scheduler {
  private readonly due = new Set<() => void>();
  /** Milliseconds spent in sampling ticks (timers of the sampling interval) so far. */
  samplingMs = 0;
  /** Milliseconds spent in other timers (hand-overs to the sink) so far. */
  otherMs = 0;

  setTimeout(callback: () => void, delayMs: number): TimerHandle {
    // The tracker schedules its next tick an interval after the last one began: 100 ms minus that tick's time.
    const sampling = delayMs > 0.9 * BENCH_SAMPLING_INTERVAL_MS && delayMs <= BENCH_SAMPLING_INTERVAL_MS;
    const fire = () => {
      this.due.delete(fire);
      const started = performance.now();
      callback();
      const spent = performance.now() - started;
      if (sampling) this.samplingMs += spent;
      else this.otherMs += spent;
    };
    const timer = setTimeout(() => this.due.add(fire), delayMs);
    timer.unref();
    return { timer, fire };
  }

  clearTimeout(handle: TimerHandle): void {
    const { timer, fire } = handle as { timer: ReturnType<typeof setTimeout>; fire: () => void };
    clearTimeout(timer);
    this.due.delete(fire);
  }

  /** Runs the timers that came due. */
  runDue(): void {
    for (const fire of [...this.due]) fire();
  }
}

const { tf, packageName, config, model, optimizer, data } = await benchTraining(1);
const oneStep = { ...config, epochs: 1, batchesPerEpoch: 1 };

/** One step's wall time, and the tracker's timer work inside it. */
async function timedStep(host: PhaseHost, scheduler: SteppedScheduler | null): Promise<[number, number]> {
  const samplingBefore = scheduler?.samplingMs ?? 0;
  const started = performance.now();
  scheduler?.runDue();
  await trainCustomLoop(tf, host, model, optimizer, data, oneStep);
  const elapsed = performance.now() - started;
  return [elapsed, (scheduler?.samplingMs ?? 0) - samplingBefore];
}

/** Per pair: the tracked step, the untracked step, the sampling ticks' time in the tracked step (ms). */
interface Pairs {
  tracked: Float64Array;
  untracked: Float64Array;
  sampling: Float64Array;
  /** Time in the tracker's other timers (hand-overs), over the whole run. */
  otherTimersMs: number;
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
    sampling: new Float64Array(PAIRS),
    otherTimersMs: 0,
  };
  const otherBefore = scheduler?.otherMs ?? 0;
  for (let pair = 0; pair < PAIRS; pair++) {
    let tracked: [number, number];
    if (pair % 2 === 0) {
      tracked = await timedStep(trackedHost, scheduler);
      pairs.untracked[pair] = (await timedStep(noopPhaseHost, null))[0];
    } else {
      pairs.untracked[pair] = (await timedStep(noopPhaseHost, null))[0];
      tracked = await timedStep(trackedHost, scheduler);
    }
    [pairs.tracked[pair], pairs.sampling[pair]] = tracked;
  }
  pairs.otherTimersMs = (scheduler?.otherMs ?? 0) - otherBefore;
  scheduler?.runDue();
  await tracker?.stop();
  return pairs;
}

/** The overhead of tracking every step, estimated from the given pairs (see the file's comment). */
function estimate(pairs: Pairs, indices: readonly number[]): number {
  let tracked = 0;
  let untracked = 0;
  let sampling = 0;
  for (const i of indices) {
    tracked += pairs.tracked[i]!;
    untracked += pairs.untracked[i]!;
    sampling += pairs.sampling[i]!;
  }
  return (tracked - untracked - sampling / 2) / untracked;
}

/** The estimate and its 90 % bootstrap interval over pairs (fixed seed). */
function withInterval(pairs: Pairs, indices: readonly number[]): [number, number, number] {
  return [estimate(pairs, indices), ...bootstrapInterval(indices, (sample) => estimate(pairs, sample))];
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
  const slowerTracked = all.filter(
    (i) => Math.log(pairs.tracked[i]! / pairs.untracked[i]!) > OUTLIER_LOG_RATIO,
  ).length;
  const [value, low, high] = withInterval(pairs, kept);
  const [allValue, allLow, allHigh] = withInterval(pairs, all);
  const wall = pairs.tracked.reduce((a, b) => a + b, 0) + pairs.untracked.reduce((a, b) => a + b, 0);
  const sampling = pairs.sampling.reduce((a, b) => a + b, 0);
  console.log(
    `${label.padEnd(28)} ${percent(value).padStart(7)} (${percent(low)} .. ${percent(high)}), ` +
      `${PAIRS - kept.length} pairs over 25 % left out (${slowerTracked} with the tracked step slower); all pairs ${percent(allValue)} (${percent(allLow)} .. ${percent(allHigh)}); ` +
      `median step ${median(pairs.untracked).toFixed(2)} ms untracked, ${median(pairs.tracked).toFixed(2)} ms tracked; ` +
      `sampling ticks ${percent(sampling / wall)}, hand-overs ${percent(pairs.otherTimersMs / wall)} of the run's wall time`,
  );
}
rmSync(sinkDir, { recursive: true, force: true });
rmSync(mainSinkDir, { recursive: true, force: true });
