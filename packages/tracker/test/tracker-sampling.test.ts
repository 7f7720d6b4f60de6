import {
  InvalidConfigError,
  noCapabilities,
  type SampleResult,
  validateTelemetryRecord,
} from "@stormlog/core";
import { getPhaseHost, noopPhaseHost } from "@stormlog/phases";
import { describe, expect, it } from "vitest";
import { MemoryTracker, processCollector } from "../src/index.js";
import {
  FakeWriter,
  failure,
  full,
  makeTracker,
  reading,
  SequencedCollector,
  settle,
  types,
} from "./helpers.js";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

function gpu(allocated: number, reserved = allocated, total = 16 * GiB) {
  return full(reading({ allocated, reserved, total, used: reserved }));
}

describe("sampling loop", () => {
  it("emits peak, allocation, alerts, then sample, in the reference's order", async () => {
    const collector = new SequencedCollector([gpu(1 * GiB), gpu(1.5 * GiB), gpu(1.25 * GiB)]);
    const { tracker } = makeTracker([collector], { alerts: true });
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    await tracker.sampleNow();
    expect(types(tracker)).toEqual([
      "start",
      "peak",
      "sample",
      "peak",
      "allocation",
      "warning",
      "sample",
      "deallocation",
      "sample",
    ]);
    const events = tracker.getEvents();
    expect(events[3]?.context).toBe("New peak memory: 1.50 GB");
    expect(events[4]?.context).toBe("Memory allocated: 512.00 MB");
    expect(events[5]).toMatchObject({
      context: "Large allocation detected: 512.00 MB",
      allocator_change_bytes: 512 * MiB,
    });
    expect(events[5]?.metadata.large_allocation).toBe(true);
    expect(events[6]?.allocator_change_bytes).toBe(512 * MiB);
    expect(events[7]?.context).toBe("Memory freed: 256.00 MB");
    const stats = tracker.getStatistics();
    expect(stats).toMatchObject({
      peakMemory: 1.5 * GiB,
      totalAllocations: 1,
      totalAllocationBytes: 512 * MiB,
      totalDeallocations: 1,
      totalDeallocationBytes: 256 * MiB,
      alertCount: 1,
      averageAllocationSize: 512 * MiB,
    });
  });

  it("does not report the first sample as an allocation", async () => {
    const collector = new SequencedCollector([gpu(8 * GiB)]);
    const { tracker } = makeTracker([collector], { alerts: true });
    await tracker.start();
    await tracker.sampleNow();
    expect(types(tracker)).toEqual(["start", "peak", "sample"]);
    expect(tracker.getEvents({ eventType: "sample" })[0]?.allocator_change_bytes).toBe(0);
    expect(tracker.getStatistics().totalAllocations).toBe(0);
  });

  it("samples on the scheduler's timer and stops sampling at stop()", async () => {
    const collector = new SequencedCollector([gpu(GiB)]);
    const { tracker, scheduler } = makeTracker([collector]);
    await tracker.start();
    await tracker.start();
    expect(scheduler.pending).toBe(1);
    await scheduler.advance(35);
    expect(collector.calls).toBe(3);
    await tracker.stop();
    await tracker.stop();
    expect(scheduler.pending).toBe(0);
    await scheduler.advance(100);
    expect(collector.calls).toBe(3);
    expect(types(tracker).filter((t) => t === "stop")).toHaveLength(1);
  });

  it("awaits asynchronous collectors and fails one that does not answer", async () => {
    let resolveSlow!: (value: SampleResult) => void;
    const slow = new Promise<SampleResult>((resolve) => {
      resolveSlow = resolve;
    });
    const collector = new SequencedCollector([Promise.resolve(gpu(GiB)), slow]);
    const { tracker, scheduler } = makeTracker([collector], { sampleTimeoutMs: 50, samplingIntervalMs: 10 });
    await tracker.start();
    await scheduler.advance(10);
    expect(tracker.getEvents({ eventType: "sample" })).toHaveLength(1);
    await scheduler.advance(10);
    expect(tracker.getEvents({ eventType: "collector_degraded" })).toHaveLength(0);
    await scheduler.advance(50);
    const degraded = tracker.getEvents({ eventType: "collector_degraded" });
    expect(degraded).toHaveLength(1);
    expect(degraded[0]?.metadata.collector_degradation_reason).toMatch(/did not answer within 50 ms/);
    resolveSlow(gpu(2 * GiB));
    await settle();
    expect(tracker.getEvents({ eventType: "sample" })).toHaveLength(1);
  });

  it("treats a throwing or contract-breaking collector as a failure", async () => {
    const throwing = new SequencedCollector([]);
    throwing.sample = () => {
      throw new Error("driver crashed");
    };
    const { tracker } = makeTracker([throwing]);
    await tracker.start();
    await tracker.sampleNow();
    expect(tracker.getStatistics().collectorLastError).toBe(
      "collector stormlog.cuda_tracker threw: driver crashed",
    );

    const liar = new SequencedCollector(
      [full({ allocator_allocated_bytes: 5, device_used_bytes: 7 })],
      "stormlog.tfjs_tracker",
      0,
      {
        ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
        supports_allocator_allocated: true,
      },
    );
    const second = makeTracker([liar]).tracker;
    await second.start();
    await second.sampleNow();
    expect(second.getStatistics().collectorLastError).toMatch(
      /reported device_used_bytes, which its capabilities mark unsupported/,
    );
    const negative = new SequencedCollector([
      full({ ...reading({ allocated: 1, reserved: 1 }), allocator_reserved_bytes: -1 }),
    ]);
    const third = makeTracker([negative]).tracker;
    await third.start();
    await third.sampleNow();
    expect(third.getStatistics().collectorLastError).toMatch(/non-negative integers/);
  });

  it("rejects collectors of another contract version and bad options", () => {
    const foreign = {
      ...new SequencedCollector([]),
      specificationVersion: "v0",
    } as unknown as SequencedCollector;
    expect(() => new MemoryTracker({ collectors: [foreign] })).toThrow(InvalidConfigError);
    expect(() => new MemoryTracker({ samplingIntervalMs: 0 })).toThrow(/samplingIntervalMs/);
    expect(() => new MemoryTracker({ maxEvents: 0.5 })).toThrow(/maxEvents/);
    expect(() => new MemoryTracker({ thresholds: { nope: 1 } as never })).toThrow(/Unknown threshold: nope/);
  });

  it("carries collector metadata on samples and defaults to the process collector", async () => {
    const tracker = new MemoryTracker({ handleProcessExit: false, registerGlobal: false, env: false });
    await tracker.start();
    await tracker.sampleNow();
    await tracker.stop();
    const sample = tracker.getEvents({ eventType: "sample" })[0];
    expect(sample?.collector).toBe("stormlog.cpu_tracker");
    expect(sample?.device_id).toBe(-1);
    expect(typeof sample?.metadata.rss_bytes).toBe("number");
    expect(sample?.allocator_allocated_bytes).toBe(sample?.metadata.rss_bytes);
  });
});

