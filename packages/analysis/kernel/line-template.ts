/**
 * AssemblyScript source of the line reader's template kernel (`src/input/fast-line.ts` reads a
 * line like a recent one through it): compiled to WebAssembly by `build.mjs`, which writes
 * `src/input/line-kernel.generated.ts`. WebAssembly because a cold command runs this loop on
 * every line before V8's optimizing compiler has caught up; compiled code runs at full speed
 * from the first line.
 *
 * It reads a line as a template: the template's constant segments byte for byte, and the number
 * token in each slot by the rules of the full read (see `LineTemplate` and `readLike`); `readRows`
 * reads a run of lines so, each as one of the templates, into rows.
 */

/** Fields (`F_*` in fast-line.ts, which checks these against its own): the ones `keepsRules` checks. */
export const FIELDS: i32 = 16;
export const F_FREE: i32 = 5;
export const F_TOTAL: i32 = 7;
export const F_USED: i32 = 8;
export const F_LOCAL_RANK: i32 = 9;
export const F_PID: i32 = 11;
export const F_RANK: i32 = 12;
export const F_WORLD_SIZE: i32 = 15;

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
/**
 * Within a template: slot count, which rows `readRows` makes of its lines (i32: ROWS_*), segment
 * starts and lengths (i32), slot fields and kinds (u8), the values of fields that are not slots
 * (f64), where its phase scope starts and ends and the segments those lie in (i32), bytes.
 */
export const T_SLOTS: i32 = 0;
export const T_ROWS: i32 = 4;
export const T_SEG_START: i32 = 8;
export const T_SEG_LENGTH: i32 = T_SEG_START + 4 * (MAX_SLOTS + 1);
export const T_SLOT_FIELD: i32 = T_SEG_LENGTH + 4 * (MAX_SLOTS + 1);
export const T_SLOT_KIND: i32 = T_SLOT_FIELD + (MAX_SLOTS + 1);
export const T_DEFAULTS: i32 = T_SLOT_KIND + (MAX_SLOTS + 1);
export const T_SCOPE: i32 = T_DEFAULTS + 8 * FIELDS;
export const T_BYTES: i32 = T_SCOPE + 16;
/** Rows of a template's lines: none (read line by line), plain samples, phase boundaries (with their scope's place). */
export const ROWS_NONE: i32 = 0;
export const ROWS_SAMPLE: i32 = 1;
export const ROWS_BOUNDARY: i32 = 2;
/** Results: field values (f64 by field), segment shifts (i32), the timestamp's head and tail (f64). */
export const VALUES_AT: i32 = TEMPLATES_AT + TEMPLATE_SLOTS * TEMPLATE_STRIDE;
export const SHIFTS_AT: i32 = VALUES_AT + 8 * 32;
export const HEAD_AT: i32 = SHIFTS_AT + 4 * (MAX_SLOTS + 1);
export const TAIL_AT: i32 = HEAD_AT + 8;
/** Where `readRows` stopped (i32): the start of the first line it did not take. */
export const STOP_AT: i32 = TAIL_AT + 8;
/**
 * `readRows`' rows, one a line: its template, the timestamp's head and tail, where its phase
 * scope starts and ends (-1: none), a spare place, then the field values (f64).
 */
export const ROWS_AT: i32 = STOP_AT + 8;
export const ROW_VALUES: i32 = 6 + FIELDS;
export const MAX_ROWS: i32 = 8192;
/**
 * The templates in the order `readRows` tries them after the current run's and the guess (u8): the
 * one that read the latest line first; then, by template, the one whose run came two runs after its
 * last run (u8, 255: none yet), the guess.
 */
export const ORDER_AT: i32 = ROWS_AT + 8 * ROW_VALUES * MAX_ROWS;
export const AFTER_AT: i32 = ORDER_AT + TEMPLATE_SLOTS;
export const MEMORY_END: i32 = AFTER_AT + TEMPLATE_SLOTS;

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
  const pos = matchTemplate(start, end, t);
  if (pos < 0) return 0;
  for (let i = pos; i < end; i++) {
    const c = load<u8>(<usize>i);
    if (c !== 0x20 && c !== 0x09 && c !== 0x0d && c !== 0x0a) return 0;
  }
  return keepsRules() ? 1 : 0;
}

/**
 * Whether the values just read keep the rules between fields that a full read checks (pid, world
 * size, ranks below it, device used and free not above total): a line that breaks one is left to
 * the full read, which declines it, and the decoder then says why.
 */
