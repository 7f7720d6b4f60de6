import { parseJson, type TelemetryRecordV3 } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { type PhaseEventLike, PhaseReplayIndex, type PhaseSpan } from "../src/index.js";
import { seededRandom } from "../src/internal.js";
import { attributeActiveSpans } from "../src/policy.js";
import {
  isPhaseBoundaryEvent,
  PHASE_ENTER_EVENT,
  PHASE_EXIT_EVENT,
  parsePhaseBoundary,
} from "../src/replay.js";

// Ports of the Python reference's tests/test_phases.py (replay and resolver cases), then our own.

function makeEvent(options: {
  timestampNs: bigint;
  eventType?: string;
  sessionId?: string;
  rank?: number;
  metadata?: TelemetryRecordV3["metadata"];
}): TelemetryRecordV3 {
  const eventType = options.eventType ?? "sample";
  const rank = options.rank ?? 0;
  return {
    schema_version: 3,
    session_id: options.sessionId ?? "session-1",
    timestamp_ns: options.timestampNs,
    event_type: eventType,
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 100,
    pid: 1234,
    host: "test-host",
    job_id: "job-1",
    rank,
    local_rank: rank,
    world_size: 2,
    device_id: 0,
    allocator_allocated_bytes: 1,
    allocator_reserved_bytes: 1,
    allocator_active_bytes: 1,
    allocator_inactive_bytes: 0,
    allocator_change_bytes: 0,
    device_used_bytes: 1,
    device_free_bytes: 1,
    device_total_bytes: 2,
    context: eventType,
    metadata: options.metadata ?? {},
  };
}

function phaseScope(options: {
  action: "enter" | "exit";
  name: string;
  path: string[];
  scopeId: string;
  sequence: number;
  threadId: number;
}): TelemetryRecordV3["metadata"] {
  const { action, name, path, scopeId, sequence, threadId } = options;
  return {
    phase_scope: {
      action,
      name,
      path,
      depth: path.length,
      scope_id: scopeId,
      parent_scope_id: path.length > 1 ? scopeId.slice(0, scopeId.lastIndexOf(":")) : null,
      thread_id: threadId,
      thread_name: `thread-${threadId}`,
      sequence,
    },
  };
}

function enter(
  timestampNs: bigint,
  path: string[],
  scopeId: string,
  sequence: number,
  threadId = 11,
  rank = 0,
) {
  return makeEvent({
    timestampNs,
    eventType: PHASE_ENTER_EVENT,
    rank,
    metadata: phaseScope({
      action: "enter",
      name: path[path.length - 1]!,
      path,
      scopeId,
      sequence,
      threadId,
    }),
  });
}

function exit(
  timestampNs: bigint,
  path: string[],
  scopeId: string,
  sequence: number,
  threadId = 11,
  rank = 0,
) {
  return makeEvent({
    timestampNs,
    eventType: PHASE_EXIT_EVENT,
    rank,
    metadata: phaseScope({ action: "exit", name: path[path.length - 1]!, path, scopeId, sequence, threadId }),
  });
}

