// Phase enter+exit through a tracker. Goals: <= 150 ns running without boundary readings (no sink);
// <= 500 ns with a tfjs-like readSync() boundary reading and the default sink (its worker, fed through
// the shared record ring). The default sink is also measured inside a step that computes, as a
// training step does: in a bare loop of phases the sink's worker, building and writing each record,
// cannot keep up with a few hundred nanoseconds a phase, and part of the loop measures the ring's
// overflow into messages. The tfjs-like collector takes its high-water mark at every boundary, as the
// tfjs collector does; a configuration without it shows that mark's cost side by side.
//
// STORMLOG_BENCH_BASE=<another checkout of this repository> adds the same rows for that checkout's
// tracker, measured in the same run (dependencies resolve from its own packages/*/node_modules).
// Issue #18 set its goals against 593e609, measured on a faster machine (211 ns without a reading,
// 702 ns with readSync and a sink given: 150 and 500 ns are x0.71 of each): with a checkout of
// 593e609 as the base, the bench also says whether this checkout is within those ratios on this
// machine (git worktree add /tmp/base 593e609 && pnpm -C /tmp/base install --offline).
//
// Each tracker configuration runs in a process of its own, as JMH forks per benchmark: with all seven
// trackers in one process their different collectors, sinks and pipelines made the shared phase
// path's call sites polymorphic, and every row paid for it (the "no reading" row read 168-192 ns
// there against 152-153 ns alone, measured alternately in one run), which a process with one tracker,
// the usual case, does not pay. This checkout's and the base's processes alternate, configuration by
// configuration.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { TelemetrySink } from "@stormlog/sink";
import { bench, do_not_optimize, group, run } from "mitata";
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
// And its high-water mark, taken at every boundary: the window's top against both its ends.
let windowStart = bytes;
const takeHighWater = () => {
  const start = windowStart;
  windowStart = bytes;
  return bytes > start + (1 << 30) ? { allocator_allocated_bytes: bytes } : null;
};
const tfjsLike: MemoryCollector = {
  specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
  name: "stormlog.tfjs_tracker",
  deviceId: 0,
  capabilities,
  availability: () => ({ available: true }),
  sample: read,
  readSync: read,
  takeHighWater,
};
const { takeHighWater: _noMark, ...withoutHighWater } = tfjsLike;
const { readSync: _drop, ...withoutReadSync } = withoutHighWater;
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

/** About 4 us of arithmetic: a stand-in for a step's own work between its phase boundaries. */
let acc = 0;
const compute = () => {
  for (let i = 0; i < 800; i++) acc = (acc * 31 + i) | 0;
  bytes += 8;
  return acc;
};

const ROWS = {
  stopped: "tracker/phase(name, fn), tracker not started",
  plain: "tracker/phase(name, fn), running, no boundary reading",
  reading: "tracker/phase(name, fn), running, tfjs readSync boundary reading",
  readingNoMark: "tracker/phase(name, fn), running, tfjs readSync boundary reading, no takeHighWater",
  givenSink: "tracker/phase(name, fn), tfjs readSync + a sink given as writer (this thread)",
  workerSink: "tracker/phase(name, fn), tfjs readSync + default sink (worker ring)",
  scope: "tracker/using scope, tfjs readSync + default sink (worker ring)",
};
const LOOP_GROUP = "phase enter+exit through a tracker";
const STEP_GROUP = "phase enter+exit around a step that computes (~4 us)";
const STEP = {
  alone: "step alone",
  reading: "tracker/phase(name, step), tfjs readSync boundary reading, no sink",
  worker: "tracker/phase(name, step), tfjs readSync + default sink (worker ring)",
};

