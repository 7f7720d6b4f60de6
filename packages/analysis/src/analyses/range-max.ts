/**
 * Range maximum over a sample column, answering what a left-to-right scan would: the first index of
 * the largest value in a range, NaN skipped (a value beats the best so far when it is larger, or
 * when the best so far is NaN and it is not). Phases that never close all reach to their rank's
 * last sample, so scanning each span made the phase statistics quadratic in the samples; this
 * answers a range in O(BLOCK) time after an O(n) build, in O(n / BLOCK * log n) memory.
 */

/** Samples per block: ranges are scanned within their partial blocks, full blocks come from the table. */
const BLOCK = 64;

/** Whether `value` beats `best` as the scan decides it (ties keep the earlier one). */
const beats = (value: number, best: number): boolean =>
  value > best || (Number.isNaN(best) && !Number.isNaN(value));

export class RangeMax {
  /**
   * `levels[k][b]`: the index of the first maximum of blocks `b .. b + 2^k - 1`, or -1 when they
   * hold only NaN.
   */
  private readonly levels: Int32Array[] = [];

  constructor(
    private readonly values: Float64Array,
    private readonly count: number,
  ) {
    const blocks = Math.ceil(count / BLOCK);
    const first = new Int32Array(blocks);
    for (let b = 0; b < blocks; b++) first[b] = this.scan(b * BLOCK, Math.min(count, (b + 1) * BLOCK), -1);
    this.levels.push(first);
    for (let width = 2; width <= blocks; width *= 2) {
      const previous = this.levels[this.levels.length - 1]!;
      const half = width / 2;
      const next = new Int32Array(blocks - width + 1);
      for (let b = 0; b < next.length; b++) next[b] = this.better(previous[b]!, previous[b + half]!);
      this.levels.push(next);
    }
  }

  /** The first index of the maximum of `values[lo, hi)` (NaN skipped), or -1 when there is none. */
  argmax(lo: number, hi: number): number {
    if (lo < 0) lo = 0;
    if (hi > this.count) hi = this.count;
    if (hi - lo <= 2 * BLOCK) return this.scan(lo, hi, -1);
    const firstFull = Math.ceil(lo / BLOCK);
    const lastFull = Math.floor(hi / BLOCK); // exclusive
    let best = this.scan(lo, firstFull * BLOCK, -1);
    if (lastFull > firstFull) {
      const level = 31 - Math.clz32(lastFull - firstFull);
      const table = this.levels[level]!;
      best = this.better(best, table[firstFull]!);
      best = this.better(best, table[lastFull - (1 << level)]!);
    }
    return this.scan(lastFull * BLOCK, hi, best);
  }

  /** The scan of `[lo, hi)` continued from `best` (an index, or -1). */
  private scan(lo: number, hi: number, best: number): number {
    const values = this.values;
    let bestValue = best < 0 ? Number.NaN : values[best]!;
    for (let i = lo; i < hi; i++) {
      const value = values[i]!;
      if (beats(value, bestValue)) {
        bestValue = value;
        best = i;
      }
    }
    return best < 0 || Number.isNaN(bestValue) ? -1 : best;
  }

  /** The earlier index `a`, unless `b` (later) beats it. */
  private better(a: number, b: number): number {
    if (b < 0) return a;
    if (a < 0) return b;
    return beats(this.values[b]!, this.values[a]!) ? b : a;
  }
}