describe("PhaseReplayIndex (reference tests/test_phases.py)", () => {
  it("prefers the deepest nested path", () => {
    const events = [
      enter(100n, ["train"], "session-1:1", 1),
      enter(120n, ["train", "step"], "session-1:2", 2),
      makeEvent({ timestampNs: 140n }),
    ];
    const attribution = PhaseReplayIndex.fromEvents(events).resolveForEvent(events[2]!);
    expect(attribution).not.toBeNull();
    expect(attribution!.phaseResolution).toBe("unique");
    expect(attribution!.phaseSource).toBe("heuristic");
    expect(attribution!.phasePath).toBe("train / step");
    expect(attribution!.phaseSummary).toBeNull();
  });

  it("treats an exit at the same timestamp as still active", () => {
    const events = [
      enter(100n, ["train"], "session-1:1", 1),
      exit(100n, ["train"], "session-1:1", 2),
      makeEvent({ timestampNs: 100n }),
    ];
    const attribution = PhaseReplayIndex.fromEvents(events).resolveForEvent(events[2]!);
    expect(attribution?.phaseResolution).toBe("unique");
    expect(attribution?.phaseSource).toBe("heuristic");
    expect(attribution?.phasePath).toBe("train");
  });

  it("synthesizes an open scope until the session end", () => {
    const events = [enter(100n, ["evaluate"], "session-1:1", 1), makeEvent({ timestampNs: 200n })];
    const index = PhaseReplayIndex.fromEvents(events);
    const attribution = index.resolveForEvent(events[1]!);
    expect(attribution?.phaseResolution).toBe("unique");
    expect(attribution?.phaseSource).toBe("heuristic");
    expect(attribution?.phasePath).toBe("evaluate");
    const [span] = index.spansFor("session-1");
    expect(span?.syntheticEnd).toBe(true);
    expect(span?.endNs).toBe(200n);
  });

  it("marks a multi-thread overlap ambiguous", () => {
    const events = [
      enter(100n, ["train"], "session-1:1", 1, 11),
      enter(110n, ["evaluate"], "session-1:2", 2, 12),
      makeEvent({ timestampNs: 120n }),
    ];
    const attribution = PhaseReplayIndex.fromEvents(events).resolveForEvent(events[2]!);
    expect(attribution?.phaseResolution).toBe("ambiguous");
    expect(attribution?.phasePaths).toEqual(["evaluate", "train"]);
    expect(attribution?.phaseSummary).toEqual({ phasePath: "evaluate", source: "heuristic" });
  });

  it("prefers origin_thread_id when available", () => {
    const events = [
      enter(100n, ["train"], "session-1:1", 1, 11),
      enter(110n, ["evaluate"], "session-1:2", 2, 12),
      makeEvent({ timestampNs: 120n, metadata: { origin_thread_id: 11 } }),
    ];
    const attribution = PhaseReplayIndex.fromEvents(events).resolveForEvent(events[2]!);
    expect(attribution?.phaseResolution).toBe("unique");
    expect(attribution?.phaseSource).toBe("thread_local");
    expect(attribution?.phasePath).toBe("train");
    expect(attribution?.phaseSummary).toBeNull();
  });

  it("prefers origin_phase_scope_id when available", () => {
    const events = [
      enter(100n, ["train"], "session-1:1", 1, 11),
      makeEvent({ timestampNs: 120n, metadata: { origin_phase_scope_id: "session-1:1" } }),
    ];
    const attribution = PhaseReplayIndex.fromEvents(events).resolveForEvent(events[1]!);
    expect(attribution?.phaseResolution).toBe("unique");
    expect(attribution?.phaseSource).toBe("exact");
    expect(attribution?.phasePath).toBe("train");
  });

  it("ignores a boundary with a malformed rank", () => {
    const events: PhaseEventLike[] = [
      {
        session_id: "session-1",
        timestamp_ns: 100n,
        event_type: PHASE_ENTER_EVENT,
        rank: "rank-zero",
        metadata: phaseScope({
          action: "enter",
          name: "train",
          path: ["train"],
          scopeId: "session-1:1",
          sequence: 1,
          threadId: 11,
        }),
      },
      makeEvent({ timestampNs: 140n }),
    ];
    expect(PhaseReplayIndex.fromEvents(events).spansFor("session-1")).toEqual([]);
  });

  it("ignores action/event type mismatches", () => {
    const event: PhaseEventLike = {
      session_id: "session-1",
      timestamp_ns: 100n,
      event_type: PHASE_ENTER_EVENT,
      rank: 0,
      metadata: phaseScope({
        action: "exit",
        name: "train",
        path: ["train"],
        scopeId: "session-1:1",
        sequence: 1,
        threadId: 11,
      }),
    };
    const index = PhaseReplayIndex.fromEvents([event]);
    expect(isPhaseBoundaryEvent(event)).toBe(false);
    expect(index.spansFor("session-1", 0)).toEqual([]);
  });

  it("returns null for an event with a malformed rank", () => {
    const events = [enter(100n, ["train"], "session-1:1", 1), makeEvent({ timestampNs: 120n })];
    const index = PhaseReplayIndex.fromEvents(events);
    expect(index.resolveForEvent({ session_id: "session-1", timestamp_ns: 120n, rank: "zero" })).toBeNull();
    // The same event with a well-formed rank does resolve, so the null above is the rank's doing.
    expect(
      index.resolveForEvent({ session_id: "session-1", timestamp_ns: 120n, rank: " 0 " })?.phasePath,
    ).toBe("train");
  });
});

