import { threadId } from "node:worker_threads";
import { noCapabilities } from "@stormlog/core";
import { PhaseProtocolError, PhaseReplayIndex } from "@stormlog/phases";
import { describe, expect, it } from "vitest";
import { full, makeTracker, reading, SequencedCollector, SyncReadCollector, types } from "./helpers.js";

const tfjsCaps = {
  ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
  supports_allocator_allocated: true,
  supports_allocator_reserved: true,
};

describe("phase boundaries", () => {
  it("records phase_enter/phase_exit with the last sample's counters when nothing reads synchronously", async () => {
    const collector = new SequencedCollector([
      full(reading({ allocated: 1000, reserved: 2000, total: 10_000 })),
    ]);
    const { tracker } = makeTracker([collector]);
    await tracker.start();
    await tracker.sampleNow();
    await tracker.phase("train", async () => {
      tracker.phase("forward", () => undefined, { metadata: { batch: 1 } });
    });
    const phases = tracker.getEvents().filter((e) => e.event_type.startsWith("phase_"));
    expect(phases.map((e) => e.context)).toEqual([
      "Phase entered: train",
      "Phase entered: train / forward",
      "Phase exited: train / forward",
      "Phase exited: train",
    ]);
    const session = tracker.getSessionSummary()?.session_id;
    for (const event of phases) {
      expect(event).toMatchObject({
        allocator_allocated_bytes: 1000,
        allocator_reserved_bytes: 2000,
        allocator_change_bytes: 0,
      });
      expect(event.metadata.phase_counters).toBe("last_sample");
      expect(event.metadata.collector_health_status).toBe("healthy");
    }
    expect(phases[1]?.metadata.phase_scope).toEqual({
      action: "enter",
      name: "forward",
      path: ["train", "forward"],
      depth: 2,
      scope_id: `${session}:2`,
      parent_scope_id: `${session}:1`,
      thread_id: threadId,
      thread_name: "main",
      sequence: 2,
      attributes: { batch: 1 },
    });
  });

  it("takes a fresh readSync() reading at each boundary for exact before/after", async () => {
    const tfjs = new SyncReadCollector(
      { allocator_allocated_bytes: 100, allocator_reserved_bytes: 100 },
      "stormlog.tfjs_tracker",
      0,
      tfjsCaps,
    );
    const { tracker } = makeTracker([tfjs]);
    await tracker.start();
    await tracker.sampleNow();
    tracker.phase("forward", () => {
      tfjs.current = { allocator_allocated_bytes: 5000, allocator_reserved_bytes: 6000 };
    });
    const [enter, exit] = tracker.getEvents().filter((e) => e.event_type.startsWith("phase_"));
    expect(enter).toMatchObject({ allocator_allocated_bytes: 100, allocator_reserved_bytes: 100 });
    expect(exit).toMatchObject({ allocator_allocated_bytes: 5000, allocator_reserved_bytes: 6000 });
    expect(exit?.metadata.phase_counters).toBe("boundary_read");
    // Boundary readings do not feed the sampler: the next sample is diffed against the last sample.
    await tracker.sampleNow();
    expect(tracker.getEvents({ eventType: "allocation" })[0]?.allocator_change_bytes).toBe(4900);
  });

  it("can be told not to read at boundaries", async () => {
    const tfjs = new SyncReadCollector(
      { allocator_allocated_bytes: 100, allocator_reserved_bytes: 100 },
      "stormlog.tfjs_tracker",
      0,
      tfjsCaps,
    );
    const { tracker } = makeTracker([tfjs], { boundaryReadings: false });
    await tracker.start();
    tfjs.current = { allocator_allocated_bytes: 7, allocator_reserved_bytes: 7 };
    tracker.phase("step", () => undefined);
    const enter = tracker.getEvents({ eventType: "phase_enter" })[0];
    expect(enter?.allocator_allocated_bytes).toBe(0);
    expect(enter?.metadata.phase_counters).toBe("last_sample");
  });

  it("is a no-op before start and after stop, and closing a stale scope is harmless", async () => {
    const { tracker } = makeTracker([new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))])]);
    expect(tracker.phase("early", () => 3)).toBe(3);
    await tracker.start();
    const scope = tracker.enterPhase("open at stop");
    await tracker.stop();
    expect(() => scope.close()).not.toThrow();
    expect(tracker.phase("late", () => 4)).toBe(4);
    expect(types(tracker)).toEqual(["start", "phase_enter", "stop"]);
  });

  it("raises protocol errors for out-of-order closes", async () => {
    const { tracker } = makeTracker([new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))])]);
    await tracker.start();
    const outer = tracker.enterPhase("outer");
    const inner = tracker.enterPhase("inner");
    expect(() => outer.close()).toThrow(PhaseProtocolError);
    inner.close();
    outer.close();
    expect(tracker.getEvents({ eventType: "phase_exit" })).toHaveLength(2);
  });

  it("produces records the replay index attributes samples with", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))]);
    const { tracker, clock } = makeTracker([collector]);
    await tracker.start();
    await tracker.phase("train", async () => {
      clock.advanceMs(1);
      await tracker.phase("forward", async () => {
        clock.advanceMs(1);
        await tracker.sampleNow();
        clock.advanceMs(1);
      });
      clock.advanceMs(1);
    });
    await tracker.stop();
    const events = tracker.getEvents();
    const index = PhaseReplayIndex.fromEvents(events);
    const sample = tracker.getEvents({ eventType: "sample" })[0];
    expect(sample).toBeDefined();
    const attribution = index.resolveForEvent(sample as NonNullable<typeof sample>);
    expect(attribution?.phaseResolution).toBe("unique");
    expect(attribution?.phasePath).toBe("train / forward");
  });
});

describe("the first sample", () => {
  it("is taken inside start() by default, so an early phase carries real counters", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 700, reserved: 900 }))]);
    const { tracker } = makeTracker([collector], { initialSample: true });
    await tracker.start();
    tracker.phase("warmup", () => undefined);
    expect(types(tracker)).toEqual(["start", "peak", "sample", "phase_enter", "phase_exit"]);
    const enter = tracker.getEvents({ eventType: "phase_enter" })[0];
    expect(enter?.allocator_allocated_bytes).toBe(700);
    expect(enter?.allocator_reserved_bytes).toBe(900);
    await tracker.stop();
  });

  it("waits one interval, as the reference does, with initialSample: false", async () => {
    const collector = new SequencedCollector([full(reading({ allocated: 700, reserved: 900 }))]);
    const { tracker } = makeTracker([collector], { initialSample: false });
    await tracker.start();
    expect(collector.calls).toBe(0);
    await tracker.stop();
  });
});
