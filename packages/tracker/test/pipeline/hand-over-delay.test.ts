import { describe, expect, it } from "vitest";
import { handOverDelayMs, workerFlushIntervalMs } from "../../src/pipeline/hand-over-delay.js";

/** The worker reads its ring at least this often while records come. */
const RING_READ_MS = 25;
/** What a kill may lose beyond the flush interval, of which the write itself may take this much. */
const ALLOWANCE_MS = 100;
const WRITE_MS = 25;

describe("the hand-over's delay", () => {
  const intervals = [1, 50, 100, 150, 200, 201, 400, 1000, 2000, 2001, 60_000];

  it("keeps a kill's loss within the flush interval + 100 ms: held, read, flushed, written", () => {
    for (const flushMs of intervals) {
      const held = handOverDelayMs(flushMs);
      const workerFlush = workerFlushIntervalMs(flushMs, held);
      expect(held).toBeGreaterThan(0);
      expect(workerFlush).toBeGreaterThan(0);
      expect(held + RING_READ_MS + workerFlush + WRITE_MS).toBeLessThanOrEqual(flushMs + ALLOWANCE_MS);
    }
  });

  it("holds records longer for long flush intervals (fewer hand-overs), at most half a second", () => {
    expect(handOverDelayMs(50)).toBe(25);
    expect(handOverDelayMs(200)).toBe(50);
    expect(handOverDelayMs(1000)).toBe(250);
    expect(handOverDelayMs(2000)).toBe(500);
    expect(handOverDelayMs(60_000)).toBe(500);
    // The default sink's worker then flushes every 1.55 s instead of 2 s.
    expect(workerFlushIntervalMs(2000, handOverDelayMs(2000))).toBe(1550);
    expect(workerFlushIntervalMs(50, handOverDelayMs(50))).toBe(50);
  });
});
