import {
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  InvalidConfigError,
  type JsonObject,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
  type TelemetryEvent,
} from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { describe, expect, it, vi } from "vitest";
import { LEAK_WINDOW_PATHS } from "../../src/alerts/leak-alerts.js";
import { LeakJudgeWorker } from "../../src/alerts/leak-judge.js";
import type { MemoryTracker } from "../../src/index.js";
import { type FakeClock, type FakeScheduler, makeTracker, temporaryDirectories } from "../helpers.js";

/** Set by a test to make the engine throw, as a bug in it would. */
const judge = vi.hoisted(() => ({ fail: false, calls: 0 }));
vi.mock("@stormlog/phases/internal", async (importOriginal) => {
  const actual = await importOriginal<typeof import("@stormlog/phases/internal")>();
  return {
    ...actual,
    judgeRetention: (...args: Parameters<typeof actual.judgeRetention>) => {
      judge.calls++;
      if (judge.fail) throw new Error("the engine broke");
      return actual.judgeRetention(...args);
    },
  };
});

const MiB = 1024 * 1024;
const tempDir = temporaryDirectories("stormlog-leak-alerts-");

/** A seeded uniform random in [0, 1). */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/**
 * A tfjs-like collector whose readings the test drives: `held` (what steps keep) plus `transient`
 * (what a step holds while it runs) plus noise read afresh at every reading; `readSync()` at the
 * boundaries, tensor counts in metadata, and, when `live` is set, birth-phase counts on samples.
 */
class DrivenCollector implements MemoryCollector {
  readonly specificationVersion = COLLECTOR_SPECIFICATION_VERSION;
  readonly name = "stormlog.tfjs_tracker";
  readonly deviceId = 0;
  readonly capabilities = {
    ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
    supports_allocator_allocated: true,
  };
  held = 64 * MiB;
  transient = 0;
  tensors = 120;
  live: Record<string, { tensors: number; bytes: number; largest: JsonObject[] }> | null = null;
  private readonly random: () => number;
  constructor(
    seed: number,
    private readonly noise = 32 * 1024,
  ) {
    this.random = seeded(seed);
  }
  availability(): CollectorAvailability {
    return { available: true };
  }
  private read(metadata: JsonObject): SampleResult {
    const jitter = Math.round((this.random() * 2 - 1) * this.noise);
    return {
      kind: "full",
      reading: { allocator_allocated_bytes: this.held + this.transient + jitter },
      metadata: { tfjs_num_tensors: this.tensors, ...metadata },
    };
  }
  sample(): SampleResult {
    return this.read(this.live === null ? {} : { tfjs_live_by_phase: structuredClone(this.live) });
  }
  readSync(): SampleResult {
    return this.read({});
  }
}

interface Loop {
  tracker: MemoryTracker;
  clock: FakeClock;
  scheduler: FakeScheduler;
  collector: DrivenCollector;
  warnings: string[];
}

function loop(options: Parameters<typeof makeTracker>[1] = {}, seed = 7): Loop {
  const collector = new DrivenCollector(seed);
  const made = makeTracker([collector], {
    samplingIntervalMs: 600_000,
    leakAlerts: { intervalMs: 1000 },
    ...options,
  });
  return { ...made, collector };
}

/**
 * One training step: `train` around forward, backward and optimizer, each of which frees what it
 * allocates (as `tf.tidy` does) except backward, which keeps `keep` bytes.
 */
function step({ tracker, clock, collector }: Loop, keep: number): void {
  tracker.phase("train", () => {
    clock.advanceMs(1);
    tracker.phase("forward", () => {
      collector.transient += 8 * MiB;
      clock.advanceMs(3);
      collector.transient -= 8 * MiB;
    });
    tracker.phase("backward", () => {
      collector.transient += 4 * MiB;
      clock.advanceMs(2);
      collector.transient -= 4 * MiB;
      collector.held += keep;
      clock.advanceMs(1);
    });
    tracker.phase("optimizer", () => {
      collector.transient += MiB;
      clock.advanceMs(1);
      collector.transient -= MiB;
    });
    clock.advanceMs(1);
  });
}

