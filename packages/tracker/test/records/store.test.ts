import { PhaseRecorder, type RecordedPhase } from "@stormlog/phases";
import { describe, expect, it } from "vitest";
import { EventStore, PHASE_ENTER } from "../../src/records/store.js";
import { cudaCapabilities } from "../helpers.js";

const group = { collectorString: "stormlog.test", deviceId: 0, capabilities: cudaCapabilities() };

/** Stores record `n` with `n` in every field a reader can check. */
function pushNumbered(store: EventStore, n: number): number {
  return store.push(
    BigInt(n),
    `type-${n}`,
    `context-${n}`,
    group,
    { allocator_allocated_bytes: n },
    n,
    { n },
    { detail: n },
    null,
    n,
    0,
  );
}

describe("EventStore", () => {
  it("reads every kept record back, in any order, across the ring's wrap-around", () => {
    const store = new EventStore(7);
    // A seeded order of reads: sequential runs, repeats, jumps back and forth.
    let seed = 12345;
    const random = () => {
      seed = (seed * 1103515245 + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    for (let n = 0; n < 60; n++) {
      expect(pushNumbered(store, n)).toBe(n);
      const oldest = Math.max(0, store.written - store.capacity);
      for (let read = 0; read < 12; read++) {
        const index = oldest + Math.floor(random() * (store.written - oldest));
        expect(store.timestamp(index)).toBe(BigInt(index));
        expect(store.eventType(index)).toBe(`type-${index}`);
        expect(store.context(index)).toBe(`context-${index}`);
        expect(store.extra(index)).toEqual({ detail: index });
        expect(store.base(index)).toEqual({ n: index });
        // The next one too, as readers walk records in order.
        if (index + 1 < store.written) expect(store.eventType(index + 1)).toBe(`type-${index + 1}`);
      }
    }
  });

  it("keeps a recorder's scope as its template and sequences, and reads back the same facts", () => {
    const store = new EventStore(4);
    const scopes: RecordedPhase[] = [];
    const recorder = new PhaseRecorder({ onBoundary: (boundary) => scopes.push(boundary.scope) });
    recorder.begin("session-a");
    recorder.phase("train", () => {
      recorder.phase("forward", () => undefined);
      recorder.phase("eval", () => undefined, { metadata: { split: "val" } });
    });
    const facts = (scope: RecordedPhase | ReturnType<EventStore["scope"]>) => ({
      name: scope?.name,
      path: scope?.path,
      phasePath: scope?.phasePath,
      depth: scope?.depth,
      scopeId: scope?.scopeId,
      parentScopeId: scope?.parentScopeId,
      threadId: scope?.threadId,
      threadName: scope?.threadName,
      sequence: scope?.sequence,
      attributes: scope?.attributes,
    });
    // train enter, forward enter: kept as templates.
    for (const scope of scopes.slice(0, 2)) {
      const index = store.push(
        1n,
        "phase_enter",
        null,
        group,
        null,
        0,
        {},
        null,
        scope,
        scope.sequence,
        PHASE_ENTER,
      );
      expect(store.scope(index)).not.toBe(scope);
      expect(facts(store.scope(index))).toEqual(facts(scope));
    }
    expect(facts(store.scope(1)).parentScopeId).toBe("session-a:1");
    // A scope with attributes is kept itself (its attributes are the user's object).
    const evalScope = scopes.find((scope) => scope.name === "eval") as RecordedPhase;
    const index = store.push(1n, "phase_enter", null, group, null, 0, {}, null, evalScope, 5, PHASE_ENTER);
    expect(store.scope(index)).toBe(evalScope);
    // Records without a scope read none, after a slot that had one.
    for (let n = 0; n < 4; n++) pushNumbered(store, n);
    expect(store.scope(store.written - 1)).toBeNull();
  });
});
