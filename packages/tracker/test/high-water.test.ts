// A collector that sees between readings (`takeHighWater()`, the tfjs engine's byte count): the
// tracker records a transient peak as a `sample` inside the phase it happened in.
import {
  type MemoryCapabilities,
  type MemoryReading,
  noCapabilities,
  type TelemetryEvent,
} from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { full, makeTracker, SequencedCollector, SyncReadCollector } from "./helpers.js";

/** A boundary-read collector whose high-water mark the test sets; each take starts a new window. */
class HighWaterCollector extends SyncReadCollector {
  high: MemoryReading | null = null;
  takes = 0;
  fail = false;
  constructor(capabilities?: MemoryCapabilities) {
    super(
      { allocator_allocated_bytes: 1000, allocator_reserved_bytes: 4000 },
      "stormlog.tfjs_tracker",
      0,
      capabilities,
    );
  }
  takeHighWater(): MemoryReading | null {
    this.takes++;
    if (this.fail) throw new Error("engine gone");
    const high = this.high;
    this.high = null;
    return high;
  }
}

/** An NVML collector's: device memory only. */
const NVML_CAPABILITIES: MemoryCapabilities = {
  ...noCapabilities("cuda", "stormlog.cuda_tracker", "nvml"),
  supports_device_used: true,
  supports_device_free: true,
  supports_device_total: true,
};

const highWaterSamples = (events: readonly TelemetryEvent[]) =>
  events.filter((event) => event.event_type === "sample" && event.metadata.high_water_mark === true);

function boundary(events: readonly TelemetryEvent[], type: string, path: string): TelemetryEvent {
  const found = events.find(
    (event) =>
      event.event_type === type &&
      (event.metadata.phase_scope as { path?: string[] } | undefined)?.path?.join(" / ") === path,
  );
  if (found === undefined) throw new Error(`no ${type} of ${path}`);
  return found;
}

