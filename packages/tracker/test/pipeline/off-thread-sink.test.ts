import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type SampleResult, type Scheduler, systemClock, systemScheduler } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import { SinkWorkerError } from "../../src/index.js";
import { OffThreadSink } from "../../src/pipeline/off-thread-sink.js";
import {
  full,
  makeTracker,
  reading,
  SequencedCollector,
  temporaryDirectories,
  trackerWithSink,
} from "../helpers.js";

const GiB = 1024 ** 3;
const tempDir = temporaryDirectories("stormlog-off-thread-");

/** A GPU-like collector whose boundary reads carry tensor counts, as tfjs's do. */
class CountingCollector extends SequencedCollector {
  tensors = 0;
  readSync(): SampleResult {
    this.tensors++;
    return {
      kind: "full",
      reading: reading({ allocated: GiB + this.tensors * 1024, reserved: 2 * GiB, total: 4 * GiB }),
      metadata: { tensor_count: this.tensors, backend: "test" },
    };
  }
}

/** The same session (samples, alerts, nested phases with attributes) tracked into `root`. */
async function trackScenario(root: string, sinkThread: "worker" | "main"): Promise<string> {
  const gpu = (allocated: number) =>
    full(reading({ allocated, reserved: allocated, used: allocated, total: 4 * GiB }));
  const collector = new CountingCollector([gpu(1 * GiB), gpu(4 * GiB), gpu(1.5 * GiB)]);
  const { tracker } = makeTracker([collector], {
    sink: { rootDir: root, handleProcessExit: false },
    sinkThread,
    alerts: true,
  });
  await tracker.start();
  await tracker.sampleNow();
  for (let step = 0; step < 3; step++) {
    tracker.phase(
      "train",
      () => {
        tracker.phase("forward", () => undefined);
        tracker.phase("backward", () => undefined, { metadata: { micro_batches: [1, 2], lr: 0.5 } });
      },
      { metadata: { step } },
    );
    await tracker.sampleNow();
  }
  const sessionId = tracker.getSessionSummary()?.session_id ?? "";
  await tracker.stop();
  const segments = readdirSync(root).filter((name) => name.endsWith(".jsonl"));
  const text = segments.map((name) => readFileSync(join(root, name), "utf8")).join("");
  return text.replaceAll(sessionId, "<session>");
}

