/**
 * Tracking overhead measured step against step: one tracker session runs throughout (the goal's
 * setting: tfjs + process collectors, 100 ms sampling, the sink on), and consecutive training steps
 * alternate between tracked and untracked, in pairs whose order alternates (ABBA).
 *
 *   pnpm --filter tfjs-training bench:steps     (PAIRS=3000 per mode; MODES=aa,sink,main,none: ~10 min;
 *   MODES=aa,sink,plain compares the default with birth-phase attribution and leak alerts off, and
 *   noattr / noleak with each of the two off alone;
 *   STORMLOG_BENCH_BASE=<another checkout, installed> runs modes sink and none side by side with that
 *   checkout's tracker, in alternating blocks of 100 pairs: the one fair comparison on this VM, whose
 *   estimates for the same code differ by 0.3-0.4 % between runs minutes apart)
 *
 * Why: on a shared VM a training step's time switches between regimes (here ~20 ms and ~33 ms per
 * step, each lasting one to several seconds), so two segments of 100 steps timed seconds apart
 * differ by 10-30 % and `bench`'s per-segment ratio scatters by a percent or more from run to run.
 * Two steps timed one after the other almost always run in the same regime.
 *
 * A tracked step sends its phases to the tracker. The tracker's scheduler keeps time only during
 * tracked steps, and runs a timer that came due at the start of the next tracked step (where a run
 * that tracks every step would run it: the loop yields between steps). So the sampling ticks, the
 * hand-overs to the sink's worker and the worker's work they start (a few ms, beside the step) all
 * fall in tracked steps, as often per tracked step, each hand-over carrying as many records, as when
 * every step is tracked (the bench prints the rates). Hence the estimate of tracking every step:
 *   (sum tracked - sum untracked) / sum untracked,
 * in which what a tick leaves behind (cold caches) and each hand-over's fixed cost count as often
 * as they would. (The previous version kept wall-clock time, which put twice the ticks and
 * hand-overs in each tracked step, and took half the ticks' own time back out: their aftermath and
 * the hand-overs' fixed cost still counted twice.) Pairs where one step took 25 % more than the
 * other straddle a regime switch or a full collection, which tracking (under 0.5 ms per step) does
 * not cause; the estimate is printed without them (the figure to read; how many of them had the
 * tracked step slower shows that they are left out evenly) and over all pairs. The A/A line (no
 * tracker, both steps alike) shows what the method reads when there is nothing to find. What
 * pairing cannot see: garbage the tracker leaves, collected in whichever step comes next (timed per
 * 150-step segment, collections took 6.91 % of tracked and 6.73 % of untracked segments' time).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PhaseHost, Scheduler, TimerHandle } from "@stormlog/core";
import { noopPhaseHost } from "@stormlog/phases";
import type { MemoryTracker } from "@stormlog/tracker";
import { trainCustomLoop } from "../src/train.js";
import {
  BENCH_SAMPLING_INTERVAL_MS,
  baseTrackerKit,
  benchTracker,
  benchTraining,
  bootstrapInterval,
  type TrackerKit,
  thisTrackerKit,
} from "./setup.js";

const PAIRS = Number(process.env.PAIRS ?? 3000);
const WARM_UP_STEPS = 100;
/** |log(tracked / untracked)| above this: a regime switch or a full collection, not tracking. */
const OUTLIER_LOG_RATIO = Math.log(1.25);

/**
 * A scheduler whose clock runs only during tracked steps: a timer is due once tracked steps have
 * taken its delay, and runs at the start of the next tracked step (as a timer in a run that tracks
 * every step runs at the next step's start, where the loop yields). So the tracker's timer work,
 * and the sink worker's work it starts, all fall in tracked steps, as often per tracked step as in
 * such a run. Timer callbacks are counted and timed, sampling ticks apart.
 */
interface SteppedTimer {
  readonly dueMs: number;
  readonly fire: () => void;
}

class TrackedTimeScheduler implements Scheduler {
  private readonly timers = new Set<SteppedTimer>();
  /** Milliseconds of tracked steps so far, the current one excluded. */
  private trackedMs = 0;
  private stepStartedAt: number | null = null;
  /** Sampling ticks (timers of the sampling interval) so far, and the milliseconds spent in them. */
  samplingTicks = 0;
  samplingMs = 0;
  /** Other timers (hand-overs to the sink) so far, and the milliseconds spent in them. */
  otherTimers = 0;
  otherMs = 0;

