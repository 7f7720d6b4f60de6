/**
 * A rank part's phase boundaries, kept as the index stores them from the moment they are scanned:
 * columns of doubles and one byte text of timestamps and scope JSON. A cold scan of a job's 32,000
 * boundaries as objects (a BigInt timestamp, a scope string, then their encoding for the index)
 * touched ~47 MB of fresh memory, about 12,000 page faults (on a VM ~15 us each); as columns and
 * bytes copied from the read buffer it touches ~10 MB. Objects are made only when an analysis reads
 * the boundaries (`list`).
 */
import { type JsonValue, parseJson, stringifyJson } from "@stormlog/core";
import { FLOAT_KEYS } from "@stormlog/core/internal";

/** A phase boundary record with the counters it carries. NaN marks a null counter. */
export interface BoundaryEntry {
  readonly timestampNs: bigint;
  readonly eventType: string;
  /** `metadata.phase_scope` as recorded (validated later by the replay index). */
  readonly scope: JsonValue;
  /** `scope`'s JSON text as read from the line, when the scan parsed it exactly (the index stores it as is). */
  readonly scopeJson: string | null;
  /** Line within its segment, or its piece of one (storage order: see `SegmentPiece.lineOffset`). */
  readonly line: number;
  readonly allocated: number;
  readonly reserved: number;
  readonly used: number;
  /** `metadata.tfjs_num_tensors` on the boundary record, NaN when absent. */
  readonly tensors: number;
  /** `device_total_bytes` on the boundary record, NaN when null. */
  readonly total: number;
  /** `device_id` of the record: the device whose counter tracks a boundary reading feeds (the Perfetto export). */
  readonly deviceId: number;
  /**
   * `metadata.phase_counters === "boundary_read"`: the counters were read at the boundary itself.
   * Otherwise (`"last_sample"`, or absent as the Python Stormlog writes) they repeat the last sample.
   */
  readonly boundaryRead: boolean;
}

/** line, allocated, reserved, used, tensors, total, boundaryRead, deviceId. */
type BoundaryFields = [number, number, number, number, number, number, boolean, number];

/**
 * A stored boundary's fields but its scope. Classes, not object literals: V8 moves the allocation of
 * a literal whose objects often outlive a young-generation collection (these live as long as their
 * rank is analysed) straight to the old generation, which is collected rarely, so memory grew with
 * the input.
 */
abstract class StoredBoundary {
  constructor(
    readonly timestampNs: bigint,
    readonly eventType: string,
    readonly line: number,
    readonly allocated: number,
    readonly reserved: number,
    readonly used: number,
    readonly tensors: number,
    readonly total: number,
    readonly boundaryRead: boolean,
    readonly deviceId: number,
  ) {}
}

/**
 * A boundary whose scope is kept as the JSON text read from its line, exact for `JSON.parse` (the
 * scan's fast path takes no floats or long integers there), and parsed when first read.
 */
export class TextScopeBoundary extends StoredBoundary implements BoundaryEntry {
  #scope: JsonValue | undefined = undefined;
  readonly scopeJson: string;

  constructor(timestampNs: bigint, eventType: string, scopeJson: string, ...fields: BoundaryFields) {
    super(timestampNs, eventType, ...fields);
    this.scopeJson = scopeJson;
  }

  get scope(): JsonValue {
    if (this.#scope === undefined) this.#scope = JSON.parse(this.scopeJson) as JsonValue;
    return this.#scope;
  }
}

/** A boundary whose scope was parsed already (read back as JSON the scan did not take as text). */
class ParsedScopeBoundary extends StoredBoundary implements BoundaryEntry {
  readonly scopeJson = null;
  readonly scope: JsonValue;