describe("alerts", () => {
  const usage = (percent: number) =>
    gpu(Math.round((percent / 100) * 16 * GiB), Math.round((percent / 100) * 16 * GiB));

  it("raises usage alerts once per episode, re-arming below the hysteresis margin", async () => {
    const collector = new SequencedCollector([
      usage(85),
      usage(86),
      usage(84),
      usage(78),
      usage(70),
      usage(85),
      usage(96),
      usage(97),
      usage(85),
    ]);
    const { tracker } = makeTracker([collector], {
      alerts: { mode: "episode" },
      thresholds: { memoryLeakThreshold: 1e15 },
    });
    await tracker.start();
    for (let i = 0; i < 9; i++) await tracker.sampleNow();
    const alerts = tracker.getAlerts().map((a) => a.context);
    expect(alerts).toEqual([
      "WARNING: Memory usage at 85.0%",
      "WARNING: Memory usage at 85.0%",
      "CRITICAL: Memory usage at 96.0%",
    ]);
    expect(tracker.getAlerts()[0]?.metadata.usage_percent).toBeCloseTo(85, 3);
    expect(tracker.getStatistics().alertsSuppressed).toBeGreaterThan(0);
  });

  it("raises them on every sample in the reference's mode", async () => {
    const collector = new SequencedCollector([usage(85), usage(86), usage(96)]);
    const { tracker } = makeTracker([collector], {
      alerts: { mode: "every-sample" },
      thresholds: { memoryLeakThreshold: 1e15 },
    });
    await tracker.start();
    for (let i = 0; i < 3; i++) await tracker.sampleNow();
    expect(tracker.getAlerts().map((a) => a.event_type)).toEqual(["warning", "warning", "critical"]);
  });

  it("raises fragmentation once per episode", async () => {
    const frag = (allocated: number) => full(reading({ allocated, reserved: 1000, total: 1_000_000 }));
    const collector = new SequencedCollector([frag(600), frag(600), frag(800), frag(600)]);
    const { tracker } = makeTracker([collector], { alerts: true, thresholds: { memoryLeakThreshold: 1e12 } });
    await tracker.start();
    for (let i = 0; i < 4; i++) await tracker.sampleNow();
    expect(tracker.getAlerts().map((a) => a.context)).toEqual([
      "High fragmentation: 40.0%",
      "High fragmentation: 40.0%",
    ]);
  });

  it("isolates alert callbacks from each other's exceptions", async () => {
    const collector = new SequencedCollector([usage(50), usage(90)]);
    const { tracker } = makeTracker([collector], { alerts: true, thresholds: { memoryLeakThreshold: 1e15 } });
    const seen: string[] = [];
    tracker.addAlertCallback(() => {
      throw new Error("first callback bug");
    });
    const remove = tracker.addAlertCallback((record) => {
      seen.push(record.event_type);
    });
    tracker.addAlertCallback(async () => {
      throw new Error("async callback bug");
    });
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    await settle();
    expect(seen).toEqual(["warning"]);
    remove();
    expect(tracker.getStatistics().alertCount).toBe(1);
  });

  it("can be switched off and thresholds changed at run time", async () => {
    const collector = new SequencedCollector([usage(85)]);
    const { tracker } = makeTracker([collector], { alerts: false });
    await tracker.start();
    await tracker.sampleNow();
    expect(tracker.getAlerts()).toHaveLength(0);
    const enabled = makeTracker([new SequencedCollector([usage(85)])], { alerts: true }).tracker;
    enabled.setThreshold("memory_warning_percent", 90);
    expect(enabled.thresholds.memoryWarningPercent).toBe(90);
    await enabled.start();
    await enabled.sampleNow();
    expect(enabled.getAlerts()).toHaveLength(0);
    expect(() => enabled.setThreshold("memory_warning_percent", -1)).toThrow(InvalidConfigError);
  });
});