  private now(): number {
    return this.trackedMs + (this.stepStartedAt === null ? 0 : performance.now() - this.stepStartedAt);
  }

  setTimeout(callback: () => void, delayMs: number): TimerHandle {
    // The tracker schedules its next tick an interval after the last one began: 100 ms minus that tick's time.
    const sampling = delayMs > 0.9 * BENCH_SAMPLING_INTERVAL_MS && delayMs <= BENCH_SAMPLING_INTERVAL_MS;
    const timer: SteppedTimer = {
      dueMs: this.now() + delayMs,
      fire: () => {
        const started = performance.now();
        callback();
        const spent = performance.now() - started;
        if (sampling) {
          this.samplingTicks++;
          this.samplingMs += spent;
        } else {
          this.otherTimers++;
          this.otherMs += spent;
        }
      },
    };
    this.timers.add(timer);
    return timer;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers.delete(handle as SteppedTimer);
  }

  /** Starts the counts afresh (after the warm-up). */
  resetCounts(): void {
    this.samplingTicks = 0;
    this.samplingMs = 0;
    this.otherTimers = 0;
    this.otherMs = 0;
  }

  /** Starts a tracked step: runs the timers that came due. */
  beginStep(): void {
    this.stepStartedAt = performance.now();
    const now = this.trackedMs;
    for (const timer of [...this.timers]) {
      if (timer.dueMs > now || !this.timers.has(timer)) continue;
      this.timers.delete(timer);
      timer.fire();
    }
  }

  endStep(): void {
    if (this.stepStartedAt !== null) this.trackedMs += performance.now() - this.stepStartedAt;
    this.stepStartedAt = null;
  }
}

const { tf, packageName, config, model, optimizer, data } = await benchTraining(1);
const oneStep = { ...config, epochs: 1, batchesPerEpoch: 1 };

/** One step's wall time. */
async function timedStep(host: PhaseHost, scheduler: TrackedTimeScheduler | null): Promise<number> {
  const started = performance.now();
  scheduler?.beginStep();
  await trainCustomLoop(tf, host, model, optimizer, data, oneStep);
  scheduler?.endStep();
  return performance.now() - started;
}

/** Per pair, the tracked and the untracked step (ms); the tracker's timers over the paired steps. */
interface Pairs {
  readonly tracked: Float64Array;
  readonly untracked: Float64Array;
  readonly timers: Pick<TrackedTimeScheduler, "samplingTicks" | "samplingMs" | "otherTimers" | "otherMs">;
}

/** `count` (default PAIRS) pairs of steps, ABBA; `tracker` null is the A/A run (both steps untracked). */
async function pairedRun(
  tracker: MemoryTracker | null,
  scheduler: TrackedTimeScheduler | null,
  count = PAIRS,
  warmUpSteps = WARM_UP_STEPS,
): Promise<Pairs> {
  await tracker?.start();
  const trackedHost: PhaseHost = tracker ?? noopPhaseHost;
  for (let step = 0; step < warmUpSteps; step++)
    await timedStep(step % 2 ? trackedHost : noopPhaseHost, step % 2 ? scheduler : null);
  const tracked = new Float64Array(count);
  const untracked = new Float64Array(count);
  scheduler?.resetCounts();
  for (let pair = 0; pair < count; pair++) {
    if (pair % 2 === 0) {
      tracked[pair] = await timedStep(trackedHost, scheduler);
      untracked[pair] = await timedStep(noopPhaseHost, null);
    } else {
      untracked[pair] = await timedStep(noopPhaseHost, null);
      tracked[pair] = await timedStep(trackedHost, scheduler);
    }
  }
  const { samplingTicks = 0, samplingMs = 0, otherTimers = 0, otherMs = 0 } = scheduler ?? {};
  await tracker?.stop();
  return { tracked, untracked, timers: { samplingTicks, samplingMs, otherTimers, otherMs } };
}

/** The overhead of tracking every step, estimated from the given pairs (see the file's comment). */
function estimate(pairs: Pairs, indices: readonly number[]): number {
  let tracked = 0;
  let untracked = 0;
  for (const i of indices) {
    tracked += pairs.tracked[i]!;
    untracked += pairs.untracked[i]!;
  }
  return (tracked - untracked) / untracked;
}

