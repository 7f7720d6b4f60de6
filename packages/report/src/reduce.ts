/**
 * Reduction of a rank's memory series to what a chart can show: the time range is cut into pixel
 * columns, and in each column the rows that hold a series' minimum and maximum are kept (the first
 * row of each when values tie), with the first and last rows of the series. Every value kept is a
 * value read, so every peak (and every trough) stays exact; a chart of the kept rows draws the same
 * envelope as one of every row, at the width it was reduced for.
 */

/** Rows of one rank: times and, per series, a value or null (not read yet) per row. */
export interface SeriesRows {
  /** Row times, ascending. */
  readonly t: ArrayLike<number>;
  /** One column of values per series, as long as `t`. */
  readonly values: readonly ArrayLike<number | null>[];
}

/**
 * The indexes (ascending) of the rows to keep when `[start, end]` is drawn over `columns` pixel
 * columns. Rows outside the range fall in the first or last column.
 */
export function reduceRows(rows: SeriesRows, start: number, end: number, columns: number): number[] {
  const n = rows.t.length;
  if (n <= 2 || n <= columns) return Array.from({ length: n }, (_, i) => i);
  const width = end > start ? (end - start) / columns : 1;
  const seriesCount = rows.values.length;
  // Per series: the index of the current column's min and max (-1: none yet).
  const minAt = new Int32Array(seriesCount).fill(-1);
  const maxAt = new Int32Array(seriesCount).fill(-1);
  const keep = new Uint8Array(n);
  keep[0] = 1;
  keep[n - 1] = 1;
  let column = -1;
  const flush = (): void => {
    for (let s = 0; s < seriesCount; s++) {
      if (minAt[s]! >= 0) keep[minAt[s]!] = 1;
      if (maxAt[s]! >= 0) keep[maxAt[s]!] = 1;
      minAt[s] = -1;
      maxAt[s] = -1;
    }
  };
  for (let i = 0; i < n; i++) {
    const c = Math.min(columns - 1, Math.max(0, Math.floor((rows.t[i]! - start) / width)));
    if (c !== column) {
      flush();
      column = c;
    }
    for (let s = 0; s < seriesCount; s++) {
      const value = rows.values[s]![i];
      if (value === null || value === undefined) continue;
      const lo = minAt[s]!;
      if (lo < 0 || value < (rows.values[s]![lo] as number)) minAt[s] = i;
      const hi = maxAt[s]!;
      if (hi < 0 || value > (rows.values[s]![hi] as number)) maxAt[s] = i;
    }
  }
  flush();
  const kept: number[] = [];
  for (let i = 0; i < n; i++) if (keep[i] === 1) kept.push(i);
  return kept;
}
