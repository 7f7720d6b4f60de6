/**
 * AssemblyScript source of the line reader's template kernel (`src/input/fast-line.ts` reads a
 * line like a recent one through it): compiled to WebAssembly by `build.mjs`, which writes
 * `src/input/line-kernel.generated.ts`. WebAssembly because a cold command runs this loop on
 * every line before V8's optimizing compiler has caught up; compiled code runs at full speed
 * from the first line.
 *
 * It reads one line as one template: the template's constant segments byte for byte, and the
 * number token in each slot by the rules of the full read (see `LineTemplate` and `readLike`).
 */

/** Memory layout (bytes), read by the JavaScript side from these exports. */
export const CHUNK_AT: i32 = 0;
/** The scan's read buffer (`CHUNK_BYTES` in scan.ts): lines read there need no copy. */
export const CHUNK_SIZE: i32 = 4 << 20;
/** A line read from elsewhere is copied here first (templates are at most 4 KiB). */
export const LINE_AT: i32 = CHUNK_AT + CHUNK_SIZE + 64;
export const LINE_SIZE: i32 = 8192;
export const TEMPLATES_AT: i32 = LINE_AT + LINE_SIZE + 64;
export const TEMPLATE_STRIDE: i32 = 8192;
export const TEMPLATE_SLOTS: i32 = 16;
/** Slots a template has at most (a phase boundary's scope adds a dozen to a line's 16 fields). */
export const MAX_SLOTS: i32 = 63;
/** Within a template: slot count, segment starts and lengths (i32), slot fields and kinds (u8), bytes. */
export const T_SLOTS: i32 = 0;
export const T_SEG_START: i32 = 8;
export const T_SEG_LENGTH: i32 = T_SEG_START + 4 * (MAX_SLOTS + 1);
export const T_SLOT_FIELD: i32 = T_SEG_LENGTH + 4 * (MAX_SLOTS + 1);
export const T_SLOT_KIND: i32 = T_SLOT_FIELD + (MAX_SLOTS + 1);
export const T_BYTES: i32 = T_SLOT_KIND + (MAX_SLOTS + 1);
/** Results: field values (f64 by field), segment shifts (i32), the timestamp's head and tail (f64). */
export const VALUES_AT: i32 = TEMPLATES_AT + TEMPLATE_SLOTS * TEMPLATE_STRIDE;
export const SHIFTS_AT: i32 = VALUES_AT + 8 * 32;
export const HEAD_AT: i32 = SHIFTS_AT + 4 * (MAX_SLOTS + 1);
export const TAIL_AT: i32 = HEAD_AT + 8;

// Slot kinds (`FIELD_KIND` and the metadata's slot kinds in fast-line.ts).
const NULLABLE_COUNT: u8 = 0;
const INT: u8 = 2;
const TENSORS: u8 = 3;
const TIMESTAMP: u8 = 4;
/** An integer in the metadata, of under 16 digits: checked, not read (no value is kept). */
const METADATA_INT: u8 = 5;
/** A run of digits inside a string value of the metadata: any run of one or more, not read. */
const STRING_DIGITS: u8 = 6;
const MAX_SAFE: u64 = 9007199254740991;
// biome-ignore lint/correctness/noPrecisionLoss: AssemblyScript reads it as a 64-bit integer, exact.
const ASCII_ZEROS: u64 = 0x3030303030303030;
// biome-ignore lint/correctness/noPrecisionLoss: AssemblyScript reads it as a 64-bit integer, exact.
const HIGH_NIBBLES: u64 = 0xf0f0f0f0f0f0f0f0;
// biome-ignore lint/correctness/noPrecisionLoss: AssemblyScript reads it as a 64-bit integer, exact.
const SIXES: u64 = 0x0606060606060606;
const LANES: u64 = 0x000000ff000000ff;
const PAIRS_TO_FOURS: u64 = 100 + ((<u64>1000000) << 32);
const FOURS_TO_EIGHT: u64 = 1 + ((<u64>10000) << 32);

/**
 * Where the run of decimal digits from `p` ends (at `end` at the latest): eight bytes at a time,
 * a byte being a digit when its high nibble is 3 and adding 6 keeps it so (ASCII and UTF-8 bytes
 * never carry into the next byte; a carry past a non-digit cannot move the first non-digit).
 */
function digitsEnd(p: i32, end: i32): i32 {
  for (; p + 8 <= end; p += 8) {
    const x = load<u64>(<usize>p);
    const notDigits = ((x & HIGH_NIBBLES) ^ ASCII_ZEROS) | (((x + SIXES) & HIGH_NIBBLES) ^ ASCII_ZEROS);
    if (notDigits !== 0) return p + <i32>(ctz(notDigits) >> 3);
  }
  while (p < end && <u32>load<u8>(<usize>p) - 0x30 < 10) p++;
  return p;
}

/**
 * The value of the decimal digits `[from, to)` (at most 18): eight at a time where it can (SWAR),
 * the rest one by one. Integers, exact: the full read's doubles are exact below 2^53 too.
 */