describe("a sink on a worker thread", () => {
  it("writes, byte for byte, the lines the training thread's sink writes", async () => {
    const onWorker = await trackScenario(join(tempDir(), "worker"), "worker");
    const onMain = await trackScenario(join(tempDir(), "main"), "main");
    const lines = onWorker.trimEnd().split("\n");
    // Samples, an alert (float-marked usage_percent), and phase records with boundary detail.
    expect(lines.length).toBeGreaterThan(20);
    expect(onWorker).toMatch(/"event_type": "critical".*"usage_percent": 100.0/);
    expect(onWorker).toContain('"tensor_count": 12');
    expect(onWorker).toContain('"attributes": {"lr": 0.5, "micro_batches": [1, 2]}');
    expect(onWorker).toBe(onMain);
  });

  it("keeps its hand-over timer armed from the timer's own callback while records come, not from inside phases", async () => {
    // Armed inside a phase (a new timer list in cold caches) a timer cost ~20 us of a tfjs step.
    const state = { insidePhase: false, armedInside: 0, armedOutside: 0 };
    const scheduler: Scheduler = {
      setTimeout(callback, delayMs) {
        if (state.insidePhase) state.armedInside++;
        else state.armedOutside++;
        return systemScheduler.setTimeout(callback, delayMs);
      },
      clearTimeout: (handle) => systemScheduler.clearTimeout(handle),
    };
    const root = join(tempDir(), "timer");
    const { tracker } = makeTracker(
      [new CountingCollector([full(reading({ allocated: GiB, reserved: GiB }))])],
      {
        sink: { rootDir: root, handleProcessExit: false, flushEverySeconds: 0.2 },
        sinkThread: "worker",
        clock: systemClock,
        scheduler,
        samplingIntervalMs: 60_000,
        leakAlerts: false,
      },
    );
    await tracker.start();
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    // A step every ~4 ms for ~500 ms: the hand-over (every 50 ms here) always has records.
    for (let step = 0; step < 120; step++) {
      state.insidePhase = true;
      tracker.phase("step", () => tracker.phase("forward", () => step));
      state.insidePhase = false;
      await sleep(4);
    }
    const armedWhileBusy = state.armedOutside;
    // Quiet: the timer arms itself once more at most, then stops.
    await sleep(300);
    const armedWhenQuiet = state.armedOutside - armedWhileBusy;
    state.insidePhase = true;
    tracker.phase("step", () => 0);
    state.insidePhase = false;
    await tracker.stop();
    // The session's start record arms it first; inside a phase the first boundary after the quiet
    // period does (and one after a pause of the loop longer than 50 ms, on a loaded machine: the
    // previous pipeline armed it after every hand-over, ~10 times here).
    expect(state.armedInside).toBeGreaterThanOrEqual(1);
    expect(state.armedInside).toBeLessThanOrEqual(3);
    expect(armedWhileBusy).toBeGreaterThanOrEqual(8);
    expect(armedWhenQuiet).toBeLessThanOrEqual(1);
    const [session] = await loadTelemetrySessions(root);
    expect(session?.events.filter((event) => event.event_type === "phase_exit")).toHaveLength(241);
  });

  it("closes the session with the sink's counters once the worker has written everything", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    await tracker.start();
    await tracker.sampleNow();
    for (let i = 0; i < 300; i++) tracker.phase("step", () => undefined);
    await tracker.stop();
    const sessions = await loadTelemetrySessions(root);
    expect(sessions[0]?.summary.status).toBe("completed");
    // start, peak, sample, 600 boundaries, stop: more than one 256-record batch.
    expect(sessions[0]?.events).toHaveLength(604);
    const statistics = tracker.getStatistics();
    expect(statistics.finalRetainedFiles).toBe(1);
    expect(statistics.finalRetainedBytes).toBe(readFileSync(join(root, "segment-000001.jsonl")).length);
  });

  it("takes start, stop and start again without awaiting in the order they were called", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    const first = tracker.start();
    const stopped = tracker.stop();
    await tracker.start();
    await Promise.all([first, stopped]);
    expect(tracker.isTracking).toBe(true);
    tracker.phase("after", () => undefined);
    await tracker.stop();
    const last = tracker.getSessionSummary()?.session_id;
    const sessions = await loadTelemetrySessions(root);
    expect(sessions.map((session) => session.summary.status)).toEqual(["completed", "completed"]);
    // The phase is in the session of the last start; the first session ends with its stop.
    const exits = (session: (typeof sessions)[number] | undefined) =>
      session?.events.filter((event) => event.event_type === "phase_exit").length;
    expect(exits(sessions.find((session) => session.summary.session_id === last))).toBe(1);
    const earlier = sessions.find((session) => session.summary.session_id !== last);
    expect(exits(earlier)).toBe(0);
    expect(earlier?.events.at(-1)?.event_type).toBe("stop");
  });

  it("stops a session whose start is still waiting for the worker", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    const starting = tracker.start();
    await tracker.stop();
    await starting;
    expect(tracker.isTracking).toBe(false);
    const sessions = await loadTelemetrySessions(root);
    expect(sessions.map((session) => session.summary.status)).toEqual(["completed"]);
    expect(sessions[0]?.events.map((event) => event.event_type)).toEqual(["start", "stop"]);
  });

  it("drops and counts what a loop the worker cannot keep up with sends beyond the backlog bound", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root, {
      rolloverMaxEvents: 1_000_000,
      retentionMaxFiles: 1000,
      fsync: "never",
    });
    await tracker.start();
    // 300,000 phase records with no pause: far more than the 65,536 the worker may be behind.
    const phases = 150_000;
    for (let i = 0; i < phases; i++) tracker.phase("step", () => undefined);
    await tracker.stop();
    const [session] = await loadTelemetrySessions(root);
    const manifest = JSON.parse(readFileSync(join(root, "manifest.json"), "utf8")) as {
      session_losses: { dropped_queue_full: number; dropped_events: number }[];
    };
    const [loss] = manifest.session_losses;
    const events = session?.events ?? [];
    const boundaries = events.filter((event) => event.event_type.startsWith("phase_"));
    expect(session?.summary.status).toBe("incomplete");
    expect(loss?.dropped_queue_full).toBeGreaterThan(0);
    expect(loss?.dropped_events).toBe(loss?.dropped_queue_full);
    // Every record is written or counted: the boundaries, start and stop, and the sample that stop
    // may take (dropped if the worker is still behind then).
    const dropped = loss?.dropped_queue_full ?? 0;
    expect(events.length + dropped).toBeGreaterThanOrEqual(2 * phases + 2);
    expect(events.length + dropped).toBeLessThanOrEqual(2 * phases + 3);
    expect(boundaries.length + dropped).toBeGreaterThanOrEqual(2 * phases);
    // What was in flight when drops began is written: the bound's worth of records.
    expect(events.length).toBeGreaterThanOrEqual(65_536);
    expect(events[0]?.event_type).toBe("start");
    expect(events.at(-1)?.event_type).toBe("stop");
    // In order: the sequence numbers of the phase scopes written only grow.
    const sequences = boundaries.map(
      (event) => (event.metadata.phase_scope as { sequence: number }).sequence,
    );
    expect(sequences.every((sequence, i) => i === 0 || sequence > (sequences[i - 1] as number))).toBe(true);
  });

  it("gives each sink of this process on one directory its own, whichever thread writes it", async () => {
    const root = join(tempDir(), "sink");
    const collector = () => new SequencedCollector([full(reading({ allocated: 128, reserved: 256 }))]);
    const sink = { rootDir: root, handleProcessExit: false };
    // Two on the sink's worker thread, one on this thread: three writers, one directory.
    const trackers = [
      makeTracker([collector()], { sink }).tracker,
      makeTracker([collector()], { sink }).tracker,
      makeTracker([collector()], { sink, sinkThread: "main" }).tracker,
    ];
    for (const tracker of trackers) await tracker.start();
    for (let i = 0; i < 300; i++) for (const tracker of trackers) tracker.phase("step", () => undefined);
    for (const tracker of trackers) await tracker.stop();
    const sessions = await loadTelemetrySessions(root);
    expect(sessions.map((session) => session.summary.status)).toEqual([
      "completed",
      "completed",
      "completed",
    ]);
    const ids = new Set(trackers.map((tracker) => tracker.getSessionSummary()?.session_id));
    expect(new Set(sessions.map((session) => session.summary.session_id))).toEqual(ids);
    for (const session of sessions) {
      expect(session.events.filter((event) => event.event_type === "phase_exit")).toHaveLength(300);
      expect(session.events.at(-1)?.event_type).toBe("stop");
    }
  });

  it("takes a burst far beyond the sink's queue without dropping a record", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root, { maxQueueEvents: 500 });
    await tracker.start();
    // 8000 records with no pause: 32 batches reach the worker at once, 16 times its sink's queue.
    for (let i = 0; i < 4000; i++) tracker.phase("step", () => undefined);
    await tracker.stop();
    const sessions = await loadTelemetrySessions(root);
    expect(sessions[0]?.summary.status).toBe("completed");
    expect(sessions[0]?.events).toHaveLength(8002);
  });

  it("hands every record over while the tracker's own store wraps around many times", async () => {
    const root = join(tempDir(), "sink");
    const collector = new SequencedCollector([full(reading({ allocated: 128, reserved: 256 }))]);
    // A store of 300 records: the records reach the ring in batches, read back by index after the
    // store has wrapped (and the leak watch reads the same records).
    const { tracker, warnings } = makeTracker([collector], {
      maxEvents: 300,
      sink: { rootDir: root, handleProcessExit: false },
    });
    await tracker.start();
    for (let i = 0; i < 1500; i++) {
      tracker.phase("train", () => {
        tracker.phase("forward", () => undefined);
        if (i % 3 === 0) tracker.phase("backward", () => undefined);
      });
      if (i % 250 === 0) await tracker.sampleNow();
    }
    await tracker.stop();
    expect(warnings).toEqual([]);
    const sessions = await loadTelemetrySessions(root);
    expect(sessions[0]?.summary.status).toBe("completed");
    const phases = (sessions[0]?.events ?? []).filter((event) => event.event_type.startsWith("phase_"));
    expect(phases).toHaveLength(2 * (1500 * 2 + 500));
    // In order: the scope sequences count up by one, enter and exit alike.
    const sequences = phases.map((event) => (event.metadata.phase_scope as { sequence: number }).sequence);
    expect(sequences).toEqual(sequences.map((_, i) => i + 1));
  });

  it("returns the summary its worker's sink registers, source included", async () => {
    const root = join(tempDir(), "sink");
    const sink = new OffThreadSink({ rootDir: root, handleProcessExit: false, source: "my.trainer" });
    const summary = sink.startSession({ session_id: "s", started_at_ns: 5n });
    await sink.close();
    const [written] = await loadTelemetrySessions(root);
    expect(summary.source).toBe("my.trainer");
    expect(written?.summary.source).toBe(summary.source);
  });

  it("reports a failed worker: the tracker goes on without the sink and the session is incomplete", async () => {
    const root = join(tempDir(), "sink");
    const warnings: string[] = [];
    const sink = new OffThreadSink({
      rootDir: root,
      handleProcessExit: false,
      logger: { warn: (message) => warnings.push(message) },
    });
    sink.startSession({ session_id: "a", started_at_ns: 1n });
    // A record of another session: the worker's sink refuses it, and the worker reports the failure.
    sink.append({ session_id: "b" } as never);
    await expect.poll(() => warnings.length, { timeout: 10_000 }).toBe(1);
    expect(warnings[0]).toMatch(/worker thread failed \(Record session_id "b" does not match/);
    expect(warnings[0]).toContain('sinkThread: "main"');
    let thrown: unknown;
    try {
      sink.append({ session_id: "a" } as never);
    } catch (error) {
      thrown = error;
    }
    expect(SinkWorkerError.isInstance(thrown)).toBe(true);
    await sink.close();
    // The worker closed the session it had opened: incomplete, not left running.
    await expect
      .poll(async () => (await loadTelemetrySessions(root)).map((session) => session.summary.status), {
        timeout: 10_000,
      })
      .toEqual(["incomplete"]);
  });

  it("rejects an unknown sinkThread", () => {
    expect(() => makeTracker([], { sinkThread: "gpu" as never })).toThrow(/sinkThread.*"worker" or "main"/);
  });
});
