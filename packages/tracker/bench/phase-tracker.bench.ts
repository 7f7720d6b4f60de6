// Phase enter+exit through a tracker. Goals: <= 150 ns running without boundary readings (no sink);
// <= 500 ns with a tfjs-like readSync() boundary reading and the default sink (its worker, fed through
// the shared record ring). The default sink is also measured inside a step that computes, as a
// training step does: in a bare loop of phases the sink's worker, building and writing each record,
// cannot keep up with a few hundred nanoseconds a phase, and part of the loop measures the ring's
// overflow into messages.
//
// STORMLOG_BENCH_BASE=<another checkout of this repository> adds the same rows for that checkout's
// tracker, measured in the same run (dependencies resolve from its own packages/*/node_modules).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { TelemetrySink } from "@stormlog/sink";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { MemoryTracker } from "../src/index.js";

const capabilities = {
  ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
  supports_allocator_allocated: true,
  supports_allocator_reserved: true,
};
let bytes = 1_000_000;
// What the tfjs adapter's readSync does: read engine counters into a fresh result (~20 ns).
const read = (): SampleResult => ({
  kind: "full",
  reading: { allocator_allocated_bytes: bytes, allocator_reserved_bytes: bytes + 4096 },
});
const tfjsLike: MemoryCollector = {
  specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
  name: "stormlog.tfjs_tracker",
  deviceId: 0,
  capabilities,
  availability: () => ({ available: true }),
  sample: read,
  readSync: read,
};
const { readSync: _drop, ...withoutReadSync } = tfjsLike;
const asyncOnly: MemoryCollector = withoutReadSync;

/** Warnings that a tracker stopped using its sink. */
const sinkFailures: string[] = [];
const common = {
  logger: {
    warn: (message: string) => {
      if (message.includes("disabling the telemetry sink")) sinkFailures.push(message);
      console.warn(message);
    },
  },
  env: false as const,
  handleProcessExit: false,
  registerGlobal: false,
  samplingIntervalMs: 60_000,
};
const dir = mkdtempSync(join(tmpdir(), "stormlog-bench-"));
const quiet = { warn: () => undefined };

/** What the bench needs of a tracker (this checkout's, or the base's). */
interface PhaseTracker {
  start(): Promise<void>;
  stop(): Promise<void>;
  sampleNow(): Promise<unknown>;
  phase<T>(name: string, fn: () => T): T;
  phase(name: string): Disposable;
}
type TrackerClass = new (options: Record<string, unknown>) => PhaseTracker;

const step = () => {
  bytes += 8;
  return bytes;
};
const WARM_UP_PHASES = 1000;

/** One checkout's trackers, started. */
async function trackersOf(Tracker: TrackerClass, label: string) {
  const made = {
    stopped: new Tracker({ ...common, collectors: [asyncOnly] }),
    plain: new Tracker({ ...common, collectors: [asyncOnly], boundaryReadings: false }),
    reading: new Tracker({ ...common, collectors: [tfjsLike] }),
    // A sink given as a writer: records built and appended on this thread. A sync loop never lets it
    // drain: its queue is bounded so appends reach a steady state (queued or counted as dropped).
    givenSink: new Tracker({
      ...common,
      collectors: [tfjsLike],
      sink: new TelemetrySink({
        rootDir: join(dir, `${label}-given`),
        handleProcessExit: false,
        maxQueueEvents: 2048,
        logger: quiet,
      }),
    }),
    // The default: sink options, written by the sink's worker.
    workerSink: new Tracker({
      ...common,
      collectors: [tfjsLike],
      sink: {
        rootDir: join(dir, `${label}-worker`),
        handleProcessExit: false,
        fsync: "never",
        logger: quiet,
      },
    }),
    readingInSteps: new Tracker({ ...common, collectors: [tfjsLike] }),
    workerSinkInSteps: new Tracker({
      ...common,
      collectors: [tfjsLike],
      sink: { rootDir: join(dir, `${label}-steps`), handleProcessExit: false, fsync: "never", logger: quiet },
    }),
  };
  for (const [name, tracker] of Object.entries(made)) {
    if (name === "stopped") continue;
    await tracker.start();
    await tracker.sampleNow();
    // A session's first phases pay one-time work (the leak watch's first window, its timer): a
    // first call slower than mitata's batch threshold (65 us) would make it time every call alone,
    // timer reads included, instead of batches of 4096.
    for (let i = 0; i < WARM_UP_PHASES; i++) tracker.phase("forward", step);
  }
  return made;
}