  constructor(timestampNs: bigint, eventType: string, scope: JsonValue, ...fields: BoundaryFields) {
    super(timestampNs, eventType, ...fields);
    this.scope = scope;
  }
}

/**
 * Columns of a rank's boundaries, each `count` long: flags (bit 0: an exit; bits 1-2: how the
 * scope's text reads, `SCOPE_PLAIN` JSON, `SCOPE_EXACT` JSON (`parseJson`), `SCOPE_TEXT` the text read
 * from the line, parsed when first read; bit 3: counters read at the boundary), line, allocated,
 * reserved, used, tensors, total (NaN: null), device id, and where the boundary's timestamp (decimal
 * digits) and its scope's text end in the rank's boundary text, where they follow one another.
 */
export const BOUNDARY_COLUMNS = 10;
const BOUNDARY_EXIT = 1;
const BOUNDARY_READ = 8;
const SCOPE_PLAIN = 0;
const SCOPE_EXACT = 1;
const SCOPE_TEXT = 2;
const C_FLAGS = 0;
const C_LINE = 1;
const C_ALLOCATED = 2;
const C_RESERVED = 3;
const C_USED = 4;
const C_TENSORS = 5;
const C_TOTAL = 6;
const C_DEVICE = 7;
const C_TS_END = 8;
const C_SCOPE_END = 9;

/** True when `JSON.stringify`/`JSON.parse` keep the value exactly (no bigint, no float marks). */
function plainJson(value: JsonValue): boolean {
  if (typeof value === "bigint") return false;
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) {
    if ((value as unknown as Record<symbol, unknown>)[FLOAT_KEYS] !== undefined) return false;
    return value.every(plainJson);
  }
  if (typeof value === "object" && value !== null) {
    if ((value as unknown as Record<symbol, unknown>)[FLOAT_KEYS] !== undefined) return false;
    for (const key in value) if (!plainJson(value[key]!)) return false;
  }
  return true;
}

/** A finite counter as it is, anything else NaN (null). */
const finite = (value: number): number => (Number.isFinite(value) ? value : Number.NaN);

/** Decimal digits of a whole number below 2^53. */
function digitCount(value: number): number {
  let count = 1;
  for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) count++;
  return count;
}

/**
 * Writes `value`'s decimal digits (a whole number below 2^53), at least `width` of them (zeros
 * first), into `into` at `at`; where they end. Written in place: as strings, two per boundary,
 * they were a good part of a scan's garbage.
 */
function writeDigits(into: Uint8Array, at: number, value: number, width: number): number {
  const end = at + Math.max(width, digitCount(value));
  let rest = value;
  for (let k = end - 1; k >= at; k--) {
    const next = Math.floor(rest / 10);
    into[k] = 0x30 + (rest - next * 10);
    rest = next;
  }
  return end;
}

/** Most digits a fast-read timestamp takes: its seconds (below 2^53: 16) and 9 of nanoseconds. */
const TIMESTAMP_DIGITS_MOST = 25;

/** A rank part's boundaries, in the order they were read (see the file's comment). */
export class BoundaryLog {
  private count = 0;
  /** Column-major by capacity: column c of boundary i is `columns[c * capacity + i]`. */
  private columns: Float64Array;
  private capacity: number;
  private text: Buffer;
  private textLength = 0;
  /** Entries that came as objects (the general path) or whose scope was parsed to check it, by index. */
  private objects: Map<number, BoundaryEntry> | null = null;

  constructor(capacity = 16) {
    this.capacity = capacity;
    this.columns = new Float64Array(capacity * BOUNDARY_COLUMNS);
    this.text = Buffer.allocUnsafe(capacity * 128);
  }

  get length(): number {
    return this.count;
  }

  /**
   * A boundary the fast reader read: its scope's JSON text is `bytes[scopeStart, scopeEnd)`, copied
   * as it is (ASCII: the fast reader takes no other scope text).
   */
  pushRead(
    tsHead: number,
    tsTail: number,
    exit: boolean,
    boundaryRead: boolean,
    line: number,
    allocated: number,
    reserved: number,
    used: number,
    tensors: number,
    total: number,
    deviceId: number,
    bytes: Uint8Array,
    scopeStart: number,
    scopeEnd: number,
  ): void {
    const i = this.row();
    this.reserveText(TIMESTAMP_DIGITS_MOST + (scopeEnd - scopeStart));
    const text = this.text;
    let at = this.textLength;
    at =
      tsHead === 0
        ? writeDigits(text, at, tsTail, 1)
        : writeDigits(text, writeDigits(text, at, tsHead, 1), tsTail, 9);
    this.set(i, C_TS_END, at);
    text.set(bytes.subarray(scopeStart, scopeEnd), at);
    at += scopeEnd - scopeStart;
    this.set(i, C_SCOPE_END, at);
    this.textLength = at;
    this.setRow(
      i,
      (exit ? BOUNDARY_EXIT : 0) | (SCOPE_TEXT << 1) | (boundaryRead ? BOUNDARY_READ : 0),
      line,
      allocated,
      reserved,
      used,
      tensors,
      total,
      deviceId,
    );
  }

