/**
 * A flat Parquet file, in one row group, one uncompressed data page (v1) per column: text columns
 * dictionary-encoded (RLE_DICTIONARY, their values repeat: sessions, hosts, phase paths), numbers
 * PLAIN, nulls as RLE definition levels. Integer columns carry min/max statistics, so engines skip
 * files by time or rank. The subset every engine reads (DuckDB, Spark, Trino, ClickHouse, Arrow).
 */

import { type EncoderValues, Int64Column, TextRuns } from "./columns.js";
import { ByteSink, type ThriftStruct, type ThriftValue, writeStruct } from "./thrift.js";

/** A column's physical and logical type. */
export type EncoderType = "INT32" | "INT64" | "DOUBLE" | "BOOLEAN" | "STRING" | "JSON";

/** One column to encode. */
export interface EncoderColumn {
  readonly name: string;
  readonly type: EncoderType;
  readonly nullable: boolean;
  readonly values: EncoderValues;
}

const PHYSICAL: Record<EncoderType, number> = {
  BOOLEAN: 0,
  INT32: 1,
  INT64: 2,
  DOUBLE: 5,
  STRING: 6,
  JSON: 6,
};
const ENCODING_PLAIN = 0;
const ENCODING_RLE = 3;
const ENCODING_RLE_DICTIONARY = 8;
const PAGE_DATA = 0;
const PAGE_DICTIONARY = 2;
const CONVERTED_UTF8 = 0;
const CONVERTED_JSON = 19;

const text = new TextEncoder();

/** Typed arrays hold little-endian values here (every platform Node runs on): copied as they are. */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** The bytes of `array`, little-endian, as Parquet's PLAIN encoding stores them. */
function littleEndianBytes(array: Int32Array | Uint32Array | Float64Array, length: number): Uint8Array {
  const bytes = new Uint8Array(array.buffer, array.byteOffset, length * array.BYTES_PER_ELEMENT);
  if (LITTLE_ENDIAN) return bytes;
  const copy = new Uint8Array(bytes.length);
  const view = new DataView(copy.buffer);
  for (let i = 0; i < length; i++) {
    if (array instanceof Float64Array) view.setFloat64(i * 8, array[i]!, true);
    else if (array instanceof Int32Array) view.setInt32(i * 4, array[i]!, true);
    else view.setUint32(i * 4, array[i]!, true);
  }
  return copy;
}

/** Appends a run of `count` copies of `value` (RLE/bit-packed hybrid, RLE runs only). */
function rleRun(out: ByteSink, count: number, value: number, byteWidth: number): void {
  out.varint(count * 2);
  for (let b = 0; b < byteWidth; b++) out.byte((value >>> (8 * b)) & 0xff);
}

/** Definition levels (1 present, 0 null) as RLE runs, with their 4-byte length prefix. */
function definitionLevels(out: ByteSink, nulls: Uint8Array | null, rows: number): void {
  const start = out.length;
  out.uint32(0);
  if (nulls === null) rleRun(out, rows, 1, 1);
  else {
    let k = 0;
    while (k < rows) {
      const isNull = nulls[k]!;
      let end = k + 1;
      while (end < rows && nulls[end] === isNull) end++;
      rleRun(out, end - k, isNull === 1 ? 0 : 1, 1);
      k = end;
    }
  }
  out.view.setUint32(start, out.length - start - 4, true);
}

/** Which rows are null (1), or null when none is: one pass over a list, none over typed arrays. */
function nullMask(values: EncoderValues, rows: number): Uint8Array | null {
  if (values instanceof Int64Column) return values.nulls;
  if (values instanceof TextRuns) throw new Error("internal: text runs have no null mask");
  if (values instanceof Int32Array || values instanceof Float64Array) return null;
  const list = values as readonly unknown[];
  let mask: Uint8Array | null = null;
  for (let k = 0; k < rows; k++) {
    const value = list[k];
    if (value === null || value === undefined) {
      mask ??= new Uint8Array(rows);
      mask[k] = 1;
    }
  }
  return mask;
}

interface Stats {
  readonly min: Uint8Array;
  readonly max: Uint8Array;
}

