import { describe, expect, it } from "vitest";
import { timestampOf } from "../../src/alerts/leak-judge.js";

describe("timestampOf", () => {
  it("reads back a timestamp stored as two 32-bit words, past 2^53 and before 1970 too", () => {
    const values = [
      0n,
      1n,
      1_764_000_000_123_456_789n,
      2n ** 63n - 1n,
      -1n,
      -(2n ** 63n),
      4_294_967_295n,
      4_294_967_296n,
    ];
    const int64 = new BigInt64Array(values);
    const words = new Int32Array(int64.buffer);
    const cells = new Float64Array(values.length * 2 + 1);
    // At an odd offset, as rows put them.
    for (let i = 0; i < values.length; i++) {
      cells[1 + 2 * i] = words[2 * i] as number;
      cells[2 + 2 * i] = words[2 * i + 1] as number;
    }
    expect(values.map((_, i) => timestampOf(cells, 1 + 2 * i))).toEqual(values);
  });
});
