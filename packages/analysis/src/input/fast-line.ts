/**
 * The analysis scan's hot path: reads a canonical v3 sink line (sorted keys, `", "`/`": "`
 * separators, all 23 keys, ASCII) straight from the bytes, without building a record or parsing
 * the metadata into objects. It accepts a subset of what core's `decodeTelemetryLine` accepts and
 * reads the same values; anything else (other layouts, escapes, non-ASCII, float tokens, NaN in
 * metadata, a rule broken) returns false and the caller decodes the line on the general path,
 * which also produces the precise error. The metadata object is validated as JSON byte by byte and
 * its top-level `tfjs_num_tensors` and `phase_counters` are read on the way.
 *
 * A line read in full becomes a template (`LineTemplate`) for the lines after it: a writer repeats
 * everything but its numbers from line to line, so a later line that has the template's bytes
 * between its number tokens is read by comparing those bytes eight at a time and parsing just the
 * numbers, with the same rules as a full read. That loop runs on nearly every line of a scan, so it
 * is WebAssembly (`kernel/line-template.ts`): a cold command runs it compiled from the first line
 * instead of waiting for V8 to optimize it. The scan's runs of plain sample and phase boundary lines go
 * further: the kernel reads line after line in one call (`readRows`), finding each line's end as it
 * matches, and this side adds each sample's row from where the kernel wrote it (`addRow`) and takes
 * a boundary's into the reader's fields (`takeRow`).
 */

import { CANONICAL_PREFIX as P } from "@stormlog/core/internal";
import { LIVE_BY_PHASE_KEY } from "@stormlog/phases/internal";
import {
  type Accumulator,
  exactTimestamp,
  FAST_BOUNDARY,
  FAST_SAMPLE,
  fastLineUse,
  type LineFields,
  type RankPart,
} from "./aggregate.js";
import { LINE_TEMPLATE_WASM } from "./line-kernel.generated.js";

const enc = (text: string): Uint8Array => Uint8Array.from(text, (c) => c.charCodeAt(0));

/**
 * A key literal (8 bytes or more) as 8-byte chunks read as doubles, so that it is compared eight
 * bytes at a time: ASCII bytes never spell a NaN or a negative zero, so equal doubles are equal
 * bytes. The last chunk ends where the literal ends (overlapping the one before it).
 */
interface Literal {
  readonly chunks: Float64Array;
  /** Where each chunk starts in the literal. */
  readonly offsets: Int32Array;
  readonly length: number;
}

/** `text` (8 characters or more) as a `Literal`. */
function literal(text: string): Literal {
  const bytes = enc(text);
  const count = Math.ceil(bytes.length / 8);
  const chunks = new Float64Array(count);
  const offsets = new Int32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < count; i++) {
    offsets[i] = Math.min(8 * i, bytes.length - 8);
    chunks[i] = view.getFloat64(offsets[i]!, true);
  }
  return { chunks, offsets, length: bytes.length };
}

const K_ACTIVE = literal(P.allocator_active_bytes);
const K_ALLOCATED = literal(P.allocator_allocated_bytes);
const K_CHANGE = literal(P.allocator_change_bytes);
const K_INACTIVE = literal(P.allocator_inactive_bytes);
const K_RESERVED = literal(P.allocator_reserved_bytes);
const K_COLLECTOR = literal(P.collector);
const K_CONTEXT = literal(P.context);
const K_FREE = literal(P.device_free_bytes);
const K_DEVICE_ID = literal(P.device_id);
const K_TOTAL = literal(P.device_total_bytes);
const K_USED = literal(P.device_used_bytes);
const K_EVENT_TYPE = literal(P.event_type);
const K_HOST = literal(P.host);
const K_JOB_ID = literal(P.job_id);
const K_LOCAL_RANK = literal(P.local_rank);
const K_METADATA = literal(P.metadata);
const K_PID = literal(P.pid);
const K_RANK = literal(P.rank);
const K_INTERVAL = literal(P.sampling_interval_ms);
const K_SCHEMA_SESSION = literal(`${P.schema_version}3${P.session_id}`);
const K_TIMESTAMP = literal(P.timestamp_ns);
const K_WORLD_SIZE = literal(P.world_size);
const TENSORS_KEY = enc("tfjs_num_tensors");
const SCOPE_KEY = enc("phase_scope");
const COUNTERS_KEY = enc("phase_counters");
const BOUNDARY_READ_VALUE = enc('"boundary_read"');
/** A phase attribution hint's key starts so; the tfjs adapter's birth counts have this key. */
const ORIGIN_PREFIX = enc('"origin_');
const BIRTHS_KEY = enc(`"${LIVE_BY_PHASE_KEY}"`);

/** Values remembered per string field. */
const INTERN_VALUES = 4;

/** An interned string field: the same bytes give back the same string without decoding. */
class InternSlot {
  /** The last few distinct values (event types cycle through a few) and their bytes. */
  private readonly bytes: Uint8Array[] = [];
  private readonly values: string[] = [];
  private next = 0;
  /** Where the string `match` found ends (its closing quote). */
  end = 0;

  /**
   * The remembered value whose bytes start at `start` and are followed by a quote, if any: those
   * bytes passed the caller's checks when they were first read, so this comparison is the whole
   * check.
   */
  match(buf: Uint8Array, start: number): string | undefined {
    const all = this.bytes;
    for (let k = 0; k < all.length; k++) {
      const cached = all[k]!;
      const n = cached.length;
      if (buf[start + n] !== 0x22) continue;
      let i = 0;
      while (i < n && buf[start + i] === cached[i]) i++;
      if (i === n) {
        this.end = start + n;
        return this.values[k];
      }
    }
    return undefined;
  }

  /** The string of `buf[start, end)` (validated ASCII), remembered for `match`. */
  get(buf: Uint8Array, start: number, end: number): string {
    // latin1 decoding of ASCII is exact and makes a flat copy.
    const value = Buffer.from(buf.buffer, buf.byteOffset + start, end - start).toString("latin1");
    const k = this.next;
    this.next = (k + 1) % INTERN_VALUES;
    this.bytes[k] = new Uint8Array(buf.subarray(start, end)); // a copy: the read buffer is reused
    this.values[k] = value;
    return value;
  }
}

// The number fields of a line, in the order they appear, as template slots.
const F_ACTIVE = 0;
const F_ALLOCATED = 1;
const F_CHANGE = 2;
const F_INACTIVE = 3;
const F_RESERVED = 4;
const F_FREE = 5;
const F_DEVICE_ID = 6;
const F_TOTAL = 7;
const F_USED = 8;
const F_LOCAL_RANK = 9;
/** Top-level `metadata.tfjs_num_tensors`, a slot only when an integer of under 16 digits. */
const F_TENSORS = 10;
const F_PID = 11;
const F_RANK = 12;
const F_INTERVAL = 13;
const F_TIMESTAMP = 14;
const F_WORLD_SIZE = 15;
const FIELDS = 16;
/** A row of `readRows` (see ROWS_AT in the kernel): template, head, tail, scope start and end, spare, then the fields. */
const ROW_VALUES = 6 + FIELDS;
const ROW_SCOPE_AT = 3;
const ROW_FIELDS_AT = 6;
/** Rows a template's lines make (T_ROWS in the kernel). */
const ROWS_NONE = 0;
const ROWS_SAMPLE = 1;
const ROWS_BOUNDARY = 2;

