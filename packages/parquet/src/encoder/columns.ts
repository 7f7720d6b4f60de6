/**
 * Column values as the encoder takes them. 64-bit integers are two 32-bit halves (`Int64Column`),
 * filled from exact doubles, bigints or a bigint base plus an exact double offset (timestamps),
 * so that no bigint is made per value on the hot path.
 */

const TWO_32 = 4294967296;

/** A column of 64-bit integers, nulls marked in `nulls` (allocated on the first null). */
export class Int64Column {
  readonly hi: Int32Array;
  readonly lo: Uint32Array;
  nulls: Uint8Array | null = null;

  constructor(readonly length: number) {
    this.hi = new Int32Array(length);
    this.lo = new Uint32Array(length);
  }

  /** An integral double (any within 2^63; fractions are truncated). */
  setNumber(k: number, value: number): void {
    const v = Math.trunc(value);
    const hi = Math.floor(v / TWO_32);
    this.hi[k] = hi;
    this.lo[k] = v - hi * TWO_32;
  }

  /** A bigint within int64 (its high half is `value >> 32n`, an arithmetic shift: signed as it should be). */
  setBigint(k: number, value: bigint): void {
    this.hi[k] = Number(value >> 32n);
    this.lo[k] = Number(value & 0xffffffffn);
  }

  /** `base + offset`, `base` split once by `splitBase`, `offset` an exact double (within 2^53). */
  setOffset(k: number, baseHi: number, baseLo: number, offset: number): void {
    const offsetHi = Math.floor(offset / TWO_32);
    const lo = baseLo + (offset - offsetHi * TWO_32);
    const carry = lo >= TWO_32 ? 1 : 0;
    this.lo[k] = lo - carry * TWO_32;
    this.hi[k] = baseHi + offsetHi + carry;
  }

  setNull(k: number): void {
    this.nulls ??= new Uint8Array(this.length);
    this.nulls[k] = 1;
  }

  /** A value, or null: integral doubles, bigints and null (NaN counts as null). */
  set(k: number, value: number | bigint | null): void {
    if (value === null || (typeof value === "number" && !Number.isFinite(value))) this.setNull(k);
    else if (typeof value === "bigint") this.setBigint(k, value);
    else this.setNumber(k, value);
  }

  /** A column of `values`. */
  static of(values: readonly (number | bigint | null)[]): Int64Column {
    const column = new Int64Column(values.length);
    values.forEach((value, k) => {
      column.set(k, value);
    });
    return column;
  }
}

/**
 * A text column as runs of equal values (a session, a host, a phase for many rows in a row): what
 * the encoder needs of it (the dictionary and its RLE indices) without an entry per row.
 */
export class TextRuns {
  readonly values: (string | null)[] = [];
  /** Rows in each run. */
  readonly counts: number[] = [];
  length = 0;

  push(value: string | null): void {
    const last = this.values.length - 1;
    if (last >= 0 && this.values[last] === value) this.counts[last] = this.counts[last]! + 1;
    else {
      this.values.push(value);
      this.counts.push(1);
    }
    this.length++;
  }

  /** The runs of the first `rows` values of `list` (undefined counts as null). */
  static of(list: readonly (string | null | undefined)[], rows: number): TextRuns {
    const runs = new TextRuns();
    for (let k = 0; k < rows; k++) runs.push(list[k] ?? null);
    return runs;
  }
}

/** `base`'s halves for `Int64Column.setOffset`. */
export function splitBase(base: bigint): [hi: number, lo: number] {
  return [Number(BigInt.asIntN(32, base >> 32n)), Number(BigInt.asUintN(32, base))];
}

/** What a column of each type takes. */
export type EncoderValues =
  | Int64Column
  | TextRuns
  | Int32Array
  | Float64Array
  | readonly (number | bigint | null)[]
  | readonly (string | null)[]
  | readonly (boolean | null)[];