/** One process's tracker: its options, and the rows measured through it. */
interface Configuration {
  /** Options beyond `common`; `sinkDir` names the sink's directory when it has one. */
  options(sinkDir: string): Record<string, unknown>;
  sink: "none" | "given" | "worker";
  started: boolean;
  /** Registers the rows; sink rows count their phases in `counted` (inline: no wrapper measured). */
  rows(tracker: PhaseTracker, label: string, counted: { phases: number }): void;
}
/** The default sink: options, written by the sink's worker. */
const workerSinkOptions = (sinkDir: string) => ({
  collectors: [tfjsLike],
  sink: { rootDir: sinkDir, handleProcessExit: false, fsync: "never", logger: quiet },
});
const CONFIGURATIONS: Record<string, Configuration> = {
  stopped: {
    options: () => ({ collectors: [asyncOnly] }),
    sink: "none",
    started: false,
    rows: (t, label) =>
      group(LOOP_GROUP, () => bench(ROWS.stopped + label, () => do_not_optimize(t.phase("forward", step)))),
  },
  plain: {
    options: () => ({ collectors: [asyncOnly], boundaryReadings: false }),
    sink: "none",
    started: true,
    rows: (t, label) =>
      group(LOOP_GROUP, () => bench(ROWS.plain + label, () => do_not_optimize(t.phase("forward", step)))),
  },
  reading: {
    options: () => ({ collectors: [tfjsLike] }),
    sink: "none",
    started: true,
    rows: (t, label) =>
      group(LOOP_GROUP, () => bench(ROWS.reading + label, () => do_not_optimize(t.phase("forward", step)))),
  },
  // The same without the high-water mark (a collector without takeHighWater): its cost, side by side.
  readingNoMark: {
    options: () => ({ collectors: [withoutHighWater] }),
    sink: "none",
    started: true,
    rows: (t, label) =>
      group(LOOP_GROUP, () =>
        bench(ROWS.readingNoMark + label, () => do_not_optimize(t.phase("forward", step))),
      ),
  },
  // A sink given as a writer: records built and appended on this thread. A sync loop never lets it
  // drain: its queue is bounded so appends reach a steady state (queued or counted as dropped).
  givenSink: {
    options: (sinkDir) => ({
      collectors: [tfjsLike],
      sink: new TelemetrySink({
        rootDir: sinkDir,
        handleProcessExit: false,
        maxQueueEvents: 2048,
        logger: quiet,
      }),
    }),
    sink: "given",
    started: true,
    rows: (t, label, counted) =>
      group(LOOP_GROUP, () =>
        bench(ROWS.givenSink + label, () => {
          counted.phases++;
          return do_not_optimize(t.phase("forward", step));
        }),
      ),
  },
  // The default: sink options, written by the sink's worker.
  workerSink: {
    options: workerSinkOptions,
    sink: "worker",
    started: true,
    rows: (t, label, counted) =>
      group(LOOP_GROUP, () => {
        bench(ROWS.workerSink + label, () => {
          counted.phases++;
          return do_not_optimize(t.phase("forward", step));
        });
        bench(ROWS.scope + label, () => {
          counted.phases++;
          using scope = t.phase("forward");
          do_not_optimize(scope);
        });
      }),
  },
  // Inside a step: the step alone is measured in the same process, and subtracted.
  readingInSteps: {
    options: () => ({ collectors: [tfjsLike] }),
    sink: "none",
    started: true,
    rows: (t, label) =>
      group(STEP_GROUP, () => {
        bench(STEP.alone + label, () => do_not_optimize(compute()));
        bench(STEP.reading + label, () => do_not_optimize(t.phase("forward", compute)));
      }),
  },
  workerSinkInSteps: {
    options: workerSinkOptions,
    sink: "worker",
    started: true,
    rows: (t, label, counted) =>
      group(STEP_GROUP, () => {
        bench(STEP.alone + label, () => do_not_optimize(compute()));
        bench(STEP.worker + label, () => {
          counted.phases++;
          return do_not_optimize(t.phase("forward", compute));
        });
      }),
  },
};

/** What one process reports: each row's median and mean (ns), and its sink's dropped records. */
interface ProcessResult {
  p50: Record<string, number>;
  mean: Record<string, number>;
  phases: number;
  dropped: number;
  sinkFailures: string[];
}
const RESULT_PREFIX = "phase-tracker-bench-result ";
/** The commit issue #18 measured its phase() figures on (211 ns, 702 ns). */
const ISSUE_18_BASE = "593e609";
const CONFIGURATION_ENV = "STORMLOG_PHASE_BENCH_CONFIGURATION";
const CHECKOUT_ENV = "STORMLOG_PHASE_BENCH_CHECKOUT";

