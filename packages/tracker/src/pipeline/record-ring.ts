/**
 * Stored records on their way from the training thread to the sink worker, through shared memory:
 * the tracker writes each record's numbers into a slot of a ring of `SharedArrayBuffer`s and
 * publishes the ring's head with `Atomics.store`; the worker reads slots up to the head as it fills.
 * Strings and objects (event types, device groups, base metadata, phase kinds, contexts) are named
 * by id: each is posted once (`RingObject`s), and again only after it went unused for `REUSE_WINDOW`
 * records, so that both sides forget what is no longer used. A record's collector detail and its
 * phase's attributes go into the slot itself, one cell a key (at most `VALUE_CELLS` in all), when each
 * value is a number, a string, a boolean, null or a nested object or array: a key list (posted once)
 * gives the keys and each one's type, and a cell holds the number, 1 or 0, or the id of the text or
 * object, which is posted like any other only when the worker does not know it. A steady tfjs sample
 * (backend name, counts, flags, an unchanged `tfjs_live_by_phase`) thus posts nothing. Nested objects
 * in collector detail are named by reference: one changed in place after its record was written may
 * reach the file as it was when first posted (collectors make a new object for a new value; the
 * collector contract says so). Phase attributes with a nested object are posted whole, as a copy:
 * user code may change such an object in place between phases. Detail with other values
 * (bigint, undefined) or more keys is posted whole, as a structured clone. When the worker falls behind
 * and the ring is full, records go into spill chunks posted as messages; every record carries its
 * sequence number, so the worker reads ring and chunks in order. A worker about `maxBacklog` records
 * behind (the pipeline's bound; checked while the ring is full) gets no more: further records are
 * dropped and counted, as the sink's own queue drops them on the training thread, so that a loop the
 * worker cannot keep up with costs bounded memory (each spilled record is new memory to touch) and a
 * kill loses a bounded backlog. A `stop` record is never dropped.
 */
import type { JsonObject, JsonValue } from "@stormlog/core";
import { sameStrings } from "@stormlog/core/internal";
import type { PhaseScopeTemplate } from "@stormlog/phases";
import type { PhaseScopeFacts } from "@stormlog/phases/internal";
import { type EventStore, RECORD_NUMBERS, type RecordContext, type StoredGroup } from "../records/store.js";

/** Slot cells after the record's numbers (`EventStore.copyNumbers`). */
const GROUP = RECORD_NUMBERS;
const BASE = GROUP + 1;
const TYPE = GROUP + 2;
/** -1: null; else an object id. */
const CONTEXT = GROUP + 3;
/** -1: null; >= 0: an object id; <= -2: a key list's id (-2 - id), its values from `VALUES`. */
const EXTRA = GROUP + 4;
/** -1: not a phase record; else the phase kind's id. */
const KIND = GROUP + 5;
const SCOPE_SEQUENCE = GROUP + 6;
/** -1: the scope id is `<session>:<scope sequence>`; else the id of its text. */
const SCOPE_ID = GROUP + 7;
/** -1: no parent; -2: `<session>:<PARENT_SEQUENCE>`; else the id of the parent scope id's text. */
const PARENT = GROUP + 8;
const PARENT_SEQUENCE = GROUP + 9;
/** As `EXTRA`, its values after the detail's. */
const ATTRIBUTES = GROUP + 10;
/** The record's sequence number in the session's stream. */
const SEQUENCE = GROUP + 11;
/** The largest object id assigned when the record was written: the worker reads it once it knows that many. */
const NEEDS = GROUP + 12;
const VALUES = GROUP + 13;
/**
 * Room for detail and attributes, a cell a key; larger ones are posted as objects. A tfjs sample's
 * detail merged with the process collector's has 12 keys: it fits, so a steady sample posts nothing.
 */
export const VALUE_CELLS = 16;
const SLOT_WIDTH = VALUES + VALUE_CELLS;

/** How a key's value is written in its cell (`ValueLayout.types`): the number itself. */
/** The kinds of values `encodeValues` writes: a record's collector detail, named by reference where
 * nested, and a phase's attributes, copied where nested (user code may change them in place). */
const DETAIL_VALUES = 0;
const ATTRIBUTE_VALUES = 1;
const AS_NUMBER = 0;
/** The id of the text (`idOfText`). */
const AS_TEXT = 1;
/** 1 or 0. */
const AS_BOOLEAN = 2;
/** Nothing: the value is null. */
const AS_NULL = 3;
/** The id of the object or array (`idOfObject`), posted when the reference is new to the worker. */
const AS_OBJECT = 4;
/** A value no cell can name (bigint, undefined, a function): the whole object is posted. */
const UNENCODABLE = -1;

/** Int32 cells of the control buffer. */
const HEAD = 0;
const TAIL = 1;
const WAKE = 2;
/** 1 while the worker sleeps longer than its usual read interval: every publication wakes it then. */
const IDLE = 3;
/** The sequence number of the next record the worker reads (as int32), stored with the tail. */
const CONSUMED = 4;
/** Records the tracker dropped so far, the worker that far behind (as int32), stored at each publication. */
const DROPPED = 5;
const CONTROL_CELLS = 6;

/**
 * Slots of the ring: a burst beyond this many unread records spills into messages. Small on purpose:
 * the slots stay in the training thread's cache (a ring of 8192 slots, 1.8 MB, cost ~80 ns a record
 * in cache misses against ~50 ns for 1024); the worker is woken at every publication.
 */