// How each field's token is read.
const NULLABLE_COUNT = 0;
const COUNT = 1;
const INT = 2;
const TENSORS = 3;
const TIMESTAMP = 4;
/** Slots of the metadata that no field reads (see `metadataSlots`): checked by the kernel, not read. */
const METADATA_INT = 5;
const STRING_DIGITS = 6;
/** The field of a slot that no field reads. */
const NO_FIELD = 255;
const FIELD_KIND = Uint8Array.of(
  NULLABLE_COUNT, // active
  COUNT, // allocated
  INT, // change
  NULLABLE_COUNT, // inactive
  COUNT, // reserved
  NULLABLE_COUNT, // free
  INT, // device_id
  NULLABLE_COUNT, // total
  COUNT, // used
  COUNT, // local_rank
  TENSORS,
  INT, // pid
  COUNT, // rank
  COUNT, // sampling_interval_ms
  TIMESTAMP,
  COUNT, // world_size
);

/**
 * Templates kept, most matched first: a sink interleaves a few kinds of lines (samples, and each
 * phase's entry and exit).
 */
const TEMPLATES = 16;
/** Slots a template has at most: the line's fields, then its metadata's numbers while there is room. */
const MAX_SLOTS = 63;
/** Longest line kept as a template (a sample line is under 1 KB; a huge line would be copied whole). */
const MAX_TEMPLATE_BYTES = 4096;
/**
 * Lines over which templates must pay their way: within one, once TEMPLATE_SLACK more templates have
 * been made than lines read by one, none is tried or made until the next (a file whose every line
 * differs, in a string or a key, reads as fast as without templates).
 */
const TEMPLATE_WINDOW = 4096;
/** As many as are kept: a job's phase boundaries make a template for each phase's entry and exit before any repeats. */
const TEMPLATE_SLACK = TEMPLATES;

/** The template kernel's compiled module, made on first use; null where WebAssembly is not available. */
let kernelModule: object | null | undefined;

function compiledKernel(): object | null {
  if (kernelModule === undefined) {
    try {
      kernelModule =
        typeof WebAssembly === "undefined"
          ? null
          : new WebAssembly.Module(Buffer.from(LINE_TEMPLATE_WASM, "base64"));
    } catch {
      // `--jitless`, or code generation disallowed: lines are read in full, as exactly, more slowly.
      kernelModule = null;
    }
  }
  return kernelModule;
}

/** The part of the WebAssembly API used here (Node 20's type definitions do not declare it). */
declare const WebAssembly: {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { readonly exports: object };
};

interface KernelExports {
  readonly memory: { readonly buffer: ArrayBuffer };
  readLike(start: number, end: number, template: number): number;
  readRows(start: number, end: number, templates: number): number;
  /** The layout's constants, as globals. */
  readonly [layout: string]: unknown;
}

/**
 * The template kernel (`kernel/line-template.ts`, compiled to WebAssembly): one instance a reader,
 * with its templates, the values it read and, for the scan, the read buffer in its memory.
 */
class LineKernel {
  readonly memory: ArrayBuffer;
  readonly bytes: Uint8Array;
  readonly readLike: (start: number, end: number, template: number) => number;
  readonly readRows: (start: number, end: number, templates: number) => number;
  readonly values: Float64Array;
  /** `readRows`' rows (ROW_VALUES each: see ROW_*). */
  readonly rows: Float64Array;
  /** Where `readRows` stopped. */
  readonly stopAt: Int32Array;
  readonly shifts: Int32Array;
  readonly timestamp: Float64Array;
  readonly chunkAt: number;
  readonly chunkSize: number;
  readonly lineAt: number;
  readonly lineSize: number;
  private readonly templatesAt: number;
  private readonly templateStride: number;
  private readonly layout: (name: string) => number;

  constructor(module: object) {
    const exports = new WebAssembly.Instance(module, {}).exports as unknown as KernelExports;
    const layout = (name: string): number => (exports[name] as { readonly value: number }).value;
    this.layout = layout;
    this.memory = exports.memory.buffer;
    this.bytes = new Uint8Array(this.memory);
    this.readLike = exports.readLike;
    this.readRows = exports.readRows;
    if (layout("MEMORY_END") > this.memory.byteLength)
      throw new Error(
        "line-template kernel: its layout ends past its memory (kernel/build.mjs sets the pages)",
      );
    this.values = new Float64Array(this.memory, layout("VALUES_AT"), FIELDS);
    this.rows = new Float64Array(this.memory, layout("ROWS_AT"), ROW_VALUES * layout("MAX_ROWS"));
    this.stopAt = new Int32Array(this.memory, layout("STOP_AT"), 1);
    this.shifts = new Int32Array(this.memory, layout("SHIFTS_AT"), MAX_SLOTS + 1);
    this.timestamp = new Float64Array(this.memory, layout("HEAD_AT"), 2);
    this.chunkAt = layout("CHUNK_AT");
    this.chunkSize = layout("CHUNK_SIZE");
    this.lineAt = layout("LINE_AT");
    this.lineSize = layout("LINE_SIZE");
    this.templatesAt = layout("TEMPLATES_AT");
    this.templateStride = layout("TEMPLATE_STRIDE");
    if (
      layout("TEMPLATE_SLOTS") < TEMPLATES ||
      layout("MAX_SLOTS") < MAX_SLOTS ||
      this.templateStride - layout("T_BYTES") < MAX_TEMPLATE_BYTES
    )
      throw new Error("line-template kernel: fewer or smaller template places than fast-line.ts keeps");
    // The fields `readRows` checks, and its rows' layout, are numbered as here.
    const checked = [
      ["FIELDS", FIELDS],
      ["ROW_VALUES", ROW_VALUES],
      ["ROWS_NONE", ROWS_NONE],
      ["ROWS_SAMPLE", ROWS_SAMPLE],
      ["ROWS_BOUNDARY", ROWS_BOUNDARY],
      ["F_FREE", F_FREE],
      ["F_TOTAL", F_TOTAL],
      ["F_USED", F_USED],
      ["F_LOCAL_RANK", F_LOCAL_RANK],
      ["F_PID", F_PID],
      ["F_RANK", F_RANK],
      ["F_WORLD_SIZE", F_WORLD_SIZE],
    ] as const;
    for (const [name, value] of checked)
      if (layout(name) !== value) throw new Error(`line-template kernel: ${name} is not ${value}`);
  }

  /** Writes `template` into the kernel's place `slot`. */
  write(slot: number, template: LineTemplate): void {
    const at = this.templatesAt + slot * this.templateStride;
    const view = new DataView(this.memory, at, this.templateStride);
    view.setInt32(this.layout("T_SLOTS"), template.slotField.length, true);
    view.setInt32(this.layout("T_ROWS"), template.rows, true);
    new Float64Array(this.memory, at + this.layout("T_DEFAULTS"), FIELDS).set(template.defaults);
    const scope = this.layout("T_SCOPE");
    view.setInt32(scope, template.positions[P_SCOPE_START]!, true);
    view.setInt32(scope + 4, template.positionSegments[P_SCOPE_START]!, true);
    view.setInt32(scope + 8, template.positions[P_SCOPE_END]!, true);
    view.setInt32(scope + 12, template.positionSegments[P_SCOPE_END]!, true);
    const segStart = this.layout("T_SEG_START");
    const segLength = this.layout("T_SEG_LENGTH");
    for (let k = 0; k < template.segStart.length; k++) {
      view.setInt32(segStart + 4 * k, template.segStart[k]!, true);
      view.setInt32(segLength + 4 * k, template.segLength[k]!, true);
    }
    this.bytes.set(template.slotField, at + this.layout("T_SLOT_FIELD"));
    this.bytes.set(template.slotKind, at + this.layout("T_SLOT_KIND"));
    this.bytes.set(template.bytes, at + this.layout("T_BYTES"));
  }
}