describe("PhaseReplayIndex semantics", () => {
  it("closes only the scope on top of the thread's stack", () => {
    const events = [
      enter(100n, ["train"], "s:1", 1),
      enter(110n, ["train", "forward"], "s:2", 2),
      exit(120n, ["train"], "s:1", 3), // not on top: ignored
      exit(130n, ["train", "forward"], "s:2", 4),
      makeEvent({ timestampNs: 150n }),
    ];
    const spans = PhaseReplayIndex.fromEvents(events).spansFor("session-1", 0);
    expect(spans.map((span) => [span.phasePath, span.startNs, span.endNs, span.syntheticEnd])).toEqual([
      ["train", 100n, 150n, true],
      ["train / forward", 110n, 130n, false],
    ]);
  });

  it("replays boundaries by (timestamp, sequence, scope_id) whatever the input order", () => {
    const events = [
      makeEvent({ timestampNs: 300n }),
      exit(200n, ["b"], "s:3", 4),
      enter(200n, ["b"], "s:3", 3),
      exit(200n, ["a"], "s:1", 2),
      enter(100n, ["a"], "s:1", 1),
    ];
    const index = PhaseReplayIndex.fromEvents(events);
    const spans = index.spansFor("session-1");
    expect(spans.map((span) => [span.phasePath, span.startNs, span.endNs])).toEqual([
      ["a", 100n, 200n],
      ["b", 200n, 200n],
    ]);
    // At 200 both are active, same depth, same thread, different labels: ambiguous with a summary.
    const attribution = index.resolve(200n, "session-1", 0);
    expect(attribution?.phaseResolution).toBe("ambiguous");
    expect(attribution?.phasePaths).toEqual(["a", "b"]);
    expect(attribution?.phaseSummary).toEqual({ phasePath: "b", source: "heuristic" });
    expect(index.resolve(201n, "session-1", 0)).toBeNull();
    expect(index.resolve(99n, "session-1", 0)).toBeNull();
  });

  it("keeps groups apart by session and rank, and a null session resolves to null", () => {
    const events = [
      enter(100n, ["r0"], "s:1", 1, 11, 0),
      enter(100n, ["r1"], "s:1", 1, 11, 1),
      makeEvent({ timestampNs: 500n, rank: 0 }),
      makeEvent({ timestampNs: 200n, rank: 1 }),
    ];
    const index = PhaseReplayIndex.fromEvents(events);
    expect(index.resolve(300n, "session-1", 0)?.phasePath).toBe("r0");
    expect(index.resolve(300n, "session-1", 1)).toBeNull(); // rank 1 ends at its own last event
    expect(index.resolve(150n, "session-1")?.phaseResolution).toBe("ambiguous");
    expect(index.activeSpans(150n, "session-1").map((span) => span.rank)).toEqual([0, 1]);
    expect(index.resolve(150n, null, 0)).toBeNull();
    expect(index.resolve(150n, "other", 0)).toBeNull();
  });

  it("coerces string ranks and skips boolean ones, like the reference", () => {
    const scope = phaseScope({
      action: "enter",
      name: "x",
      path: ["x"],
      scopeId: "s:1",
      sequence: 1,
      threadId: 1,
    });
    const base = { session_id: "s", timestamp_ns: 10n, event_type: PHASE_ENTER_EVENT, metadata: scope };
    const index = PhaseReplayIndex.fromEvents([
      { ...base, rank: " 2 " },
      { ...base, rank: true },
      { ...base, rank: "1_0" },
      { ...base, rank: "\u0663" }, // ARABIC-INDIC DIGIT THREE: Python's int() accepts it
      { ...base, rank: "2.0" },
      { ...base, metadata: { phase_scope: { ...(scope.phase_scope as object), scope_id: "s:9" } } }, // no rank: 0
    ]);
    expect(index.spansFor("s").map((span) => span.rank)).toEqual([0, 2, 3, 10]);
  });

  it("validates boundaries as parse_phase_boundary does", () => {
    const good = enter(5n, ["train", "", "step"], "s:2", 2);
    const parsed = parsePhaseBoundary(good);
    expect(parsed?.path).toEqual(["train", "step"]);
    expect(parsed?.depth).toBe(2);
    expect(parsed?.attributes).toEqual({});

    const scope = (good.metadata.phase_scope ?? {}) as Record<string, unknown>;
    const variant = (patch: Record<string, unknown>) => ({
      ...good,
      metadata: { phase_scope: { ...scope, ...patch } },
    });
    expect(parsePhaseBoundary(variant({ name: "  " }))).toBeNull();
    expect(parsePhaseBoundary(variant({ path: ["", 3] }))).toBeNull();
    expect(parsePhaseBoundary(variant({ sequence: 1.5 }))).toBeNull();
    expect(parsePhaseBoundary(variant({ thread_id: "11" }))).toBeNull();
    expect(parsePhaseBoundary(variant({ parent_scope_id: 4 }))).toBeNull();
    expect(parsePhaseBoundary(variant({ thread_name: null }))).toBeNull();
    expect(parsePhaseBoundary(variant({ depth: 7, attributes: [1] }))?.depth).toBe(2);
    expect(parsePhaseBoundary(variant({ name: " step\u001f" }))?.name).toBe("step");
    expect(parsePhaseBoundary(variant({ sequence: true }))?.sequence).toBe(1); // Python: bool is an int
    expect(parsePhaseBoundary(variant({ attributes: { lr: 0.1 } }))?.attributes).toEqual({ lr: 0.1 });
    expect(parsePhaseBoundary({ ...good, session_id: 3 })).toBeNull();
    expect(parsePhaseBoundary({ ...good, event_type: "sample" })).toBeNull();
  });

  it("rejects a float-typed sequence decoded by core's lossless parser, as Python's json does", () => {
    const record = (sequence: string) =>
      parseJson(
        `{"session_id": "s", "timestamp_ns": 1700000000000000000, "event_type": "phase_enter", "rank": 0, ` +
          `"metadata": {"phase_scope": {"action": "enter", "name": "a", "path": ["a"], "scope_id": "s:1", ` +
          `"thread_id": 1, "thread_name": "main", "sequence": ${sequence}}}}`,
      ) as PhaseEventLike;
    expect(parsePhaseBoundary(record("1"))?.timestampNs).toBe(1700000000000000000n);
    expect(parsePhaseBoundary(record("1.0"))).toBeNull();
  });

  it("keeps exact nanoseconds for groups wider than 2^53 ns", () => {
    const far = 2n ** 60n;
    const events = [
      enter(1n, ["early"], "s:1", 1),
      exit(2n, ["early"], "s:1", 2),
      enter(far, ["late"], "s:3", 3),
      exit(far + 1n, ["late"], "s:3", 4),
    ];
    const index = PhaseReplayIndex.fromEvents(events);
    expect(index.resolve(far + 1n, "session-1", 0)?.phasePath).toBe("late");
    expect(index.resolve(far + 2n, "session-1", 0)).toBeNull();
    expect(index.resolve(far - 1n, "session-1", 0)).toBeNull();
    expect(index.resolve(2n, "session-1", 0)?.phasePath).toBe("early");
    expect(index.resolve(3n, "session-1", 0)).toBeNull();
  });

  it("keeps thread ids and sequences beyond 2^53 exact (bigint)", () => {
    const big = 2n ** 60n;
    const record = (
      action: "enter" | "exit",
      t: bigint,
      path: string[],
      scopeId: string,
      sequence: bigint,
    ) => ({
      session_id: "s",
      timestamp_ns: t,
      event_type: `phase_${action}`,
      rank: 0,
      metadata: {
        phase_scope: {
          action,
          name: path[path.length - 1]!,
          path,
          scope_id: scopeId,
          thread_id: big + 1n,
          thread_name: "t",
          sequence,
        },
      },
    });
    const index = PhaseReplayIndex.fromEvents([
      record("enter", 10n, ["a"], "s:1", big + 1n),
      record("enter", 20n, ["a", "b"], "s:2", big + 2n),
      record("enter", 20n, ["a", "c"], "s:3", big + 3n),
      record("exit", 30n, ["a", "c"], "s:3", big + 4n),
    ]);
    const spans = index.activeSpans(25n, "s", 0);
    // Reference order: by (start, end), closed spans before synthetic ones on ties.
    expect(spans.map((span) => span.sequence)).toEqual([big + 1n, big + 3n, big + 2n]);
    const attribution = index.resolve(25n, "s", 0);
    expect(attribution).toEqual(attributeActiveSpans(spans));
    expect(attribution?.phaseSummary?.phasePath).toBe("a / c");
    expect(index.resolve(25n, "s", 0, big + 1n)?.scopeId).toBe("s:3"); // thread_local: most recent
    expect(index.resolve(15n, "s", 0)?.threadId).toBe(big + 1n);
  });

  it("distinguishes timestamps one nanosecond apart near 1.7e18", () => {
    const t = 1_760_000_000_123_456_789n;
    const events = [
      enter(t, ["a"], "s:1", 1),
      exit(t + 1n, ["a"], "s:1", 2),
      makeEvent({ timestampNs: t + 1000n }),
    ];
    const index = PhaseReplayIndex.fromEvents(events);
    expect(index.resolve(t - 1n, "session-1", 0)).toBeNull();
    expect(index.resolve(t, "session-1", 0)?.phasePath).toBe("a");
    expect(index.resolve(t + 1n, "session-1", 0)?.phasePath).toBe("a");
    expect(index.resolve(t + 2n, "session-1", 0)).toBeNull();
  });
});