const RING_CAPACITY = 1024;
/** Records written between two publications of the head (besides the pipeline's timer). */
const PUBLISH_EVERY = 64;
/**
 * Records between two stores of the tail by the worker, and between two reads of it by a tracker
 * whose ring is full: the control cells share a cache line, which each access moves between cores.
 */
const TAIL_EVERY = 32;
/** Records per spill chunk. */
const SPILL_CHUNK = 1024;
/** An object unused for this many records is forgotten by the worker (and posted again if used). */
export const REUSE_WINDOW = 1 << 16;
/**
 * Strings, phase kinds and key lists kept for reuse on the training thread; beyond, a table starts
 * over (and posts again): names made per step (`batch-17`) must not pile up.
 */
const MAX_KEPT = 4096;

/** The shared memory of one ring. */
export interface RingBuffers {
  readonly capacity: number;
  readonly control: SharedArrayBuffer;
  readonly numbers: SharedArrayBuffer;
  readonly timestamps: SharedArrayBuffer;
}

/** An object the worker learns: its id, its value, and the sequence number of the record that first uses it. */
export type RingObject = readonly [id: number, value: unknown, sequence: number];

/** Records that did not fit in the ring, in slot layout. */
export interface SpillChunk {
  readonly count: number;
  readonly numbers: Float64Array;
  readonly timestamps: BigInt64Array;
}

/** What a phase record's scope shares with every other scope of its phase path (on its thread). */
type PhaseKind = Pick<
  PhaseScopeTemplate,
  "name" | "path" | "phasePath" | "depth" | "threadId" | "threadName"
>;

interface ObjectEntry {
  id: number;
  lastSequence: number;
}

interface KindEntry extends ObjectEntry {
  readonly kind: PhaseKind;
}

/** What the worker learns of a key list: the keys in order, and how each one's value is written. */
interface ValueLayout {
  readonly keys: readonly string[];
  readonly types: readonly number[];
}

const EMPTY_LAYOUT: ValueLayout = { keys: [], types: [] };

interface KeyList extends ObjectEntry {
  readonly layout: ValueLayout;
}

/** `capacity - 1`: slots are taken by mask, so that the wrapping int32 counters stay in order. */
function ringMask(capacity: number): number {
  if (!Number.isInteger(capacity) || capacity < 1 || (capacity & (capacity - 1)) !== 0)
    throw new RangeError(`a record ring's capacity must be a power of two, got ${capacity}`);
  return capacity - 1;
}

export function ringBuffers(capacity = RING_CAPACITY): RingBuffers {
  ringMask(capacity);
  return {
    capacity,
    control: new SharedArrayBuffer(CONTROL_CELLS * Int32Array.BYTES_PER_ELEMENT),
    numbers: new SharedArrayBuffer(capacity * SLOT_WIDTH * Float64Array.BYTES_PER_ELEMENT),
    timestamps: new SharedArrayBuffer(capacity * BigInt64Array.BYTES_PER_ELEMENT),
  };
}

/** What the ring writer hands over besides the shared memory. */
export interface RingOutlet {
  /** Objects new to the worker, in id order; posted before any spill chunk that needs them. */
  objects(objects: RingObject[]): void;
  spill(chunk: SpillChunk): void;
}

/**
 * The training thread's side: `write` copies a stored record into the next slot (or a spill
 * chunk), ids and numbers only; what the worker has not seen yet waits in `pending` until `post()`.
 */
export class RecordRingWriter {
  readonly buffers: RingBuffers;
  private readonly control: Int32Array;
  private readonly numbers: Float64Array;
  /** The ring's timestamps as 32-bit words (see `EventStore.copyTimestamp`). */
  private readonly timestampWords: Int32Array;
  private readonly capacity: number;
  private readonly mask: number;
  private readonly outlet: RingOutlet;
  private sessionId = "";
  private prefix = "";
  private sequence = 0;
  private head: number;
  /** The head the worker can see (`publish()`). */
  private published: number;
  /** The worker's tail as last read (it only grows). */
  private tailSeen: number;
  /** `CONSUMED` as last read. */
  private consumedSeen = 0;
  /** Writes that found the ring full (their count says when to read the worker's progress again). */
  private fullWrites = 0;
  private readonly maxBacklog: number;
  private dropped = 0;
  private droppedPublished = 0;
  private nextId = 0;
  private outbox: RingObject[] = [];
  private spillNumbers: Float64Array | null = null;
  private spillTimestamps: BigInt64Array | null = null;
  private spillTimestampWords: Int32Array | null = null;
  private spillCount = 0;
  private readonly objectIds = new WeakMap<object, ObjectEntry>();
  private texts = new Map<string, ObjectEntry>();
  private readonly kinds = new Map<number, Map<string, KindEntry>>();
  private kindCount = 0;
  /** Kinds by the recorder's path keys (`RecordedPhase.pathKey`), beside `kinds`; weak, as paths may be many. */
  private readonly kindsByKey = new WeakMap<object, KindEntry>();
  private readonly keyLists = new Map<string, KeyList>();
  /** The last few key lists used, checked before `keyLists` (which needs a joined key). */
  private readonly recentKeyLists: KeyList[] = [];
  /**
   * The key list each kind of values used last (`DETAIL_VALUES`, `ATTRIBUTE_VALUES`): a phase record has both, so
   * one shared "last" would alternate between them and miss every time.
   */
  private readonly lastKeyLists: (KeyList | null)[] = [null, null];
  private lastBase: JsonObject | null = null;
  private lastGroup: StoredGroup | null = null;
  private lastGroupEntry: ObjectEntry | null = null;
  /** The last two event types and their entries: phase boundaries alternate between two. */
  private readonly typeCache: (string | ObjectEntry | null)[] = ["", null, "", null];
  private lastBaseEntry: ObjectEntry | null = null;