function int64Bytes(hi: number, lo: number): Uint8Array {
  const bytes = new Uint8Array(8);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, lo, true);
  view.setInt32(4, hi, true);
  return bytes;
}

/** PLAIN values of a number or boolean column (nulls skipped); min/max for integers. */
function plainValues(
  out: ByteSink,
  column: EncoderColumn,
  rows: number,
  nulls: Uint8Array | null,
): Stats | null {
  const { type } = column;
  let values = column.values;
  if (type === "INT64") {
    if (!(values instanceof Int64Column))
      values = Int64Column.of(values as readonly (number | bigint | null)[]);
    const { hi, lo, nulls } = values as Int64Column;
    // Little-endian halves interleaved in an aligned array, then copied in one go.
    const words = new Uint32Array(rows * 2);
    let w = 0;
    let minHi = 0;
    let minLo = 0;
    let maxHi = 0;
    let maxLo = 0;
    let any = false;
    for (let k = 0; k < rows; k++) {
      if (nulls !== null && nulls[k] === 1) continue;
      const h = hi[k]!;
      const l = lo[k]!;
      words[w++] = l;
      words[w++] = h;
      if (!any) {
        minHi = maxHi = h;
        minLo = maxLo = l;
        any = true;
      } else {
        if (h < minHi || (h === minHi && l < minLo)) {
          minHi = h;
          minLo = l;
        }
        if (h > maxHi || (h === maxHi && l > maxLo)) {
          maxHi = h;
          maxLo = l;
        }
      }
    }
    out.append(littleEndianBytes(words, w));
    return any ? { min: int64Bytes(minHi, minLo), max: int64Bytes(maxHi, maxLo) } : null;
  }
  if (type === "INT32") {
    const list = values as Int32Array | readonly (number | null)[];
    if (list instanceof Int32Array) out.append(littleEndianBytes(list, rows));
    let min = 0;
    let max = 0;
    let any = false;
    const typed = list instanceof Int32Array;
    if (!typed) out.ensure(rows * 4);
    for (let k = 0; k < rows; k++) {
      if (!typed && nulls !== null && nulls[k] === 1) continue;
      const v = list[k] as number;
      if (!typed) {
        out.view.setInt32(out.length, v, true);
        out.length += 4;
      }
      if (!any || v < min) min = v;
      if (!any || v > max) max = v;
      any = true;
    }
    if (!any) return null;
    const minBytes = new Uint8Array(4);
    const maxBytes = new Uint8Array(4);
    new DataView(minBytes.buffer).setInt32(0, min, true);
    new DataView(maxBytes.buffer).setInt32(0, max, true);
    return { min: minBytes, max: maxBytes };
  }
  if (type === "DOUBLE") {
    const list = values as Float64Array | readonly (number | null)[];
    if (list instanceof Float64Array) {
      out.append(littleEndianBytes(list, rows));
      return null;
    }
    out.ensure(rows * 8);
    for (let k = 0; k < rows; k++) {
      if (nulls !== null && nulls[k] === 1) continue;
      out.view.setFloat64(out.length, list[k] as number, true);
      out.length += 8;
    }
    return null;
  }
  // BOOLEAN: bit-packed, least significant bit first.
  const list = values as readonly (boolean | null)[];
  let byte = 0;
  let bit = 0;
  for (let k = 0; k < rows; k++) {
    if (nulls !== null && nulls[k] === 1) continue;
    if (list[k] === true) byte |= 1 << bit;
    if (++bit === 8) {
      out.byte(byte);
      byte = 0;
      bit = 0;
    }
  }
  if (bit > 0) out.byte(byte);
  return null;
}

interface ChunkMeta {
  readonly column: EncoderColumn;
  readonly offset: number;
  readonly dataOffset: number;
  readonly dictionaryOffset: number | null;
  readonly size: number;
  readonly nulls: number;
  readonly stats: Stats | null;
  readonly encodings: readonly number[];
}

function pageHeader(
  out: ByteSink,
  type: number,
  size: number,
  header: readonly [id: number, value: ThriftValue],
): void {
  writeStruct(out, [[1, { i32: type }], [2, { i32: size }], [3, { i32: size }], header]);
}

