import { seededRandom } from "@stormlog/phases/internal";
import { describe, expect, it } from "vitest";
import {
  argmax,
  integerMedian,
  linregress,
  mean,
  pythonRound,
  std,
  studentTSurvival,
  sum,
} from "../../src/analyses/stats.js";

// Expected values printed by NumPy 2.4 / SciPy 1.17 for the same inputs.
const series = Array.from({ length: 300 }, (_, i) => (((i * 7919) % 1000) / 7) * 1e6 + i * 0.1);

describe("NumPy-compatible reductions", () => {
  it("sums pairwise, bit for bit (a naive loop gives 21450004485.000004)", () => {
    expect(sum(series)).toBe(21450004485.0);
    expect(series.reduce((a, b) => a + b, 0)).not.toBe(21450004485.0);
    expect(mean(series)).toBe(71500014.95);
    expect(std(series)).toBe(41533119.4566903);
    expect(sum([])).toBe(0);
    expect(Number.isNaN(mean([]))).toBe(true);
  });

  it("argmax returns the first maximum", () => {
    expect(argmax([1, 5, 3, 5])).toBe(1);
    expect(argmax([])).toBe(-1);
  });
});

describe("SciPy-compatible linear regression", () => {
  it("matches scipy.stats.linregress", () => {
    const x = Array.from({ length: 15 }, (_, i) => (i * i) % 17);
    const y = x.map((v, i) => 3 * v + ((i * 5) % 7));
    const fit = linregress(x, y)!;
    expect(fit.slope).toBeCloseTo(2.9706964892412238, 12);
    expect(fit.intercept).toBeCloseTo(3.055917327293315, 12);
    expect(fit.rvalue).toBeCloseTo(0.9923886149787534, 14);
    expect(fit.pvalue / 3.272980759397614e-13).toBeCloseTo(1, 8);
    expect(fit.stderr).toBeCloseTo(0.1022406742527345, 12);
    expect(fit.interceptStderr).toBeCloseTo(1.0608753017114634, 12);
  });

  it("refuses what SciPy refuses", () => {
    expect(linregress([1, 1, 1], [1, 2, 3])).toBeNull();
    expect(linregress([1], [1])).toBeNull();
    expect(linregress([1, 2], [1])).toBeNull();
    expect(linregress([1, 2], [3, 5])?.pvalue).toBe(0);
  });

  it("computes Student's t survival like scipy.special.stdtr(df, -t)", () => {
    const cases: Array<[number, number, number]> = [
      [1, 0.5, 0.35241638234956674],
      [3, 2.5, 0.04385332350403278],
      [10, -1.2, 0.8711018496378472],
      [25, 4.0, 0.0002477218352660437],
      [101, 0.01, 0.4960205066144308],
      [7, 12.0, 3.179155189092549e-6],
      [2, 1e-3, 0.49964644669779507],
    ];
    for (const [df, t, expected] of cases) {
      expect(studentTSurvival(t, df) / expected, `df=${df} t=${t}`).toBeCloseTo(1, 11);
    }
    expect(studentTSurvival(Number.POSITIVE_INFINITY, 3)).toBe(0);
    expect(Number.isNaN(studentTSurvival(1, 0))).toBe(true);
  });
});

describe("pythonRound", () => {
  it("rounds half-to-even on the exact binary value, like Python's round()", () => {
    expect(pythonRound(2.675, 2)).toBe(2.67); // 2.675 is slightly below the tie
    expect(pythonRound(0.125, 2)).toBe(0.12); // an exact tie goes to even
    expect((0.125).toFixed(2)).toBe("0.13"); // which toFixed does not do
    expect(pythonRound(-0.0005, 3)).toBe(-0.001);
    expect(pythonRound(1234567.25, 1)).toBe(1234567.2);
    expect(pythonRound(Number.NaN, 2)).toBeNaN();
    expect(pythonRound(2 ** 60, 1)).toBe(2 ** 60);
  });
});

describe("integerMedian", () => {
  it("gives Python's int(statistics.median) of 32-bit gaps, counted as of doubles sorted", () => {
    const next = seededRandom(5);
    const shapes: ((i: number) => number)[] = [
      () => Math.floor(next() * 2 ** 32),
      () => 10_000_000 + Math.floor(next() * 1000),
      // Two values only, either side of a 16-bit boundary, and the largest 32-bit values.
      (i) => (i % 3 === 0 ? 0x1ffff : 0x20000),
      () => 0xffffffff - Math.floor(next() * 3),
      () => Math.floor(next() * 4),
    ];
    for (const shape of shapes) {
      for (const n of [1, 2, 3, 4, 5, 100, 101, 4096, 4097]) {
        const values = Array.from({ length: n }, (_, i) => shape(i));
        const sorted = [...values].sort((a, b) => a - b);
        const mid = n >> 1;
        const expected =
          n % 2 === 1 ? BigInt(sorted[mid]!) : BigInt(Math.trunc((sorted[mid - 1]! + sorted[mid]!) / 2));
        expect(integerMedian(Uint32Array.from(values)), `${n} values`).toBe(expected);
        expect(integerMedian(Float64Array.from(values)), `${n} values`).toBe(expected);
      }
    }
  });
});