/** Measures one configuration of one checkout's tracker (a child process) and prints its result. */
async function measureOne(name: string, checkoutRoot: string | null): Promise<void> {
  const configuration = CONFIGURATIONS[name];
  if (configuration === undefined) throw new Error(`unknown configuration ${name}`);
  const Tracker =
    checkoutRoot === null
      ? (MemoryTracker as unknown as TrackerClass)
      : (
          (await import(pathToFileURL(join(checkoutRoot, "packages/tracker/src/index.ts")).href)) as {
            MemoryTracker: TrackerClass;
          }
        ).MemoryTracker;
  const label = checkoutRoot === null ? "" : " [base]";
  const dir = mkdtempSync(join(tmpdir(), "stormlog-bench-"));
  const sinkDir = join(dir, "sink");
  const tracker = new Tracker({ ...common, ...configuration.options(sinkDir) });
  const counted = { phases: 0 };
  if (configuration.started) {
    await tracker.start();
    await tracker.sampleNow();
    // A session's first phases pay one-time work (the leak watch's first window, its timer): a
    // first call slower than mitata's batch threshold (65 us) would make it time every call alone,
    // timer reads included, instead of batches of 4096.
    for (let i = 0; i < WARM_UP_PHASES; i++) tracker.phase("forward", step);
  }
  configuration.rows(tracker, label, counted);
  const results = await run();
  await tracker.stop();
  const out: ProcessResult = { p50: {}, mean: {}, phases: counted.phases, dropped: 0, sinkFailures };
  for (const trial of results.benchmarks) {
    for (const r of trial.runs) {
      if (!r.stats) continue;
      out.p50[r.name] = r.stats.p50;
      out.mean[r.name] = r.stats.avg;
    }
  }
  // Records a sink dropped and counted (its queue full, or its worker too far behind) cost less than
  // written ones: their share is part of what the rows measured.
  if (configuration.sink !== "none") {
    const manifest = JSON.parse(readFileSync(join(sinkDir, "manifest.json"), "utf8")) as {
      session_losses?: { dropped_events: number }[];
    };
    out.dropped = (manifest.session_losses ?? []).reduce((sum, loss) => sum + loss.dropped_events, 0);
  }
  rmSync(dir, { recursive: true, force: true });
  console.log(RESULT_PREFIX + JSON.stringify(out));
}

/** Runs one configuration of one checkout in a child process of this file; returns its result. */
function spawnOne(name: string, checkoutRoot: string | null): ProcessResult {
  const child = spawnSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
    env: { ...process.env, [CONFIGURATION_ENV]: name, [CHECKOUT_ENV]: checkoutRoot ?? "" },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    maxBuffer: 64 * 1024 * 1024,
  });
  const line = child.stdout.split("\n").find((text) => text.startsWith(RESULT_PREFIX));
  if (child.status !== 0 || line === undefined)
    throw new Error(
      `configuration ${name} ended with status ${child.status} and no result:\n${child.stdout}`,
    );
  return JSON.parse(line.slice(RESULT_PREFIX.length)) as ProcessResult;
}