/**
 * A line read in full, as constant bytes between its number tokens (slots): a line with the same
 * constant bytes and valid numbers in the slots is the same JSON with other numbers, so it reads
 * as the template did but for those numbers (the caller re-checks the rules between fields). The
 * kernel holds a copy in place `slot`.
 */
class LineTemplate {
  /** Field (`F_*`, or NO_FIELD) of each slot, in line order, and how its token is read (`FIELD_KIND`, or a metadata slot's kind). */
  readonly slotField: Uint8Array;
  readonly slotKind: Uint8Array;
  /** Constant segments (one more than the slots): where each starts in `bytes`, and its length. */
  readonly segStart: Int32Array;
  readonly segLength: Int32Array;
  /** Values of fields that are not slots (null counters: NaN; tensors when not a slot). */
  readonly defaults: Float64Array;
  /** Template positions of the context, metadata and phase scope, and their segments. */
  readonly positions: Int32Array;
  readonly positionSegments: Int32Array;
  /** `CanonicalLineReader.reads` when it was made or last matched a line. */
  lastRead = 0;
  /**
   * Which rows `readRows` makes of its lines (ROWS_*): plain samples (no phase attribution hint and
   * no birth counts in the metadata: the scan reads those lines' metadata) and phase boundaries
   * (with exact metadata: the scan keeps their scope's text), as the scan takes them.
   */
  readonly rows: number;

  constructor(
    readonly slot: number,
    readonly bytes: Uint8Array,
    slotStarts: readonly number[],
    slotEnds: readonly number[],
    slotFields: readonly number[],
    slotKinds: readonly number[],
    defaults: Float64Array,
    positions: readonly number[],
    readonly eventType: string,
    readonly collector: string,
    readonly host: string,
    readonly jobId: string | null,
    readonly sessionId: string,
    readonly metadataInexact: boolean,
    readonly metadataEmpty: boolean,
    readonly boundaryRead: boolean,
    readonly metadataOrigin: boolean,
    readonly metadataBirths: boolean,
  ) {
    const use = fastLineUse(eventType, metadataOrigin, metadataBirths, metadataInexact);
    this.rows = use === FAST_SAMPLE ? ROWS_SAMPLE : use === FAST_BOUNDARY ? ROWS_BOUNDARY : ROWS_NONE;
    const slots = slotFields.length;
    this.slotField = Uint8Array.from(slotFields);
    this.slotKind = Uint8Array.from(slotKinds);
    this.segStart = new Int32Array(slots + 1);
    this.segLength = new Int32Array(slots + 1);
    for (let k = 0; k <= slots; k++) {
      const from = k === 0 ? 0 : slotEnds[k - 1]!;
      this.segStart[k] = from;
      this.segLength[k] = (k === slots ? bytes.length : slotStarts[k]!) - from;
    }
    this.defaults = defaults;
    this.positions = Int32Array.from(positions);
    // A position lies in the segment that holds it (none is at a slot's edge: slots are numbers,
    // and these are string contents and the edges of objects and values that are not slots).
    this.positionSegments = Int32Array.from(positions, (p) => {
      let k = 0;
      while (k < slots && p >= slotEnds[k]!) k++;
      return k;
    });
  }
}

/** Indexes into `LineTemplate.positions`. */
const P_CONTEXT_START = 0;
const P_CONTEXT_END = 1;
const P_METADATA_START = 2;
const P_METADATA_END = 3;
const P_SCOPE_START = 4;
const P_SCOPE_END = 5;

/**
 * A reusable reader: `read(buf, start, end)` fills the public fields from one line, or returns
 * false. Null counters read as NaN.
 */
export class CanonicalLineReader implements LineFields {
  // Counters are doubles from the start (NaN): a field that starts as a small integer changes its
  // representation at the first large value, which deprecates the reader's map and throws away the
  // code compiled against it (a cold scan compiled `read` and its helpers again and again).
  allocated = Number.NaN;
  reserved = Number.NaN;
  active = Number.NaN;
  inactive = Number.NaN;
  change = Number.NaN;
  used = Number.NaN;
  free = Number.NaN;
  total = Number.NaN;
  deviceId = 0;
  pid = 0;
  rank = 0;
  localRank = 0;
  worldSize = 0;
  samplingIntervalMs = 0;
  /** `timestamp_ns` as seconds (all but the last nine digits) and nanoseconds. */
  tsHead = Number.NaN;
  tsTail = Number.NaN;
  eventType = "";
  collector = "";
  host = "";
  jobId: string | null = null;
  sessionId = "";
  /** Byte range of the context string's contents, or -1 for null. */
  contextStart = -1;
  contextEnd = -1;
  /** Byte range of the metadata object (braces included). */
  metadataStart = 0;
  metadataEnd = 0;
  /** Top-level `metadata.tfjs_num_tensors` when it is a number, else NaN. */
  tensors = Number.NaN;
  /** The metadata holds a float, a 16+ digit integer or another token JSON.parse would not keep exact. */
  metadataInexact = false;
  /** The metadata is `{}`. */
  metadataEmpty = true;
  /** Byte range of the top-level `metadata.phase_scope` value (its JSON text), or -1. */
  scopeStart = -1;
  scopeEnd = -1;
  /** Top-level `metadata.phase_counters` is `"boundary_read"`. */
  boundaryRead = false;
  /**
   * The metadata's bytes hold a key starting `origin_` (a phase attribution hint), or the birth
   * counts' key: looked for in place, once per template (digits cannot make or unmake either).
   */
  metadataOrigin = false;
  metadataBirths = false;

  /** The number the last `int`, `count` or `nullableCount` read. */
  private number = Number.NaN;
  private headScratch = Number.NaN;
  private tailScratch = Number.NaN;
  private buf: Uint8Array = new Uint8Array(0);
  private view: DataView = new DataView(new ArrayBuffer(0));
  private limit = 0;
  private pos = 0;
  private readonly eventTypeSlot = new InternSlot();
  private readonly collectorSlot = new InternSlot();
  private readonly hostSlot = new InternSlot();
  private readonly jobSlot = new InternSlot();
  private readonly sessionSlot = new InternSlot();
  /** Container stack of the metadata validator: 1 object, 2 array. */
  private stack = new Uint8Array(64);
  /** Where a full read found each number field's token (-1: null, or not a template slot). */
  private readonly markStart = new Int32Array(FIELDS);
  private readonly markEnd = new Int32Array(FIELDS);
  /** The metadata's top-level `tfjs_num_tensors` token, when an integer of under 16 digits. */
  private tensorsStart = -1;
  private tensorsEnd = -1;
  private readonly templates: LineTemplate[] = [];
  /** Where the first line the last `readRows` did not read starts, and the offset of its buffer in the kernel's memory. */
  rowsEnd = 0;
  private rowsOffset = 0;
  /** The templates by their place in the kernel. */
  private readonly bySlot: LineTemplate[] = [];
  /** Lines read (a template's `lastRead` is the count when it last matched). */
  private reads = 0;
  private windowLines = 0;
  private templateReads = 0;
  private templatesMade = 0;
  /** A template read's field values, and each segment's shift from template to line positions. */
  /**
   * Made on first use: a process that imports the analysis but scans nothing makes none. Null where
   * WebAssembly is not available: then no line is read as a template.
   */
  private kernelMade: LineKernel | null | undefined;

