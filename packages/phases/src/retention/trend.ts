/**
 * Noise-robust trend statistics for leak verdicts: the Mann-Kendall test (is a series rising, and
 * how surely) and the Theil-Sen slope (how fast), both rank-based, so one outlier or a transient
 * bump moves neither. Long series are reduced to block medians first, which keeps both O(k²) on at
 * most `MAX_TREND_POINTS` points.
 */

/** Points a trend test looks at; longer series are reduced to this many block medians. */
export const MAX_TREND_POINTS = 400;

/** Median of a copy (NaN for no values); `values` stay as they are. */
export function median(values: readonly number[] | Float64Array): number {
  return values.length === 0 ? Number.NaN : medianInPlace(Float64Array.from(values));
}

/** The series as at most `max` block medians (each block the same number of points, the last may be shorter). */
function reduceToBlocks(values: Float64Array, max = MAX_TREND_POINTS): Float64Array {
  if (values.length <= max) return values;
  const size = Math.ceil(values.length / max);
  const out = new Float64Array(Math.ceil(values.length / size));
  for (let start = 0, k = 0; start < values.length; start += size, k++)
    out[k] = median(values.subarray(start, start + size));
  return out;
}

/** Standard normal upper tail, P(Z > z) (Abramowitz-Stegun 7.1.26 through erfc; error < 1.5e-7). */
export function normalUpperTail(z: number): number {
  const x = Math.abs(z) / Math.SQRT2;
  const t = 1 / (1 + 0.3275911 * x);
  const erfc =
    t *
    (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) *
    Math.exp(-x * x);
  return z >= 0 ? erfc / 2 : 1 - erfc / 2;
}

/** A rising-trend test's result. */
export interface TrendTest {
  /** Points tested (after block reduction). */
  readonly points: number;
  /** Kendall's S: concordant minus discordant pairs. */
  readonly s: number;
  /** One-sided p-value of "the series rises" (1 when it cannot be tested). */
  readonly pRising: number;
  /** Theil-Sen slope per original step (per occurrence). */
  readonly slope: number;
}

/**
 * Mann-Kendall test of an upward trend, with the tie correction of its variance and the continuity
 * correction, and the Theil-Sen slope (median of pairwise slopes), per original index step. A typed
 * array, not a `number[]`: an array's map changes with the kind of numbers it holds (small integers
 * for tensor counts, doubles for bytes), and each new map threw away the compiled test and its callers.
 */
export function risingTrend(values: Float64Array): TrendTest {
  const y = reduceToBlocks(values);
  const n = y.length;
  if (n < 3) return { points: n, s: 0, pRising: 1, slope: 0 };
  const step = values.length / n;
  let s = 0;
  // Pairwise slopes in a typed array, their median selected in linear time: the same median as a
  // sort finds, several times faster (the tracker's leak checks run this on the training thread).
  const slopes = new Float64Array((n * (n - 1)) / 2);
  let k = 0;
  for (let i = 0; i < n - 1; i++) {
    const yi = y[i]!;
    for (let j = i + 1; j < n; j++) {
      const d = y[j]! - yi;
      if (d > 0) s++;
      else if (d < 0) s--;
      slopes[k++] = d / (j - i);
    }
  }
  const slopeMedian = medianInPlace(slopes);
  const ties = new Map<number, number>();
  for (const value of y) ties.set(value, (ties.get(value) ?? 0) + 1);
  let tieTerm = 0;
  for (const count of ties.values()) if (count > 1) tieTerm += count * (count - 1) * (2 * count + 5);
  const variance = (n * (n - 1) * (2 * n + 5) - tieTerm) / 18;
  let pRising = 1;
  if (variance > 0) {
    const z = s > 0 ? (s - 1) / Math.sqrt(variance) : s < 0 ? (s + 1) / Math.sqrt(variance) : 0;
    pRising = normalUpperTail(z);
  }
  return { points: n, s, pRising, slope: slopeMedian / step };
}

/**
 * The k-th smallest value (0-based) of `values`, which it reorders: Hoare's selection around a
 * median-of-three pivot, O(n) on average without sorting.
 */
export function selectKth(values: Float64Array | Uint32Array, k: number): number {
  let lo = 0;
  let hi = values.length - 1;
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    const a = values[lo]!;
    const b = values[m]!;
    const c = values[hi]!;
    // The median of the three.
    let pivot = b;
    if (a < b) {
      if (c < b) pivot = Math.max(a, c);
    } else if (c > b) pivot = Math.min(a, c);
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (values[i]! < pivot) i++;
      while (values[j]! > pivot) j--;
      if (i <= j) {
        const t = values[i]!;
        values[i] = values[j]!;
        values[j] = t;
        i++;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return values[k]!;
  }
  return values[k]!;
}

/**
 * The median of `values` (not NaN, at least one), reordering them: the upper middle by selection, then
 * the largest value below it when the count is even.
 */
function medianInPlace(values: Float64Array): number {
  const n = values.length;
  const mid = n >> 1;
  selectKth(values, mid);
  const upper = values[mid]!;
  if (n % 2 === 1) return upper;
  let lower = values[0]!;
  for (let i = 1; i < mid; i++) if (values[i]! > lower) lower = values[i]!;
  return (lower + upper) / 2;
}

/**
 * Noise of a series around its local level: 1.4826 x the median absolute first difference / sqrt 2
 * (a robust standard deviation that a trend or a single step barely moves).
 */
export function localNoise(values: Float64Array): number {
  if (values.length < 3) return 0;
  const diffs: number[] = [];
  for (let i = 1; i < values.length; i++) diffs.push(Math.abs(values[i]! - values[i - 1]!));
  return (1.4826 * median(diffs)) / Math.SQRT2;
}

/** mulberry32: a small seeded generator, so a verdict's bootstrap is the same on every run. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
