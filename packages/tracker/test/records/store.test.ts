import { describe, expect, it } from "vitest";
import { EventStore } from "../../src/records/store.js";
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
});