const childConfiguration = process.env[CONFIGURATION_ENV];
if (childConfiguration !== undefined) {
  const root = process.env[CHECKOUT_ENV];
  await measureOne(childConfiguration, root === undefined || root === "" ? null : root);
} else {
  const baseRoot = process.env.STORMLOG_BENCH_BASE;
  const checkouts = [{ label: "", root: null as string | null }];
  if (baseRoot !== undefined && baseRoot !== "") checkouts.push({ label: " [base]", root: baseRoot });
  const byCheckout = new Map<string, Map<string, ProcessResult>>(
    checkouts.map(({ label }) => [label, new Map()]),
  );
  for (const name of Object.keys(CONFIGURATIONS))
    for (const { label, root } of checkouts) byCheckout.get(label)?.set(name, spawnOne(name, root));
  const ns = (value: number | undefined) => `${(value ?? Number.NaN).toFixed(0)} ns`;
  const failures: string[] = [];
  for (const { label } of checkouts) {
    const of = byCheckout.get(label) as Map<string, ProcessResult>;
    const row = (name: string, rowName: string, stat: "p50" | "mean") =>
      of.get(name)?.[stat][rowName + label];
    const inStep = (name: string, rowName: string, stat: "p50" | "mean") =>
      (row(name, rowName, stat) ?? Number.NaN) - (row(name, STEP.alone, stat) ?? Number.NaN);
    for (const stat of ["p50", "mean"] as const) {
      console.log(
        `${stat === "p50" ? "medians" : "means"}${label || " [this checkout]"}: ` +
          `no reading ${ns(row("plain", ROWS.plain, stat))}${stat === "p50" ? " (goal <= 150)" : ""}; ` +
          `readSync + takeHighWater ${ns(row("reading", ROWS.reading, stat))} ` +
          `(readSync alone ${ns(row("readingNoMark", ROWS.readingNoMark, stat))}); ` +
          `readSync + default sink ${ns(row("workerSink", ROWS.workerSink, stat))} in a bare loop, ` +
          `${ns(inStep("workerSinkInSteps", STEP.worker, stat))} inside a step` +
          `${stat === "p50" ? ` (goal <= 500; readSync alone there ${ns(inStep("readingInSteps", STEP.reading, stat))})` : ""}; ` +
          `readSync + a given sink ${ns(row("givenSink", ROWS.givenSink, stat))}`,
      );
    }
    const share = (name: string) => {
      const result = of.get(name) as ProcessResult;
      return `${((100 * result.dropped) / Math.max(1, 2 * result.phases)).toFixed(1)} % of ${2 * result.phases}`;
    };
    // Records reach a sink in batches (every 256 phase records at most): the median phase copies none,
    // the mean carries the batches' share.
    console.log(
      `records dropped${label || " [this checkout]"}: default sink ${share("workerSink")} in a bare loop, ` +
        `${share("workerSinkInSteps")} inside a step; a given sink ${share("givenSink")}`,
    );
    for (const result of of.values()) failures.push(...result.sinkFailures);
  }
  if (checkouts.length === 2) {
    const [mine, base] = [byCheckout.get(""), byCheckout.get(" [base]")] as Map<string, ProcessResult>[];
    const ratio = (name: string, rowName: string) =>
      (
        ((mine as Map<string, ProcessResult>).get(name)?.p50[rowName] ?? Number.NaN) /
        ((base as Map<string, ProcessResult>).get(name)?.p50[`${rowName} [base]`] ?? Number.NaN)
      ).toFixed(2);
    console.log(
      `this / base, medians: no reading x${ratio("plain", ROWS.plain)}, readSync x${ratio("reading", ROWS.reading)}, ` +
        `readSync + default sink x${ratio("workerSink", ROWS.workerSink)}, readSync + a given sink x${ratio("givenSink", ROWS.givenSink)}`,
    );
    const baseCommit = spawnSync("git", ["-C", baseRoot as string, "rev-parse", "HEAD"], {
      encoding: "utf8",
    });
    if (baseCommit.stdout.startsWith(ISSUE_18_BASE)) {
      // The default sink against 593e609's sink row (a sink given: its only one; its options made a main-thread sink).
      const sinkRatio =
        ((mine as Map<string, ProcessResult>).get("workerSink")?.p50[ROWS.workerSink] ?? Number.NaN) /
        ((base as Map<string, ProcessResult>).get("givenSink")?.p50[`${ROWS.givenSink} [base]`] ??
          Number.NaN);
      const within = (value: number, goal: number) =>
        `x${value.toFixed(2)} (goal x${goal.toFixed(2)}: ${value <= goal ? "met" : "not met"})`;
      console.log(
        `issue #18's goals against ${ISSUE_18_BASE}: no reading ${within(Number(ratio("plain", ROWS.plain)), 150 / 211)}; ` +
          `readSync + default sink against its sink row ${within(sinkRatio, 500 / 702)}; ` +
          `readSync + a given sink ${within(Number(ratio("givenSink", ROWS.givenSink)), 500 / 702)}`,
      );
    }
  }
  // A sink that failed would make its rows measure a tracker that writes nothing.
  if (failures.length > 0) throw new Error(`a bench tracker's sink failed: ${failures.join("; ")}`);
}
