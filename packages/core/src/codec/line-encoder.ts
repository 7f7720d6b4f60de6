import type { TelemetryEvent } from "../schema/schema.js";
import { CANONICAL_END, CANONICAL_PREFIX as P } from "./canonical-line.js";
import { encodeTelemetryRecord } from "./codec.js";
import type { JsonObject, JsonValue } from "./json.js";
import { FLOAT_KEYS, pythonJsonNumber, pythonJsonString, stringifyJson } from "./json-codec.js";
import { isRecorderPhaseScope } from "./phase-scope-shape.js";

/**
 * Room `encodeInto` keeps free beyond each variable-length piece it writes: enough for every
 * fixed-size piece (key names, integers) that may follow before the next check.
 */
const MARGIN = 1024;

/** The bytes of an ASCII text (what every encoded piece is: `ensure_ascii` escaping). */
function ascii(text: string): Uint8Array {
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

const K_ATTRIBUTES = ascii(', "attributes": ');
const K_DEPTH = ascii(', "depth": ');
const K_NAME = ascii(', "name": ');
const K_PARENT = ascii(', "parent_scope_id": ');
const K_PATH = ascii(', "path": [');
const K_SCOPE_ID = ascii('], "scope_id": ');
const K_SEQUENCE = ascii(', "sequence": ');
const K_THREAD_ID = ascii(', "thread_id": ');
const K_THREAD_NAME = ascii(', "thread_name": ');
const ACTION_ENTER = ascii('{"action": "enter"');
const ACTION_EXIT = ascii('{"action": "exit"');

/**
 * The number `putCounter` writes. Counters above 2^31 are doubles: passing one to a function that is
 * not inlined boxes it (a heap allocation per call); a typed array slot carries it unboxed.
 */
const COUNTER = new Float64Array(1);

/**
 * Writes COUNTER[0] as `str()` writes an int field: digits (|value| <= 2^53), `null` for NaN (what
 * callers store for null), -1 for anything else (core's path decides).
 */
function putCounter(out: Uint8Array, pos: number): number {
  let value = COUNTER[0]!;
  if (Number.isNaN(value)) return putNull(out, pos);
  if (!Number.isSafeInteger(value)) return -1;
  if (value < 0) {
    out[pos++] = 0x2d;
    value = -value;
  }
  if (value < 1e9) return putSmall(out, pos, value | 0);
  // Two exact halves: the quotient may be off by one after rounding, the remainder says which way.
  let high = Math.floor(value / 1e9);
  let low = value - high * 1e9;
  if (low < 0) {
    high--;
    low += 1e9;
  } else if (low >= 1e9) {
    high++;
    low -= 1e9;
  }
  pos = putSmall(out, pos, high | 0);
  putDigits(out, pos, low | 0, 9);
  return pos + 9;
}

/** A counter field's value (a number or null) through putCounter; -1 for anything else. */
function putCounterField(out: Uint8Array, pos: number, value: unknown): number {
  if (typeof value !== "number" && value !== null) return -1;
  COUNTER[0] = value === null ? Number.NaN : value;
  return putCounter(out, pos);
}

/** Writes a safe integer's digits. */
function putInt(out: Uint8Array, pos: number, value: number): number {
  COUNTER[0] = value;
  return putCounter(out, pos);
}

/** Writes exactly `count` digits of `value`, an integer in [0, 1e9) (zero-padded). */
function putDigits(out: Uint8Array, pos: number, value: number, count: number): void {
  for (let i = pos + count - 1; i >= pos; i--) {
    const q = (value / 10) | 0;
    out[i] = 0x30 + value - q * 10;
    value = q;
  }
}

/** Digits of an integer in [0, 1e9). */
function putSmall(out: Uint8Array, pos: number, value: number): number {
  let count = 1;
  for (let bound = 10; bound <= value; bound *= 10) count++;
  putDigits(out, pos, value, count);
  return pos + count;
}

const TWO_TO_64 = 1n << 64n;
const U64 = new BigUint64Array(1);
const U32 = new Uint32Array(U64.buffer);
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const HIGH_WORD = LITTLE_ENDIAN ? 1 : 0;
const LOW_WORD = LITTLE_ENDIAN ? 0 : 1;

/**
 * Writes a bigint in [0, 2^64) (a nanosecond timestamp) without making a string: the quotient by
 * 1e9 is estimated in floating point, and the exact low 32 bits of the remainder correct it.
 */
function putUint64(out: Uint8Array, pos: number, value: bigint): number {
  U64[0] = value;
  const high = U32[HIGH_WORD]!;
  const low = U32[LOW_WORD]!;
  if (high === 0) return putInt(out, pos, low);
  let quotient = Math.floor((high * 4294967296 + low) / 1e9);
  // The true remainder is within (-1e9, 2e9) of the estimate's: its value mod 2^32 tells which.
  let rest = (low - Math.imul(quotient, 1e9)) >>> 0;
  if (rest >= 1e9) {
    if (rest < 2e9) {
      quotient++;
      rest -= 1e9;
    } else {
      quotient--;
      rest = rest + 1e9 - 4294967296;
    }
  }
  COUNTER[0] = quotient;
  pos = putCounter(out, pos);
  putDigits(out, pos, rest | 0, 9);
  return pos + 9;
}

function putNull(out: Uint8Array, pos: number): number {
  out[pos] = 0x6e;
  out[pos + 1] = 0x75;
  out[pos + 2] = 0x6c;
  out[pos + 3] = 0x6c;
  return pos + 4;
}

/** Copies ASCII text; -1 when it would leave less than MARGIN free. */
function putText(out: Uint8Array, pos: number, text: string): number {
  const length = text.length;
  if (pos + length + MARGIN > out.length) return -1;
  for (let i = 0; i < length; i++) out[pos + i] = text.charCodeAt(i);
  return pos + length;
}

/** Copies bytes; -1 when they would leave less than MARGIN free. */
function putBytes(out: Uint8Array, pos: number, bytes: Uint8Array): number {
  if (pos + bytes.length + MARGIN > out.length) return -1;
  out.set(bytes, pos);
  return pos + bytes.length;
}

/** A JSON string as Python writes it: plain printable ASCII in one pass, anything else through core. */
function putString(out: Uint8Array, pos: number, value: string): number {
  const length = value.length;
  if (pos + length + 2 + MARGIN > out.length) return -1;
  out[pos] = 0x22;
  const start = pos + 1;
  for (let i = 0; i < length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return putText(out, pos, pythonJsonString(value));
    out[start + i] = c;
  }
  out[start + length] = 0x22;
  return start + length + 1;
}

/**
 * A few recent values of a group of fields (up to 5) and the bytes they encode to: a tracker's
 * records repeat them, or alternate between a few (samples and phase boundaries).
 */
class RunCache {
  private readonly keys: unknown[] = [];
  private readonly bytes: Uint8Array[] = [];
  private last = 0;
  private next = 0;

  constructor(private readonly slots: number) {}

  get(a: unknown, b: unknown, c: unknown, d: unknown, e: unknown): Uint8Array | undefined {
    const keys = this.keys;
    let k = this.last * 5;
    if (keys[k] === a && keys[k + 1] === b && keys[k + 2] === c && keys[k + 3] === d && keys[k + 4] === e)
      return this.bytes[this.last];
    k = 0;
    for (let slot = 0; slot < this.bytes.length; slot++, k += 5) {
      if (keys[k] === a && keys[k + 1] === b && keys[k + 2] === c && keys[k + 3] === d && keys[k + 4] === e) {
        this.last = slot;
        return this.bytes[slot];
      }
    }
    return undefined;
  }

  set(a: unknown, b: unknown, c: unknown, d: unknown, e: unknown, text: string): Uint8Array {
    const slot = this.next;
    this.next = (slot + 1) % this.slots;
    this.last = slot;
    const k = slot * 5;
    this.keys[k] = a;
    this.keys[k + 1] = b;
    this.keys[k + 2] = c;
    this.keys[k + 3] = d;
    this.keys[k + 4] = e;
    const bytes = ascii(text);
    this.bytes[slot] = bytes;
    return bytes;
  }
}

/** An integer field's text (`null` too), or undefined for what core's path must write. */
function intText(value: unknown): string | undefined {
  if (value === null) return "null";
  return typeof value === "number" && Number.isSafeInteger(value) ? String(value) : undefined;
}

/** Bytes of one arena of kept copies (see `Arena`). */
const ARENA_BYTES = 64 << 10;

/**
 * Kept copies of encoded bytes, as views into a shared buffer: a fresh `Uint8Array` per copy would
 * allocate a backing store each time (costly inside a training step). A full arena is replaced; views
 * into the old one stay valid, and it is freed once none is left.
 */
class Arena {
  private buffer = new Uint8Array(ARENA_BYTES);
  private used = 0;

  /** A copy of `out[from, to)` (a Buffer's `slice` would be a view of memory about to be reused). */
  keep(out: Uint8Array, from: number, to: number): Uint8Array {
    const length = to - from;
    if (this.used + length > this.buffer.length) {
      this.buffer = new Uint8Array(Math.max(ARENA_BYTES, length));
      this.used = 0;
    }
    const start = this.used;
    const buffer = this.buffer;
    for (let i = 0; i < length; i++) buffer[start + i] = out[from + i]!;
    this.used = start + length;
    return buffer.subarray(start, start + length);
  }
}

/** Keys that sort differently by UTF-16 unit and by code point need core's slow path. */
const ASTRAL = /[\ud800-\udfff]/;

const NEVER_EQUAL = Symbol("never equal");

/** One metadata key set (in the record's own key order) and what the last record of it held. */
class MetadataShape {
  /** Key indices in sorted (Python) order. */
  readonly order: number[];
  /** `{"key": ` then `, "key": `, in sorted order. */
  readonly prefixes: Uint8Array[];
  /** What each value is compared by against the previous record's (see `comparable`). */
  readonly lastValues: unknown[];
  /** The whole object's bytes while the values stay the same; null until they repeat once. */
  lastBytes: Uint8Array | null = null;
  /**
   * Per key (sorted order), the bytes of its prefix and value while that value stays the same; null
   * until it repeats once. A phase boundary changes `phase_scope` and keeps the dozen other keys.
   */
  readonly entryBytes: (Uint8Array | null)[];
  /** Per key (sorted order), how many records in a row have repeated its value (capped). */
  readonly entryRepeats: Uint8Array;

  constructor(readonly keys: string[]) {
    const order = keys
      .map((_, index) => index)
      .sort((a, b) => (keys[a]! < keys[b]! ? -1 : keys[a]! > keys[b]! ? 1 : 0));
    this.order = order;
    this.prefixes = order.map((index, position) =>
      ascii(`${position === 0 ? "{" : ", "}${pythonJsonString(keys[index]!)}: `),
    );
    this.lastValues = new Array(keys.length).fill(NEVER_EQUAL);
    this.entryBytes = new Array(keys.length).fill(null);
    this.entryRepeats = new Uint8Array(keys.length);
  }

  matches(keys: string[]): boolean {
    const known = this.keys;
    if (keys.length !== known.length) return false;
    for (let i = 0; i < keys.length; i++) if (keys[i] !== known[i]) return false;
    return true;
  }
}

/** Metadata key sets remembered at once (samples, phase boundaries, and a few more). */
const SHAPES = 8;
/** Contexts remembered for one collector (phase paths × enter/exit, alerts); beyond it, start over. */
const MAX_CONTEXT_RUNS = 1024;

/**
 * What a metadata value is compared by against the previous record's: itself for primitives, one
 * token for every empty array (tracker records carry `collector_partial_fields: []`), and a token
 * equal to nothing for other objects (they may have changed in place) and float-marked values.
 */
function comparable(value: JsonValue | undefined, isFloat: boolean): unknown {
  if (isFloat) return NEVER_EQUAL;
  if (typeof value !== "object" || value === null) return value;
  return FlatSnapshot.of(value) ?? NEVER_EQUAL;
}

/** Whether `value` would be written as the value `comparable` returned `last` for. */
function equalsLast(value: unknown, last: unknown): boolean {
  if (value === last) return true;
  if (typeof value !== "object" || value === null) return false;
  return last instanceof FlatSnapshot && last.matches(value);
}

/** A small object or array of plain scalars (collector health by collector, reasons, `[]`), by value. */
class FlatSnapshot {
  private constructor(
    private readonly keys: string[] | null,
    private readonly values: unknown[],
  ) {}

  static of(value: object): FlatSnapshot | null {
    if (FLOAT_KEYS in value) return null;
    const values: unknown[] = [];
    if (Array.isArray(value)) {
      if (value.length > MAX_FLAT) return null;
      for (let i = 0; i < value.length; i++) {
        if (!isScalar(value[i])) return null;
        values.push(value[i]);
      }
      return new FlatSnapshot(null, values);
    }
    const proto = Object.getPrototypeOf(value) as unknown;
    if (proto !== Object.prototype && proto !== null) return null;
    const keys: string[] = [];
    for (const key in value) {
      const item = (value as JsonObject)[key];
      if (keys.length === MAX_FLAT || !isScalar(item)) return null;
      keys.push(key);
      values.push(item);
    }
    return new FlatSnapshot(keys, values);
  }

  matches(value: object): boolean {
    const { keys, values } = this;
    if (FLOAT_KEYS in value) return false;
    if (keys === null) {
      if (!Array.isArray(value) || value.length !== values.length) return false;
      for (let i = 0; i < values.length; i++) if (value[i] !== values[i]) return false;
      return true;
    }
    if (Array.isArray(value)) return false;
    const proto = Object.getPrototypeOf(value) as unknown;
    if (proto !== Object.prototype && proto !== null) return false;
    let i = 0;
    for (const key in value) {
      if (i === keys.length || key !== keys[i] || (value as JsonObject)[key] !== values[i]) return false;
      i++;
    }
    return i === keys.length;
  }
}

/** Entries a value may have to be compared by value (beyond it, it is written every time). */
const MAX_FLAT = 16;

/** A value written the same whenever it is `===` (NaN is not, and is simply written again). */
function isScalar(value: unknown): boolean {
  const type = typeof value;
  return type === "string" || type === "number" || type === "boolean" || value === null;
}

type FloatMarked = { [FLOAT_KEYS]?: Set<string | number> };

const OTHER_KEYS = 0;
const CHANGED_VALUES = 1;
const SAME_VALUES = 2;

/**
 * Reads the metadata's values into `values` (in key order) if its keys are the shape's: says
 * whether they are (`OTHER_KEYS` if not) and whether every value equals the last record's.
 */
function scanMetadata(shape: MetadataShape, metadata: JsonObject, values: unknown[]): number {
  const keys = shape.keys;
  const last = shape.lastValues;
  const count = keys.length;
  let same = true;
  let i = 0;
  for (const key in metadata) {
    if (i === count || key !== keys[i]) return OTHER_KEYS;
    const value = metadata[key];
    values[i] = value;
    if (same && !equalsLast(value, last[i])) same = false;
    i++;
  }
  if (i !== count) return OTHER_KEYS;
  return same ? SAME_VALUES : CHANGED_VALUES;
}

/**
 * Encodes records exactly as `encodeTelemetryRecord` (the bytes Python's
 * `json.dumps(record, sort_keys=True)` writes), faster for the writer's stream of similar records:
 * `encodeInto` writes the line's bytes straight into the caller's buffer (integers digit by digit,
 * key names and repeated runs of fields copied as bytes), metadata key orders are sorted once per key
 * set (several sets are remembered: a tracker alternates samples and phase boundaries), and the
 * phase recorder's `phase_scope` object has its own template. Anything unusual (astral keys,
 * `undefined` values, integers beyond 2^53) goes through core's `encodeTelemetryRecord`.
 */
export class TelemetryLineEncoder {
  private readonly arena = new Arena();
  // Runs of the line between the counters that change with every record (see encodeInto).
  private activeRun: Uint8Array | null = null;
  private activeKey: number | null = null;
  private changeRun: Uint8Array | null = null;
  private changeKey: number | null = null;
  private inactiveKey: number | null = null;
  /**
   * `collector` + `context` runs by context, for the current collector. A map, not a RunCache: a
   * training step cycles through more contexts (one per phase path and action) than a scan can hold.
   */
  private collectorRuns = new Map<string | null, Uint8Array>();
  private runsCollector: string | null = null;
  private deviceRun: Uint8Array | null = null;
  private deviceKey = 0;
  private totalKey: number | null = null;
  private readonly identityRuns = new RunCache(4);
  private readonly tailRuns = new RunCache(2);
  private worldRun: Uint8Array | null = null;
  private worldKey = 0;
  private readonly shapes: MetadataShape[] = [];
  private lastShape: MetadataShape | null = null;
  /** The current record's metadata values, in its key order. */
  private readonly values: unknown[] = [];
  private nextShape = 0;
  private scratch: Buffer | null = null;

  /** The record's line (no newline), as `encodeTelemetryRecord` writes it. */
  encode(record: TelemetryEvent): string {
    this.scratch ??= Buffer.allocUnsafeSlow(64 << 10);
    const end = this.encodeInto(record, this.scratch, 0);
    if (end < 0) return encodeTelemetryRecord(record);
    return this.scratch.toString("latin1", 0, end);
  }

  /**
   * Writes the record's line (no newline; ASCII, so one byte per character) into `out` at `offset`
   * and returns the offset after it; returns -1 when `out` lacks room (keep about 1 KiB beyond the
   * line free) or the record needs core's general encoder (then call `encodeTelemetryRecord`). Bytes
   * after `offset` may have been overwritten either way. Throws what core's encoder throws for
   * values that are not JSON.
   */
  encodeInto(record: TelemetryEvent, out: Uint8Array, offset: number): number {
    const version = record.schema_version;
    if ((version !== 3 && version !== 4) || offset + MARGIN > out.length) return -1;
    // The line is cut into runs of fields that rarely change (kept as bytes, keyed by their values)
    // and the counters and timestamp that change with every sample (written digit by digit). Numeric
    // keys are compared here, not in a call: a double passed to a call may be boxed (allocated).
    const active = record.allocator_active_bytes;
    if (active !== this.activeKey || this.activeRun === null) {
      const text = intText(active);
      if (text === undefined) return -1;
      this.activeKey = active;
      this.activeRun = ascii(`${P.allocator_active_bytes}${text}${P.allocator_allocated_bytes}`);
    }
    let run = this.activeRun;
    out.set(run, offset);
    let pos = offset + run.length;
    pos = putCounterField(out, pos, record.allocator_allocated_bytes);
    if (pos < 0) return -1;

    const { allocator_change_bytes: change, allocator_inactive_bytes: inactive } = record;
    if (change !== this.changeKey || inactive !== this.inactiveKey || this.changeRun === null) {
      const changeText = intText(change);
      const inactiveText = intText(inactive);
      if (changeText === undefined || inactiveText === undefined) return -1;
      this.changeKey = change;
      this.inactiveKey = inactive;
      this.changeRun = ascii(
        `${P.allocator_change_bytes}${changeText}${P.allocator_inactive_bytes}${inactiveText}${P.allocator_reserved_bytes}`,
      );
    }
    run = this.changeRun;
    out.set(run, pos);
    pos += run.length;
    pos = putCounterField(out, pos, record.allocator_reserved_bytes);
    if (pos < 0) return -1;

    const { collector, context } = record;
    if (collector !== this.runsCollector || this.collectorRuns.size >= MAX_CONTEXT_RUNS) {
      this.collectorRuns = new Map();
      this.runsCollector = collector;
    }
    let collectorRun = this.collectorRuns.get(context);
    if (collectorRun === undefined) {
      collectorRun = ascii(
        `${P.collector}${pythonJsonString(collector)}${P.context}${context === null ? "null" : pythonJsonString(context)}${P.device_free_bytes}`,
      );
      this.collectorRuns.set(context, collectorRun);
    }
    run = collectorRun;
    pos = putBytes(out, pos, run);
    if (pos < 0) return -1;
    pos = putCounterField(out, pos, record.device_free_bytes);
    if (pos < 0) return -1;

    const { device_id: deviceId, device_total_bytes: total } = record;
    if (deviceId !== this.deviceKey || total !== this.totalKey || this.deviceRun === null) {
      const deviceText = intText(deviceId);
      const totalText = intText(total);
      if (deviceText === undefined || totalText === undefined) return -1;
      this.deviceKey = deviceId;
      this.totalKey = total;
      this.deviceRun = ascii(
        `${P.device_id}${deviceText}${P.device_total_bytes}${totalText}${P.device_used_bytes}`,
      );
    }
    run = this.deviceRun;
    out.set(run, pos);
    pos += run.length;
    pos = putCounterField(out, pos, record.device_used_bytes);
    if (pos < 0) return -1;

    const { event_type: eventType, host, job_id: jobId, local_rank: localRank } = record;
    let identity = this.identityRuns.get(eventType, host, jobId, localRank, 0);
    if (identity === undefined) {
      const rankText = intText(localRank);
      if (rankText === undefined) return -1;
      identity = this.identityRuns.set(
        eventType,
        host,
        jobId,
        localRank,
        0,
        `${P.event_type}${pythonJsonString(eventType)}${P.host}${pythonJsonString(host)}` +
          `${P.job_id}${jobId === null ? "null" : pythonJsonString(jobId)}${P.local_rank}${rankText}${P.metadata}`,
      );
    }
    pos = putBytes(out, pos, identity);
    if (pos < 0) return -1;

    pos = this.putMetadata(out, pos, record.metadata);
    if (pos < 0) return -1;

    const { pid, rank, sampling_interval_ms: interval, session_id: sessionId } = record;
    let tail = this.tailRuns.get(pid, rank, interval, version, sessionId);
    if (tail === undefined) {
      const pidText = intText(pid);
      const rankText = intText(rank);
      const intervalText = intText(interval);
      if (pidText === undefined || rankText === undefined || intervalText === undefined) return -1;
      tail = this.tailRuns.set(
        pid,
        rank,
        interval,
        version,
        sessionId,
        `${P.pid}${pidText}${P.rank}${rankText}${P.sampling_interval_ms}${intervalText}` +
          `${P.schema_version}${version}${P.session_id}${pythonJsonString(sessionId)}${P.timestamp_ns}`,
      );
    }
    pos = putBytes(out, pos, tail);
    if (pos < 0) return -1;

    const ts = record.timestamp_ns as bigint | number;
    if (typeof ts === "bigint") {
      pos = ts >= 0n && ts < TWO_TO_64 ? putUint64(out, pos, ts) : putText(out, pos, ts.toString());
      if (pos < 0) return -1;
    } else if (Number.isSafeInteger(ts)) {
      COUNTER[0] = ts;
      pos = putCounter(out, pos);
    } else {
      return -1;
    }
    const worldSize = record.world_size;
    if (worldSize !== this.worldKey || this.worldRun === null) {
      const text = intText(worldSize);
      if (text === undefined) return -1;
      this.worldKey = worldSize;
      this.worldRun = ascii(`${P.world_size}${text}${CANONICAL_END}`);
    }
    run = this.worldRun;
    out.set(run, pos);
    return pos + run.length;
  }

  /** The metadata object's bytes; -1 to let core encode the whole record. */
  private putMetadata(out: Uint8Array, pos: number, metadata: JsonObject): number {
    if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) return -1;
    // `for in` reads the values through V8's key cache (much faster than `metadata[key]`); it
    // would also list inherited keys, which Object.keys (core's encoder) does not.
    const proto = Object.getPrototypeOf(metadata) as unknown;
    if (proto !== Object.prototype && proto !== null) return -1;
    const values = this.values;
    let shape = this.lastShape;
    let state = shape === null ? OTHER_KEYS : scanMetadata(shape, metadata, values);
    if (state === OTHER_KEYS) {
      const keys = Object.keys(metadata);
      if (keys.length === 0) {
        out[pos] = 0x7b;
        out[pos + 1] = 0x7d;
        return pos + 2;
      }
      shape = this.shapeOf(keys);
      if (shape === null) return -1;
      this.lastShape = shape;
      state = scanMetadata(shape, metadata, values);
      if (state === OTHER_KEYS) return -1;
    }
    const marks = (metadata as FloatMarked)[FLOAT_KEYS];
    const same = state === SAME_VALUES && marks === undefined;
    // A tracker's metadata (backend, collector health, capabilities) is mostly the same from one
    // record to the next: then so are its bytes.
    if (same && shape!.lastBytes !== null) return putBytes(out, pos, shape!.lastBytes);

    const { keys, order, prefixes, lastValues, entryBytes, entryRepeats } = shape!;
    // Values are about to change one by one: the old bytes no longer match them.
    shape!.lastBytes = null;
    const start = pos;
    for (let j = 0; j < order.length; j++) {
      const i = order[j]!;
      const value = values[i] as JsonValue | undefined;
      const isFloat = marks?.has(keys[i]!) === true;
      const repeated = !isFloat && equalsLast(value, lastValues[i]);
      const cached = entryBytes[j]!;
      if (repeated && cached !== null) {
        pos = putBytes(out, pos, cached);
        if (pos < 0) return -1;
        continue;
      }
      const entryStart = pos;
      pos = putBytes(out, pos, prefixes[j]!);
      if (pos < 0) return -1;
      pos = this.putValue(out, pos, keys[i]!, value, isFloat);
      if (pos < 0) return -1;
      if (repeated) {
        // Kept once the value has repeated twice: a key whose value changes every record or two (tensor
        // counts at phase boundaries) never pays the copy.
        if (entryRepeats[j]! >= 1) entryBytes[j] = this.arena.keep(out, entryStart, pos);
        else entryRepeats[j] = 1;
      } else {
        entryBytes[j] = null;
        entryRepeats[j] = 0;
        lastValues[i] = comparable(value, isFloat);
      }
    }
    out[pos++] = 0x7d;
    // Keep the bytes once the values repeated (a stream whose values keep changing never pays the
    // copy). A copy: a Buffer's `slice` would be a view of memory about to be reused.
    if (same) shape!.lastBytes = this.arena.keep(out, start, pos);
    return pos;
  }

  private putValue(
    out: Uint8Array,
    pos: number,
    key: string,
    value: JsonValue | undefined,
    isFloat: boolean,
  ): number {
    switch (typeof value) {
      case "string":
        return putString(out, pos, value);
      case "number":
        if (!isFloat && Number.isSafeInteger(value)) return putInt(out, pos, value);
        return putText(out, pos, pythonJsonNumber(value, isFloat));
      case "boolean":
        return putText(out, pos, value ? "true" : "false");
      case "bigint":
        return putText(out, pos, value.toString());
      case "object": {
        if (value === null) return putNull(out, pos);
        if (Array.isArray(value)) {
          if (value.length === 0 && !(FLOAT_KEYS in value)) {
            out[pos] = 0x5b;
            out[pos + 1] = 0x5d;
            return pos + 2;
          }
        } else {
          const end = key === "phase_scope" ? putPhaseScope(out, pos, value) : putFlatObject(out, pos, value);
          if (end !== -2) return end;
        }
        return putText(out, pos, stringifyJson(value, { sortKeys: true }));
      }
      default:
        // undefined (core skips the key) or not JSON at all: core decides.
        return -1;
    }
  }

  /** The remembered shape of this key set, learnt now if new; null for keys core must sort. */
  private shapeOf(keys: string[]): MetadataShape | null {
    for (const shape of this.shapes) if (shape.matches(keys)) return shape;
    for (const key of keys) if (ASTRAL.test(key)) return null;
    const shape = new MetadataShape(keys);
    this.shapes[this.nextShape] = shape;
    this.nextShape = (this.nextShape + 1) % SHAPES;
    return shape;
  }
}

