/**
 * The Thrift compact protocol, as much as Parquet's footer and page headers need: structs of
 * i32/i64/binary/bool/list/struct fields, written into a growable byte buffer.
 */

/** A growable little-endian byte buffer. */
export class ByteSink {
  bytes: Uint8Array;
  view: DataView;
  length = 0;

  constructor(capacity = 1 << 16) {
    this.bytes = new Uint8Array(capacity);
    this.view = new DataView(this.bytes.buffer);
  }

  /** Makes room for `more` bytes. */
  ensure(more: number): void {
    const needed = this.length + more;
    if (needed <= this.bytes.length) return;
    let capacity = this.bytes.length * 2;
    while (capacity < needed) capacity *= 2;
    const next = new Uint8Array(capacity);
    next.set(this.bytes.subarray(0, this.length));
    this.bytes = next;
    this.view = new DataView(next.buffer);
  }

  byte(value: number): void {
    this.ensure(1);
    this.bytes[this.length++] = value;
  }

  append(bytes: Uint8Array): void {
    this.ensure(bytes.length);
    this.bytes.set(bytes, this.length);
    this.length += bytes.length;
  }

  uint32(value: number): void {
    this.ensure(4);
    this.view.setUint32(this.length, value, true);
    this.length += 4;
  }

  /** An unsigned varint (values up to 2^53). */
  varint(value: number): void {
    this.ensure(10);
    let v = value;
    while (v >= 0x80) {
      this.bytes[this.length++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.bytes[this.length++] = v;
  }

  /** An unsigned varint of a bigint. */
  varbig(value: bigint): void {
    this.ensure(10);
    let v = value;
    while (v >= 0x80n) {
      this.bytes[this.length++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.bytes[this.length++] = Number(v);
  }

  result(): Uint8Array {
    return this.bytes.subarray(0, this.length);
  }
}

enum CompactType {
  True = 1,
  False = 2,
  I32 = 5,
  I64 = 6,
  Binary = 8,
  List = 9,
  Struct = 12,
}

/** A Thrift field value: what `writeStruct` writes for each field id. */
export type ThriftValue =
  | { readonly i32: number }
  | { readonly i64: number | bigint }
  | { readonly binary: Uint8Array | string }
  | { readonly bool: boolean }
  | { readonly struct: ThriftStruct }
  | { readonly list: readonly ThriftValue[]; readonly of: "i32" | "binary" | "struct" };

/** Fields by id (ascending), undefined fields left out. */
export type ThriftStruct = readonly (readonly [id: number, value: ThriftValue | undefined])[];

const encoder = new TextEncoder();

function zigzag32(value: number): number {
  return ((value << 1) ^ (value >> 31)) >>> 0;
}

function zigzag64(value: number | bigint): bigint {
  const v = BigInt(value);
  return v >= 0n ? v << 1n : (-v << 1n) - 1n;
}

function typeOf(value: ThriftValue): CompactType {
  if ("i32" in value) return CompactType.I32;
  if ("i64" in value) return CompactType.I64;
  if ("binary" in value) return CompactType.Binary;
  if ("bool" in value) return value.bool ? CompactType.True : CompactType.False;
  if ("struct" in value) return CompactType.Struct;
  return CompactType.List;
}

function writeValue(out: ByteSink, value: ThriftValue): void {
  if ("i32" in value) out.varint(zigzag32(value.i32));
  else if ("i64" in value) out.varbig(zigzag64(value.i64));
  else if ("binary" in value) {
    const bytes = typeof value.binary === "string" ? encoder.encode(value.binary) : value.binary;
    out.varint(bytes.length);
    out.append(bytes);
  } else if ("bool" in value) {
    // In a list a bool is a byte; as a field its value is in the header.
    out.byte(value.bool ? 1 : 2);
  } else if ("struct" in value) writeStruct(out, value.struct);
  else {
    const elementType =
      value.of === "i32" ? CompactType.I32 : value.of === "binary" ? CompactType.Binary : CompactType.Struct;
    const size = value.list.length;
    if (size < 15) out.byte((size << 4) | elementType);
    else {
      out.byte(0xf0 | elementType);
      out.varint(size);
    }
    for (const element of value.list) writeValue(out, element);
  }
}

/** Writes a struct: its fields in id order, then the stop byte. */
export function writeStruct(out: ByteSink, fields: ThriftStruct): void {
  let last = 0;
  for (const [id, value] of fields) {
    if (value === undefined) continue;
    const type = typeOf(value);
    const delta = id - last;
    if (delta > 0 && delta <= 15) out.byte((delta << 4) | type);
    else {
      out.byte(type);
      out.varint(zigzag32(id));
    }
    last = id;
    if (type !== CompactType.True && type !== CompactType.False) writeValue(out, value);
  }
  out.byte(0);
}