describe("several collectors", () => {
  const tfjsCaps = {
    ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
    supports_allocator_allocated: true,
    supports_allocator_reserved: true,
  };
  const nvmlCaps = {
    ...noCapabilities("cuda", "stormlog.nvml_tracker", "nvml"),
    supports_device_used: true,
    supports_device_free: true,
    supports_device_total: true,
  };

  it("merges allocator and device counters of one device into one record per tick", async () => {
    const tfjs = new SequencedCollector(
      [full({ allocator_allocated_bytes: 3 * GiB, allocator_reserved_bytes: 4 * GiB })],
      "stormlog.tfjs_tracker",
      0,
      tfjsCaps,
    );
    const nvml = new SequencedCollector(
      [
        full({ device_used_bytes: 6 * GiB, device_free_bytes: 10 * GiB, device_total_bytes: 16 * GiB }),
        failure("NVML_ERROR_GPU_IS_LOST"),
      ],
      "stormlog.nvml_tracker",
      0,
      nvmlCaps,
    );
    const host = processCollector();
    const { tracker } = makeTracker([tfjs, nvml, host], { schemaVersion: 4 });
    await tracker.start();
    await tracker.sampleNow();
    const samples = tracker.getEvents({ eventType: "sample" });
    expect(samples.map((s) => s.device_id)).toEqual([0, -1]);
    expect(samples[0]).toMatchObject({
      collector: "stormlog.tfjs_tracker+stormlog.nvml_tracker",
      allocator_allocated_bytes: 3 * GiB,
      allocator_reserved_bytes: 4 * GiB,
      device_used_bytes: 6 * GiB,
      device_total_bytes: 16 * GiB,
      allocator_active_bytes: null,
    });
    expect(samples[0]?.metadata.memory_capabilities).toMatchObject({
      backend: "tensorflow+cuda",
      supports_allocator_allocated: true,
      supports_device_used: true,
      supports_allocator_active: false,
    });
    expect(samples[1]?.collector).toBe("stormlog.cpu_tracker");

    await tracker.sampleNow();
    const degraded = tracker.getEvents({ eventType: "collector_degraded" });
    expect(degraded).toHaveLength(1);
    expect(degraded[0]?.metadata).toMatchObject({
      collector_name: "stormlog.nvml_tracker",
      collector_health_status: "unhealthy",
    });
    const latest = tracker
      .getEvents({ eventType: "sample" })
      .filter((s) => s.device_id === 0)
      .at(-1);
    expect(latest?.allocator_allocated_bytes).toBe(3 * GiB);
    expect(latest?.device_used_bytes).toBeNull();
    expect(latest?.context).toBe(
      "Collected partial telemetry sample (device_used_bytes, device_free_bytes, device_total_bytes).",
    );
    expect(latest?.metadata.collectors_health).toEqual({
      "stormlog.tfjs_tracker": "healthy",
      "stormlog.nvml_tracker": "unhealthy",
    });
    const stats = tracker.getStatistics();
    expect(stats.devices.map((d) => d.deviceId)).toEqual([0, -1]);
    expect(stats.collectors.map((c) => [c.name, c.collectorHealthStatus])).toEqual([
      ["stormlog.tfjs_tracker", "healthy"],
      ["stormlog.nvml_tracker", "unhealthy"],
      ["stormlog.cpu_tracker", "healthy"],
    ]);
    expect(stats.collectorHealthStatus).toBe("unhealthy");
    expect(stats.currentMemoryAllocated).toBe(3 * GiB);
    await tracker.stop();
    host.close();
  });
});