  /** Reads `buf[start, end)` (one line without its newline). */
  read(buf: Uint8Array, start: number, end: number): boolean {
    if (this.buf !== buf) {
      this.buf = buf;
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    }
    this.limit = buf.length;
    this.reads++;
    const paying = this.templatesPay();
    this.windowLines++;
    const templates = this.templates;
    if (paying && templates.length > 0) {
      // The kernel reads its own memory: a line of the scan's buffer (`chunkBuffer`) is there, any
      // other is copied in (one a template can match fits).
      // Made by `remember`, with the first template.
      const kernel = this.kernelMade!;
      let at = start;
      if (buf.buffer === kernel.memory) at += buf.byteOffset;
      else if (end - start <= kernel.lineSize) {
        kernel.bytes.set(buf.subarray(start, end), kernel.lineAt);
        at = kernel.lineAt;
      } else at = -1;
      for (let k = 0; at >= 0 && k < templates.length; k++) {
        const template = templates[k]!;
        if (!this.readLike(template, at, at + end - start, at - start)) continue;
        this.templateReads++;
        template.lastRead = this.reads;
        if (k > 0) {
          templates[k] = templates[k - 1]!;
          templates[k - 1] = template;
        }
        return true;
      }
    }
    if (!this.readFull(start, end)) return false;
    // A phase boundary's scope id and sequence, which no later line repeats, are slots too (`metadataSlots`).
    if (paying && this.pos + 1 - start <= MAX_TEMPLATE_BYTES) {
      this.remember(buf, start);
      this.templatesMade++;
    }
    return true;
  }

  /** Reads a line in full, noting where its number tokens are (`remember`). */
  private readFull(start: number, end: number): boolean {
    this.pos = start;
    if (!this.expect(K_ACTIVE)) return false;
    if (!this.markedNumber(F_ACTIVE)) return false;
    const active = this.number;
    if (!this.expect(K_ALLOCATED) || !this.markedNumber(F_ALLOCATED)) return false;
    const allocated = this.number;
    if (!this.expect(K_CHANGE) || !this.markedNumber(F_CHANGE)) return false;
    const change = this.number;
    if (!this.expect(K_INACTIVE) || !this.markedNumber(F_INACTIVE)) return false;
    const inactive = this.number;
    if (!this.expect(K_RESERVED) || !this.markedNumber(F_RESERVED)) return false;
    const reserved = this.number;
    if (!this.expect(K_COLLECTOR)) return false;
    const collector = this.string(this.collectorSlot, true);
    if (collector === undefined || !this.expect(K_CONTEXT)) return false;
    if (this.isNull()) {
      this.contextStart = -1;
      this.contextEnd = -1;
    } else {
      const contextStart = this.pos + 1;
      if (!this.skipPlainString()) return false;
      this.contextStart = contextStart;
      this.contextEnd = this.pos - 1;
    }
    if (!this.expect(K_FREE)) return false;
    if (!this.markedNumber(F_FREE)) return false;
    const free = this.number;
    if (!this.expect(K_DEVICE_ID) || !this.markedNumber(F_DEVICE_ID)) return false;
    const deviceId = this.number;
    if (!this.expect(K_TOTAL) || !this.markedNumber(F_TOTAL)) return false;
    const total = this.number;
    if (!this.expect(K_USED) || !this.markedNumber(F_USED)) return false;
    const used = this.number;
    if (!this.expect(K_EVENT_TYPE)) return false;
    const eventType = this.string(this.eventTypeSlot, true);
    if (eventType === undefined || !this.expect(K_HOST)) return false;
    const host = this.string(this.hostSlot, true);
    if (host === undefined || !this.expect(K_JOB_ID)) return false;
    let jobId: string | null = null;
    if (!this.isNull()) {
      const value = this.string(this.jobSlot, true);
      if (value === undefined) return false;
      jobId = value;
    }
    if (!this.expect(K_LOCAL_RANK)) return false;
    if (!this.markedNumber(F_LOCAL_RANK)) return false;
    const localRank = this.number;
    if (!this.expect(K_METADATA)) return false;
    if (!this.metadata()) return false;
    const metadataOrigin =
      !this.metadataEmpty && holds(this.buf, this.metadataStart, this.metadataEnd, ORIGIN_PREFIX);
    const metadataBirths =
      !this.metadataEmpty && holds(this.buf, this.metadataStart, this.metadataEnd, BIRTHS_KEY);
    this.markStart[F_TENSORS] = this.tensorsStart;
    this.markEnd[F_TENSORS] = this.tensorsEnd;
    if (!this.expect(K_PID)) return false;
    if (!this.markedNumber(F_PID)) return false;
    const pid = this.number;
    if (pid < -1 || !this.expect(K_RANK) || !this.markedNumber(F_RANK)) return false;
    const rank = this.number;
    if (!this.expect(K_INTERVAL) || !this.markedNumber(F_INTERVAL)) return false;
    const interval = this.number;
    if (!this.expect(K_SCHEMA_SESSION)) return false;
    const sessionId = this.string(this.sessionSlot, true);
    if (sessionId === undefined || !this.expect(K_TIMESTAMP)) return false;
    this.markStart[F_TIMESTAMP] = this.pos;
    if (!this.timestamp()) return false;
    this.markEnd[F_TIMESTAMP] = this.pos;
    if (!this.expect(K_WORLD_SIZE)) return false;
    if (!this.markedNumber(F_WORLD_SIZE)) return false;
    const worldSize = this.number;
    if (worldSize < 1) return false;
    const buf2 = this.buf;
    if (buf2[this.pos] !== 0x7d) return false;
    for (let i = this.pos + 1; i < end; i++) {
      const c = buf2[i];
      if (c !== 0x20 && c !== 0x09 && c !== 0x0d && c !== 0x0a) return false;
    }
    if (this.pos >= end) return false;
    if (rank >= worldSize || localRank >= worldSize) return false;
    if (!Number.isNaN(total) && (used > total || (!Number.isNaN(free) && free > total))) return false;
    this.active = active;
    this.allocated = allocated;
    this.change = change;
    this.inactive = inactive;
    this.reserved = reserved;
    this.collector = collector;
    this.free = free;
    this.deviceId = deviceId;
    this.total = total;
    this.used = used;
    this.eventType = eventType;
    this.host = host;
    this.jobId = jobId;
    this.localRank = localRank;
    this.pid = pid;
    this.rank = rank;
    this.samplingIntervalMs = interval;
    this.sessionId = sessionId;
    this.tsHead = this.headScratch;
    this.tsTail = this.tailScratch;
    this.worldSize = worldSize;
    this.metadataOrigin = metadataOrigin;
    this.metadataBirths = metadataBirths;
    return true;
  }

