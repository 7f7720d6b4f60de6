import { metrics } from "@opentelemetry/api";
import { type DataPoint, type Histogram, MeterProvider, type MetricData } from "@opentelemetry/sdk-metrics";
import { InvalidConfigError } from "@stormlog/core";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryTracker } from "../../src/index.js";
import { FakeWriter, failure, full, makeTracker, reading, SequencedCollector } from "../helpers.js";
import { CollectOnDemandReader } from "./collect-reader.js";

const MiB = 1024 * 1024;

/** The tracker's metrics as a reader collects them now. */
class TestReader extends CollectOnDemandReader {
  /** Every metric collected now, by name. */
  async metricsByName(): Promise<Map<string, MetricData>> {
    const { resourceMetrics, errors } = await this.collect();
    expect(errors).toEqual([]);
    const out = new Map<string, MetricData>();
    for (const scope of resourceMetrics.scopeMetrics) {
      for (const metric of scope.metrics) out.set(metric.descriptor.name, metric);
    }
    return out;
  }
}

function provider(): { provider: MeterProvider; reader: TestReader } {
  const reader = new TestReader();
  return { provider: new MeterProvider({ readers: [reader] }), reader };
}

function points(metric: MetricData | undefined): DataPoint<unknown>[] {
  if (metric === undefined) throw new Error("metric missing");
  return metric.dataPoints as DataPoint<unknown>[];
}

function pointWith(metric: MetricData | undefined, attributes: Record<string, unknown>): DataPoint<unknown> {
  const found = points(metric).find((point) =>
    Object.entries(attributes).every(([key, value]) => point.attributes[key] === value),
  );
  if (found === undefined) throw new Error(`no point with ${JSON.stringify(attributes)}`);
  return found;
}

afterEach(() => {
  metrics.disable();
});