/** `steps` steps, with the leak check's timer fired every `checkEvery` steps. */
async function run(l: Loop, steps: number, keep: number, checkEvery = 10): Promise<void> {
  for (let i = 1; i <= steps; i++) {
    step(l, keep);
    if (i % checkEvery === 0) await l.scheduler.advance(1000);
  }
}

const leakAlerts = (alerts: readonly TelemetryEvent[], path: string) =>
  alerts.filter((alert) => alert.context?.startsWith(`Leak suspected: \`${path}\``));

describe("leak alerts", () => {
  it("reads a long phase's enter before the samples inside it push it out of a small store", async () => {
    // 50 records kept; each occurrence of `eval` holds 30 samples (60+ records) between enter and exit.
    const l = loop({ maxEvents: 50 });
    // The store keeps too few records to hold the warning until the end: it is caught as it is made.
    const alerts: TelemetryEvent[] = [];
    l.tracker.addAlertCallback((alert) => {
      alerts.push(alert);
    });
    await l.tracker.start();
    for (let i = 1; i <= 40; i++) {
      await l.tracker.phase("eval", async () => {
        for (let s = 0; s < 30; s++) {
          l.clock.advanceMs(2);
          if (s === 15) l.collector.held += MiB;
          await l.tracker.sampleNow();
        }
      });
      if (i % 10 === 0) await l.scheduler.advance(1000);
    }
    await l.tracker.stop();
    expect(l.warnings).toEqual([]);
    expect(leakAlerts(alerts, "eval")).toHaveLength(1);
  });

  it("gives boundaries without their own tensor count the count of the last sample stored before them", async () => {
    // No boundary readings: a phase's records carry the last sample's counters and tensor count.
    const l = loop({ boundaryReadings: false });
    await l.tracker.start();
    await l.tracker.sampleNow();
    for (let i = 1; i <= 80; i++) {
      await l.tracker.phase("train", async () => {
        l.clock.advanceMs(5);
        l.collector.held += MiB;
        l.collector.tensors += 1;
        // The exit's counters come from this sample, the enter's from the one before it.
        await l.tracker.sampleNow();
        l.clock.advanceMs(5);
      });
      if (i % 10 === 0) await l.scheduler.advance(1000);
    }
    await l.tracker.stop();
    const train = leakAlerts(l.tracker.getAlerts(), "train");
    expect(train).toHaveLength(1);
    expect(train[0]?.metadata.leak_tensors_per_occurrence).toBeCloseTo(1, 1);
  });

  it("a loop whose backward keeps 1 MiB per step raises one warning for it, in memory and in the sink", async () => {
    const root = tempDir();
    const l = loop({ sink: { rootDir: root, handleProcessExit: false }, sinkThread: "main" });
    await l.tracker.start();
    await run(l, 80, MiB);
    const sessionId = l.tracker.getSessionSummary()?.session_id;
    await l.tracker.stop();

    const alerts = l.tracker.getAlerts();
    const backward = leakAlerts(alerts, "train / backward");
    expect(backward).toHaveLength(1);
    const [alert] = backward as [TelemetryEvent];
    expect(alert.event_type).toBe("warning");
    expect(alert.context).toBe(
      "Leak suspected: `train / backward` keeps 1.00 MB per `train`, still held as it comes around again",
    );
    expect(alert.metadata).toMatchObject({
      leak_phase_path: "train / backward",
      leak_tensors_per_occurrence: null,
      leak_unit_path: "train",
      leak_method: "retention_profile",
    });
    expect(Math.abs((alert.metadata.leak_bytes_per_occurrence as number) - MiB)).toBeLessThan(MiB / 50);
    expect(alert.metadata.leak_confidence).toBeGreaterThan(0.9);
    // The step itself grows too, as the analysis reports it, and says where.
    const train = leakAlerts(alerts, "train");
    expect(train).toHaveLength(1);
    expect(train[0]?.context).toMatch(
      /^Leak suspected: `train` keeps \d+\.\d\d [KM]B per occurrence, still held as it comes around again; the growth is kept inside `train \/ backward`$/,
    );
    expect(leakAlerts(alerts, "train / forward")).toHaveLength(0);
    expect(leakAlerts(alerts, "train / optimizer")).toHaveLength(0);
    expect(l.warnings).toEqual([]);

    const [session] = await loadTelemetrySessions(root);
    expect(session?.summary.session_id).toBe(sessionId);
    const written = leakAlerts(session?.events ?? [], "train / backward");
    expect(written).toHaveLength(1);
    expect(written[0]?.context).toBe(alert.context);
    expect(written[0]?.metadata).toMatchObject(alert.metadata);
  });

  it("judges on the leak-judge worker with judgeOn 'worker': the warnings of a check judged here, recorded when its verdicts come back", async () => {
    const onWorker = loop({ leakAlerts: { intervalMs: 1000, judgeOn: "worker" } });
    const here = loop({ leakAlerts: { intervalMs: 1000, judgeOn: "main" } });
    const sent = vi.spyOn(LeakJudgeWorker.prototype, "judge");
    const callsHere = judge.calls;
    await onWorker.tracker.start();
    await here.tracker.start();
    for (let i = 1; i <= 80; i++) {
      step(onWorker, MiB);
      step(here, MiB);
      if (i % 10 !== 0) continue;
      await here.scheduler.advance(1000);
      const sentBefore = sent.mock.results.length;
      await onWorker.scheduler.advance(1000);
      // The check went to the worker: nothing was judged on this thread for it.
      expect(sent.mock.results.length).toBe(sentBefore + 1);
      await Promise.allSettled(sent.mock.results.map((result) => result.value));
      await new Promise((resolve) => setImmediate(resolve));
    }
    // Every check of `here` judged here; none of `onWorker`'s did.
    expect(judge.calls - callsHere).toBe(8);
    const leaks = (l: Loop) =>
      l.tracker
        .getAlerts()
        .filter((alert) => alert.context?.startsWith("Leak suspected"))
        .map((alert) => ({ context: alert.context, metadata: alert.metadata }));
    expect(leaks(onWorker).length).toBeGreaterThanOrEqual(2);
    expect(leaks(onWorker)).toEqual(leaks(here));
    await onWorker.tracker.stop();
    await here.tracker.stop();
    sent.mockRestore();
  });

  it("reads each phase record before the store overwrites it: a store of 8 records judges as one of 10000", async () => {
    // The watch reads stored boundaries at the next sample or check, or sooner when the store would
    // overwrite the oldest waiting, so a small store that overwrites its records between checks loses
    // nothing of the window.
    const judged = async (maxEvents: number) => {
      const l = loop({ maxEvents });
      // The store keeps the last 8 records only: alerts are taken as they are recorded.
      const alerts: TelemetryEvent[] = [];
      l.tracker.addAlertCallback((alert) => {
        alerts.push(alert);
      });
      await l.tracker.start();
      for (let i = 1; i <= 80; i++) {
        step(l, MiB);
        if (i % 10 === 0) await l.scheduler.advance(1000);
        // Samples between steps, as the sampling timer takes them.
        if (i % 7 === 0) await l.tracker.sampleNow();
      }
      await l.tracker.stop();
      return leakAlerts(alerts, "train / backward").map((alert) => alert.metadata);
    };
    const small = await judged(8);
    expect(small).toHaveLength(1);
    expect(small).toEqual(await judged(10_000));
  });

  it("reads waiting phase records before other records overwrite them: OOM errors inside steps, a store of 8", async () => {
    // Each step stores its 8 phase records with 4 error records among them: with a store of 8, the
    // errors alone would push the step's first enters out before the next sample or check.
    const judged = async (maxEvents: number) => {
      const l = loop({ maxEvents, oom: { enabled: false } });
      const alerts: TelemetryEvent[] = [];
      l.tracker.addAlertCallback((alert) => {
        if (alert.event_type === "warning") alerts.push(alert);
      });
      await l.tracker.start();
      for (let i = 1; i <= 80; i++) {
        l.tracker.phase("train", () => {
          l.tracker.phase("forward", () => {
            l.clock.advanceMs(2);
            l.tracker.handleError(new Error("out of memory"));
            l.tracker.handleError(new Error("out of memory"));
          });
          l.tracker.phase("backward", () => {
            l.clock.advanceMs(2);
            l.collector.held += MiB;
            l.tracker.handleError(new Error("out of memory"));
            l.tracker.handleError(new Error("out of memory"));
          });
          l.tracker.phase("optimizer", () => {
            l.clock.advanceMs(1);
          });
        });
        if (i % 10 === 0) await l.scheduler.advance(1000);
      }
      await l.tracker.stop();
      return leakAlerts(alerts, "train / backward").map((alert) => alert.metadata);
    };
    const small = await judged(8);
    expect(small).toHaveLength(1);
    expect(small).toEqual(await judged(10_000));
  });

  it("a stable loop with noise raises none, at the checks or at stop()", async () => {
    const l = loop();
    await l.tracker.start();
    await run(l, 300, 0, 25);
    await l.tracker.stop();
    expect(judge.calls).toBeGreaterThan(10);
    expect(l.tracker.getAlerts()).toEqual([]);
  });

  it("a loop that leaks, stops leaking and leaks again raises one warning per episode", async () => {
    const l = loop({}, 11);
    await l.tracker.start();
    await run(l, 60, MiB);
    expect(leakAlerts(l.tracker.getAlerts(), "train / backward")).toHaveLength(1);
    // Long enough for the window (512 steps) to hold no leaking step.
    await run(l, 600, 0, 50);
    expect(leakAlerts(l.tracker.getAlerts(), "train / backward")).toHaveLength(1);
    await run(l, 400, MiB, 50);
    await l.tracker.stop();
    expect(leakAlerts(l.tracker.getAlerts(), "train / backward")).toHaveLength(2);
  });

  it("birth-phase counts that keep growing raise a birth_phase warning naming backward", async () => {
    const l = loop();
    const group = { dtype: "float32", shape: [2048, 2048], bytes: 16 * MiB, count: 1 };
    await l.tracker.start();
    for (let i = 0; i < 30; i++) {
      l.collector.live = {
        "train / forward": { tensors: 4, bytes: 4096, largest: [] },
        "train / backward": {
          tensors: i,
          bytes: i * 16 * MiB,
          largest: i === 0 ? [] : [{ ...group, bytes: i * 16 * MiB, count: i }],
        },
      };
      step(l, 0);
      await l.tracker.sampleNow();
      l.clock.advanceMs(1);
      if (i % 10 === 9) await l.scheduler.advance(1000);
    }
    await l.tracker.stop();
    const backward = leakAlerts(l.tracker.getAlerts(), "train / backward");
    expect(backward).toHaveLength(1);
    expect(backward[0]?.context).toMatch(
      /^Leak suspected: `train \/ backward`: 1 tensor \(16\.00 MB, float32 \[2048, 2048\]\) born here per step is still alive \d+ steps later \(step: `train`\); \d+ alive now \(\d+\.\d\d MB\), largest: \d+ x float32 \[2048, 2048\] \(\d+\.\d\d MB\)$/,
    );
    expect(backward[0]?.metadata).toMatchObject({
      leak_phase_path: "train / backward",
      leak_bytes_per_occurrence: 16 * MiB,
      leak_tensors_per_occurrence: 1,
      leak_unit_path: "train",
      leak_method: "birth_phase",
    });
    expect(leakAlerts(l.tracker.getAlerts(), "train / forward")).toHaveLength(0);
  });

  it("an engine that throws never reaches the training loop: logged once, tracking goes on", async () => {
    const l = loop();
    judge.fail = true;
    try {
      await l.tracker.start();
      await run(l, 60, MiB);
      await l.tracker.stop();
    } finally {
      judge.fail = false;
    }
    expect(l.tracker.getAlerts()).toEqual([]);
    expect(l.warnings).toEqual(["leak alerts: a leak check failed (the engine broke); tracking goes on"]);
    expect(l.tracker.getEvents({ eventType: "phase_exit" })).toHaveLength(240);
    expect(l.tracker.getEvents({ eventType: "stop" })).toHaveLength(1);
  });

  it("leakAlerts: false raises none and keeps no timer", async () => {
    const l = loop({ leakAlerts: false });
    await l.tracker.start();
    const calls = judge.calls;
    step(l, MiB);
    expect(l.scheduler.pending).toBe(1); // sampling only
    await run(l, 80, MiB);
    await l.tracker.stop();
    expect(judge.calls).toBe(calls);
    expect(l.tracker.getAlerts()).toEqual([]);
  });

  it("{ enabled: false } turns them off too; the defaults check every 10 s", async () => {
    const off = loop({ leakAlerts: { enabled: false, intervalMs: 5 } });
    await off.tracker.start();
    await run(off, 80, MiB);
    await off.tracker.stop();
    expect(off.tracker.getAlerts()).toEqual([]);

    const l = loop({ leakAlerts: undefined });
    await l.tracker.start();
    await run(l, 80, MiB, 1000);
    await l.scheduler.advance(9_000);
    expect(leakAlerts(l.tracker.getAlerts(), "train / backward")).toHaveLength(0);
    await l.scheduler.advance(1_000);
    expect(leakAlerts(l.tracker.getAlerts(), "train / backward")).toHaveLength(1);
    await l.tracker.stop();
  });

  it("keeps at most 50 phase paths, replacing the least recently seen", async () => {
    // A leaking loop (4 paths, entered in the order train, forward, backward, optimizer), then
    // `others` one-off paths, then the check at stop(): the leak of backward is reported while its
    // window is watched, not once it gave way to newer paths.
    const reported = async (others: number) => {
      const l = loop();
      await l.tracker.start();
      await run(l, 60, MiB, Number.POSITIVE_INFINITY);
      for (let i = 0; i < others; i++) l.tracker.phase(`request ${i}`, () => l.clock.advanceMs(1));
      await l.tracker.stop();
      return leakAlerts(l.tracker.getAlerts(), "train / backward").length;
    };
    expect(LEAK_WINDOW_PATHS).toBe(50);
    // 52 paths: the two seen least recently (train, train / forward) gave way; backward is still watched.
    expect(await reported(LEAK_WINDOW_PATHS - 2)).toBe(1);
    // 53 paths: backward, seen before optimizer and the new paths, gave way too.
    expect(await reported(LEAK_WINDOW_PATHS - 1)).toBe(0);

    // Many more paths than the window holds, then a stable loop: nothing to report, nothing breaks.
    const l = loop();
    await l.tracker.start();
    for (let i = 0; i < 120; i++) l.tracker.phase(`request ${i}`, () => l.clock.advanceMs(1));
    await run(l, 10, 0);
    await l.tracker.stop();
    expect(l.tracker.getAlerts()).toEqual([]);
  });

  it("rejects invalid options with InvalidConfigError saying what to write", () => {
    const cases: [unknown, RegExp][] = [
      [
        "on",
        /Invalid option 'leakAlerts': expected true, false or \{ enabled\?: boolean, intervalMs\?: number, judgeOn\?: "worker" \| "main" \}, got "on"/,
      ],
      [
        { interval: 5000 },
        /'leakAlerts': unknown key 'interval'; the keys are 'enabled' .*, 'intervalMs' .* and 'judgeOn'/,
      ],
      [
        { intervalMs: 0 },
        /'leakAlerts.intervalMs': expected a number of milliseconds > 0 \(default 10000\), got 0/,
      ],
      [{ intervalMs: "10s" }, /'leakAlerts.intervalMs': .* got "10s"/],
      [{ intervalMs: Number.NaN }, /'leakAlerts.intervalMs'/],
      [{ enabled: "yes" }, /'leakAlerts.enabled': expected true or false, got "yes"; use leakAlerts: false/],
      [[], /'leakAlerts': .* got an array/],
      [{ judgeOn: "gpu" }, /'leakAlerts.judgeOn': expected "worker" or "main", got "gpu"/],
    ];
    for (const [value, message] of cases) {
      let thrown: unknown;
      try {
        makeTracker([], { leakAlerts: value as never });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidConfigError);
      expect((thrown as Error).message).toMatch(message);
    }
  });
});