/** The estimate and its 90 % bootstrap interval over pairs (fixed seed). */
function withInterval(pairs: Pairs, indices: readonly number[]): [number, number, number] {
  return [estimate(pairs, indices), ...bootstrapInterval(indices, (sample) => estimate(pairs, sample))];
}

const percent = (value: number) => `${(value * 100).toFixed(2)} %`;
const median = (values: Float64Array) => [...values].sort((a, b) => a - b)[values.length >> 1]!;

const sinkDir = mkdtempSync(join(tmpdir(), "stormlog-steps-"));
const mainSinkDir = mkdtempSync(join(tmpdir(), "stormlog-steps-main-"));
const plainSinkDir = mkdtempSync(join(tmpdir(), "stormlog-steps-plain-"));
const MODES: Record<string, [string, () => Promise<Pairs>]> = {
  aa: ["A/A (nothing tracked)", () => pairedRun(null, null)],
  sink: [
    "sink (worker thread)",
    () => {
      const scheduler = new TrackedTimeScheduler();
      return pairedRun(benchTracker(tf, { sinkDir, scheduler }), scheduler);
    },
  ],
  plain: [
    "sink, no attribution, no leak alerts",
    () => {
      const scheduler = new TrackedTimeScheduler();
      return pairedRun(
        benchTracker(tf, { sinkDir: plainSinkDir, scheduler, leakEvidence: false }),
        scheduler,
      );
    },
  ],
  noattr: [
    "sink, no attribution (leak alerts on)",
    () => {
      const scheduler = new TrackedTimeScheduler();
      return pairedRun(benchTracker(tf, { sinkDir: plainSinkDir, scheduler, attribution: false }), scheduler);
    },
  ],
  noleak: [
    "sink, no leak alerts (attribution on)",
    () => {
      const scheduler = new TrackedTimeScheduler();
      return pairedRun(benchTracker(tf, { sinkDir: plainSinkDir, scheduler, leakAlerts: false }), scheduler);
    },
  ],
  main: [
    "sink on the training thread",
    () => {
      const scheduler = new TrackedTimeScheduler();
      return pairedRun(benchTracker(tf, { sinkDir: mainSinkDir, sinkThread: "main", scheduler }), scheduler);
    },
  ],
  none: [
    "no sink",
    () => {
      const scheduler = new TrackedTimeScheduler();
      return pairedRun(benchTracker(tf, { scheduler }), scheduler);
    },
  ],
};
/** Pairs per block when two checkouts run side by side. */
const BLOCK_PAIRS = 100;
/** Warm-up steps of a block after the first (the tracker starts a new session each block). */
const BLOCK_WARM_UP_STEPS = 20;

/** The pairs of several runs, one after the other. */
function concatPairs(parts: readonly Pairs[]): Pairs {
  const join = (pick: (pairs: Pairs) => Float64Array) => {
    const out = new Float64Array(parts.reduce((sum, part) => sum + pick(part).length, 0));
    let at = 0;
    for (const part of parts) {
      out.set(pick(part), at);
      at += pick(part).length;
    }
    return out;
  };
  const sum = (key: keyof Pairs["timers"]) => parts.reduce((total, part) => total + part.timers[key], 0);
  return {
    tracked: join((pairs) => pairs.tracked),
    untracked: join((pairs) => pairs.untracked),
    timers: {
      samplingTicks: sum("samplingTicks"),
      samplingMs: sum("samplingMs"),
      otherTimers: sum("otherTimers"),
      otherMs: sum("otherMs"),
    },
  };
}

/**
 * Two trackers measured side by side: blocks of BLOCK_PAIRS pairs, each tracker's block in turn
 * (their order alternating), so that the VM's slow and fast spells fall on both alike.
 */
async function sideBySide(
  make: readonly [() => [MemoryTracker, TrackedTimeScheduler], () => [MemoryTracker, TrackedTimeScheduler]],
): Promise<[Pairs, Pairs]> {
  const made = make.map((factory) => factory());
  const parts: [Pairs[], Pairs[]] = [[], []];
  const blocks = Math.max(1, Math.round(PAIRS / BLOCK_PAIRS));
  for (let block = 0; block < blocks; block++) {
    for (const which of block % 2 === 0 ? [0, 1] : [1, 0]) {
      const [tracker, scheduler] = made[which]!;
      parts[which]!.push(
        await pairedRun(tracker, scheduler, BLOCK_PAIRS, block < 2 ? WARM_UP_STEPS : BLOCK_WARM_UP_STEPS),
      );
    }
  }
  return [concatPairs(parts[0]), concatPairs(parts[1])];
}