function digitsValue(from: i32, to: i32): u64 {
  let value: u64 = 0;
  let p = from;
  for (; p + 8 <= to; p += 8) {
    // Eight ASCII digits to their value: pairs, then fours, then the eight (little-endian lanes).
    let x = load<u64>(<usize>p) - ASCII_ZEROS;
    x = x * 10 + (x >> 8);
    x = ((x & LANES) * PAIRS_TO_FOURS + ((x >> 16) & LANES) * FOURS_TO_EIGHT) >> 32;
    value = value * 100000000 + x;
  }
  for (; p < to; p++) value = value * 10 + <u64>(load<u8>(<usize>p) - 0x30);
  return value;
}

/**
 * Whether `[start, end)` reads as template `t` (0..TEMPLATE_SLOTS-1). On a match the values of
 * the slots' fields are in VALUES (the caller set the others), each segment's shift from
 * template to line positions in SHIFTS, the timestamp in HEAD and TAIL.
 */
export function readLike(start: i32, end: i32, t: i32): i32 {
  const tpl: usize = <usize>(TEMPLATES_AT + t * TEMPLATE_STRIDE);
  const slots = load<i32>(tpl + T_SLOTS);
  const bytes: usize = tpl + T_BYTES;
  let pos = start;
  for (let k = 0; ; k++) {
    const from = load<i32>(tpl + T_SEG_START + (k << 2));
    const length = load<i32>(tpl + T_SEG_LENGTH + (k << 2));
    if (pos + length > end) return 0;
    const at: usize = <usize>pos;
    const expected: usize = bytes + <usize>from;
    let i = 0;
    for (; i + 8 <= length; i += 8) {
      if (load<u64>(at + <usize>i) !== load<u64>(expected + <usize>i)) return 0;
    }
    for (; i < length; i++) {
      if (load<u8>(at + <usize>i) !== load<u8>(expected + <usize>i)) return 0;
    }
    store<i32>(<usize>(SHIFTS_AT + (k << 2)), pos - from);
    pos += length;
    if (k === slots) break;
    const kind = load<u8>(tpl + T_SLOT_KIND + <usize>k);
    const field = <usize>load<u8>(tpl + T_SLOT_FIELD + <usize>k);
    // Tokens end at `end` at the latest: a token running past it cannot be followed by the next segment.
    let c: u32 = pos < end ? <u32>load<u8>(<usize>pos) : 0;
    if (kind === STRING_DIGITS) {
      // Not none: two constant segments joined could spell a key the template's bytes do not hold.
      const digitsStart = pos;
      pos = digitsEnd(pos, end);
      if (pos === digitsStart) return 0;
      continue;
    }
    if (kind === METADATA_INT) {
      // JSON's integer: a sign, then no leading zero; past 15 digits the full read marks the metadata inexact.
      if (c === 0x2d) pos++;
      const digitsStart = pos;
      pos = digitsEnd(pos, end);
      const digits = pos - digitsStart;
      if (digits === 0 || digits > 15 || (digits > 1 && load<u8>(<usize>digitsStart) === 0x30)) return 0;
      continue;
    }
    if (kind === TIMESTAMP) {
      const digitsStart = pos;
      pos = digitsEnd(pos, end);
      const digits = pos - digitsStart;
      if (digits === 0 || digits > 24 || (digits > 1 && load<u8>(<usize>digitsStart) === 0x30)) return 0;
      const split = max(digitsStart, pos - 9);
      const head = <f64>digitsValue(digitsStart, split);
      const tail = <f64>digitsValue(split, pos);
      store<f64>(<usize>HEAD_AT, head);
      store<f64>(<usize>TAIL_AT, tail);
      continue;
    }
    if (c === 0x6e) {
      if (
        kind !== NULLABLE_COUNT ||
        pos + 4 > end ||
        load<u8>(<usize>(pos + 1)) !== 0x75 ||
        load<u8>(<usize>(pos + 2)) !== 0x6c ||
        load<u8>(<usize>(pos + 3)) !== 0x6c
      )
        return 0;
      pos += 4;
      store<f64>(<usize>VALUES_AT + (field << 3), NaN);
      continue;
    }
    let negative = false;
    if (c === 0x2d) {
      if (kind !== INT && kind !== TENSORS) return 0;
      negative = true;
      pos++;
      c = pos < end ? <u32>load<u8>(<usize>pos) : 0;
    }
    const digitsStart = pos;
    pos = digitsEnd(pos, end);
    c = pos < end ? <u32>load<u8>(<usize>pos) : 0;
    const digits = pos - digitsStart;
    if (digits === 0 || (digits > 1 && load<u8>(<usize>digitsStart) === 0x30)) return 0;
    // Past 16 digits a number is past 2^53 (no leading zero); the full read takes none of them, nor
    // a 16-digit tensor count.
    if (digits > 16 || (digits === 16 && kind === TENSORS)) return 0;
    const exact = digitsValue(digitsStart, pos);
    if (exact > MAX_SAFE) return 0;
    const value = <f64>exact;
    if (c === 0x2e || c === 0x65 || c === 0x45) return 0;
    // `int` reads -0 as 0; the metadata validator (tensors) keeps the sign.
    store<f64>(
      <usize>VALUES_AT + (field << 3),
      negative && (value !== 0 || kind === TENSORS) ? -value : value,
    );
  }
  for (let i = pos; i < end; i++) {
    const c = load<u8>(<usize>i);
    if (c !== 0x20 && c !== 0x09 && c !== 0x0d && c !== 0x0a) return 0;
  }
  return 1;
}
