import { analyzeEvents } from "@stormlog/analysis";
import {
  type Clock,
  COLLECTOR_SPECIFICATION_VERSION,
  type JsonObject,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
  type Scheduler,
  type TimerHandle,
} from "@stormlog/core";
import { MemoryTracker } from "@stormlog/tracker";
import { describe, expect, it } from "vitest";

// The tracker's leak alerts and `stormlog analyze` judge through the same engine and words: judged
// at stop() over a window that holds the whole run, the alerts say what the analysis of its records says.
const MiB = 2 ** 20;

class ManualTime implements Clock, Scheduler {
  ns = 1_700_000_000_000_000_000n;
  private timers = new Map<number, () => void>();
  private next = 1;
  nowNs(): bigint {
    return this.ns;
  }
  advanceMs(ms: number): void {
    this.ns += BigInt(ms * 1e6);
  }
  setTimeout(callback: () => void): TimerHandle {
    this.timers.set(this.next, callback);
    return this.next++;
  }
  clearTimeout(handle: TimerHandle): void {
    this.timers.delete(handle as number);
  }
}

/** Counters the test drives, read at boundaries (`readSync`), with birth-phase counts on samples when set. */
function drivenCollector(state: { bytes: number; live: JsonObject | null; seed: number }): MemoryCollector {
  const read = (extra: JsonObject = {}): SampleResult => {
    state.seed = (Math.imul(state.seed, 1664525) + 1013904223) >>> 0;
    const jitter = Math.round((state.seed / 2 ** 32 - 0.5) * 64 * 1024);
    return {
      kind: "full",
      reading: { allocator_allocated_bytes: state.bytes + jitter },
      metadata: { tfjs_num_tensors: 100, ...extra },
    };
  };
  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: "stormlog.tfjs_tracker",
    deviceId: 0,
    capabilities: {
      ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
      supports_allocator_allocated: true,
    },
    availability: () => ({ available: true }),
    sample: () => read(state.live === null ? {} : { tfjs_live_by_phase: state.live }),
    readSync: () => read(),
  };
}

interface DrivenRun {
  steps: number;
  /** Rounds of forward and backward per `train` step (micro-batches when more than one). */
  rounds: number;
  /** Samples carry birth-phase counts (backward's tensors accumulate) and the bytes balance. */
  births: boolean;
  sampleEvery: number;
  /** Leave amounts out of the compared texts (windows of different reach estimate them apart). */
  amountsAsN: boolean;
}

/**
 * A tracked loop whose `train / backward` keeps 1 MiB per round (or, with births, a 4 MiB tensor per
 * step), judged only at stop() so the watch sees what the analysis sees; the leak texts of both.
 */
async function drivenRun(run: DrivenRun) {
  const time = new ManualTime();
  const state = { bytes: 256 * MiB, live: null as JsonObject | null, seed: 3 };
  const tracker = new MemoryTracker({
    collectors: [drivenCollector(state)],
    clock: time,
    scheduler: time,
    env: false,
    handleProcessExit: false,
    registerGlobal: false,
    initialSample: false,
    alerts: false,
    // Only the check at stop(): it sees the whole run, as the analysis does.
    leakAlerts: { intervalMs: 3_600_000 },
    logger: { warn: () => undefined },
  });
  await tracker.start();
  for (let step = 0; step < run.steps; step++) {
    if (run.births)
      state.live = {
        "train / forward": { tensors: 2, bytes: 8192, largest: [] },
        "train / backward": {
          tensors: step,
          bytes: step * 4 * MiB,
          largest:
            step === 0 ? [] : [{ dtype: "float32", shape: [1024, 1024], bytes: step * 4 * MiB, count: step }],
        },
      };
    tracker.phase("train", () => {
      time.advanceMs(1);
      for (let round = 0; round < run.rounds; round++) {
        tracker.phase("forward", () => {
          state.bytes += 8 * MiB;
          time.advanceMs(2);
          state.bytes -= 8 * MiB;
        });
        tracker.phase("backward", () => {
          state.bytes += 4 * MiB;
          time.advanceMs(2);
          state.bytes -= run.births ? 4 * MiB : 3 * MiB;
        });
      }
      time.advanceMs(1);
    });
    if (step % run.sampleEvery === 0) await tracker.sampleNow();
    time.advanceMs(1);
  }
  await tracker.stop();
  const text = (message: string) =>
    run.amountsAsN ? message.replace(/keeps [0-9.]+ [KMG]?B/, "keeps N") : message;
  const alerts = tracker
    .getAlerts()
    .map((alert) => alert.context as string)
    .filter((context) => context.startsWith("Leak suspected: "))
    .map(text)
    .sort();
  const report = analyzeEvents(tracker.getEvents({}).filter((event) => event.event_type !== "warning"));
  const leaks = report.leaks
    .filter((leak) => leak.verdict === "leaking")
    .map((leak) => text(`Leak suspected: ${leak.message}`))
    .sort();
  return { alerts, leaks };
}

const trackedRun = (births: boolean) =>
  drivenRun({ steps: 60, rounds: 1, births, sampleEvery: 1, amountsAsN: false });
// 600 steps x 4 rounds: a child's window (512 occurrences) reaches back fewer steps than its parent's.
const microBatches = (rounds: number) =>
  drivenRun({ steps: 600, rounds, births: false, sampleEvery: 5, amountsAsN: true });

describe("the tracker's leak alerts and stormlog analyze", () => {
  it("name the same phases when a child runs several times per step (its window reaches back less)", async () => {
    const { alerts, leaks } = await microBatches(4);
    expect(leaks).toContain(
      "Leak suspected: `train / backward` keeps N per `train`, still held as it comes around again",
    );
    expect(alerts).toEqual(leaks);
  });

  it("name the same leaks in the same words (counters)", async () => {
    const { alerts, leaks } = await trackedRun(false);
    expect(leaks.some((leak) => leak.startsWith("Leak suspected: `train / backward` keeps 1.00 MB"))).toBe(
      true,
    );
    expect(alerts).toEqual(leaks);
  });

  it("name the same leaks in the same words (birth phases)", async () => {
    const { alerts, leaks } = await trackedRun(true);
    expect(
      leaks.some((leak) => leak.startsWith("Leak suspected: `train / backward`: 1 tensor (4.00 MB")),
    ).toBe(true);
    expect(alerts).toEqual(leaks);
  });
});