  /**
   * Reads a line as `template` (its constant bytes and numbers in its slots), or returns false: the
   * line is `[at, end)` of the kernel's memory, `shift` bytes from where it is in `buf`. The kernel
   * reads the slots' numbers by the rules of `int`, `count`, `nullableCount` and `timestamp` (and
   * the metadata validator's for `tfjs_num_tensors`).
   */
  private readLike(template: LineTemplate, at: number, end: number, shift: number): boolean {
    const kernel = this.kernelMade!;
    const values = kernel.values;
    values.set(template.defaults);
    // The kernel checks the rules between fields too (`keepsRules`).
    if (kernel.readLike(at, end, template.slot) === 0) return false;
    this.take(template, values, 0, kernel.timestamp[0]!, kernel.timestamp[1]!);
    // Template positions move by what the slots before them gained or lost in length (the kernel's
    // shifts are to its memory; `shift` takes them back to `buf`).
    const shifts = kernel.shifts;
    const positions = template.positions;
    const segments = template.positionSegments;
    let p = positions[P_CONTEXT_START]!;
    this.contextStart = p < 0 ? -1 : p + shifts[segments[P_CONTEXT_START]!]! - shift;
    p = positions[P_CONTEXT_END]!;
    this.contextEnd = p < 0 ? -1 : p + shifts[segments[P_CONTEXT_END]!]! - shift;
    this.metadataStart = positions[P_METADATA_START]! + shifts[segments[P_METADATA_START]!]! - shift;
    this.metadataEnd = positions[P_METADATA_END]! + shifts[segments[P_METADATA_END]!]! - shift;
    p = positions[P_SCOPE_START]!;
    this.scopeStart = p < 0 ? -1 : p + shifts[segments[P_SCOPE_START]!]! - shift;
    p = positions[P_SCOPE_END]!;
    this.scopeEnd = p < 0 ? -1 : p + shifts[segments[P_SCOPE_END]!]! - shift;
    return true;
  }

  /** The fields of a line read as `template`: its slots' values from `values[at...]`, the rest the template's. */
  private take(template: LineTemplate, values: Float64Array, at: number, head: number, tail: number): void {
    this.active = values[at + F_ACTIVE]!;
    this.allocated = values[at + F_ALLOCATED]!;
    this.change = values[at + F_CHANGE]!;
    this.inactive = values[at + F_INACTIVE]!;
    this.reserved = values[at + F_RESERVED]!;
    this.free = values[at + F_FREE]!;
    this.deviceId = values[at + F_DEVICE_ID]!;
    this.total = values[at + F_TOTAL]!;
    this.used = values[at + F_USED]!;
    this.localRank = values[at + F_LOCAL_RANK]!;
    this.tensors = values[at + F_TENSORS]!;
    this.pid = values[at + F_PID]!;
    this.rank = values[at + F_RANK]!;
    this.samplingIntervalMs = values[at + F_INTERVAL]!;
    this.worldSize = values[at + F_WORLD_SIZE]!;
    this.tsHead = head;
    this.tsTail = tail;
    this.eventType = template.eventType;
    this.collector = template.collector;
    this.host = template.host;
    this.jobId = template.jobId;
    this.sessionId = template.sessionId;
    this.metadataInexact = template.metadataInexact;
    this.metadataEmpty = template.metadataEmpty;
    this.boundaryRead = template.boundaryRead;
    this.metadataOrigin = template.metadataOrigin;
    this.metadataBirths = template.metadataBirths;
  }

  /**
   * Whether templates pay their way in the current window of TEMPLATE_WINDOW lines (a new window
   * starts once it is full): at most TEMPLATE_SLACK more made than lines read by one.
   */
  private templatesPay(): boolean {
    if (this.windowLines >= TEMPLATE_WINDOW) {
      this.windowLines = 0;
      this.templateReads = 0;
      this.templatesMade = 0;
    }
    return this.templatesMade < this.templateReads + TEMPLATE_SLACK;
  }

  /**
   * Reads the lines of `buf[start, end)` whose templates make rows (`LineTemplate.rows`: plain samples
   * and phase boundaries) in one call into the kernel while they come, each a whole line ended by its
   * `\n`: how many, each then taken by `takeRow`; `rowsEnd` is where the first line not read starts.
   * 0 where `buf` is not the scan's buffer in the kernel's memory (`chunkBuffer`), or templates do not
   * pay their way (`read`).
   */
  readRows(buf: Uint8Array, start: number, end: number): number {
    const kernel = this.kernelMade;
    const templates = this.templates;
    if (kernel == null || buf.buffer !== kernel.memory || templates.length === 0) return 0;
    if (!this.templatesPay()) return 0;
    const rows = kernel.readRows(buf.byteOffset + start, buf.byteOffset + end, templates.length);
    this.rowsOffset = buf.byteOffset;
    this.rowsEnd = kernel.stopAt[0]! - buf.byteOffset;
    this.windowLines += rows;
    this.templateReads += rows;
    return rows;
  }

  /**
   * Adds row `i` of the last `readRows` to `accumulator` as `Accumulator.addLine` adds a line `read`
   * read, when it is a sample's (else false: see `takeRow`), its numbers taken where the kernel wrote them.
   */
  addRow(i: number, accumulator: Accumulator, line: number): RankPart | null {
    const rows = this.kernelMade!.rows;
    const at = i * ROW_VALUES;
    const template = this.bySlot[rows[at]!]!;
    if (template.rows !== ROWS_SAMPLE) return null;
    this.reads++;
    template.lastRead = this.reads;
    const v = at + ROW_FIELDS_AT;
    return accumulator.addRead(
      template,
      rows[at + 1]!,
      rows[at + 2]!,
      rows[v + F_RANK]!,
      rows[v + F_PID]!,
      rows[v + F_LOCAL_RANK]!,
      rows[v + F_WORLD_SIZE]!,
      rows[v + F_INTERVAL]!,
      rows[v + F_DEVICE_ID]!,
      rows[v + F_ALLOCATED]!,
      rows[v + F_RESERVED]!,
      rows[v + F_USED]!,
      rows[v + F_TOTAL]!,
      rows[v + F_TENSORS]!,
      line,
    );
  }

  /** The session of row `i` of the last `readRows`. */
  rowSession(i: number): string {
    return this.bySlot[this.kernelMade!.rows[i * ROW_VALUES]!]!.sessionId;
  }

  /**
   * Takes the fields of row `i` of the last `readRows`, as `read` would have read its line (but for
   * the byte ranges of context and metadata: a plain sample's and a boundary's are not used).
   */
  takeRow(i: number): void {
    const kernel = this.kernelMade!;
    const rows = kernel.rows;
    const at = i * ROW_VALUES;
    const template = this.bySlot[rows[at]!]!;
    this.reads++;
    template.lastRead = this.reads;
    this.take(template, rows, at + ROW_FIELDS_AT, rows[at + 1]!, rows[at + 2]!);
    this.contextStart = -1;
    this.contextEnd = -1;
    const scopeStart = rows[at + ROW_SCOPE_AT]!;
    this.scopeStart = scopeStart < 0 ? -1 : scopeStart - this.rowsOffset;
    this.scopeEnd = scopeStart < 0 ? -1 : rows[at + ROW_SCOPE_AT + 1]! - this.rowsOffset;
  }