  /** A boundary given whole (the general path): stored as the index stores it, and listed as given. */
  push(entry: BoundaryEntry): void {
    const i = this.row();
    let scope: string;
    let how: number;
    if (entry.scopeJson !== null) {
      scope = entry.scopeJson;
      how = SCOPE_TEXT;
    } else if (plainJson(entry.scope)) {
      scope = JSON.stringify(entry.scope);
      how = SCOPE_PLAIN;
    } else {
      scope = stringifyJson(entry.scope);
      how = SCOPE_EXACT;
    }
    const digits = `${entry.timestampNs}`;
    // A scope's text read from a line is ASCII; another scope's JSON may not be.
    const scopeBytes = how === SCOPE_TEXT ? scope.length : Buffer.byteLength(scope, "utf8");
    this.reserveText(digits.length + scopeBytes);
    let at = this.textLength;
    at += this.text.write(digits, at, "latin1");
    this.set(i, C_TS_END, at);
    at += this.text.write(scope, at, how === SCOPE_TEXT ? "latin1" : "utf8");
    this.set(i, C_SCOPE_END, at);
    this.textLength = at;
    this.setRow(
      i,
      (entry.eventType === "phase_enter" ? 0 : BOUNDARY_EXIT) |
        (how << 1) |
        (entry.boundaryRead ? BOUNDARY_READ : 0),
      entry.line,
      finite(entry.allocated),
      finite(entry.reserved),
      finite(entry.used),
      finite(entry.tensors),
      finite(entry.total),
      entry.deviceId,
    );
    this.objects ??= new Map();
    this.objects.set(i, entry);
  }

  /**
   * The boundaries as objects, made anew at each call: a rank's are read while it is analysed, and
   * kept they held every rank's scopes (parsed) in memory until the report was done.
   */
  list(): BoundaryEntry[] {
    const n = this.count;
    const listed: BoundaryEntry[] = new Array(n);
    let from = 0;
    for (let i = 0; i < n; i++) {
      const tsEnd = this.get(i, C_TS_END);
      const scopeEnd = this.get(i, C_SCOPE_END);
      const kept = this.objects?.get(i);
      if (kept !== undefined) {
        listed[i] = kept;
        from = scopeEnd;
        continue;
      }
      const timestampNs = BigInt(this.text.toString("latin1", from, tsEnd));
      // Only text scopes are not kept as objects (see `adopt`).
      listed[i] = new TextScopeBoundary(
        timestampNs,
        this.eventType(i),
        this.text.toString("latin1", tsEnd, scopeEnd),
        ...this.fields(i),
      );
      from = scopeEnd;
    }
    return listed;
  }

  /** The index's form: `BOUNDARY_COLUMNS` columns of `count` each, and the text they point into (views when they fit exactly). */
  encoded(): { columns: Float64Array; text: Uint8Array } {
    const n = this.count;
    let columns = this.columns;
    if (n !== this.capacity) {
      columns = new Float64Array(n * BOUNDARY_COLUMNS);
      for (let c = 0; c < BOUNDARY_COLUMNS; c++)
        columns.set(this.columns.subarray(c * this.capacity, c * this.capacity + n), c * n);
    }
    return { columns, text: this.text.subarray(0, this.textLength) };
  }

