import { describe, expect, it } from "vitest";
import { reduceRows } from "../src/index.js";

describe("reduceRows", () => {
  it("keeps every row when there are no more rows than columns", () => {
    expect(reduceRows({ t: [0, 1, 2], values: [[5, 6, 7]] }, 0, 2, 10)).toEqual([0, 1, 2]);
  });

  it("keeps each column's minimum and maximum of every series, and the ends", () => {
    // 1000 rows over 10 columns; series a peaks once at row 437, series b dips once at row 612.
    const n = 1000;
    const t = Array.from({ length: n }, (_, i) => i / 100);
    const a = t.map((_, i) => (i === 437 ? 1_000_000_007 : 1000 + (i % 7)));
    const b = t.map((_, i) => (i === 612 ? -3 : 500 - (i % 5)));
    const kept = reduceRows({ t, values: [a, b] }, 0, 10, 10);
    expect(kept.length).toBeLessThanOrEqual(10 * 4 + 2);
    expect(kept).toContain(437);
    expect(kept).toContain(612);
    expect(kept[0]).toBe(0);
    expect(kept[kept.length - 1]).toBe(n - 1);
    // Per column, the kept rows hold the column's exact extremes.
    for (let c = 0; c < 10; c++) {
      const rows = Array.from({ length: 100 }, (_, k) => c * 100 + k);
      const keptHere = kept.filter((i) => i >= c * 100 && i < (c + 1) * 100);
      for (const series of [a, b]) {
        const all = rows.map((i) => series[i]!);
        const mine = keptHere.map((i) => series[i]!);
        expect(Math.max(...mine)).toBe(Math.max(...all));
        expect(Math.min(...mine)).toBe(Math.min(...all));
      }
    }
  });

  it("skips nulls (a series not read yet) and keeps ascending indexes", () => {
    const t = Array.from({ length: 50 }, (_, i) => i);
    const a = t.map((i) => (i < 20 ? null : i * 2));
    const kept = reduceRows({ t, values: [a] }, 0, 50, 5);
    expect([...kept].sort((x, y) => x - y)).toEqual(kept);
    expect(kept).toContain(49);
    expect(kept).toContain(20);
    expect(kept.some((i) => i > 0 && i < 20)).toBe(false);
  });
});