describe("live metrics through the OpenTelemetry API", () => {
  it("publishes memory per device, phase durations and alerts through a given MeterProvider", async () => {
    const { provider: meterProvider, reader } = provider();
    const collector = new SequencedCollector([
      full(reading({ allocated: 100 * MiB, reserved: 150 * MiB, used: 200 * MiB, total: 1024 * MiB })),
      full(reading({ allocated: 950 * MiB, reserved: 1000 * MiB, used: 1000 * MiB, total: 1024 * MiB })),
    ]);
    const { tracker, clock } = makeTracker([collector], {
      metrics: { meterProvider },
      alerts: true,
      identity: { jobId: "job-7", rank: 3, worldSize: 8 },
    });
    await tracker.start();
    await tracker.sampleNow();
    tracker.phase("step", () => {
      clock.advanceMs(30);
      tracker.phase("forward", () => clock.advanceMs(20));
    });
    tracker.phase("step", () => clock.advanceMs(50));
    // Above the warning and critical thresholds: alerts are recorded.
    await tracker.sampleNow();

    const byName = await reader.metricsByName();
    const device = {
      "stormlog.device": 0,
      "stormlog.job_id": "job-7",
      "stormlog.rank": 3,
      "host.name": "test-host",
    };
    expect(pointWith(byName.get("stormlog.memory.allocated"), device).value).toBe(950 * MiB);
    expect(pointWith(byName.get("stormlog.memory.reserved"), device).value).toBe(1000 * MiB);
    // A GPU's driver-reported memory under the semantic conventions' hardware names.
    const gpu = { ...device, "hw.id": "gpu0" };
    expect(pointWith(byName.get("hw.gpu.memory.usage"), gpu).value).toBe(1000 * MiB);
    expect(pointWith(byName.get("hw.gpu.memory.limit"), gpu).value).toBe(1024 * MiB);
    expect(byName.get("stormlog.memory.allocated")?.descriptor.unit).toBe("By");

    const durations = byName.get("stormlog.phase.duration");
    expect(durations?.descriptor.unit).toBe("s");
    const step = pointWith(durations, { "stormlog.phase.path": "step" }).value as Histogram;
    expect(step.count).toBe(2);
    expect(step.sum).toBeCloseTo(0.1, 9);
    const forward = pointWith(durations, { "stormlog.phase.path": "step / forward" }).value as Histogram;
    expect(forward.count).toBe(1);
    expect(forward.sum).toBeCloseTo(0.02, 9);

    const recorded = tracker.getEvents();
    const alerts = byName.get("stormlog.alerts");
    const severities = recorded
      .map((event) => event.event_type)
      .filter((type) => type === "warning" || type === "critical");
    expect(severities.length).toBeGreaterThan(0);
    for (const severity of new Set(severities)) {
      const expected = severities.filter((type) => type === severity).length;
      expect(pointWith(alerts, { "stormlog.alert.severity": severity }).value).toBe(expected);
    }
    expect(points(alerts).length).toBe(new Set(severities).size);
    await tracker.stop();
    // Stopped: the durations recorded stay with the provider.
    const after = await reader.metricsByName();
    const steps = pointWith(after.get("stormlog.phase.duration"), { "stormlog.phase.path": "step" });
    expect((steps.value as Histogram).count).toBe(2);
    await meterProvider.shutdown();
  });

  it("reads the global provider at start(), and publishes nothing with metrics: false", async () => {
    const { provider: meterProvider, reader } = provider();
    metrics.setGlobalMeterProvider(meterProvider);
    const collector = new SequencedCollector([
      full(reading({ allocated: 64 * MiB, reserved: 64 * MiB, total: 1024 * MiB })),
    ]);
    const on = makeTracker([collector]).tracker;
    await on.start();
    await on.sampleNow();
    const byName = await reader.metricsByName();
    expect(pointWith(byName.get("stormlog.memory.allocated"), { "stormlog.device": 0 }).value).toBe(64 * MiB);
    await on.stop();

    const { provider: second, reader: secondReader } = provider();
    metrics.disable();
    metrics.setGlobalMeterProvider(second);
    const off = makeTracker([collector], { metrics: false }).tracker;
    await off.start();
    await off.sampleNow();
    off.phase("step", () => undefined);
    await off.sampleNow();
    const nothing = await secondReader.metricsByName();
    expect([...nothing.keys()]).toEqual([]);
    await off.stop();
    await meterProvider.shutdown();
    await second.shutdown();
  });

  it("looks the global provider up at start(): one registered later is used from the next session on", async () => {
    const collector = new SequencedCollector([
      full(reading({ allocated: 32 * MiB, reserved: 32 * MiB, total: 1024 * MiB })),
    ]);
    const { tracker } = makeTracker([collector]);
    await tracker.start();
    const { provider: meterProvider, reader } = provider();
    metrics.setGlobalMeterProvider(meterProvider);
    await tracker.sampleNow();
    tracker.phase("step", () => undefined);
    await tracker.sampleNow();
    expect([...(await reader.metricsByName()).keys()]).toEqual([]);
    await tracker.stop();
    await tracker.start();
    await tracker.sampleNow();
    const byName = await reader.metricsByName();
    expect(pointWith(byName.get("stormlog.memory.allocated"), { "stormlog.device": 0 }).value).toBe(32 * MiB);
    await tracker.stop();
    await meterProvider.shutdown();
  });

  it("publishes collector health as a state set and counts its transitions", async () => {
    const { provider: meterProvider, reader } = provider();
    const collector = new SequencedCollector([
      full(reading({ allocated: 10 * MiB, reserved: 10 * MiB, total: 1024 * MiB })),
      failure("device lost"),
    ]);
    const { tracker } = makeTracker([collector], { metrics: { meterProvider } });
    await tracker.start();
    await tracker.sampleNow();
    await tracker.sampleNow();
    const byName = await reader.metricsByName();
    const health = byName.get("stormlog.collector.health");
    const state = (status: string) =>
      pointWith(health, { "stormlog.collector": collector.name, "stormlog.collector.state": status }).value;
    expect(state("unhealthy")).toBe(1);
    expect(state("healthy")).toBe(0);
    expect(state("degraded")).toBe(0);
    const degraded = tracker.getEvents().filter((event) => event.event_type === "collector_degraded").length;
    expect(degraded).toBe(1);
    expect(
      pointWith(byName.get("stormlog.collector.transitions"), { "stormlog.collector.transition": "degraded" })
        .value,
    ).toBe(degraded);
    await tracker.stop();
    await meterProvider.shutdown();
  });

  it("publishes the sink's counters and the process RSS a collector reports", async () => {
    const { provider: meterProvider, reader } = provider();
    const writer = new FakeWriter();
    writer.diagnostics = { dropped_events: 2, written_events: 40, queued_events: 5 };
    const collector = new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))]);
    const { tracker } = makeTracker([collector], { metrics: { meterProvider }, sink: writer });
    await tracker.start();
    await tracker.sampleNow();
    const byName = await reader.metricsByName();
    expect(points(byName.get("stormlog.sink.written"))[0]?.value).toBe(40);
    expect(points(byName.get("stormlog.sink.dropped"))[0]?.value).toBe(2);
    expect(points(byName.get("stormlog.sink.queue.depth"))[0]?.value).toBe(5);
    await tracker.stop();

    // The process collector's samples carry rss_bytes: published as the semantic conventions' process.memory.usage.
    const processTracker = new MemoryTracker({
      metrics: { meterProvider },
      env: false,
      handleProcessExit: false,
      registerGlobal: false,
      initialSample: false,
      logger: { warn: () => undefined },
    });
    await processTracker.start();
    await processTracker.sampleNow();
    const rss = processTracker
      .getEvents()
      .filter((event) => event.event_type === "sample")
      .map((event) => event.metadata.rss_bytes)
      .at(-1);
    expect(typeof rss).toBe("number");
    const again = await reader.metricsByName();
    expect(points(again.get("process.memory.usage")).map((point) => point.value)).toContain(rss);
    await processTracker.stop();
    await meterProvider.shutdown();
  });

  it("refuses malformed options with a typed error", () => {
    expect(() => new MemoryTracker({ metrics: { meterProvider: {} as never } })).toThrow(InvalidConfigError);
    expect(() => new MemoryTracker({ metrics: { enabled: "yes" as never } })).toThrow(/metrics.enabled/);
    expect(() => new MemoryTracker({ metrics: { provider: 1 } as never })).toThrow(/unknown key 'provider'/);
  });
});