  /** `maxBacklog`: records the worker may be behind (ring and spill chunks) before further ones are dropped. */
  constructor(
    outlet: RingOutlet,
    buffers: RingBuffers = ringBuffers(),
    maxBacklog = Number.POSITIVE_INFINITY,
  ) {
    if (!(maxBacklog >= buffers.capacity))
      throw new RangeError(
        `a ring's backlog bound must hold the ring (${buffers.capacity}), got ${maxBacklog}`,
      );
    this.maxBacklog = maxBacklog;
    this.buffers = buffers;
    this.capacity = buffers.capacity;
    this.mask = ringMask(buffers.capacity);
    this.control = new Int32Array(buffers.control);
    this.numbers = new Float64Array(buffers.numbers);
    this.timestampWords = new Int32Array(buffers.timestamps);
    // Where the ring stands (zero for a new one).
    this.head = Atomics.load(this.control, HEAD);
    this.published = this.head;
    this.tailSeen = Atomics.load(this.control, TAIL);
    this.outlet = outlet;
  }

  /** The session whose scope ids (`<session id>:<sequence>`) are written as numbers. */
  begin(sessionId: string): void {
    this.sessionId = sessionId;
    this.prefix = `${sessionId}:`;
  }

  /** Whether records wait to be published, or objects or spilled records to be posted (`post()`). */
  get holding(): boolean {
    return (
      this.published !== this.head ||
      this.outbox.length > 0 ||
      this.spillCount > 0 ||
      this.dropped !== this.droppedPublished
    );
  }

  get waitingObjects(): number {
    return this.outbox.length;
  }

  /** Records dropped so far because the worker was `maxBacklog` behind. */
  get droppedRecords(): number {
    return this.dropped;
  }

  /**
   * Copies stored record `index` into the ring (or a spill chunk when the worker is a ring behind).
   * `wake`: whether its publication every `PUBLISH_EVERY` records wakes a worker (see `publish`); a
   * full ring always does (the worker must make room). `droppable`: whether the record may be
   * dropped when the worker is `maxBacklog` behind (a session's last records are not: they are few;
   * nor is a `stop` record, whatever its batch).
   */
  write(store: EventStore, index: number, wake = true, droppable = true): void {
    // Head and tail are int32 counters that wrap (a long session passes 2^31 records): distances are
    // taken modulo 2^32, slots by mask.
    if (((this.head - this.tailSeen) | 0) >= this.capacity) {
      // While the ring is full, the worker's progress is read again every `TAIL_EVERY` records (not
      // at each: see `TAIL_EVERY`).
      if ((this.fullWrites & (TAIL_EVERY - 1)) === 0) this.readProgress();
      this.fullWrites = (this.fullWrites + 1) | 0;
      if (droppable && this.tooFarBehind() && store.eventType(index) !== "stop") {
        this.dropped++;
        return;
      }
    }
    const sequence = this.sequence++;
    if (((this.head - this.tailSeen) | 0) >= this.capacity) {
      // The worker must see what the ring holds before it can make room.
      if (this.published !== this.head) this.publish();
      if (this.spillNumbers === null) {
        this.spillNumbers = new Float64Array(SPILL_CHUNK * SLOT_WIDTH);
        this.spillTimestamps = new BigInt64Array(SPILL_CHUNK);
        this.spillTimestampWords = new Int32Array(this.spillTimestamps.buffer);
      }
      const slot = this.spillCount++;
      this.encode(store, index, sequence, this.spillNumbers, slot * SLOT_WIDTH);
      store.copyTimestamp(index, this.spillTimestampWords as Int32Array, slot);
      if (this.spillCount === SPILL_CHUNK) this.post();
      return;
    }
    // Spilled records first: the worker reads in sequence order and would wait for them.
    if (this.spillCount > 0) this.post();
    const slot = this.head & this.mask;
    this.encode(store, index, sequence, this.numbers, slot * SLOT_WIDTH);
    store.copyTimestamp(index, this.timestampWords, slot);
    this.head = (this.head + 1) | 0;
    // Objects first when some wait: a woken worker could read nothing past the record that needs them.
    if (((this.head - this.published) | 0) >= PUBLISH_EVERY) {
      if (this.outbox.length > 0) this.post(wake);
      else this.publish(wake);
    }
  }

  /**
   * Whether the worker is `maxBacklog` records behind. Read again before saying so: it may have caught
   * up since (a load of a line it stores every `TAIL_EVERY` records, cheap beside a record written).
   */
  private tooFarBehind(): boolean {
    if (((this.sequence - this.consumedSeen) | 0) < this.maxBacklog) return false;
    this.readProgress();
    return ((this.sequence - this.consumedSeen) | 0) >= this.maxBacklog;
  }

  /** Reads how far the worker has read: the ring's tail and the next sequence number. */
  private readProgress(): void {
    this.tailSeen = Atomics.load(this.control, TAIL);
    this.consumedSeen = Atomics.load(this.control, CONSUMED);
  }

