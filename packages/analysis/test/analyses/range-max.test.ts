import { describe, expect, it } from "vitest";
import { RangeMax } from "../../src/analyses/range-max.js";

/** What `collectOccurrences` did before the range maximum: a scan, first maximum kept, NaN skipped. */
function scan(values: Float64Array, lo: number, hi: number): number {
  let best = -1;
  let bestValue = Number.NaN;
  for (let i = lo; i < hi; i++) {
    const value = values[i]!;
    if (value > bestValue || (Number.isNaN(bestValue) && !Number.isNaN(value))) {
      bestValue = value;
      best = i;
    }
  }
  return best;
}

/** mulberry32: deterministic test data. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("RangeMax", () => {
  it("answers random ranges as the scan does: first maximum, NaN skipped, ties to the earlier index", () => {
    const rand = random(7);
    for (const n of [0, 1, 5, 63, 64, 65, 129, 1000, 4099]) {
      // Few distinct values (many ties), runs of NaN, and both zeros.
      const values = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        const r = rand();
        values[i] = r < 0.15 ? Number.NaN : r < 0.2 ? -0 : r < 0.25 ? 0 : Math.floor(rand() * 12);
      }
      if (n > 300) values.fill(Number.NaN, 100, 300);
      const max = new RangeMax(values, n);
      for (let k = 0; k < 2000; k++) {
        const a = Math.floor(rand() * (n + 1));
        const b = Math.floor(rand() * (n + 1));
        const lo = Math.min(a, b);
        const hi = Math.max(a, b);
        expect(max.argmax(lo, hi), `n=${n} [${lo}, ${hi})`).toBe(scan(values, lo, hi));
      }
      // Spans that reach the end, as phases that never close do.
      for (let lo = 0; lo <= n; lo += 7) expect(max.argmax(lo, n)).toBe(scan(values, lo, n));
    }
  });

  it("finds a lone maximum anywhere and -1 for a range of NaN only", () => {
    const n = 5000;
    const values = new Float64Array(n).fill(1);
    values[3777] = 2;
    values[4000] = 2;
    const max = new RangeMax(values, n);
    expect(max.argmax(0, n)).toBe(3777);
    expect(max.argmax(3778, n)).toBe(4000);
    expect(max.argmax(0, 3777)).toBe(0);
    const empty = new RangeMax(new Float64Array(1000).fill(Number.NaN), 1000);
    expect(empty.argmax(0, 1000)).toBe(-1);
    expect(empty.argmax(10, 10)).toBe(-1);
  });

  it("reads only the first `count` values of a longer column", () => {
    const values = Float64Array.from({ length: 600 }, (_, i) => i);
    const max = new RangeMax(values, 300);
    expect(max.argmax(0, 600)).toBe(299);
  });
});