describe("records", () => {
  it("writes valid v3 and v4 records with the tracker's identity", async () => {
    for (const schemaVersion of [3, 4] as const) {
      const collector = new SequencedCollector([gpu(GiB), failure(), gpu(2 * GiB)]);
      const { tracker, clock } = makeTracker([collector], {
        schemaVersion,
        alerts: true,
        env: { RANK: "1", LOCAL_RANK: "1", WORLD_SIZE: "2", TORCHELASTIC_RUN_ID: "job-7" },
      });
      await tracker.start();
      await tracker.sampleNow();
      await tracker.sampleNow();
      clock.advanceMs(2000);
      await tracker.sampleNow();
      tracker.phase("train", () => undefined);
      await tracker.stop();
      for (const record of tracker.getEvents()) {
        expect(() => validateTelemetryRecord(record)).not.toThrow();
        expect(record).toMatchObject({
          schema_version: schemaVersion,
          rank: 1,
          local_rank: 1,
          world_size: 2,
          job_id: "job-7",
        });
        expect(record.host).toBe("test-host");
        expect(record.pid).toBe(4242);
        expect(record.sampling_interval_ms).toBe(10);
      }
      expect(types(tracker)).toEqual([
        "start",
        "peak",
        "sample",
        "collector_degraded",
        "collector_recovered",
        "peak",
        "allocation",
        "warning",
        "sample",
        "phase_enter",
        "phase_exit",
        "stop",
      ]);
    }
  });

  it("writes nulls for unsupported counters in v4 and the reference's derived values in v3", async () => {
    const caps = {
      ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
      supports_allocator_allocated: true,
    };
    for (const schemaVersion of [3, 4] as const) {
      const collector = new SequencedCollector(
        [full({ allocator_allocated_bytes: 10 })],
        "stormlog.tfjs_tracker",
        0,
        caps,
      );
      const { tracker } = makeTracker([collector], { schemaVersion });
      await tracker.start();
      await tracker.sampleNow();
      const sample = tracker.getEvents({ eventType: "sample" })[0];
      // v3 cannot hold null: reserved falls back to allocated, device used to max(allocated, reserved).
      expect(sample?.allocator_reserved_bytes).toBe(schemaVersion === 3 ? 10 : null);
      expect(sample?.device_used_bytes).toBe(schemaVersion === 3 ? 10 : null);
      expect(sample?.device_total_bytes).toBeNull();
    }
  });

  it("serialises statistics with the reference's keys", async () => {
    const { tracker } = makeTracker([new SequencedCollector([gpu(GiB)])]);
    await tracker.start();
    await tracker.sampleNow();
    const json = tracker.getStatisticsJson();
    const reference = [
      "peak_memory",
      "total_allocations",
      "total_deallocations",
      "total_allocation_bytes",
      "total_deallocation_bytes",
      "alert_count",
      "tracking_start_time",
      "last_memory_check",
      "total_events",
      "events_last_hour",
      "history_window_limit_events",
      "history_retained_events",
      "history_dropped_events",
      "backend",
      "oom_flight_recorder_enabled",
      "last_oom_dump_path",
      "session_id",
      "session_status",
      "current_memory_allocated",
      "current_memory_reserved",
      "memory_utilization_percent",
      "average_allocation_size",
      "average_deallocation_size",
      "collector_health_status",
      "telemetry_partial",
      "collector_partial_fields",
      "collector_last_error",
      "collector_consecutive_failures",
      "collector_next_retry_epoch_s",
      "rollover_count",
      "pruned_segment_count",
      "pruned_bytes",
      "final_retained_files",
      "final_retained_bytes",
      "tracking_duration_seconds",
      "allocations_per_second",
      "bytes_allocated_per_second",
    ];
    const keys = Object.keys(json);
    expect(keys).toEqual(expect.arrayContaining(reference));
    const order = reference.map((key) => keys.indexOf(key));
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    expect(json.session_status).toBe("running");
    expect(json.current_memory_allocated).toBe(GiB);
    expect(json.memory_utilization_percent).toBeCloseTo(6.25);
  });

  it("keeps a memory timeline per interval", async () => {
    const collector = new SequencedCollector([gpu(GiB), gpu(2 * GiB), gpu(3 * GiB)]);
    const { tracker, clock } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    clock.advanceMs(400);
    await tracker.sampleNow();
    clock.advanceMs(1000);
    await tracker.sampleNow();
    const timeline = tracker.getMemoryTimeline(1);
    expect(timeline.allocated).toEqual([2 * GiB, 3 * GiB]);
    expect(timeline.timestamps).toHaveLength(2);
  });
});