function keepsRules(): bool {
  const values: usize = <usize>VALUES_AT;
  const pid = load<f64>(values + (F_PID << 3));
  const rank = load<f64>(values + (F_RANK << 3));
  const localRank = load<f64>(values + (F_LOCAL_RANK << 3));
  const worldSize = load<f64>(values + (F_WORLD_SIZE << 3));
  const total = load<f64>(values + (F_TOTAL << 3));
  const used = load<f64>(values + (F_USED << 3));
  const free = load<f64>(values + (F_FREE << 3));
  if (pid < -1 || worldSize < 1 || rank >= worldSize || localRank >= worldSize) return false;
  // biome-ignore lint/suspicious/noGlobalIsNan: AssemblyScript's isNaN is its typed builtin, not the global.
  return !(!isNaN(total) && (used > total || (!isNaN(free) && free > total)));
}

/**
 * Reads `[start, ...)` as template `t` (see `readLike`) up to the end of its bytes, which is
 * returned (-1: no match); `end` bounds the reading.
 */
function matchTemplate(start: i32, end: i32, t: i32): i32 {
  const tpl: usize = <usize>(TEMPLATES_AT + t * TEMPLATE_STRIDE);
  const slots = load<i32>(tpl + T_SLOTS);
  const bytes: usize = tpl + T_BYTES;
  let pos = start;
  for (let k = 0; ; k++) {
    const from = load<i32>(tpl + T_SEG_START + (k << 2));
    const length = load<i32>(tpl + T_SEG_LENGTH + (k << 2));
    if (pos + length > end) return -1;
    const at: usize = <usize>pos;
    const expected: usize = bytes + <usize>from;
    let i = 0;
    for (; i + 8 <= length; i += 8) {
      if (load<u64>(at + <usize>i) !== load<u64>(expected + <usize>i)) return -1;
    }
    // The last 1-7 bytes in one comparison: the 8 bytes ending there (a segment of 8 or more), else
    // the first `length` bytes of the 8 from there (memory goes on past a line and a template).
    if (i < length) {
      if (length >= 8) {
        const last: usize = <usize>(length - 8);
        if (load<u64>(at + last) !== load<u64>(expected + last)) return -1;
      } else {
        const mask: u64 = ((<u64>1) << ((<u64>length) << 3)) - 1;
        if (((load<u64>(at) ^ load<u64>(expected)) & mask) !== 0) return -1;
      }
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
      if (pos === digitsStart) return -1;
      continue;
    }
    if (kind === METADATA_INT) {
      // JSON's integer: a sign, then no leading zero; past 15 digits the full read marks the metadata inexact.
      if (c === 0x2d) pos++;
      const digitsStart = pos;
      pos = digitsEnd(pos, end);
      const digits = pos - digitsStart;
      if (digits === 0 || digits > 15 || (digits > 1 && load<u8>(<usize>digitsStart) === 0x30)) return -1;
      continue;
    }
    if (kind === TIMESTAMP) {
      const digitsStart = pos;
      pos = digitsEnd(pos, end);
      const digits = pos - digitsStart;
      if (digits === 0 || digits > 24 || (digits > 1 && load<u8>(<usize>digitsStart) === 0x30)) return -1;
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
        return -1;
      pos += 4;
      store<f64>(<usize>VALUES_AT + (field << 3), NaN);
      continue;
    }
    let negative = false;
    if (c === 0x2d) {
      if (kind !== INT && kind !== TENSORS) return -1;
      negative = true;
      pos++;
      c = pos < end ? <u32>load<u8>(<usize>pos) : 0;
    }
    const digitsStart = pos;
    pos = digitsEnd(pos, end);
    c = pos < end ? <u32>load<u8>(<usize>pos) : 0;
    const digits = pos - digitsStart;
    if (digits === 0 || (digits > 1 && load<u8>(<usize>digitsStart) === 0x30)) return -1;
    // Past 16 digits a number is past 2^53 (no leading zero); the full read takes none of them, nor
    // a 16-digit tensor count.
    if (digits > 16 || (digits === 16 && kind === TENSORS)) return -1;
    const exact = digitsValue(digitsStart, pos);
    if (exact > MAX_SAFE) return -1;
    const value = <f64>exact;
    if (c === 0x2e || c === 0x65 || c === 0x45) return -1;
    // `int` reads -0 as 0; the metadata validator (tensors) keeps the sign.
    store<f64>(
      <usize>VALUES_AT + (field << 3),
      negative && (value !== 0 || kind === TENSORS) ? -value : value,
    );
  }
  return pos;
}

/** Whether ORDER and AFTER are set up yet (memory starts zeroed). */
let ordered = false;
/**
 * The template of the run of lines read now, and of the run before it. A writer's lines come in runs
 * (a rank's samples between its phase boundaries, each boundary a run of one) in a cycle: the run
 * after this one is guessed to be the one that came two runs after the previous run's template last
 * time (samples, enter `forward`, samples: next, exit `forward`), so a boundary is found at the
 * first or second try rather than after every template that a wrong one takes ~200 bytes to rule out.
 */