/** A text column's dictionary page, and its data page's levels and RLE indices into `scratch`. */
function writeText(
  out: ByteSink,
  column: EncoderColumn,
  rows: number,
  scratch: ByteSink,
): { nulls: number; dictionaryOffset: number } {
  const runs =
    column.values instanceof TextRuns
      ? column.values
      : TextRuns.of(column.values as readonly (string | null)[], rows);
  const { values, counts } = runs;
  const count = values.length;
  let nulls = 0;
  for (let r = 0; r < count; r++) if (values[r] === null) nulls += counts[r]!;
  if (nulls > 0 && !column.nullable)
    throw new Error(`internal: ${nulls} null(s) in required column ${column.name}`);
  if (column.nullable) {
    // Definition levels: runs of present (1) and null (0).
    const start = scratch.length;
    scratch.uint32(0);
    let r = 0;
    while (r < count) {
      const isNull = values[r] === null;
      let length = counts[r++]!;
      while (r < count && (values[r] === null) === isNull) length += counts[r++]!;
      rleRun(scratch, length, isNull ? 0 : 1, 1);
    }
    scratch.view.setUint32(start, scratch.length - start - 4, true);
  }
  const ids = new Map<string, number>();
  const runIds = new Int32Array(count);
  for (let r = 0; r < count; r++) {
    const value = values[r];
    if (value === null || value === undefined) {
      runIds[r] = -1;
      continue;
    }
    let id = ids.get(value);
    if (id === undefined) {
      id = ids.size;
      ids.set(value, id);
    }
    runIds[r] = id;
  }
  // The dictionary page: its values PLAIN.
  const dictionary = new ByteSink(1024);
  for (const value of ids.keys()) {
    const bytes = text.encode(value);
    dictionary.uint32(bytes.length);
    dictionary.append(bytes);
  }
  const dictionaryOffset = out.length;
  pageHeader(out, PAGE_DICTIONARY, dictionary.length, [
    7,
    {
      struct: [
        [1, { i32: ids.size }],
        [2, { i32: ENCODING_PLAIN }],
      ],
    },
  ]);
  out.append(dictionary.result());
  // The data page's values: the indices of the present rows, as RLE runs (adjacent runs of one id merged).
  let bitWidth = 1;
  while (2 ** bitWidth < ids.size) bitWidth++;
  const byteWidth = Math.ceil(bitWidth / 8);
  scratch.byte(bitWidth);
  let r = 0;
  while (r < count) {
    const id = runIds[r]!;
    if (id < 0) {
      r++;
      continue;
    }
    let length = counts[r++]!;
    while (r < count && (runIds[r] === id || runIds[r] === -1)) {
      if (runIds[r] === id) length += counts[r]!;
      r++;
    }
    rleRun(scratch, length, id, byteWidth);
  }
  return { nulls, dictionaryOffset };
}

/** Writes one column chunk (dictionary page, data page) at the end of `out`. */
function writeChunk(out: ByteSink, column: EncoderColumn, rows: number, scratch: ByteSink): ChunkMeta {
  const offset = out.length;
  scratch.length = 0;
  let nulls = 0;
  let dictionaryOffset: number | null = null;
  let stats: Stats | null = null;
  let encoding = ENCODING_PLAIN;
  if (column.type === "STRING" || column.type === "JSON") {
    ({ nulls, dictionaryOffset } = writeText(out, column, rows, scratch));
    encoding = ENCODING_RLE_DICTIONARY;
  } else {
    const mask = nullMask(column.values, rows);
    if (mask !== null) for (let k = 0; k < rows; k++) nulls += mask[k]!;
    if (nulls > 0 && !column.nullable)
      throw new Error(`internal: ${nulls} null(s) in required column ${column.name}`);
    if (column.nullable) definitionLevels(scratch, mask, rows);
    stats = plainValues(scratch, column, rows, mask);
  }
  const dataOffset = out.length;
  pageHeader(out, PAGE_DATA, scratch.length, [
    5,
    {
      struct: [
        [1, { i32: rows }],
        [2, { i32: encoding }],
        [3, { i32: ENCODING_RLE }],
        [4, { i32: ENCODING_RLE }],
      ],
    },
  ]);
  out.append(scratch.result());
  return {
    column,
    offset,
    dataOffset,
    dictionaryOffset,
    size: out.length - offset,
    nulls,
    stats,
    encodings:
      encoding === ENCODING_PLAIN
        ? [ENCODING_PLAIN, ENCODING_RLE]
        : [ENCODING_PLAIN, ENCODING_RLE, ENCODING_RLE_DICTIONARY],
  };
}

