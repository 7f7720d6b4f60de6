import { existsSync } from "node:fs";
import type { MemoryReading, SampleResult, TelemetryEvent } from "@stormlog/core";
import { noCapabilities } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import { processCollector } from "../src/index.js";
import { full, makeTracker, SequencedCollector, SyncReadCollector, temporaryDirectories } from "./helpers.js";

const hostCaps = {
  ...noCapabilities("cpu", "stormlog.cpu_tracker", "procfs_statm"),
  supports_allocator_allocated: true,
  supports_allocator_reserved: true,
};

/** A host-memory collector without `readSync()`, whose `readOnDemand()` the test controls and counts. */
class OnDemandCollector extends SequencedCollector {
  onDemandCalls = 0;
  current: MemoryReading = { allocator_allocated_bytes: 1000, allocator_reserved_bytes: 1000 };
  onDemand: "read" | "throw" | "failure" = "read";
  constructor() {
    super(
      [full({ allocator_allocated_bytes: 1000, allocator_reserved_bytes: 1000 })],
      "stormlog.cpu_tracker",
      -1,
      hostCaps,
    );
  }
  readOnDemand(): SampleResult {
    this.onDemandCalls++;
    if (this.onDemand === "throw") throw new Error("statm went away");
    if (this.onDemand === "failure") return { kind: "failure", error: "could not read" };
    return { kind: "full", reading: { ...this.current }, metadata: { read_on_demand: true } };
  }
}

const phaseRecords = (events: readonly TelemetryEvent[]) =>
  events.filter((e) => e.event_type === "phase_enter" || e.event_type === "phase_exit");

const MiB = 1024 * 1024;
/** Kept for the whole run, so the memory a phase touched stays resident. */
const kept: Buffer[] = [];

describe("phases that ask for readings (PhaseOptions.readings)", () => {
  it("a plain boundary never calls readOnDemand() and keeps the last sample's counters", async () => {
    const collector = new OnDemandCollector();
    const { tracker } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    collector.current = { allocator_allocated_bytes: 5000, allocator_reserved_bytes: 5000 };
    tracker.phase("plain", () => tracker.phase("inner", () => undefined, { readings: false }));
    using _scope = tracker.phase("scope");
    expect(collector.onDemandCalls).toBe(0);
    const records = phaseRecords(tracker.getEvents());
    expect(records).toHaveLength(5);
    for (const record of records) {
      expect(record.allocator_allocated_bytes).toBe(1000);
      expect(record.metadata.phase_counters).toBe("last_sample");
    }
  });

  it("reads readOnDemand() at the enter and exit of a phase that asks, with its detail", async () => {
    const collector = new OnDemandCollector();
    const { tracker } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    collector.current = { allocator_allocated_bytes: 2000, allocator_reserved_bytes: 2100 };
    tracker.phase(
      "measured",
      () => {
        collector.current = { allocator_allocated_bytes: 7000, allocator_reserved_bytes: 7100 };
        tracker.phase("inner", () => undefined);
        collector.current = { allocator_allocated_bytes: 9000, allocator_reserved_bytes: 9100 };
      },
      { readings: true },
    );
    expect(collector.onDemandCalls).toBe(2);
    const [enter, innerEnter, innerExit, exit] = phaseRecords(tracker.getEvents());
    expect(enter).toMatchObject({ allocator_allocated_bytes: 2000, allocator_reserved_bytes: 2100 });
    expect(exit).toMatchObject({ allocator_allocated_bytes: 9000, allocator_reserved_bytes: 9100 });
    expect(enter?.metadata).toMatchObject({ phase_counters: "boundary_read", read_on_demand: true });
    expect(exit?.metadata.phase_counters).toBe("boundary_read");
    // The phase inside did not ask: the last sample's counters.
    expect(innerEnter).toMatchObject({ allocator_allocated_bytes: 1000 });
    expect(innerExit?.metadata.phase_counters).toBe("last_sample");
    // On-demand readings do not feed the sampler.
    await tracker.sampleNow();
    expect(collector.calls).toBe(2);
  });

  it("never throws when readOnDemand() throws or fails: the record keeps the last sample's counters", async () => {
    const collector = new OnDemandCollector();
    const { tracker, warnings } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    collector.current = { allocator_allocated_bytes: 4000, allocator_reserved_bytes: 4000 };
    collector.onDemand = "throw";
    expect(tracker.phase("throws", () => 3, { readings: true })).toBe(3);
    collector.onDemand = "failure";
    await expect(tracker.phase("fails", async () => 4, { readings: true })).resolves.toBe(4);
    expect(collector.onDemandCalls).toBe(4);
    for (const record of phaseRecords(tracker.getEvents())) {
      expect(record.allocator_allocated_bytes).toBe(1000);
      expect(record.metadata.phase_counters).toBe("last_sample");
    }
    expect(warnings).toEqual([]);
    expect(tracker.getSessionSummary()?.status).toBe("running");
  });

  it("reads readSync() collectors instead when they have one, and nothing when boundaryReadings is false", async () => {
    const both = Object.assign(
      new SyncReadCollector(
        { allocator_allocated_bytes: 300, allocator_reserved_bytes: 300 },
        "both",
        -1,
        hostCaps,
      ),
      { onDemandCalls: 0 },
    );
    const bothCollector = Object.assign(both, {
      readOnDemand(): SampleResult {
        both.onDemandCalls++;
        return full({ allocator_allocated_bytes: 1, allocator_reserved_bytes: 1 });
      },
    });
    const { tracker } = makeTracker([bothCollector]);
    await tracker.start();
    tracker.phase("measured", () => undefined, { readings: true });
    expect(both.onDemandCalls).toBe(0);
    expect(tracker.getEvents({ eventType: "phase_exit" })[0]?.allocator_allocated_bytes).toBe(300);

    const onDemand = new OnDemandCollector();
    const off = makeTracker([onDemand], { boundaryReadings: false }).tracker;
    await off.start();
    off.phase("measured", () => undefined, { readings: true });
    expect(onDemand.onDemandCalls).toBe(0);
    expect(off.getEvents({ eventType: "phase_exit" })[0]?.metadata.phase_counters).toBe("last_sample");
  });
});