describe("PhaseReplayIndex stabbing queries", () => {
  it("returns exactly the spans a linear scan finds, in the same order", () => {
    let sawSynthetic = false;
    for (let seed = 1; seed <= 12; seed++) {
      const random = seededRandom(seed);
      const base = 1_760_000_000_000_000_000n;
      const events: TelemetryRecordV3[] = [];
      let sequence = 0;
      for (let thread = 1; thread <= (seed % 3) + 1; thread++) {
        // Random nested enter/exit walk per thread on a coarse clock so timestamps collide.
        const stack: Array<{ path: string[]; scopeId: string }> = [];
        let t = BigInt(Math.floor(random() * 20));
        for (let step = 0; step < 120; step++) {
          t += BigInt(Math.floor(random() * 4));
          if (stack.length > 0 && (random() < 0.45 || stack.length >= 5)) {
            const top = stack.pop()!;
            sequence++;
            events.push(exit(base + t, top.path, top.scopeId, sequence, thread));
          } else {
            const parent = stack[stack.length - 1]?.path ?? [];
            const path = [...parent, ["fwd", "bwd", "opt"][Math.floor(random() * 3)]!];
            sequence++;
            const scopeId = `s:${sequence}`;
            stack.push({ path, scopeId });
            events.push(enter(base + t, path, scopeId, sequence, thread));
          }
        }
      }
      events.push(makeEvent({ timestampNs: base + 400n }));
      // Shuffle: the index must not depend on input order.
      for (let i = events.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [events[i], events[j]] = [events[j]!, events[i]!];
      }
      const index = PhaseReplayIndex.fromEvents(events);
      const all: PhaseSpan[] = index.spansFor("session-1", 0);
      expect(all.length).toBeGreaterThan(40);
      if (all.some((span) => span.syntheticEnd)) sawSynthetic = true;
      for (let q = -2n; q <= 402n; q++) {
        const t = base + q;
        const expected = all.filter((span) => span.startNs <= t && t <= span.endNs);
        expect(index.activeSpans(t, "session-1", 0)).toEqual(expected);
        // resolve() has a fast path for the one-thread case; it must agree with the policy.
        expect(index.resolve(t, "session-1", 0)).toEqual(attributeActiveSpans(expected));
      }
    }
    expect(sawSynthetic).toBe(true);
  });
});