  /**
   * Boundaries read back from the index: `columns` (as `encoded` writes them) and their text,
   * `bytes[start, end)`, kept as views (as the samples' columns are: a boundary added later copies
   * them first); null when they do not read as written (a damaged file).
   */
  static adopt(columns: Float64Array, bytes: Buffer, start: number, end: number): BoundaryLog | null {
    const n = columns.length / BOUNDARY_COLUMNS;
    const log = new BoundaryLog(0);
    log.columns = columns;
    log.capacity = n;
    log.count = n;
    log.text = bytes.subarray(start, end);
    log.textLength = end - start;
    let from = 0;
    for (let i = 0; i < n; i++) {
      const flags = log.get(i, C_FLAGS);
      const tsEnd = log.get(i, C_TS_END);
      const scopeEnd = log.get(i, C_SCOPE_END);
      if (!(tsEnd > from && scopeEnd > tsEnd && scopeEnd <= log.textLength)) return null;
      const digits = log.text.toString("latin1", from, tsEnd);
      if (!/^-?\d+$/.test(digits)) return null;
      const how = (flags >> 1) & 3;
      if (how !== SCOPE_TEXT) {
        // Parsed now, so that a damaged text rejects the file here rather than in an analysis.
        let scope: JsonValue;
        try {
          const scopeText = log.text.toString("utf8", tsEnd, scopeEnd);
          scope = how === SCOPE_EXACT ? parseJson(scopeText) : (JSON.parse(scopeText) as JsonValue);
        } catch {
          return null;
        }
        log.objects ??= new Map();
        log.objects.set(
          i,
          new ParsedScopeBoundary(BigInt(digits), log.eventType(i), scope, ...log.fields(i)),
        );
      }
      from = scopeEnd;
    }
    return from === log.textLength ? log : null;
  }

  private eventType(i: number): string {
    return (this.get(i, C_FLAGS) & BOUNDARY_EXIT) === 0 ? "phase_enter" : "phase_exit";
  }

  /** Boundary `i`'s fields after its timestamp, type and scope, in the order the boundary classes take them. */
  private fields(i: number): BoundaryFields {
    return [
      this.get(i, C_LINE),
      this.get(i, C_ALLOCATED),
      this.get(i, C_RESERVED),
      this.get(i, C_USED),
      this.get(i, C_TENSORS),
      this.get(i, C_TOTAL),
      (this.get(i, C_FLAGS) & BOUNDARY_READ) !== 0,
      this.get(i, C_DEVICE),
    ];
  }

  /** The next row's index, with room for it. */
  private row(): number {
    if (this.count === this.capacity) {
      const capacity = Math.max(16, this.capacity * 2);
      const columns = new Float64Array(capacity * BOUNDARY_COLUMNS);
      for (let c = 0; c < BOUNDARY_COLUMNS; c++)
        columns.set(this.columns.subarray(c * this.capacity, c * this.capacity + this.count), c * capacity);
      this.columns = columns;
      this.capacity = capacity;
    }
    return this.count++;
  }

  private reserveText(bytes: number): void {
    const needed = this.textLength + bytes;
    if (needed <= this.text.length) return;
    const text = Buffer.allocUnsafe(Math.max(needed, this.text.length * 2));
    this.text.copy(text, 0, 0, this.textLength);
    this.text = text;
  }

  private get(i: number, column: number): number {
    return this.columns[column * this.capacity + i]!;
  }

  private set(i: number, column: number, value: number): void {
    this.columns[column * this.capacity + i] = value;
  }

  private setRow(
    i: number,
    flags: number,
    line: number,
    allocated: number,
    reserved: number,
    used: number,
    tensors: number,
    total: number,
    deviceId: number,
  ): void {
    const columns = this.columns;
    const k = this.capacity;
    columns[C_FLAGS * k + i] = flags;
    columns[C_LINE * k + i] = line;
    columns[C_ALLOCATED * k + i] = allocated;
    columns[C_RESERVED * k + i] = reserved;
    columns[C_USED * k + i] = used;
    columns[C_TENSORS * k + i] = tensors;
    columns[C_TOTAL * k + i] = total;
    columns[C_DEVICE * k + i] = deviceId;
  }
}