/**
 * A flat object (scalar values, no float marks, keys within the BMP: phase attributes, collector
 * health by collector) as `stringifyJson(value, { sortKeys: true })` writes it, without building
 * the string: -2 for any other value, -1 for no room.
 */
function putFlatObject(out: Uint8Array, pos: number, value: JsonObject): number {
  if (FLOAT_KEYS in value) return -2;
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) return -2;
  const keys = Object.keys(value);
  if (keys.length > MAX_FLAT) return -2;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    if (!isScalar(value[key]) || ASTRAL.test(key)) return -2;
  }
  // Without surrogates, UTF-16 unit order (the default sort) is Python's code point order.
  if (keys.length > 1) keys.sort();
  out[pos++] = 0x7b;
  for (let i = 0; i < keys.length; i++) {
    if (i > 0) {
      out[pos] = 0x2c;
      out[pos + 1] = 0x20;
      pos += 2;
    }
    const key = keys[i]!;
    pos = putString(out, pos, key);
    if (pos < 0) return -1;
    out[pos] = 0x3a;
    out[pos + 1] = 0x20;
    pos += 2;
    const item = value[key] as string | number | boolean | null;
    if (typeof item === "string") pos = putString(out, pos, item);
    else if (typeof item === "number")
      pos = Number.isSafeInteger(item)
        ? putInt(out, pos, item)
        : putText(out, pos, pythonJsonNumber(item, false));
    else if (item === null) pos = putNull(out, pos);
    else pos = putText(out, pos, item ? "true" : "false");
    if (pos < 0) return -1;
  }
  out[pos] = 0x7d;
  return pos + 1;
}

