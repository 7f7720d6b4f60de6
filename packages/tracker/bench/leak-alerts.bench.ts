import {
  COLLECTOR_SPECIFICATION_VERSION,
  type JsonObject,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import {
  LEAK_WINDOW_OCCURRENCES,
  LEAK_WINDOW_PATHS,
  LEAK_WINDOW_SNAPSHOTS,
} from "../src/alerts/leak-alerts.js";
import { type JudgeInput, workerInput } from "../src/alerts/leak-judge.js";
import { MemoryTracker } from "../src/index.js";

// The leak watch's cost. At a phase boundary it appends a few numbers to its path's arrays (goal:
// no measurable change to the boundary's cost); a check judges the whole window on its own timer
// (every 10 s by default, and never more than 1 % of the time: a slower check spaces the next ones).
const MiB = 2 ** 20;
const capabilities = {
  ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
  supports_allocator_allocated: true,
  supports_allocator_reserved: true,
};

/** A tfjs-like collector whose bytes the loop drives, with noise; birth counts on samples when set. */
function collector(state: { bytes: number; seed: number; live: JsonObject | null }): MemoryCollector {
  const read = (extra: JsonObject = {}): SampleResult => {
    state.seed = (Math.imul(state.seed, 1664525) + 1013904223) >>> 0;
    const bytes = state.bytes + Math.round((state.seed / 2 ** 32 - 0.5) * 64 * 1024);
    return {
      kind: "full",
      reading: { allocator_allocated_bytes: bytes, allocator_reserved_bytes: bytes + 4096 },
      metadata: { tfjs_num_tensors: 100, tfjs_num_data_buffers: 100, ...extra },
    };
  };
  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: "stormlog.tfjs_tracker",
    deviceId: 0,
    capabilities,
    availability: () => ({ available: true }),
    sample: () => read(state.live === null ? {} : { tfjs_live_by_phase: state.live }),
    readSync: () => read(),
  };
}

const common = {
  env: false as const,
  handleProcessExit: false,
  registerGlobal: false,
  samplingIntervalMs: 3_600_000,
  initialSample: false,
  alerts: false,
  // Checked by hand below.
  leakAlerts: { intervalMs: 3_600_000 },
  logger: { warn: () => undefined },
};

interface Watch {
  verdicts(): Map<string, unknown>;
  /** What a check judges (the judge's worker is sent `workerInput` of it). */
  judgeInput(): JudgeInput;
  paths: number;
}
const watchOf = (tracker: MemoryTracker) => (tracker as unknown as { leakWatch: Watch }).leakWatch;
/** A check's judgement (on the calling thread: what the judge's worker does with a copy). */
const freshCheck = (tracker: MemoryTracker) => watchOf(tracker).verdicts();

/**
 * A tracker whose window is full: `LEAK_WINDOW_OCCURRENCES` steps of `train` around `children - 1`
 * children, the last of which keeps `keep` bytes per step (0: stable), plus birth snapshots.
 */
async function fullWindow(children: number, keep: number, births: boolean): Promise<MemoryTracker> {
  const state = { bytes: 512 * MiB, seed: 1, live: null as JsonObject | null };
  const tracker = new MemoryTracker({ ...common, maxEvents: 1000, collectors: [collector(state)] });
  await tracker.start();
  const names = Array.from({ length: children - 1 }, (_, i) => `op${i}`);
  for (let s = 0; s < Math.max(LEAK_WINDOW_OCCURRENCES, LEAK_WINDOW_SNAPSHOTS); s++) {
    tracker.phase("train", () => {
      for (let c = 0; c < names.length; c++) {
        tracker.phase(names[c] as string, () => {
          state.bytes += 2 * MiB;
          state.bytes -= c === names.length - 1 ? 2 * MiB - keep : 2 * MiB;
        });
      }
    });
    if (births) {
      const live: JsonObject = {};
      for (let c = 0; c < Math.min(names.length, 10); c++)
        live[`train / ${names[c]}`] = {
          tensors: c === 0 ? s : 3,
          bytes: (c === 0 ? s : 3) * 4096,
          largest: [
            { dtype: "float32", shape: [32, 32], bytes: (c === 0 ? s : 3) * 4096, count: c === 0 ? s : 3 },
          ],
        };
      state.live = live;
      await tracker.sampleNow();
    }
  }
  return tracker;
}

const typical = await fullWindow(4, 0, false);
const typicalLeak = await fullWindow(4, MiB, false);
const wide = await fullWindow(LEAK_WINDOW_PATHS, 0, false);
const wideLeak = await fullWindow(LEAK_WINDOW_PATHS, MiB, false);
const wideBirths = await fullWindow(LEAK_WINDOW_PATHS, MiB, true);
const paths = watchOf(wide).paths;
console.log(
  `full window: ${paths} paths x ${LEAK_WINDOW_OCCURRENCES} occurrences (+ ${LEAK_WINDOW_SNAPSHOTS} birth snapshots in the last)`,
);

group("leak check over a full window (timer only)", () => {
  summary(() => {
    bench("leak check/4 paths x 512, stable", () => do_not_optimize(freshCheck(typical)));
    bench("leak check/4 paths x 512, leaking", () => do_not_optimize(freshCheck(typicalLeak)));
    bench("leak check/50 paths x 512, stable", () => do_not_optimize(freshCheck(wide)));
    bench("leak check/50 paths x 512, leaking", () => do_not_optimize(freshCheck(wideLeak)));
    bench("leak check/50 paths x 512, leaking + 512 birth snapshots", () =>
      do_not_optimize(freshCheck(wideBirths)),
    );
    // What a check judged on the worker (the default) costs the training thread before its message.
    bench("leak check on the judge's worker: the copy/4 paths x 512", () =>
      do_not_optimize(workerInput(watchOf(typicalLeak).judgeInput())),
    );
    bench("leak check on the judge's worker: the copy/50 paths x 512 + 512 birth snapshots", () =>
      do_not_optimize(workerInput(watchOf(wideBirths).judgeInput())),
    );
  });
});

// The boundary path with and without the watch (tfjs readSync boundary readings, no sink).
const readingState = { bytes: MiB, seed: 1, live: null };
const watched = new MemoryTracker({ ...common, collectors: [collector(readingState)] });
const unwatched = new MemoryTracker({ ...common, collectors: [collector(readingState)], leakAlerts: false });
await watched.start();
await unwatched.start();
const body = () => readingState.bytes;
// A session's first phase pays one-time work (the watch's first window, its timer): a first call
// slower than mitata's batch threshold (65 us) would make it time every call alone.
for (let i = 0; i < 1000; i++) {
  watched.phase("forward", body);
  unwatched.phase("forward", body);
}

group("phase enter+exit, tfjs readSync boundary reading", () => {
  summary(() => {
    bench("tracker/phase(name, fn), leakAlerts off", () => do_not_optimize(unwatched.phase("forward", body)));
    bench("tracker/phase(name, fn), leak watch on (default)", () =>
      do_not_optimize(watched.phase("forward", body)),
    );
  });
});

await run();
await Promise.all(
  [typical, typicalLeak, wide, wideLeak, wideBirths, watched, unwatched].map((t) => t.stop()),
);