/** About 4 us of arithmetic: a stand-in for a step's own work between its phase boundaries. */
let acc = 0;
const compute = () => {
  for (let i = 0; i < 800; i++) acc = (acc * 31 + i) | 0;
  bytes += 8;
  return acc;
};

/** Phases run through each sink tracker, to tell what share of their records was dropped. */
interface PhaseCounts {
  given: number;
  worker: number;
  steps: number;
}
const noPhases = (): PhaseCounts => ({ given: 0, worker: 0, steps: 0 });
const checkouts: {
  label: string;
  name: string;
  trackers: Awaited<ReturnType<typeof trackersOf>>;
  phases: PhaseCounts;
}[] = [
  {
    label: "",
    name: "this",
    trackers: await trackersOf(MemoryTracker as unknown as TrackerClass, "this"),
    phases: noPhases(),
  },
];
const baseRoot = process.env.STORMLOG_BENCH_BASE;
if (baseRoot !== undefined && baseRoot !== "") {
  const base = (await import(pathToFileURL(join(baseRoot, "packages/tracker/src/index.ts")).href)) as {
    MemoryTracker: TrackerClass;
  };
  checkouts.push({
    label: " [base]",
    name: "base",
    trackers: await trackersOf(base.MemoryTracker, "base"),
    phases: noPhases(),
  });
}

const ROWS = {
  stopped: "tracker/phase(name, fn), tracker not started",
  plain: "tracker/phase(name, fn), running, no boundary reading",
  reading: "tracker/phase(name, fn), running, tfjs readSync boundary reading",
  givenSink: "tracker/phase(name, fn), tfjs readSync + a sink given as writer (this thread)",
  workerSink: "tracker/phase(name, fn), tfjs readSync + default sink (worker ring)",
  scope: "tracker/using scope, tfjs readSync + default sink (worker ring)",
};
group("phase enter+exit through a tracker", () => {
  summary(() => {
    for (const { label, trackers: t, phases } of checkouts) {
      bench(ROWS.stopped + label, () => do_not_optimize(t.stopped.phase("forward", step)));
      bench(ROWS.plain + label, () => do_not_optimize(t.plain.phase("forward", step)));
      bench(ROWS.reading + label, () => do_not_optimize(t.reading.phase("forward", step)));
      bench(ROWS.givenSink + label, () => {
        phases.given++;
        return do_not_optimize(t.givenSink.phase("forward", step));
      });
      bench(ROWS.workerSink + label, () => {
        phases.worker++;
        return do_not_optimize(t.workerSink.phase("forward", step));
      });
      bench(ROWS.scope + label, () => {
        phases.worker++;
        using scope = t.workerSink.phase("forward");
        do_not_optimize(scope);
      });
    }
  });
});

const STEP_GROUP = "phase enter+exit around a step that computes (~4 us)";
const STEP = {
  alone: "step alone",
  reading: "tracker/phase(name, step), tfjs readSync boundary reading, no sink",
  worker: "tracker/phase(name, step), tfjs readSync + default sink (worker ring)",
};
group(STEP_GROUP, () => {
  bench(STEP.alone, () => do_not_optimize(compute()));
  for (const { label, trackers: t, phases } of checkouts) {
    bench(STEP.reading + label, () => do_not_optimize(t.readingInSteps.phase("forward", compute)));
    bench(STEP.worker + label, () => {
      phases.steps++;
      return do_not_optimize(t.workerSinkInSteps.phase("forward", compute));
    });
  }
});