  /**
   * Shows the worker every record written so far (the head, with `Atomics.store`) and, with `wake`,
   * wakes it if it sleeps. Every `PUBLISH_EVERY` records, and by the pipeline's timer and flush:
   * publishing each record kept the head's cache line moving between the two cores at every record.
   * The timer's publication does not wake a worker that reads on its own every few milliseconds
   * (`RingWatch`): from inside a training step a wake is a system call (34 against 16 us). A worker
   * that went idle (nothing published for a while) is woken by every publication.
   */
  publish(wake = true): void {
    if (this.dropped !== this.droppedPublished) {
      this.droppedPublished = this.dropped;
      Atomics.store(this.control, DROPPED, this.dropped | 0);
    }
    Atomics.store(this.control, HEAD, this.head);
    this.published = this.head;
    if (!wake && Atomics.load(this.control, IDLE) === 0) return;
    // A worker that is reading now sees the flag at its next wait and reads again.
    if (Atomics.load(this.control, WAKE) === 0) {
      Atomics.store(this.control, WAKE, 1);
      Atomics.notify(this.control, WAKE);
    }
  }

  /**
   * Posts the objects the worker has not seen, then the spilled records, and publishes the ring
   * (`wake`: see `publish`; a post wakes the worker anyway).
   */
  post(wake = true): void {
    if (this.outbox.length > 0) {
      const objects = this.outbox;
      this.outbox = [];
      this.outlet.objects(objects);
    }
    if (this.spillCount > 0) {
      const count = this.spillCount;
      this.spillCount = 0;
      const numbers = this.spillNumbers as Float64Array;
      const timestamps = this.spillTimestamps as BigInt64Array;
      if (count < SPILL_CHUNK) {
        // A part of a chunk goes as a copy of what it holds; the buffers stay for the next spill
        // (a worker just behind the ring would otherwise cost a new 250 KB chunk every few records).
        this.outlet.spill({
          count,
          numbers: numbers.slice(0, count * SLOT_WIDTH),
          timestamps: timestamps.slice(0, count),
        });
      } else {
        this.spillNumbers = null;
        this.spillTimestamps = null;
        this.spillTimestampWords = null;
        this.outlet.spill({ count, numbers, timestamps });
      }
    }
    if (this.published !== this.head || this.dropped !== this.droppedPublished) this.publish(wake);
  }

  private encode(store: EventStore, index: number, sequence: number, out: Float64Array, at: number): void {
    store.copyNumbers(index, out, at);
    const group = store.group(index);
    if (
      group === this.lastGroup &&
      sequence - (this.lastGroupEntry as ObjectEntry).lastSequence <= REUSE_WINDOW
    ) {
      (this.lastGroupEntry as ObjectEntry).lastSequence = sequence;
      out[at + GROUP] = (this.lastGroupEntry as ObjectEntry).id;
    } else {
      out[at + GROUP] = this.idOfObject(group, sequence, copyGroup);
      this.lastGroup = group;
      this.lastGroupEntry = this.objectIds.get(group) as ObjectEntry;
    }
    const base = store.base(index);
    if (
      base === this.lastBase &&
      sequence - (this.lastBaseEntry as ObjectEntry).lastSequence <= REUSE_WINDOW
    ) {
      (this.lastBaseEntry as ObjectEntry).lastSequence = sequence;
      out[at + BASE] = (this.lastBaseEntry as ObjectEntry).id;
    } else {
      out[at + BASE] = this.idOfObject(base, sequence, same);
      this.lastBase = base;
      this.lastBaseEntry = this.objectIds.get(base) as ObjectEntry;
    }
    out[at + TYPE] = this.idOfType(store.eventType(index), sequence);
    const context = store.context(index);
    out[at + CONTEXT] = context === null ? -1 : this.idOfText(context, sequence);
    const extra = store.extra(index);
    let values = 0;
    if (extra === null) out[at + EXTRA] = -1;
    else {
      const code = this.encodeValues(extra, out, at + VALUES, VALUE_CELLS, sequence, DETAIL_VALUES);
      if (code === 0) out[at + EXTRA] = this.idOfObject(extra, sequence, same);
      else {
        out[at + EXTRA] = code;
        values = this.valueCount;
      }
    }
    const scope = store.scope(index);
    if (scope === null) out[at + KIND] = -1;
    else this.encodeScope(scope, sequence, out, at, values);
    out[at + SEQUENCE] = sequence;
    out[at + NEEDS] = this.nextId - 1;
  }

  private encodeScope(
    scope: PhaseScopeFacts,
    sequence: number,
    out: Float64Array,
    at: number,
    values: number,
  ): void {
    out[at + KIND] = this.idOfKind(scope, sequence);
    out[at + SCOPE_SEQUENCE] = scope.sequence;
    if (scope.sessionId === this.sessionId && scope.parentSequence !== undefined) {
      // The recorder's own scope: both ids follow from the sequences, nothing to build or parse.
      out[at + SCOPE_ID] = -1;
      const parentSequence = scope.parentSequence;
      if (parentSequence === null) out[at + PARENT] = -1;
      else {
        out[at + PARENT] = -2;
        out[at + PARENT_SEQUENCE] = parentSequence;
      }
    } else this.encodeScopeIds(scope, sequence, out, at);
    const attributes = scope.attributes;
    if (attributes === undefined) out[at + ATTRIBUTES] = -1;
    else {
      // A user's phase metadata may hold an object the loop changes in place between phases: nested
      // objects there are posted with their record (a copy), never named by reference.
      const code = this.encodeValues(
        attributes,
        out,
        at + VALUES + values,
        VALUE_CELLS - values,
        sequence,
        ATTRIBUTE_VALUES,
      );
      out[at + ATTRIBUTES] = code === 0 ? this.idOfObject(attributes, sequence, same) : code;
    }
  }