function schemaElement(column: EncoderColumn): ThriftStruct {
  const converted =
    column.type === "STRING" ? CONVERTED_UTF8 : column.type === "JSON" ? CONVERTED_JSON : undefined;
  return [
    [1, { i32: PHYSICAL[column.type] }],
    [3, { i32: column.nullable ? 1 : 0 }],
    [4, { binary: column.name }],
    [6, converted === undefined ? undefined : { i32: converted }],
  ];
}

/** One Parquet file of `columns` (equally long), `metadata` as its key-value metadata. */
export function encodeParquet(
  columns: readonly EncoderColumn[],
  rows: number,
  options: {
    readonly createdBy: string;
    readonly metadata?: Readonly<Record<string, string>>;
    /**
     * Buffers to encode into, reused from one file to the next (the result then views `sinks.out`:
     * valid until the next call with them).
     */
    readonly sinks?: { readonly out: ByteSink; readonly scratch: ByteSink };
  },
): Uint8Array {
  // About 8 bytes a value: one buffer of the file's size, not a chain of doublings.
  const out = options.sinks?.out ?? new ByteSink(Math.max(1 << 16, rows * columns.length * 8 + 4096));
  out.length = 0;
  out.ensure(rows * columns.length * 8 + 4096);
  out.uint32(0x31524150); // PAR1
  const scratch = options.sinks?.scratch ?? new ByteSink(Math.max(1 << 12, rows * 8 + 1024));
  const chunks = columns.map((column) => writeChunk(out, column, rows, scratch));
  const rowGroupBytes = chunks.reduce((sum, chunk) => sum + chunk.size, 0);
  const footerStart = out.length;
  writeStruct(out, [
    [1, { i32: 1 }],
    [
      2,
      {
        of: "struct",
        list: [
          {
            struct: [
              [4, { binary: "schema" }],
              [5, { i32: columns.length }],
            ],
          },
          ...columns.map((column): ThriftValue => ({ struct: schemaElement(column) })),
        ],
      },
    ],
    [3, { i64: rows }],
    [
      4,
      {
        of: "struct",
        list: [
          {
            struct: [
              [
                1,
                {
                  of: "struct",
                  list: chunks.map(
                    (chunk): ThriftValue => ({
                      struct: [
                        [2, { i64: chunk.offset }],
                        [
                          3,
                          {
                            struct: [
                              [1, { i32: PHYSICAL[chunk.column.type] }],
                              [2, { of: "i32", list: chunk.encodings.map((e) => ({ i32: e })) }],
                              [3, { of: "binary", list: [{ binary: chunk.column.name }] }],
                              [4, { i32: 0 }],
                              [5, { i64: rows }],
                              [6, { i64: chunk.size }],
                              [7, { i64: chunk.size }],
                              [9, { i64: chunk.dataOffset }],
                              [
                                11,
                                chunk.dictionaryOffset === null ? undefined : { i64: chunk.dictionaryOffset },
                              ],
                              [
                                12,
                                {
                                  struct: [
                                    [3, { i64: chunk.nulls }],
                                    [5, chunk.stats === null ? undefined : { binary: chunk.stats.max }],
                                    [6, chunk.stats === null ? undefined : { binary: chunk.stats.min }],
                                  ],
                                },
                              ],
                            ],
                          },
                        ],
                      ],
                    }),
                  ),
                },
              ],
              [2, { i64: rowGroupBytes }],
              [3, { i64: rows }],
            ],
          },
        ],
      },
    ],
    [
      5,
      options.metadata === undefined
        ? undefined
        : {
            of: "struct",
            list: Object.entries(options.metadata).map(
              ([key, value]): ThriftValue => ({
                struct: [
                  [1, { binary: key }],
                  [2, { binary: value }],
                ],
              }),
            ),
          },
    ],
    [6, { binary: options.createdBy }],
  ]);
  out.uint32(out.length - footerStart);
  out.uint32(0x31524150);
  return out.result();
}