/**
 * `metadata.phase_scope` as the phase recorder writes it (the shape `isRecorderPhaseScope` checks,
 * as core's string template does): -2 for any other shape (the generic writer handles it), -1 for no room.
 */
function putPhaseScope(out: Uint8Array, pos: number, scope: JsonObject): number {
  if (!isRecorderPhaseScope(scope)) return -2;
  const { action, attributes, depth, name, parent_scope_id: parent, scope_id: scopeId } = scope;
  const { sequence, thread_id: threadId, thread_name: threadName } = scope;
  const path = scope.path as string[];

  if (action === "enter") pos = putBytes(out, pos, ACTION_ENTER);
  else if (action === "exit") pos = putBytes(out, pos, ACTION_EXIT);
  else {
    pos = putText(out, pos, '{"action": ');
    if (pos >= 0) pos = putString(out, pos, action as string);
  }
  if (pos < 0) return -1;
  if (attributes !== undefined) {
    out.set(K_ATTRIBUTES, pos);
    pos += K_ATTRIBUTES.length;
    const end = putFlatObject(out, pos, attributes as JsonObject);
    pos = end !== -2 ? end : putText(out, pos, stringifyJson(attributes, { sortKeys: true }));
    if (pos < 0) return -1;
  }
  out.set(K_DEPTH, pos);
  pos = putInt(out, pos + K_DEPTH.length, depth as number);
  out.set(K_NAME, pos);
  pos = putString(out, pos + K_NAME.length, name as string);
  if (pos < 0) return -1;
  out.set(K_PARENT, pos);
  pos += K_PARENT.length;
  pos = parent === null ? putNull(out, pos) : putString(out, pos, parent as string);
  if (pos < 0) return -1;
  out.set(K_PATH, pos);
  pos += K_PATH.length;
  for (let i = 0; i < path.length; i++) {
    if (i > 0) {
      out[pos] = 0x2c;
      out[pos + 1] = 0x20;
      pos += 2;
    }
    pos = putString(out, pos, path[i]!);
    if (pos < 0) return -1;
  }
  out.set(K_SCOPE_ID, pos);
  pos = putString(out, pos + K_SCOPE_ID.length, scopeId as string);
  if (pos < 0) return -1;
  out.set(K_SEQUENCE, pos);
  pos = putInt(out, pos + K_SEQUENCE.length, sequence as number);
  out.set(K_THREAD_ID, pos);
  pos = putInt(out, pos + K_THREAD_ID.length, threadId as number);
  out.set(K_THREAD_NAME, pos);
  pos = putString(out, pos + K_THREAD_NAME.length, threadName as string);
  if (pos < 0) return -1;
  out[pos] = 0x7d;
  return pos + 1;
}