  /** Keeps the line just read in full (`buf[start, ...]`, up to its closing brace) as a template. */
  private remember(buf: Uint8Array, start: number): void {
    const kernel = this.kernel();
    if (kernel === null) return;
    const close = this.pos + 1;
    const slots: MarkedSlot[] = [];
    const defaults = new Float64Array(FIELDS).fill(Number.NaN);
    defaults[F_TENSORS] = this.tensors;
    for (let field = 0; field < FIELDS; field++) {
      if (this.markStart[field]! < 0) continue;
      slots.push({
        start: this.markStart[field]!,
        end: this.markEnd[field]!,
        field,
        kind: FIELD_KIND[field]!,
      });
    }
    metadataSlots(buf, this.metadataStart, this.metadataEnd, this.tensorsStart, slots);
    slots.sort((a, b) => a.start - b.start);
    const relative = (p: number): number => (p < 0 ? -1 : p - start);
    // A new template takes a free place, else the place (and the kernel's place) of the least recently
    // matched one (a new rank's lines replace the last rank's), and moves up as it reads lines (`read`).
    const templates = this.templates;
    let replaced = templates.length;
    if (replaced === TEMPLATES) {
      replaced = 0;
      for (let k = 1; k < TEMPLATES; k++)
        if (templates[k]!.lastRead < templates[replaced]!.lastRead) replaced = k;
    }
    const template = new LineTemplate(
      replaced < templates.length ? templates[replaced]!.slot : templates.length,
      buf.slice(start, close),
      slots.map((slot) => slot.start - start),
      slots.map((slot) => slot.end - start),
      slots.map((slot) => slot.field),
      slots.map((slot) => slot.kind),
      defaults,
      [
        relative(this.contextStart),
        relative(this.contextEnd),
        relative(this.metadataStart),
        relative(this.metadataEnd),
        relative(this.scopeStart),
        relative(this.scopeEnd),
      ],
      this.eventType,
      this.collector,
      this.host,
      this.jobId,
      this.sessionId,
      this.metadataInexact,
      this.metadataEmpty,
      this.boundaryRead,
      this.metadataOrigin,
      this.metadataBirths,
    );
    template.lastRead = this.reads;
    kernel.write(template.slot, template);
    templates[replaced] = template;
    this.bySlot[template.slot] = template;
  }

  /** A number field read by its rule (`FIELD_KIND`), its token noted for `remember`. */
  private markedNumber(field: number): boolean {
    const start = this.pos;
    const kind = FIELD_KIND[field]!;
    if (!(kind === COUNT ? this.count() : kind === INT ? this.int() : this.nullableCount())) return false;
    this.markStart[field] = this.buf[start] === 0x6e ? -1 : start;
    this.markEnd[field] = this.pos;
    return true;
  }

  /**
   * A read buffer in the kernel's memory, for a scan to read its chunks into: its lines are read
   * by templates where they are, without a copy. One a reader: one scan at a time uses it.
   */
  chunkBuffer(bytes: number): Buffer {
    const kernel = this.kernel();
    if (kernel === null || kernel.chunkSize !== bytes) return Buffer.allocUnsafe(bytes);
    return Buffer.from(kernel.memory, kernel.chunkAt, kernel.chunkSize);
  }

  private kernel(): LineKernel | null {
    if (this.kernelMade === undefined) {
      const module = compiledKernel();
      this.kernelMade = module === null ? null : new LineKernel(module);
    }
    return this.kernelMade;
  }

  /**
   * Lets go of the buffer of the lines read when it is larger than `bytes` (one grown for a very long
   * line): a reader kept for later scans must not hold it.
   */
  releaseBufferOver(bytes: number): void {
    if (this.buf.length <= bytes) return;
    this.buf = new Uint8Array(0);
    this.view = new DataView(this.buf.buffer);
  }

  /** `timestamp_ns` of the last line read, exact. */
  timestampNs(): bigint {
    return exactTimestamp(this.tsHead, this.tsTail);
  }

  /** The context string of the last line read (null when it was null). */
  context(): string | null {
    if (this.contextStart < 0) return null;
    const buf = this.buf;
    return Buffer.from(
      buf.buffer,
      buf.byteOffset + this.contextStart,
      this.contextEnd - this.contextStart,
    ).toString("latin1");
  }

  private expect(literal: Literal): boolean {
    const view = this.view;
    const pos = this.pos;
    const { chunks, offsets } = literal;
    const n = chunks.length;
    if (pos + literal.length > this.limit) return false;
    for (let i = 0; i < n; i++) if (view.getFloat64(pos + offsets[i]!, true) !== chunks[i]) return false;
    this.pos = pos + literal.length;
    return true;
  }

  private isNull(): boolean {
    const buf = this.buf;
    const p = this.pos;
    if (buf[p] === 0x6e && buf[p + 1] === 0x75 && buf[p + 2] === 0x6c && buf[p + 3] === 0x6c) {
      this.pos = p + 4;
      return true;
    }
    return false;
  }

  /**
   * An integer token without fraction or exponent, within 2^53, into `number`; false otherwise (as
   * core's reader). Through a field, not returned: a double returned from a call the compiler does
   * not inline is a new heap number each time, garbage at every counter of every line.
   */
  private int(): boolean {
    const buf = this.buf;
    let p = this.pos;
    let negative = false;
    let c = buf[p];
    if (c === 0x2d) {
      negative = true;
      c = buf[++p];
    }
    if (c === 0x30) {
      c = buf[++p];
      if (c === 0x2e || c === 0x65 || c === 0x45 || (c !== undefined && c >= 0x30 && c <= 0x39)) return false;
      this.pos = p;
      this.number = 0;
      return true;
    }
    const start = p;
    let value = 0;
    while (c !== undefined && c >= 0x30 && c <= 0x39) {
      value = value * 10 + (c - 0x30);
      c = buf[++p];
    }
    const digits = p - start;
    if (digits === 0 || (digits > 15 && !Number.isSafeInteger(value))) return false;
    if (c === 0x2e || c === 0x65 || c === 0x45) return false;
    this.pos = p;
    this.number = negative ? -value : value;
    return true;
  }

  /** A non-negative `int`. */
  private count(): boolean {
    if (this.buf[this.pos] === 0x2d) return false;
    return this.int();
  }

  /** A count or null (NaN). */
  private nullableCount(): boolean {
    if (this.buf[this.pos] === 0x6e) {
      if (!this.isNull()) return false;
      this.number = Number.NaN;
      return true;
    }
    return this.count();
  }

  /** Digits of `timestamp_ns` (no sign, no leading zero) into seconds and nanoseconds; false otherwise. */
  private timestamp(): boolean {
    const buf = this.buf;
    const start = this.pos;
    let p = start;
    let c = buf[p];
    while (c !== undefined && c >= 0x30 && c <= 0x39) c = buf[++p];
    const digits = p - start;
    // Beyond 24 digits the seconds part would not be exact: the general path takes it.
    if (digits === 0 || digits > 24 || (digits > 1 && buf[start] === 0x30)) return false;
    const split = Math.max(start, p - 9);
    let head = 0;
    for (let i = start; i < split; i++) head = head * 10 + (buf[i]! - 0x30);
    let tail = 0;
    for (let i = split; i < p; i++) tail = tail * 10 + (buf[i]! - 0x30);
    this.headScratch = head;
    this.tailScratch = tail;
    this.pos = p;
    return true;
  }

