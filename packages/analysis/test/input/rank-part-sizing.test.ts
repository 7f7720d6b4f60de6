import { describe, expect, it } from "vitest";
import { BASE_NS, MiB, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { Accumulator, roomForSamples } from "../../src/input/aggregate.js";

/** Adds `count` samples of `rank` (session-a), one a millisecond; the next line number. */
function addSamples(accumulator: Accumulator, rank: number, count: number, line: number): number {
  for (let i = 0; i < count; i++) {
    const ts = BASE_NS + BigInt(line) * 1_000_000n;
    accumulator.addEvent(record("sample", ts, { rank, device_used_bytes: (i + 1) * MiB }), line++);
  }
  return line;
}

/** Room the columns of `rank`'s part have now. */
const room = (accumulator: Accumulator, rank: number): number =>
  accumulator.session("session-a").ranks.get(rank)!.samples.t.length;

describe("rank parts are sized like the ranks before them", () => {
  it("sizes a rank after a partial one like the whole one before it", () => {
    const scan = new Accumulator();
    let line = addSamples(scan, 0, 1000, 1);
    // A rank cut short (the end of a piece, or a rank that stopped early) does not size the next one.
    line = addSamples(scan, 1, 100, line);
    line = addSamples(scan, 2, 1, line);
    expect(room(scan, 2)).toBe(roomForSamples(1000));
    addSamples(scan, 2, 999, line);
    expect(room(scan, 2)).toBe(roomForSamples(1000));
    expect(scan.recentSamples).toBe(1000);
  });

  it("carries the size to the next range of the same input, whose first rank is the rest of a cut one", () => {
    const first = new Accumulator();
    let line = addSamples(first, 0, 1000, 1);
    line = addSamples(first, 1, 100, line);
    // What `scanRangeSync` hands the next range through its scratch.
    const carried = first.recentSamples;
    expect(carried).toBe(1000);
    const next = new Accumulator(roomForSamples(carried), null, carried);
    line = addSamples(next, 1, 900, line);
    line = addSamples(next, 2, 1, line);
    expect(room(next, 2)).toBe(roomForSamples(1000));
    // Without it, the rank after the cut one is sized by that one's rest, and then grows.
    const alone = new Accumulator(roomForSamples(carried));
    line = addSamples(alone, 1, 900, line);
    addSamples(alone, 2, 1, line);
    expect(room(alone, 2)).toBe(roomForSamples(900));
  });
});