  /** Scope ids of any other form: numbers where they are `<session>:<n>`, else texts. */
  private encodeScopeIds(scope: PhaseScopeFacts, sequence: number, out: Float64Array, at: number): void {
    out[at + SCOPE_ID] =
      this.sequenceAfterPrefix(scope.scopeId) === scope.sequence
        ? -1
        : this.idOfText(scope.scopeId, sequence);
    const parent = scope.parentScopeId;
    if (parent === null) out[at + PARENT] = -1;
    else {
      const parentSequence = this.sequenceAfterPrefix(parent);
      if (parentSequence >= 0) {
        out[at + PARENT] = -2;
        out[at + PARENT_SEQUENCE] = parentSequence;
      } else out[at + PARENT] = this.idOfText(parent, sequence);
    }
  }

  /** The decimal number after this session's prefix in `scopeId`, or -1 if it is not of that form. */
  private sequenceAfterPrefix(scopeId: string): number {
    const prefix = this.prefix;
    const length = scopeId.length;
    const from = prefix.length;
    if (length === from || length > from + 15 || !scopeId.startsWith(prefix)) return -1;
    // No leading zero: the text must be the number's own.
    if (scopeId.charCodeAt(from) === 48 && length > from + 1) return -1;
    let value = 0;
    for (let i = from; i < length; i++) {
      const digit = scopeId.charCodeAt(i) - 48;
      if (digit < 0 || digit > 9) return -1;
      value = value * 10 + digit;
    }
    return value;
  }

  /** Values written by the last successful `encodeValues`. */
  private valueCount = 0;
  /** The texts and nested objects met by `encodeValues`, by cell, until they are named by id. */
  private readonly references: (string | object | undefined)[] = new Array(VALUE_CELLS).fill(undefined);

  /**
   * Writes an object's values (into `out` from `at`, at most `room`) and returns -2 - its key list's
   * id; 0 when it holds a value no cell can name or more than `room` keys.
   */
  private encodeValues(
    object: JsonObject,
    out: Float64Array,
    at: number,
    room: number,
    sequence: number,
    kind: typeof DETAIL_VALUES | typeof ATTRIBUTE_VALUES,
  ): number {
    let count = 0;
    // Most objects have the keys and types of the last one of their kind: compared in the same pass as
    // the values are written.
    const lastList = this.lastKeyLists[kind] as KeyList | null;
    const last = lastList === null ? EMPTY_LAYOUT : lastList.layout;
    const lastKeys = last.keys;
    const lastTypes = last.types;
    let sameAsLast = true;
    let referenced = false;
    for (const key in object) {
      if (count === room) return this.refuse(referenced, count);
      const value = object[key];
      let type = AS_NUMBER;
      if (typeof value === "number") out[at + count] = value;
      else {
        type = typeOfValue(value);
        if (type === AS_BOOLEAN) out[at + count] = value === true ? 1 : 0;
        else if (type === AS_NULL) out[at + count] = 0;
        else if (type === UNENCODABLE || (type === AS_OBJECT && kind === ATTRIBUTE_VALUES))
          return this.refuse(referenced, count);
        else {
          this.references[count] = value as string | object;
          referenced = true;
        }
      }
      if (sameAsLast && (lastKeys[count] !== key || lastTypes[count] !== type)) sameAsLast = false;
      count++;
    }
    this.valueCount = count;
    // Named only now: an object posted whole must not also post its texts and nested objects.
    if (referenced) this.nameReferences(out, at, count, sequence);
    if (sameAsLast && count === lastKeys.length && count > 0)
      return -2 - this.reuse(lastList as KeyList, sequence);
    const list = this.keyListOf(object, count);
    this.lastKeyLists[kind] = list;
    return -2 - this.reuse(list, sequence);
  }

  /** `encodeValues` gives up: the references met so far are let go. */
  private refuse(referenced: boolean, count: number): number {
    if (referenced) this.references.fill(undefined, 0, count);
    return 0;
  }

  /** Replaces the texts and nested objects met by `encodeValues` with their ids. */
  private nameReferences(out: Float64Array, at: number, count: number, sequence: number): void {
    const references = this.references;
    for (let i = 0; i < count; i++) {
      const value = references[i];
      if (value === undefined) continue;
      references[i] = undefined;
      out[at + i] =
        typeof value === "string" ? this.idOfText(value, sequence) : this.idOfObject(value, sequence, same);
    }
  }

  /** The key list of an object of `count` keys that is not the last one used: a recent, kept or new one. */
  private keyListOf(object: JsonObject, count: number): KeyList {
    const recent = this.recentKeyLists;
    for (let i = 0; i < recent.length; i++) {
      const list = recent[i] as KeyList;
      if (list.layout.keys.length === count && sameLayout(object, list.layout)) return list;
    }
    // `for ... in`, as `encodeValues` reads the values: the same keys in the same order.
    const keys: string[] = [];
    const types: number[] = [];
    for (const key in object) {
      keys.push(key);
      types.push(typeOfValue(object[key]));
    }
    const joined = `${types.join("")}\u0000${keys.join("\u0000")}`;
    let list = this.keyLists.get(joined);
    // Keys holding the separator could join alike: the kept list must have these very keys.
    if (list === undefined || !sameStrings(list.layout.keys, keys)) {
      if (this.keyLists.size >= MAX_KEPT) this.keyLists.clear();
      list = { id: -1, lastSequence: -REUSE_WINDOW - 1, layout: { keys, types } };
      this.keyLists.set(joined, list);
    }
    if (recent.length === 4) recent.pop();
    recent.unshift(list);
    return list;
  }