describe("high-water marks between readings", () => {
  it("records a transient inside a synchronous phase as a sample in that phase, before its exit", async () => {
    const collector = new HighWaterCollector();
    const { tracker, clock } = makeTracker([collector], { alerts: true });
    await tracker.start();
    await tracker.sampleNow();
    tracker.phase("step", () => {
      clock.advanceMs(5);
      tracker.phase("forward", () => {
        clock.advanceMs(200);
        // A 100 MB activation made and disposed of while the phase ran: no reading saw it.
        collector.high = { allocator_allocated_bytes: 100_001_000 };
      });
      clock.advanceMs(5);
      tracker.phase("backward", () => clock.advanceMs(100));
    });
    await tracker.stop();

    const events = tracker.getEvents();
    const [peak, ...others] = highWaterSamples(events);
    expect(others).toEqual([]);
    expect(peak).toMatchObject({
      allocator_allocated_bytes: 100_001_000,
      // The other counters are the last reading's.
      allocator_reserved_bytes: 4000,
      allocator_change_bytes: 100_000_000,
      context: "High-water mark since the previous reading.",
    });
    const forwardEnter = boundary(events, "phase_enter", "step / forward");
    const forwardExit = boundary(events, "phase_exit", "step / forward");
    expect(peak!.timestamp_ns).toBe(forwardExit.timestamp_ns - 1n);
    expect(peak!.timestamp_ns).toBeGreaterThan(forwardEnter.timestamp_ns);
    // In the order written too: after forward's enter, right before its exit.
    expect(events.indexOf(peak!)).toBe(events.indexOf(forwardExit) - 1);
    // The tracker's statistics and `peak` record count it, as for a sampled peak.
    expect(tracker.getStatistics().peakMemory).toBe(100_001_000);
    expect(events.some((e) => e.event_type === "peak" && e.allocator_allocated_bytes === 100_001_000)).toBe(
      true,
    );
    // Every reading of the primary device ended a window: start, a sample, six boundaries, stop.
    expect(collector.takes).toBe(9);
  });

  it("records a transient between two samples outside any phase right before the later sample", async () => {
    const collector = new HighWaterCollector();
    const { tracker, clock } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    clock.advanceMs(50);
    collector.high = { allocator_allocated_bytes: 9000 };
    await tracker.sampleNow();
    const events = tracker.getEvents();
    const [peak] = highWaterSamples(events);
    const samples = events.filter((e) => e.event_type === "sample" && e.metadata.high_water_mark !== true);
    expect(peak?.allocator_allocated_bytes).toBe(9000);
    expect(peak!.timestamp_ns).toBe(samples[1]!.timestamp_ns - 1n);
    // The memory came and went between the readings: no allocation or deallocation records, and the
    // later sample's change is from the earlier one.
    expect(events.filter((e) => e.event_type === "allocation" || e.event_type === "deallocation")).toEqual(
      [],
    );
    expect(samples[1]?.allocator_change_bytes).toBe(0);
    await tracker.stop();
  });

  it("leaves out what came before the session, and goes on when a collector's take throws", async () => {
    const collector = new HighWaterCollector();
    collector.high = { allocator_allocated_bytes: 77_000 };
    const { tracker, clock } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    expect(highWaterSamples(tracker.getEvents())).toEqual([]);

    collector.fail = true;
    expect(tracker.phase("forward", () => clock.advanceMs(10) ?? 42)).toBe(42);
    await tracker.sampleNow();
    collector.fail = false;
    await tracker.stop();
    const types = tracker.getEvents().map((e) => e.event_type);
    expect(types.filter((t) => t === "phase_enter" || t === "phase_exit")).toEqual([
      "phase_enter",
      "phase_exit",
    ]);
    expect(highWaterSamples(tracker.getEvents())).toEqual([]);
  });

  it("reads the collector's other counters now, and marks the device's other collectors' counters as last read", async () => {
    const tfjs = new HighWaterCollector({
      ...noCapabilities("tfjs-wasm", "stormlog.tfjs_tracker", "tf.memory+wasm_heap"),
      supports_allocator_allocated: true,
      supports_allocator_reserved: true,
    });
    const nvml = new SequencedCollector(
      [full({ device_used_bytes: 50_000, device_free_bytes: 950_000, device_total_bytes: 1_000_000 })],
      "stormlog.cuda_tracker",
      0,
      NVML_CAPABILITIES,
    );
    const { tracker, clock } = makeTracker([tfjs, nvml]);
    await tracker.start();
    await tracker.sampleNow();
    tracker.phase("forward", () => {
      clock.advanceMs(20);
      // The heap grew for the peak (a wasm heap never shrinks): the mark carries it as it is now.
      tfjs.current = { allocator_allocated_bytes: 1000, allocator_reserved_bytes: 64_000 };
      tfjs.high = { allocator_allocated_bytes: 60_000 };
    });
    await tracker.stop();
    const [mark] = highWaterSamples(tracker.getEvents());
    expect(mark).toMatchObject({ allocator_allocated_bytes: 60_000, allocator_reserved_bytes: 64_000 });
    // NVML was not read at the peak's time: its last reading, as a boundary record carries it, listed
    // as partial (never derived from the peak: the allocator's peak is not the device's).
    expect(mark).toMatchObject({ device_used_bytes: 50_000, device_total_bytes: 1_000_000 });
    expect(mark?.metadata).toMatchObject({
      telemetry_partial: true,
      collector_partial_fields: ["device_used_bytes", "device_free_bytes", "device_total_bytes"],
      high_water_mark: true,
    });
  });

  it("takes a mark from a collector read only by samples (NVML polled on its thread), with only its peak", async () => {
    class PolledCollector extends SequencedCollector {
      high: MemoryReading | null = null;
      takeHighWater(): MemoryReading | null {
        const high = this.high;
        this.high = null;
        return high;
      }
    }
    const nvml = new PolledCollector(
      [full({ device_used_bytes: 2000, device_free_bytes: 8000, device_total_bytes: 10_000 })],
      "stormlog.cuda_tracker",
      0,
      NVML_CAPABILITIES,
    );
    const { tracker, clock } = makeTracker([nvml]);
    await tracker.start();
    await tracker.sampleNow();
    tracker.phase("infer", () => {
      clock.advanceMs(30);
      nvml.high = { device_used_bytes: 9000 };
    });
    await tracker.stop();
    const events = tracker.getEvents();
    const [mark, ...others] = highWaterSamples(events);
    expect(others).toEqual([]);
    expect(mark).toMatchObject({
      device_used_bytes: 9000,
      device_total_bytes: 10_000,
      device_free_bytes: 8000,
    });
    expect(mark?.metadata.collector_partial_fields).toEqual(["device_free_bytes", "device_total_bytes"]);
    expect(mark!.timestamp_ns).toBe(boundary(events, "phase_exit", "infer").timestamp_ns - 1n);
  });

  it("keeps a mark inside its phase when the clock did not move since the phase began", async () => {
    const collector = new HighWaterCollector();
    const { tracker, clock } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    clock.advanceMs(11);
    // A coarse clock: step and forward begin, peak and end within one tick.
    tracker.phase("step", () =>
      tracker.phase("forward", () => {
        collector.high = { allocator_allocated_bytes: 8000 };
      }),
    );
    await tracker.stop();
    const events = tracker.getEvents();
    const [mark] = highWaterSamples(events);
    const enter = boundary(events, "phase_enter", "step / forward");
    expect(mark!.timestamp_ns).toBe(enter.timestamp_ns);
    expect(events.indexOf(mark!)).toBeGreaterThan(events.indexOf(enter));
  });

  it("takes no window from collectors off the first device, whose readings do not end at boundaries", async () => {
    const primary = new HighWaterCollector();
    const other = new HighWaterCollector();
    Object.defineProperty(other, "deviceId", { value: 1 });
    const { tracker, clock } = makeTracker([primary, other]);
    await tracker.start();
    await tracker.sampleNow();
    tracker.phase("forward", () => clock.advanceMs(10));
    await tracker.stop();
    expect(primary.takes).toBeGreaterThan(0);
    expect(other.takes).toBe(0);
  });
});