const selected = (process.env.MODES ?? "aa,sink,main,none").split(",").map((mode) => mode.trim());
for (const mode of selected) {
  if (!(mode in MODES))
    throw new Error(`unknown mode "${mode}" in MODES; use any of ${Object.keys(MODES).join(",")}`);
}

console.log(
  `tfjs ${packageName} (${tf.getBackend()}): ${PAIRS} pairs of steps per mode, tracked and untracked alternating ` +
    "(ABBA); overhead of tracking every step, estimated from the pairs (see the file's comment), 90 % bootstrap interval",
);
/** Prints one mode's estimate, its interval, and the rates of the tracker's timers. */
function report(label: string, pairs: Pairs): void {
  const all = Array.from(pairs.tracked, (_, i) => i);
  const kept = all.filter(
    (i) => Math.abs(Math.log(pairs.tracked[i]! / pairs.untracked[i]!)) <= OUTLIER_LOG_RATIO,
  );
  const slowerTracked = all.filter(
    (i) => Math.log(pairs.tracked[i]! / pairs.untracked[i]!) > OUTLIER_LOG_RATIO,
  ).length;
  const [value, low, high] = withInterval(pairs, kept);
  const [allValue, allLow, allHigh] = withInterval(pairs, all);
  const trackedMs = pairs.tracked.reduce((a, b) => a + b, 0);
  const wall = trackedMs + pairs.untracked.reduce((a, b) => a + b, 0);
  const { samplingTicks, samplingMs, otherTimers, otherMs } = pairs.timers;
  // Per second of tracked steps; a run tracking every step has at most 1000 / interval ticks a second.
  const rate = (count: number) => (count / trackedMs) * 1000;
  console.log(
    `${label.padEnd(28)} ${percent(value).padStart(7)} (${percent(low)} .. ${percent(high)}), ` +
      `${PAIRS - kept.length} pairs over 25 % left out (${slowerTracked} with the tracked step slower); all pairs ${percent(allValue)} (${percent(allLow)} .. ${percent(allHigh)}); ` +
      `median step ${median(pairs.untracked).toFixed(2)} ms untracked, ${median(pairs.tracked).toFixed(2)} ms tracked; ` +
      `per second of tracked steps: ${rate(samplingTicks).toFixed(1)} sampling ticks (at most ${(1000 / BENCH_SAMPLING_INTERVAL_MS).toFixed(1)}), ` +
      `${rate(otherTimers).toFixed(1)} hand-overs; their time ${percent(samplingMs / trackedMs)} and ${percent(otherMs / trackedMs)} of tracked steps' (wall ${(wall / 1000).toFixed(0)} s)`,
  );
}

// STORMLOG_BENCH_BASE=<another checkout>: each mode (A/A aside) runs this checkout's tracker and
// that checkout's side by side, in alternating blocks.
const baseRoot = process.env.STORMLOG_BENCH_BASE;
const baseKit = baseRoot ? await baseTrackerKit(baseRoot) : null;
const SIDE_BY_SIDE: Record<string, (kit: TrackerKit) => () => [MemoryTracker, TrackedTimeScheduler]> = {
  sink: (kit) => () => {
    const scheduler = new TrackedTimeScheduler();
    return [
      benchTracker(tf, { sinkDir: mkdtempSync(join(sinkDir, "side-by-side-")), scheduler }, kit),
      scheduler,
    ];
  },
  none: (kit) => () => {
    const scheduler = new TrackedTimeScheduler();
    return [benchTracker(tf, { scheduler }, kit), scheduler];
  },
};
for (const mode of selected) {
  const [label, run] = MODES[mode]!;
  const sideBySideOf = SIDE_BY_SIDE[mode];
  if (baseKit !== null && sideBySideOf !== undefined) {
    const [mine, base] = await sideBySide([sideBySideOf(thisTrackerKit), sideBySideOf(baseKit)]);
    report(label, mine);
    report(`${label} [base]`, base);
    continue;
  }
  report(label, await run());
}
rmSync(sinkDir, { recursive: true, force: true });
rmSync(mainSinkDir, { recursive: true, force: true });
rmSync(plainSinkDir, { recursive: true, force: true });