  /** The entry's id, a new one (posted) if the worker may have forgotten it. */
  private reuse(entry: ObjectEntry & { layout?: ValueLayout; kind?: PhaseKind }, sequence: number): number {
    if (sequence - entry.lastSequence > REUSE_WINDOW) {
      entry.id = this.nextId++;
      this.outbox.push([entry.id, entry.layout ?? entry.kind, sequence]);
    }
    entry.lastSequence = sequence;
    return entry.id;
  }

  private idOfObject<T extends object>(value: T, sequence: number, copy: (value: T) => unknown): number {
    let entry = this.objectIds.get(value);
    if (entry !== undefined && sequence - entry.lastSequence <= REUSE_WINDOW) {
      entry.lastSequence = sequence;
      return entry.id;
    }
    const id = this.nextId++;
    if (entry === undefined) {
      entry = { id, lastSequence: sequence };
      this.objectIds.set(value, entry);
    } else {
      entry.id = id;
      entry.lastSequence = sequence;
    }
    this.outbox.push([id, copy(value), sequence]);
    return id;
  }

  /** `idOfText` for event types, through a two-entry cache (a phase loop alternates enter and exit). */
  private idOfType(type: string, sequence: number): number {
    const cache = this.typeCache;
    for (let k = 0; k < 4; k += 2) {
      if (cache[k] !== type) continue;
      const entry = cache[k + 1] as ObjectEntry;
      if (sequence - entry.lastSequence > REUSE_WINDOW) break;
      entry.lastSequence = sequence;
      return entry.id;
    }
    const id = this.idOfText(type, sequence);
    if (cache[0] !== type) {
      cache[2] = cache[0] as string;
      cache[3] = cache[1] as ObjectEntry;
      cache[0] = type;
    }
    cache[1] = this.texts.get(type) as ObjectEntry;
    return id;
  }

  private idOfText(value: string, sequence: number): number {
    const entry = this.texts.get(value);
    if (entry !== undefined && sequence - entry.lastSequence <= REUSE_WINDOW) {
      entry.lastSequence = sequence;
      return entry.id;
    }
    const id = this.nextId++;
    if (entry === undefined) {
      // Contexts such as `Memory allocated: 1.2 MB` are many: start over rather than keep them all.
      if (this.texts.size >= MAX_KEPT) this.texts = new Map();
      this.texts.set(value, { id, lastSequence: sequence });
    } else {
      entry.id = id;
      entry.lastSequence = sequence;
    }
    this.outbox.push([id, value, sequence]);
    return id;
  }

  private idOfKind(scope: PhaseScopeFacts, sequence: number): number {
    // The recorder's scopes share one key per path: one identity lookup instead of hashing the path.
    const key = scope.pathKey;
    if (key !== undefined) {
      const keyed = this.kindsByKey.get(key);
      if (
        keyed !== undefined &&
        keyed.kind.threadId === scope.threadId &&
        keyed.kind.threadName === scope.threadName
      )
        return this.reuse(keyed, sequence);
      const entry = this.kindEntry(scope);
      this.kindsByKey.set(key, entry);
      return this.reuse(entry, sequence);
    }
    return this.reuse(this.kindEntry(scope), sequence);
  }

  /** The kind of `scope`'s path on its thread, made when new. */
  private kindEntry(scope: PhaseScopeFacts): KindEntry {
    if (this.kindCount >= MAX_KEPT) {
      this.kinds.clear();
      this.kindCount = 0;
    }
    let byPath = this.kinds.get(scope.threadId);
    if (byPath === undefined) {
      byPath = new Map();
      this.kinds.set(scope.threadId, byPath);
    }
    const known = byPath.get(scope.phasePath);
    // Names may contain " / ": two paths can join into one phase path.
    if (
      known !== undefined &&
      known.kind.threadName === scope.threadName &&
      sameStrings(known.kind.path, scope.path)
    )
      return known;
    const entry: KindEntry = {
      id: -1,
      lastSequence: -REUSE_WINDOW - 1,
      kind: {
        name: scope.name,
        path: [...scope.path],
        phasePath: scope.phasePath,
        depth: scope.depth,
        threadId: scope.threadId,
        threadName: scope.threadName,
      },
    };
    byPath.set(scope.phasePath, entry);
    this.kindCount++;
    return entry;
  }
}

interface LearnedObject {
  readonly value: unknown;
  lastUse: number;
}

/**
 * The worker's side: reads records in sequence order from the ring and the spill chunks, rebuilds
 * each in a one-record `EventStore` and materializes it with the session's context (the same code
 * as on the training thread, so the lines are identical).
 */
export class RecordRingReader {
  private readonly control: Int32Array;
  private readonly numbers: Float64Array;
  private readonly timestamps: BigInt64Array;
  private readonly mask: number;
  private readonly objects = new Map<number, LearnedObject>();
  private readonly spills: { chunk: SpillChunk; at: number }[] = [];
  private readonly prefix: string;
  private known = 0;
  private tail: number;
  private nextSequence = 0;
  /** The writer's `DROPPED` as last taken. */
  private droppedSeen = 0;
  private sinceCleanup = 0;

