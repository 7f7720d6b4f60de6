// Ports of the reference's tests/test_tracker_resilience.py, on fake time.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeTelemetryLine } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { FakeWriter, failure, full, makeTracker, reading, SequencedCollector, types } from "./helpers.js";

describe("collector health (reference test_tracker_resilience)", () => {
  it("recovers after a transient collector failure", async () => {
    const collector = new SequencedCollector([failure(), full(reading({ allocated: 256, reserved: 256 }))]);
    const { tracker, clock } = makeTracker([collector], {}, 10);
    await tracker.start();

    await tracker.sampleNow();
    expect(types(tracker).at(-1)).toBe("collector_degraded");
    let stats = tracker.getStatistics();
    expect(stats.collectorHealthStatus).toBe("unhealthy");
    expect(stats.collectorNextRetryEpochS).toBeCloseTo(11.0);

    clock.setSeconds(10.5);
    await tracker.sampleNow();
    expect(collector.calls).toBe(1);
    expect(types(tracker).filter((t) => t === "collector_degraded")).toHaveLength(1);

    clock.setSeconds(11.1);
    await tracker.sampleNow();
    const events = types(tracker);
    expect(events.filter((t) => t === "collector_degraded")).toHaveLength(1);
    expect(events).toContain("collector_recovered");
    stats = tracker.getStatistics();
    expect(stats.collectorHealthStatus).toBe("healthy");
    expect(stats.telemetryPartial).toBe(false);
    expect(stats.currentMemoryAllocated).toBe(256);
    await tracker.stop();
  });

  it("keeps retrying with bounded backoff during a persistent failure", async () => {
    const collector = new SequencedCollector([failure()]);
    const { tracker, clock } = makeTracker([collector], { retryBackoff: { initialS: 0.1, maxS: 0.4 } }, 20);
    await tracker.start();

    await tracker.sampleNow();
    clock.setSeconds(20.11);
    await tracker.sampleNow();
    clock.setSeconds(20.32);
    await tracker.sampleNow();

    const stats = tracker.getStatistics();
    expect(stats.collectorHealthStatus).toBe("unhealthy");
    expect(stats.telemetryPartial).toBe(true);
    expect(stats.collectorConsecutiveFailures).toBe(3);
    expect(stats.collectorNextRetryEpochS).toBeCloseTo(20.72);
    expect(types(tracker)).toEqual(["start", "collector_degraded"]);
    expect(collector.calls).toBe(3);
  });

  it("uses the default backoff min(30, 2^(n-1)) s", async () => {
    const collector = new SequencedCollector([failure("nvml lost")]);
    const { tracker, clock } = makeTracker([collector], {}, 100);
    await tracker.start();
    const delays: number[] = [];
    for (let i = 0; i < 7; i++) {
      await tracker.sampleNow();
      const retry = tracker.getStatistics().collectorNextRetryEpochS as number;
      delays.push(Math.round(retry - clock.seconds));
      clock.setSeconds(retry);
    }
    expect(delays).toEqual([1, 2, 4, 8, 16, 30, 30]);
    const degraded = tracker.getEvents({ eventType: "collector_degraded" });
    expect(degraded).toHaveLength(1);
    expect(degraded[0]?.metadata).toMatchObject({
      collector_transition: "degraded",
      collector_degraded_from: "healthy",
      collector_degradation_reason: "nvml lost",
      collector_retry_delay_s: 1,
      collector_health_status: "unhealthy",
      collector_consecutive_failures: 1,
    });
    expect(degraded[0]?.context).toBe("Collector unavailable; telemetry paused until recovery.");
  });

  it("emits partial sample events with health metadata", async () => {
    const partial = {
      kind: "partial" as const,
      reading: reading({ allocated: 128, reserved: 128, total: null, active: null, inactive: null }),
      missing: [
        "device_total_bytes",
        "device_free_bytes",
        "allocator_active_bytes",
        "allocator_inactive_bytes",
      ] as const,
      reason: "total unavailable; stats unavailable",
    };
    const collector = new SequencedCollector([
      full(reading({ allocated: 128, reserved: 128 })),
      { ...partial, missing: [...partial.missing] },
    ]);
    const { tracker } = makeTracker([collector], {}, 30);
    await tracker.start();
    await tracker.sampleNow();
    const before = tracker.getEvents().length;

    await tracker.sampleNow();
    const events = tracker.getEvents().slice(before);
    expect(events.map((e) => e.event_type)).toEqual(["collector_degraded", "sample"]);
    const sample = events[1];
    expect(sample?.metadata.collector_health_status).toBe("degraded");
    expect(sample?.metadata.telemetry_partial).toBe(true);
    expect(sample?.metadata.collector_partial_fields).toEqual([
      "device_total_bytes",
      "device_free_bytes",
      "allocator_active_bytes",
      "allocator_inactive_bytes",
    ]);
    expect(sample?.context).toBe(
      "Collected partial telemetry sample (device_total_bytes, device_free_bytes, allocator_active_bytes, allocator_inactive_bytes).",
    );
    expect(sample?.device_total_bytes).toBeNull();
    expect(events[0]?.context).toBe("Collector degraded; telemetry is partial.");
    expect(events[0]?.metadata.collector_degradation_reason).toBe("total unavailable; stats unavailable");
    expect(tracker.getStatistics().collectorHealthStatus).toBe("degraded");
  });

  it("keeps health metadata in exports", async () => {
    const partial = {
      kind: "partial" as const,
      reading: reading({ allocated: 256, reserved: 256, total: null }),
      missing: ["device_total_bytes", "device_free_bytes"] as ("device_total_bytes" | "device_free_bytes")[],
      reason: "total unavailable",
    };
    const collector = new SequencedCollector([full(reading({ allocated: 256, reserved: 256 })), partial]);
    const { tracker } = makeTracker([collector], {}, 40);
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    const dir = mkdtempSync(join(tmpdir(), "stormlog-export-"));
    try {
      expect(tracker.exportEvents(join(dir, "events.jsonl"))).toBe(5);
      const lines = readFileSync(join(dir, "events.jsonl"), "utf8").trim().split("\n");
      const decoded = lines.map((line) => decodeTelemetryLine(line));
      expect(decoded.map((r) => r.event_type)).toEqual([
        "start",
        "peak",
        "sample",
        "collector_degraded",
        "sample",
      ]);
      expect(decoded[4]?.metadata.collector_partial_fields).toEqual([
        "device_total_bytes",
        "device_free_bytes",
      ]);
      tracker.exportEvents(join(dir, "events.json"), "json");
      const json = readFileSync(join(dir, "events.json"), "utf8");
      expect(json).toContain('"collector_health_status": "degraded"');
      expect(() => tracker.exportEvents(join(dir, "x.csv"), "csv" as never)).toThrow(
        /Unsupported format: csv/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("puts the six health keys on every record", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 256, reserved: 256 })), failure()]);
    const { tracker } = makeTracker([collector], {}, 40);
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    tracker.phase("step", () => undefined);
    await tracker.stop();
    for (const event of tracker.getEvents()) {
      expect(Object.keys(event.metadata)).toEqual(
        expect.arrayContaining([
          "collector_health_status",
          "telemetry_partial",
          "collector_partial_fields",
          "collector_last_error",
          "collector_consecutive_failures",
          "collector_next_retry_epoch_s",
          "backend",
          "supports_device_total",
          "supports_device_free",
          "sampling_source",
        ]),
      );
    }
    const last = tracker.getEvents().at(-1);
    expect(last?.event_type).toBe("stop");
    expect(last?.metadata.collector_last_error).toBe("collector unavailable");
  });

  it("resets collector session state on start", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 512, reserved: 768 })), failure()]);
    const { tracker } = makeTracker([collector], {}, 50);
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    expect(tracker.getStatistics().collectorHealthStatus).toBe("unhealthy");
    await tracker.stop();

    await tracker.start();
    const stats = tracker.getStatistics();
    expect(stats.collectorHealthStatus).toBe("healthy");
    expect(stats.collectorLastError).toBeNull();
    expect(stats.collectorConsecutiveFailures).toBe(0);
    expect(stats.collectorNextRetryEpochS).toBeNull();
    expect(stats.currentMemoryAllocated).toBeNull();
    expect(stats.lastMemoryCheck).toBe(0);
    expect(types(tracker)).toEqual(["start"]);
    expect(tracker.getEvents()[0]?.allocator_allocated_bytes).toBe(0);
  });

  it("hides stale current statistics while unhealthy", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 256, reserved: 512 })), failure()]);
    const { tracker } = makeTracker([collector], {}, 60);
    await tracker.start();
    await tracker.sampleNow();
    expect(tracker.getStatistics().currentMemoryAllocated).toBe(256);
    await tracker.sampleNow();
    const stats = tracker.getStatistics();
    expect(stats.collectorHealthStatus).toBe("unhealthy");
    expect(stats.currentMemoryAllocated).toBeNull();
    expect(stats.currentMemoryReserved).toBeNull();
    expect(stats.memoryUtilizationPercent).toBeNull();
  });

  it("never invents zero samples for failed readings", async () => {
    const collector = new SequencedCollector([failure(), failure(), failure()]);
    const { tracker, scheduler } = makeTracker([collector], { retryBackoff: { initialS: 0 } });
    await tracker.start();
    await scheduler.advance(100);
    expect(collector.calls).toBeGreaterThanOrEqual(5);
    expect(tracker.getEvents({ eventType: "sample" })).toHaveLength(0);
    expect(types(tracker)).toEqual(["start", "collector_degraded"]);
  });

  it("streams records to the sink and closes it completed", async () => {
    const writer = new FakeWriter();
    const collector = new SequencedCollector([full(reading({ allocated: 128, reserved: 256 }))]);
    const { tracker } = makeTracker([collector], { sink: writer });
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    await tracker.stop();
    expect(writer.records.map((r) => r.event_type)).toEqual(["start", "peak", "sample", "sample", "stop"]);
    expect(writer.records[2]).toMatchObject({
      collector: "stormlog.cuda_tracker",
      allocator_allocated_bytes: 128,
    });
    expect(writer.sessions).toHaveLength(1);
    expect(writer.closes).toEqual(["completed"]);
    expect(tracker.getSessionSummary()?.status).toBe("completed");
    expect(tracker.getStatistics().finalRetainedFiles).toBe(1);
  });

  it("gives the sink every record in order when a burst of phases outruns a small history", async () => {
    const writer = new FakeWriter();
    const collector = new SequencedCollector([full(reading({ allocated: 64, reserved: 64 }))]);
    // The history ring (8 records) is far smaller than the burst: no record may be overwritten
    // before the sink has it.
    const { tracker } = makeTracker([collector], { sink: writer, maxEvents: 8 });
    await tracker.start();
    for (let i = 0; i < 50; i++) tracker.phase(`step_${i}`, () => undefined);
    await tracker.stop();
    const phases = writer.records.filter((r) => r.event_type.startsWith("phase_"));
    expect(phases).toHaveLength(100);
    phases.forEach((record, i) => {
      expect(record.event_type).toBe(i % 2 === 0 ? "phase_enter" : "phase_exit");
      expect(record.context).toContain(`step_${i >> 1}`);
    });
    expect(writer.records.at(-1)?.event_type).toBe("stop");
  });

  it("hands records to the sink in batches, 50 ms after the first (between training steps)", async () => {
    const writer = new FakeWriter();
    const { tracker, scheduler } = makeTracker(
      [new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))])],
      {
        sink: writer,
      },
    );
    await tracker.start();
    const phases = () => writer.records.filter((r) => r.event_type.startsWith("phase_"));
    tracker.phase("forward", () => undefined);
    await tracker.phase("backward", async () => {
      await Promise.resolve();
    });
    expect(writer.records).toHaveLength(0);
    await scheduler.advance(49);
    expect(writer.records).toHaveLength(0);
    await scheduler.advance(1);
    expect(writer.records[0]?.event_type).toBe("start");
    expect(phases().map((r) => r.context)).toEqual([
      "Phase entered: forward",
      "Phase exited: forward",
      "Phase entered: backward",
      "Phase exited: backward",
    ]);
    // `stop` hands over what is waiting, before its own record.
    tracker.phase("optimizer", () => undefined);
    await tracker.stop();
    expect(writer.records.slice(-3).map((r) => r.event_type)).toEqual(["phase_enter", "phase_exit", "stop"]);
  });

  it("disables a failing sink, keeps tracking and marks the session incomplete", async () => {
    const writer = new FakeWriter();
    const collector = new SequencedCollector([full(reading({ allocated: 128, reserved: 256 }))]);
    const { tracker, scheduler, warnings } = makeTracker([collector], { sink: writer });
    await tracker.start();
    writer.failAppend = true;
    // Samples reach the sink (and fail there) once their batch is handed over, 50 ms later.
    await scheduler.advance(60);
    expect(tracker.getEvents({ eventType: "sample" }).length).toBeGreaterThanOrEqual(3);
    expect(writer.closes).toEqual(["incomplete"]);
    expect(tracker.getSessionSummary()?.status).toBe("incomplete");
    expect(warnings.some((w) => w.includes("disabling the telemetry sink"))).toBe(true);
    await tracker.stop();
    expect(writer.closes).toEqual(["incomplete"]);
    expect(tracker.getSessionSummary()?.status).toBe("incomplete");
    expect(tracker.getSessionSummary()?.ended_at_ns).not.toBeNull();
  });

  it("a logger that throws loses its message, never the sampling timer's work or the training loop", async () => {
    const writer = new FakeWriter();
    const collector = new SequencedCollector([full(reading({ allocated: 128, reserved: 256 }))]);
    let thrown = 0;
    const { tracker, scheduler } = makeTracker([collector], {
      sink: writer,
      logger: {
        warn: () => {
          thrown++;
          throw new Error("the user's logger broke");
        },
      },
    });
    await tracker.start();
    writer.failAppend = true;
    // The sink fails inside a timer; its warning goes to the throwing logger.
    await scheduler.advance(60);
    expect(thrown).toBeGreaterThan(0);
    expect(tracker.getSessionSummary()?.status).toBe("incomplete");
    // Sampling and phases go on.
    const before = tracker.getEvents({ eventType: "sample" }).length;
    await scheduler.advance(50);
    expect(tracker.getEvents({ eventType: "sample" }).length).toBeGreaterThan(before);
    expect(tracker.phase("train", () => 7)).toBe(7);
    await tracker.stop();
  });

  it("marks the session incomplete when the sink lost records", async () => {
    const writer = new FakeWriter();
    writer.diagnostics = { dropped_events: 3 };
    const { tracker } = makeTracker(
      [new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))])],
      {
        sink: writer,
      },
    );
    await tracker.start();
    await tracker.stop();
    expect(tracker.getSessionSummary()?.status).toBe("incomplete");
  });

  it("bounds the history and counts what it drops", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 128, reserved: 128 }))]);
    const { tracker } = makeTracker([collector], { maxEvents: 5 });
    await tracker.start();
    for (let i = 0; i < 6; i++) await tracker.sampleNow();
    const stats = tracker.getStatistics();
    // start, peak, 6 samples: 8 records.
    expect(stats.historyWindowLimitEvents).toBe(5);
    expect(stats.historyRetainedEvents).toBe(5);
    expect(stats.historyDroppedEvents).toBe(3);
    expect(stats.totalEvents).toBe(5);
    expect(types(tracker)).toEqual(["sample", "sample", "sample", "sample", "sample"]);
    tracker.clearEvents();
    expect(tracker.getStatistics().historyDroppedEvents).toBe(0);
  });
});