describe("the process collector's readOnDemand()", () => {
  const tempDir = temporaryDirectories("stormlog-readings-");

  it("reads RSS alone, and fails after close", () => {
    const collector = processCollector();
    const result = collector.readOnDemand();
    expect(result.kind).toBe("full");
    if (result.kind !== "full") return;
    const rss = result.reading.allocator_allocated_bytes as number;
    expect(result.reading.allocator_reserved_bytes).toBe(rss);
    expect(Math.abs(rss - process.memoryUsage.rss()) / rss).toBeLessThan(0.2);
    expect(result.metadata).toBeUndefined();
    expect(collector.readSync).toBeUndefined();
    collector.close();
    expect(collector.readOnDemand().kind).toBe("failure");
  });

  it.runIf(existsSync("/proc/self/statm"))(
    "puts the growth of a phase that asks into its sink records; a plain phase keeps the last sample",
    async () => {
      const root = tempDir();
      const collector = processCollector();
      const { tracker } = makeTracker([collector], { sink: { rootDir: root, handleProcessExit: false } });
      await tracker.start();
      await tracker.sampleNow();
      const sessionId = tracker.getSessionSummary()?.session_id;
      tracker.phase("grow", () => kept.push(Buffer.alloc(48 * MiB, 1)), { readings: true });
      tracker.phase("grow plain", () => kept.push(Buffer.alloc(48 * MiB, 1)));
      await tracker.stop();
      collector.close();

      const [session] = await loadTelemetrySessions(root);
      expect(session?.summary.session_id).toBe(sessionId);
      const byPath = new Map<string, TelemetryEvent[]>();
      for (const record of phaseRecords(session?.events ?? [])) {
        const path = (record.metadata.phase_scope as { path: string[] }).path.join(" / ");
        byPath.set(path, [...(byPath.get(path) ?? []), record]);
      }
      const [enter, exit] = byPath.get("grow") ?? [];
      expect(enter?.metadata.phase_counters).toBe("boundary_read");
      expect(exit?.metadata.phase_counters).toBe("boundary_read");
      const growth =
        (exit?.allocator_allocated_bytes as number) - (enter?.allocator_allocated_bytes as number);
      expect(growth).toBeGreaterThan(40 * MiB);

      const [plainEnter, plainExit] = byPath.get("grow plain") ?? [];
      expect(plainEnter?.metadata.phase_counters).toBe("last_sample");
      expect(plainExit?.metadata.phase_counters).toBe("last_sample");
      expect(plainExit?.allocator_allocated_bytes).toBe(plainEnter?.allocator_allocated_bytes);
      kept.length = 0;
    },
  );
});