  constructor(
    buffers: RingBuffers,
    private readonly context: RecordContext,
    private readonly store: EventStore,
  ) {
    this.mask = ringMask(buffers.capacity);
    this.control = new Int32Array(buffers.control);
    this.numbers = new Float64Array(buffers.numbers);
    this.timestamps = new BigInt64Array(buffers.timestamps);
    this.tail = Atomics.load(this.control, TAIL);
    this.prefix = `${context.sessionId}:`;
  }

  learn(objects: readonly RingObject[]): void {
    for (const [id, value, sequence] of objects) {
      this.objects.set(id, { value, lastUse: sequence });
      this.known = id + 1;
    }
  }

  spill(chunk: SpillChunk): void {
    this.spills.push({ chunk, at: 0 });
  }

  /**
   * Hands the records that can be read now to `append`, in order, while `more()` says so. Returns
   * true when it stopped for `more()` (records may remain), false when none is readable now.
   */
  drain(append: (record: ReturnType<EventStore["materialize"]>) => void, more: () => boolean): boolean {
    try {
      return this.read(append, more);
    } finally {
      this.storeProgress();
    }
  }

  /** Records the writer dropped (this side `maxBacklog` behind) since the last call. */
  takeDropped(): number {
    const total = Atomics.load(this.control, DROPPED);
    const count = (total - this.droppedSeen) >>> 0;
    this.droppedSeen = total;
    return count;
  }

  /** Shows the writer how far this side has read: the ring's tail, and the next sequence number. */
  private storeProgress(): void {
    Atomics.store(this.control, TAIL, this.tail);
    Atomics.store(this.control, CONSUMED, this.nextSequence | 0);
  }

  private read(
    append: (record: ReturnType<EventStore["materialize"]>) => void,
    more: () => boolean,
  ): boolean {
    let head = Atomics.load(this.control, HEAD);
    for (;;) {
      if (!more()) return true;
      if (this.tail === head) head = Atomics.load(this.control, HEAD);
      if (this.tail !== head) {
        const slot = this.tail & this.mask;
        const at = slot * SLOT_WIDTH;
        if (this.numbers[at + SEQUENCE] === this.nextSequence) {
          if ((this.numbers[at + NEEDS] as number) >= this.known) return false;
          append(this.decode(this.numbers, at, this.timestamps[slot] as bigint));
          this.tail = (this.tail + 1) | 0;
          // The tail shares its cache line with the head: stored per record, the line would move
          // between the cores at every record the tracker writes into a full ring.
          if ((this.nextSequence & (TAIL_EVERY - 1)) === 0) this.storeProgress();
          continue;
        }
      }
      const spill = this.spills[0];
      if (spill === undefined) return false;
      const at = spill.at * SLOT_WIDTH;
      const numbers = spill.chunk.numbers;
      if (numbers[at + SEQUENCE] !== this.nextSequence || (numbers[at + NEEDS] as number) >= this.known)
        return false;
      append(this.decode(numbers, at, spill.chunk.timestamps[spill.at] as bigint));
      if (++spill.at === spill.chunk.count) this.spills.shift();
      if ((this.nextSequence & (TAIL_EVERY - 1)) === 0) this.storeProgress();
    }
  }

  private decode(numbers: Float64Array, at: number, ts: bigint): ReturnType<EventStore["materialize"]> {
    const sequence = this.nextSequence++;
    const extraCode = numbers[at + EXTRA] as number;
    let values = 0;
    let extra: JsonObject | null = null;
    if (extraCode >= 0) extra = this.object(extraCode, sequence) as JsonObject;
    else if (extraCode <= -2) {
      const layout = this.object(-2 - extraCode, sequence) as ValueLayout;
      extra = this.valuesObject(layout, numbers, at + VALUES, sequence);
      values = layout.keys.length;
    }
    const contextId = numbers[at + CONTEXT] as number;
    const kindId = numbers[at + KIND] as number;
    let scope: PhaseScopeFacts | null = null;
    if (kindId >= 0) {
      const kind = this.object(kindId, sequence) as PhaseKind;
      const scopeSequence = numbers[at + SCOPE_SEQUENCE] as number;
      const scopeIdCode = numbers[at + SCOPE_ID] as number;
      const parentCode = numbers[at + PARENT] as number;
      const attributesCode = numbers[at + ATTRIBUTES] as number;
      let attributes: JsonObject | undefined;
      if (attributesCode >= 0) attributes = this.object(attributesCode, sequence) as JsonObject;
      else if (attributesCode <= -2)
        attributes = this.valuesObject(
          this.object(-2 - attributesCode, sequence) as ValueLayout,
          numbers,
          at + VALUES + values,
          sequence,
        );
      // Only `materialize` reads it, and it reads only these fields.
      scope = {
        scopeId:
          scopeIdCode === -1 ? this.prefix + scopeSequence : (this.object(scopeIdCode, sequence) as string),
        name: kind.name,
        path: kind.path,
        phasePath: kind.phasePath,
        depth: kind.depth,
        parentScopeId:
          parentCode === -1
            ? null
            : parentCode === -2
              ? this.prefix + (numbers[at + PARENT_SEQUENCE] as number)
              : (this.object(parentCode, sequence) as string),
        sequence: scopeSequence,
        threadId: kind.threadId,
        threadName: kind.threadName,
        attributes,
      };
    }
    const index = this.store.pushNumbers(
      ts,
      this.object(numbers[at + TYPE] as number, sequence) as string,
      contextId === -1 ? null : (this.object(contextId, sequence) as string),
      this.object(numbers[at + GROUP] as number, sequence) as StoredGroup,
      numbers,
      at,
      this.object(numbers[at + BASE] as number, sequence) as JsonObject,
      extra,
      scope,
    );
    if (++this.sinceCleanup === 4096) this.forgetUnused();
    return this.store.materialize(index, this.context);
  }