  /** A string without escapes, control or non-ASCII characters (non-empty, no blank ends when `nonEmpty`). */
  private string(slot: InternSlot, nonEmpty: boolean): string | undefined {
    const buf = this.buf;
    if (buf[this.pos] !== 0x22) return undefined;
    const start = this.pos + 1;
    // A value the slot remembers (the usual case: one host, session and collector per segment, a
    // few event types).
    const known = slot.match(buf, start);
    if (known !== undefined) {
      this.pos = slot.end + 1;
      return known;
    }
    let p = start;
    for (;;) {
      const c = buf[p];
      if (c === 0x22) break;
      if (c === undefined || c === 0x5c || c < 0x20 || c > 0x7e) return undefined;
      p++;
    }
    if (nonEmpty) {
      if (p === start) return undefined;
      // Blank at an end: core's general path applies Python's strip() rule.
      if (buf[start] === 0x20 || buf[p - 1] === 0x20) return undefined;
    }
    this.pos = p + 1;
    return slot.get(buf, start, p);
  }

  private skipPlainString(): boolean {
    const buf = this.buf;
    if (buf[this.pos] !== 0x22) return false;
    let p = this.pos + 1;
    for (;;) {
      const c = buf[p];
      if (c === 0x22) break;
      if (c === undefined || c === 0x5c || c < 0x20 || c > 0x7e) return false;
      p++;
    }
    this.pos = p + 1;
    return true;
  }

  /**
   * Validates the metadata object as JSON (RFC 8259 grammar; escapes allowed inside strings,
   * non-ASCII and Python's NaN/Infinity sent to the general path), noting its extent, whether a
   * token would need the exact parser, the top-level `tfjs_num_tensors` and `phase_counters`.
   */
  private metadata(): boolean {
    const buf = this.buf;
    let p = this.pos;
    if (buf[p] !== 0x7b) return false;
    this.metadataStart = p;
    this.tensors = Number.NaN;
    this.tensorsStart = -1;
    this.tensorsEnd = -1;
    this.metadataInexact = false;
    this.scopeStart = -1;
    this.scopeEnd = -1;
    this.boundaryRead = false;
    if (buf[p + 1] === 0x7d) {
      this.metadataEmpty = true;
      this.pos = p + 2;
      this.metadataEnd = p + 2;
      return true;
    }
    this.metadataEmpty = false;
    const stack = this.stack;
    let depth = 0;
    stack[0] = 1;
    p++;
    // States: expecting a key (or '}' right after '{'), or a value (or ']' right after '[').
    let expectKey = true;
    let allowClose = true;
    let tensorsNext = false;
    let countersNext = false;
    // The value of a top-level phase_scope key is being read (its end is noted back at depth 0).
    let scopeOpen = false;
    for (;;) {
      p = skipSpace(buf, p);
      let c: number | undefined = buf[p];
      if (c === undefined) return false;
      if (expectKey) {
        if (c === 0x7d && allowClose) {
          // An empty object.
          p++;
          if (depth === 0) {
            this.pos = p;
            this.metadataEnd = p;
            return true;
          }
          depth--;
          expectKey = false;
          c = -1;
        } else {
          if (c !== 0x22) return false;
          const keyStart = p + 1;
          p = skipString(buf, p);
          if (p < 0) return false;
          if (depth === 0) {
            // An escaped top-level key may spell tfjs_num_tensors: leave that to the general path.
            for (let i = keyStart; i < p - 1; i++) if (buf[i] === 0x5c) return false;
            tensorsNext = sameBytes(buf, keyStart, p - 1, TENSORS_KEY);
            scopeOpen = sameBytes(buf, keyStart, p - 1, SCOPE_KEY);
            countersNext = sameBytes(buf, keyStart, p - 1, COUNTERS_KEY);
            // The last of duplicate keys wins: a phase_counters that is not "boundary_read" resets it.
            if (countersNext) this.boundaryRead = false;
          } else {
            tensorsNext = false;
            countersNext = false;
          }
          p = skipSpace(buf, p);
          if (buf[p] !== 0x3a) return false;
          p = skipSpace(buf, p + 1);
          c = buf[p];
          // The last of duplicate keys wins, as in JSON.parse.
          if (scopeOpen && depth === 0) this.scopeStart = p;
          expectKey = false;
          allowClose = false;
          if (c === undefined) return false;
          // Fall through to read the value.
        }
      }
      if (c === -1) {
        // The empty container closed above: go on after it.
      } else if (!expectKey) {
        if (c === 0x5d && allowClose) {
          // An empty array (depth >= 1: the metadata itself is an object).
          p++;
          depth--;
        } else if (c === 0x7b || c === 0x5b) {
          if (tensorsNext) {
            this.tensors = Number.NaN;
            this.tensorsStart = -1;
          }
          if (++depth >= stack.length) return false;
          stack[depth] = c === 0x7b ? 1 : 2;
          p++;
          expectKey = c === 0x7b;
          allowClose = true;
          tensorsNext = false;
          countersNext = false;
          continue;
        } else {
          // A tfjs_num_tensors that is not a number counts as absent (set again below when it is).
          if (tensorsNext) {
            this.tensors = Number.NaN;
            this.tensorsStart = -1;
          }
          if (c === 0x22) {
            const valueStart = p;
            p = skipString(buf, p);
            if (p < 0) return false;
            if (countersNext) {
              // An escape could spell boundary_read: the general path decides.
              for (let i = valueStart; i < p; i++) if (buf[i] === 0x5c) return false;
              this.boundaryRead = sameBytes(buf, valueStart, p, BOUNDARY_READ_VALUE);
            }
          } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
            const start = p;
            p = skipNumber(buf, p);
            if (p < 0) return false;
            let integer = true;
            for (let i = start; i < p; i++) {
              const d = buf[i];
              if (d === 0x2e || d === 0x65 || d === 0x45) integer = false;
            }
            const digits = p - start - (buf[start] === 0x2d ? 1 : 0);
            if (!integer || digits >= 16) this.metadataInexact = true;
            if (tensorsNext) {
              const exact = integer && digits < 16;
              this.tensors = exact ? parseInteger(buf, start, p) : Number(latin1(buf, start, p));
              this.tensorsStart = exact ? start : -1;
              this.tensorsEnd = p;
            }
          } else if (c === 0x74) {
            if (buf[p + 1] !== 0x72 || buf[p + 2] !== 0x75 || buf[p + 3] !== 0x65) return false;
            p += 4;
          } else if (c === 0x66) {
            if (buf[p + 1] !== 0x61 || buf[p + 2] !== 0x6c || buf[p + 3] !== 0x73 || buf[p + 4] !== 0x65)
              return false;
            p += 5;
          } else if (c === 0x6e) {
            if (buf[p + 1] !== 0x75 || buf[p + 2] !== 0x6c || buf[p + 3] !== 0x6c) return false;
            p += 4;
          } else {
            return false;
          }
          tensorsNext = false;
          countersNext = false;
        }
      }
      // After a value or a closed container: ',' or the closer of the current container.
      for (;;) {
        if (scopeOpen && depth === 0) {
          this.scopeEnd = p;
          scopeOpen = false;
        }
        p = skipSpace(buf, p);
        c = buf[p];
        const kind = stack[depth];
        if (c === 0x2c) {
          p++;
          expectKey = kind === 1;
          allowClose = false;
          break;
        }
        if ((c === 0x7d && kind === 1) || (c === 0x5d && kind === 2)) {
          p++;
          if (depth === 0) {
            this.pos = p;
            this.metadataEnd = p;
            return true;
          }
          depth--;
          continue;
        }
        return false;
      }
    }
  }
}