const results = await run();
const p50 = new Map<string, number>();
const mean = new Map<string, number>();
for (const trial of results.benchmarks) {
  const inGroup = results.layout[trial.group ?? -1]?.name;
  for (const r of trial.runs) {
    if (!r.stats) continue;
    p50.set(`${inGroup}:${r.name}`, r.stats.p50);
    mean.set(`${inGroup}:${r.name}`, r.stats.avg);
  }
}
const ns = (value: number) => `${value.toFixed(0)} ns`;
const alone = p50.get(`${STEP_GROUP}:${STEP.alone}`) ?? Number.NaN;
const aloneMean = mean.get(`${STEP_GROUP}:${STEP.alone}`) ?? Number.NaN;
for (const { label } of checkouts) {
  const loop = (row: string) => p50.get(`phase enter+exit through a tracker:${row}${label}`) ?? Number.NaN;
  const inStep = (row: string) => (p50.get(`${STEP_GROUP}:${row}${label}`) ?? Number.NaN) - alone;
  const loopMean = (row: string) =>
    mean.get(`phase enter+exit through a tracker:${row}${label}`) ?? Number.NaN;
  const inStepMean = (row: string) => (mean.get(`${STEP_GROUP}:${row}${label}`) ?? Number.NaN) - aloneMean;
  console.log(
    `medians${label || " [this checkout]"}: no reading ${ns(loop(ROWS.plain))} (goal <= 150); ` +
      `readSync ${ns(loop(ROWS.reading))}; readSync + default sink ${ns(loop(ROWS.workerSink))} in a bare loop, ` +
      `${ns(inStep(STEP.worker))} inside a step (goal <= 500; readSync alone there ${ns(inStep(STEP.reading))}); ` +
      `readSync + a given sink ${ns(loop(ROWS.givenSink))}`,
  );
  // Records reach a sink in batches (every 256 phase records at most): the median phase copies none,
  // the mean carries the batches' share.
  console.log(
    `means${label || " [this checkout]"}: no reading ${ns(loopMean(ROWS.plain))}; readSync ${ns(loopMean(ROWS.reading))}; ` +
      `readSync + default sink ${ns(loopMean(ROWS.workerSink))} in a bare loop, ${ns(inStepMean(STEP.worker))} inside a step; ` +
      `readSync + a given sink ${ns(loopMean(ROWS.givenSink))}`,
  );
}
if (checkouts.length === 2) {
  const ratio = (row: string) =>
    (
      (p50.get(`phase enter+exit through a tracker:${row}`) ?? Number.NaN) /
      (p50.get(`phase enter+exit through a tracker:${row} [base]`) ?? Number.NaN)
    ).toFixed(2);
  console.log(
    `this / base, medians: no reading x${ratio(ROWS.plain)}, readSync x${ratio(ROWS.reading)}, ` +
      `readSync + default sink x${ratio(ROWS.workerSink)}, readSync + a given sink x${ratio(ROWS.givenSink)}`,
  );
}
await Promise.all(
  checkouts.flatMap(({ trackers }) => Object.values(trackers).map((tracker) => tracker.stop())),
);
// Records a sink dropped and counted (its queue full, or its worker too far behind) cost less than
// written ones: their share is part of what each row measured.
const droppedIn = (root: string): number => {
  const manifest = JSON.parse(readFileSync(join(root, "manifest.json"), "utf8")) as {
    session_losses?: { dropped_events: number }[];
  };
  return (manifest.session_losses ?? []).reduce((sum, loss) => sum + loss.dropped_events, 0);
};
for (const { label, name, phases } of checkouts) {
  const share = (kind: string, count: number) => {
    const dropped = droppedIn(join(dir, `${name}-${kind}`));
    return `${((100 * dropped) / Math.max(1, 2 * count)).toFixed(1)} % of ${2 * count}`;
  };
  console.log(
    `records dropped${label || " [this checkout]"}: default sink ${share("worker", phases.worker)} in a bare loop, ` +
      `${share("steps", phases.steps)} inside a step; a given sink ${share("given", phases.given)}`,
  );
}
// A sink that failed would make its rows measure a tracker that writes nothing.
if (sinkFailures.length > 0) throw new Error(`a bench tracker's sink failed: ${sinkFailures.join("; ")}`);
rmSync(dir, { recursive: true, force: true });