  private object(id: number, sequence: number): unknown {
    const entry = this.objects.get(id) as LearnedObject;
    entry.lastUse = sequence;
    return entry.value;
  }

  /** The object a key list's cells make: the writer's keys, in its order, with their values. */
  private valuesObject(layout: ValueLayout, numbers: Float64Array, at: number, sequence: number): JsonObject {
    const { keys, types } = layout;
    const object: JsonObject = {};
    for (let i = 0; i < keys.length; i++) {
      const cell = numbers[at + i] as number;
      const type = types[i];
      // Texts and objects through `object()`: each use keeps them from being forgotten, as the writer counts.
      const value: JsonValue =
        type === AS_NUMBER
          ? cell
          : type === AS_TEXT || type === AS_OBJECT
            ? (this.object(cell, sequence) as JsonValue)
            : type === AS_BOOLEAN
              ? cell === 1
              : null;
      const key = keys[i] as string;
      // Assigned, `__proto__` would set the prototype instead of making the key.
      if (key === "__proto__")
        Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
      else object[key] = value;
    }
    return object;
  }

  /** Drops what went unused for a window (the writer posts it again, with a new id, if used again). */
  private forgetUnused(): void {
    this.sinceCleanup = 0;
    const before = this.nextSequence - REUSE_WINDOW;
    for (const [id, entry] of this.objects) if (entry.lastUse < before) this.objects.delete(id);
  }
}

/** `Atomics.waitAsync` (Node 16+; not in TypeScript's ES2022 library). */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      array: Int32Array,
      index: number,
      value: number,
      timeoutMs: number,
    ): { async: boolean; value: Promise<string> | string };
  }
).waitAsync;

/**
 * Reads that found nothing new before the worker goes idle: more than a short hold's hand-over (50 ms)
 * at the 25 ms read interval, so that a training loop that publishes at least that often never finds it
 * idle and never pays for a wake (a system call). Holds of a long flush interval (up to 500 ms,
 * hand-over-delay.ts) find it idle and wake it: one system call per hand-over, two a second.
 */
export const QUIET_READS_BEFORE_IDLE = 4;

/**
 * The worker's waits between reads of one ring: `readIntervalMs` while records come, `idleIntervalMs`
 * once none came for `QUIET_READS_BEFORE_IDLE` reads. Before a longer wait it raises `IDLE`, so that
 * the tracker's next publication wakes it (and a kill still loses at most what one read interval
 * holds back); it then reads the head again, so a publication that did not see the flag is not
 * missed (both sides use sequentially consistent atomics).
 */
export class RingWatch {
  private readonly control: Int32Array;
  private lastHead: number;
  private quietReads = 0;

  constructor(
    buffers: RingBuffers,
    private readonly readIntervalMs: number,
    private readonly idleIntervalMs: number,
  ) {
    this.control = new Int32Array(buffers.control);
    this.lastHead = Atomics.load(this.control, HEAD);
  }

  /** Resolves when the tracker publishes records (or wakes the worker), or the wait's time passed. */
  wait(): Promise<void> {
    const control = this.control;
    const head = Atomics.load(control, HEAD);
    let timeoutMs = this.readIntervalMs;
    if (head !== this.lastHead) {
      this.lastHead = head;
      this.quietReads = 0;
      Atomics.store(control, IDLE, 0);
    } else if (++this.quietReads > QUIET_READS_BEFORE_IDLE) {
      timeoutMs = this.idleIntervalMs;
      Atomics.store(control, IDLE, 1);
      if (Atomics.load(control, HEAD) !== head) {
        Atomics.store(control, IDLE, 0);
        return Promise.resolve();
      }
    }
    const waited = waitAsync(control, WAKE, 0, timeoutMs);
    return Promise.resolve(waited.value).then(() => {
      Atomics.store(control, WAKE, 0);
    });
  }
}

/** How a value is written in a cell (`AS_*`), or `UNENCODABLE`. */
function typeOfValue(value: JsonValue | undefined): number {
  switch (typeof value) {
    case "number":
      return AS_NUMBER;
    case "string":
      return AS_TEXT;
    case "boolean":
      return AS_BOOLEAN;
    case "object":
      return value === null ? AS_NULL : AS_OBJECT;
    default:
      return UNENCODABLE;
  }
}

/** Whether `object` has the layout's keys, in its order, with values of its types. */
function sameLayout(object: JsonObject, layout: ValueLayout): boolean {
  const { keys, types } = layout;
  let i = 0;
  for (const key in object) {
    if (key !== keys[i] || typeOfValue(object[key]) !== types[i]) return false;
    i++;
  }
  return i === keys.length;
}

function same<T>(value: T): T {
  return value;
}

/** A group's fields as plain data (a `DeviceGroup` holds collectors, which cannot cross threads). */
function copyGroup(group: StoredGroup): StoredGroup {
  return {
    collectorString: group.collectorString,
    deviceId: group.deviceId,
    capabilities: group.capabilities,
  };
}