describe("lifecycle", () => {
  it("registers as the global phase host while running", async () => {
    const { tracker } = makeTracker([new SequencedCollector([gpu(GiB)])], { registerGlobal: true });
    await tracker.start();
    expect(getPhaseHost()).toBe(tracker);
    await tracker.stop();
    expect(getPhaseHost()).toBe(noopPhaseHost);
  });

  it("stops with await using", async () => {
    const writer = new FakeWriter();
    {
      await using tracker = makeTracker([new SequencedCollector([gpu(GiB)])], { sink: writer }).tracker;
      await tracker.start();
    }
    expect(writer.closes).toEqual(["completed"]);
    expect(writer.records.at(-1)?.event_type).toBe("stop");
  });

  it("drops a sample that resolves after stop()", async () => {
    let resolve!: (value: SampleResult) => void;
    const collector = new SequencedCollector([
      new Promise<SampleResult>((r) => {
        resolve = r;
      }),
    ]);
    const { tracker, scheduler } = makeTracker([collector]);
    await tracker.start();
    await scheduler.advance(10);
    await tracker.stop();
    resolve(gpu(GiB));
    await settle();
    expect(types(tracker)).toEqual(["start", "stop"]);
  });

  it("skips collectors that are not available, with a warning", async () => {
    const unavailable = new SequencedCollector([gpu(GiB)], "stormlog.nvml_tracker", 1);
    unavailable.availability = () => ({ available: false, reason: "libnvidia-ml.so not found" }) as never;
    const present = new SequencedCollector([gpu(GiB)]);
    const { tracker, warnings } = makeTracker([unavailable, present]);
    await tracker.start();
    await tracker.sampleNow();
    expect(unavailable.calls).toBe(0);
    expect(warnings[0]).toMatch(/stormlog.nvml_tracker is not available.*libnvidia-ml.so not found/);
    expect(tracker.getEvents({ eventType: "sample" })).toHaveLength(1);
  });
});

describe("collector availability", () => {
  it("falls back to the process collector when no configured collector is available", async () => {
    const unavailable = new SequencedCollector([full({ device_used_bytes: 1 })]);
    unavailable.availability = () => ({ available: false, reason: "NVML library not found" });
    const { tracker, warnings } = makeTracker([unavailable]);
    await tracker.start();
    await tracker.sampleNow();
    const sample = tracker.getEvents({ eventType: "sample" })[0];
    expect(sample?.collector).toBe("stormlog.cpu_tracker");
    expect(sample?.allocator_allocated_bytes).toBeGreaterThan(0);
    expect(warnings.some((warning) => warning.includes("NVML library not found"))).toBe(true);
    expect(warnings.some((warning) => warning.includes("falling back to the process collector"))).toBe(true);
    await tracker.stop();
  });
});