let current: i32 = 0;
let previous: i32 = 0;

/**
 * Reads the lines from `start` (a line's start) one after the other while each is read by one of the
 * first `templates` templates whose lines make rows (`T_ROWS`: plain samples and phase boundaries),
 * with the checks of the JavaScript side's `readLike`, ends with `\n` before `end` (after spaces or
 * tabs and one `\r`) and is not empty, and at most MAX_ROWS of them: writes a row each (see ROWS_AT)
 * and returns how many; STOP_AT holds where the first line not read starts. Anything else is left to
 * the caller, line by line.
 */
export function readRows(start: i32, end: i32, templates: i32): i32 {
  if (!ordered) {
    for (let k = 0; k < TEMPLATE_SLOTS; k++) {
      store<u8>(<usize>(ORDER_AT + k), <u8>k);
      store<u8>(<usize>(AFTER_AT + k), 255);
    }
    ordered = true;
  }
  let rows = 0;
  let p = start;
  while (rows < MAX_ROWS) {
    // Tried in turn: the current run's template, the guess, then the others most recent first.
    const guess = <i32>load<u8>(<usize>(AFTER_AT + previous));
    let t = current;
    let close = -1;
    for (let k = 0; k < TEMPLATE_SLOTS + 2; k++) {
      t = k === 0 ? current : k === 1 ? guess : <i32>load<u8>(<usize>(ORDER_AT + k - 2));
      if (t >= templates || (k > 0 && t === current) || (k > 1 && t === guess)) continue;
      close = rowLike(p, end, t);
      if (close >= 0) break;
    }
    if (close < 0 || !lineEnds(close, end)) break;
    if (t !== current) {
      // A new run: learned as the guess after the previous one, and first in the order.
      store<u8>(<usize>(AFTER_AT + previous), <u8>t);
      previous = current;
      current = t;
      let j = 0;
      while (j < TEMPLATE_SLOTS - 1 && <i32>load<u8>(<usize>(ORDER_AT + j)) !== t) j++;
      for (; j > 0; j--) store<u8>(<usize>(ORDER_AT + j), load<u8>(<usize>(ORDER_AT + j - 1)));
      store<u8>(<usize>ORDER_AT, <u8>t);
    }
    close = lineEnd;
    const tpl: usize = <usize>(TEMPLATES_AT + t * TEMPLATE_STRIDE);
    const row: usize = <usize>(ROWS_AT + rows * ROW_VALUES * 8);
    store<f64>(row, <f64>t);
    store<f64>(row + 8, load<f64>(<usize>HEAD_AT));
    store<f64>(row + 16, load<f64>(<usize>TAIL_AT));
    store<f64>(row + 24, <f64>shifted(tpl, 0));
    store<f64>(row + 32, <f64>shifted(tpl, 8));
    memory.copy(row + 48, <usize>VALUES_AT, 8 * FIELDS);
    rows++;
    p = close + 1;
  }
  store<i32>(<usize>STOP_AT, p);
  return rows;
}

/** Where `lineEnds` found the `\n` that ends the line just read. */
let lineEnd: i32 = 0;

/** Whether the line just read ends at `close`: spaces or tabs, at most one `\r`, then its `\n` (before `end`; see lineEnd). */
function lineEnds(close: i32, end: i32): bool {
  while (close < end && (load<u8>(<usize>close) === 0x20 || load<u8>(<usize>close) === 0x09)) close++;
  if (close < end && load<u8>(<usize>close) === 0x0d) close++;
  if (close >= end || load<u8>(<usize>close) !== 0x0a) return false;
  lineEnd = close;
  return true;
}

/** Where the scope position at `T_SCOPE + at` of template `tpl` is in the line just read (-1: none). */
function shifted(tpl: usize, at: i32): i32 {
  const position = load<i32>(tpl + T_SCOPE + <usize>at);
  if (position < 0) return -1;
  return position + load<i32>(<usize>(SHIFTS_AT + (load<i32>(tpl + T_SCOPE + <usize>(at + 4)) << 2)));
}

/** Where template `t` ends reading `[start, ...)` as a line it makes rows of that passes the checks, else -1. */
function rowLike(start: i32, end: i32, t: i32): i32 {
  const tpl: usize = <usize>(TEMPLATES_AT + t * TEMPLATE_STRIDE);
  if (load<i32>(tpl + T_ROWS) === ROWS_NONE) return -1;
  memory.copy(<usize>VALUES_AT, tpl + T_DEFAULTS, 8 * FIELDS);
  const close = matchTemplate(start, end, t);
  return close >= 0 && keepsRules() ? close : -1;
}