/**
 * Whether `buf[start, end)` holds `text` (quote first: the keys looked for start with one). In place:
 * a view of every sample's metadata cost a young-generation object per line.
 */
function holds(buf: Uint8Array, start: number, end: number, text: Uint8Array): boolean {
  const last = end - text.length;
  const second = text[1];
  for (let i = start; i <= last; i++) {
    if (buf[i] !== 0x22 || buf[i + 1] !== second) continue;
    let k = 2;
    while (k < text.length && buf[i + k] === text[k]) k++;
    if (k === text.length) return true;
  }
  return false;
}

/** A template slot: a token's bytes `[start, end)` in the line, its field (or NO_FIELD) and kind. */
interface MarkedSlot {
  readonly start: number;
  readonly end: number;
  readonly field: number;
  readonly kind: number;
}

const isDigit = (c: number | undefined): boolean => c !== undefined && c >= 0x30 && c <= 0x39;

/**
 * Adds to `slots` (up to MAX_SLOTS in all) the metadata's numbers that no field reads, so that lines
 * that differ only there (a phase boundary's scope id, sequence and depth) share a template: its
 * integer tokens of under 16 digits (but `tensorsStart`'s, a field), and the digit runs inside its
 * string values without escapes. Any other integer or digit run there leaves the JSON valid, exact
 * for JSON.parse and the same shape: what the scan keeps of the metadata it reads from the line's
 * own bytes (the scope's text, the birth counts), or from strings without digits (`phase_counters`)
 * and the tensors field. Keys, floats and longer integers stay constant bytes. `buf[start, end)` is
 * the metadata object a full read just validated.
 */
function metadataSlots(
  buf: Uint8Array,
  start: number,
  end: number,
  tensorsStart: number,
  slots: MarkedSlot[],
): void {
  const runs: number[] = [];
  let p = start;
  while (p < end && slots.length < MAX_SLOTS) {
    const c = buf[p]!;
    if (c === 0x22) {
      runs.length = 0;
      let escaped = false;
      let q = p + 1;
      while (buf[q] !== 0x22) {
        if (buf[q] === 0x5c) {
          escaped = true;
          q += 2;
        } else if (isDigit(buf[q])) {
          const from = q;
          while (isDigit(buf[q])) q++;
          runs.push(from, q);
        } else q++;
      }
      p = q + 1;
      let after = p;
      while (buf[after] === 0x20 || buf[after] === 0x09 || buf[after] === 0x0a || buf[after] === 0x0d)
        after++;
      // A key (a colon follows) stays constant: another key is another field.
      if (escaped || buf[after] === 0x3a) continue;
      for (let k = 0; k < runs.length && slots.length < MAX_SLOTS; k += 2)
        slots.push({ start: runs[k]!, end: runs[k + 1]!, field: NO_FIELD, kind: STRING_DIGITS });
      continue;
    }
    if (c === 0x2d || isDigit(c)) {
      const from = p;
      let integer = true;
      p++;
      for (;;) {
        const d = buf[p];
        if (isDigit(d) || d === 0x2d || d === 0x2b) p++;
        else if (d === 0x2e || d === 0x65 || d === 0x45) {
          integer = false;
          p++;
        } else break;
      }
      const digits = p - from - (c === 0x2d ? 1 : 0);
      if (integer && digits < 16 && from !== tensorsStart)
        slots.push({ start: from, end: p, field: NO_FIELD, kind: METADATA_INT });
      continue;
    }
    p++;
  }
}

function skipSpace(buf: Uint8Array, p: number): number {
  let c = buf[p];
  while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = buf[++p];
  return p;
}

/** Past a JSON string starting at `p` (the quote); -1 when malformed or not ASCII. */
function skipString(buf: Uint8Array, p: number): number {
  p++;
  for (;;) {
    const c = buf[p];
    if (c === undefined || c < 0x20 || c > 0x7e) return -1;
    if (c === 0x22) return p + 1;
    if (c === 0x5c) {
      const e = buf[p + 1];
      if (e === 0x75) {
        for (let i = 2; i < 6; i++) {
          const h = buf[p + i];
          if (
            h === undefined ||
            !((h >= 0x30 && h <= 0x39) || (h >= 0x41 && h <= 0x46) || (h >= 0x61 && h <= 0x66))
          )
            return -1;
        }
        p += 6;
        continue;
      }
      if (
        e === 0x22 ||
        e === 0x5c ||
        e === 0x2f ||
        e === 0x62 ||
        e === 0x66 ||
        e === 0x6e ||
        e === 0x72 ||
        e === 0x74
      ) {
        p += 2;
        continue;
      }
      return -1;
    }
    p++;
  }
}

/** Past a JSON number token at `p`; -1 when malformed. */
function skipNumber(buf: Uint8Array, p: number): number {
  let c = buf[p];
  if (c === 0x2d) c = buf[++p];
  if (c === 0x30) {
    c = buf[++p];
  } else if (c !== undefined && c >= 0x31 && c <= 0x39) {
    while (c !== undefined && c >= 0x30 && c <= 0x39) c = buf[++p];
  } else {
    return -1;
  }
  if (c === 0x2e) {
    c = buf[++p];
    if (c === undefined || c < 0x30 || c > 0x39) return -1;
    while (c !== undefined && c >= 0x30 && c <= 0x39) c = buf[++p];
  }
  if (c === 0x65 || c === 0x45) {
    c = buf[++p];
    if (c === 0x2b || c === 0x2d) c = buf[++p];
    if (c === undefined || c < 0x30 || c > 0x39) return -1;
    while (c !== undefined && c >= 0x30 && c <= 0x39) c = buf[++p];
  }
  return p;
}

function parseInteger(buf: Uint8Array, start: number, end: number): number {
  let negative = false;
  if (buf[start] === 0x2d) {
    negative = true;
    start++;
  }
  let value = 0;
  for (let i = start; i < end; i++) value = value * 10 + (buf[i]! - 0x30);
  return negative ? -value : value;
}

function sameBytes(buf: Uint8Array, start: number, end: number, literal: Uint8Array): boolean {
  if (end - start !== literal.length) return false;
  for (let i = 0; i < literal.length; i++) if (buf[start + i] !== literal[i]) return false;
  return true;
}

/** Bytes `[start, end)` as a latin1 string. */
export function latin1(buf: Uint8Array, start: number, end: number): string {
  return Buffer.from(buf.buffer, buf.byteOffset + start, end - start).toString("latin1");
}
