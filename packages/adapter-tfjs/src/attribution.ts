import type { PhaseContextLike } from "@stormlog/core";
import type { TfEngine, TfEngineState, TfTrackedTensor } from "./types.js";

/** Size groups reported per birth phase in `tfjs_live_by_phase`. */
export const LARGEST_GROUPS = 3;

/** One `(dtype, shape)` group of live tensors born in one phase (a type, so that it is JSON). */
export type LiveTensorGroup = {
  dtype: string;
  shape: number[];
  /** Total bytes of the group's live tensors. */
  bytes: number;
  /** Live tensors in the group. */
  count: number;
};

/** Live tensors born in one phase path: one value of `tfjs_live_by_phase`. */
export type LivePhaseTensors = {
  tensors: number;
  bytes: number;
  /** At most {@link LARGEST_GROUPS} groups, largest total bytes first. */
  largest: LiveTensorGroup[];
};

/** What one collector holds of the engine's shared attribution; `release()` is idempotent. */
export interface BirthPhaseSubscription {
  /**
   * Live tensors by birth phase path ("" outside any phase); only paths with live tensors. While the
   * result stays the same it is the same object (encoders may tell by identity): do not change it.
   */
  live(): Record<string, LivePhaseTensors>;
  /** Routes later tensor births to this context's current phase. */
  bind(context: PhaseContextLike | null): void;
  /**
   * The engine's byte count (`tf.memory().numBytes`) at its highest since this subscription's previous
   * call, when that is above its value then and now (a peak that readings at both ends miss), else
   * null. Each call starts a new window. Followed at every tensor the engine tracks.
   */
  takeHighWater(): number | null;
  /** Why attribution stopped (an internal error), or undefined while it works. */
  readonly error: string | undefined;
  release(): void;
}

/** Marks our wrappers with their hook, so that every copy of this package finds it (no double wrap). */
const HOOK_KEY: unique symbol = Symbol.for("stormlog.tfjs.birth_phases") as never;

type TrackTensor = (tensor: TfTrackedTensor, backend: unknown) => void;
type DisposeTensor = (tensor: TfTrackedTensor) => void;
type Method = (this: unknown, ...args: never[]) => void;

/** The engine fields the hook reads (tfjs 4.x `Engine`). */
interface HookableEngine {
  readonly state: TfEngineState;
  readonly trackTensor: TrackTensor;
  readonly disposeTensor: DisposeTensor;
}

/** One wrapped method: where it was found (the engine's prototype, as a rule) and what it was. */
interface Patch {
  readonly holder: Record<string, unknown>;
  readonly name: string;
  readonly original: Method;
  readonly wrapper: Method;
}

/** The object of `engine`'s prototype chain that holds `name` itself. */
function holderOf(engine: object, name: string): Record<string, unknown> | undefined {
  for (
    let object: object | null = engine;
    object !== null;
    object = Object.getPrototypeOf(object) as object | null
  ) {
    if (Object.hasOwn(object, name)) return object as Record<string, unknown>;
  }
  return undefined;
}

/** `method`, or what it wraps when it is an uninstalled (inert) wrapper of ours, as deep as they go. */
function skipInert(method: Method, name: string): Method {
  let current = method;
  for (;;) {
    const hook = (current as { [HOOK_KEY]?: BirthPhases })[HOOK_KEY];
    const below = hook !== undefined && !hook.active ? hook.originalOf(name) : undefined;
    if (below === undefined) return current;
    current = below;
  }
}

/** Our hook for `engine`, from the marker on the `trackTensor` it runs now (any copy of this package). */
function hookOf(engine: HookableEngine): BirthPhases | undefined {
  for (let method: unknown = engine.trackTensor; typeof method === "function"; ) {
    const hook = (method as { [HOOK_KEY]?: BirthPhases })[HOOK_KEY];
    if (hook === undefined) return undefined;
    if (hook.engine === engine && hook.active) return hook;
    // Another engine's hook on the shared prototype: look under it.
    method = hook.originalTrack;
  }
  return undefined;
}

/** dtype codes kept per tensor; OTHER keeps the tensor itself for its dtype. */
const DTYPES = ["float32", "int32", "bool", "complex64", "string"] as const;
const FLOAT32 = 0;
const INT32 = 1;
const BOOL = 2;
const COMPLEX64 = 3;
const STRING = 4;
const OTHER = 5;
/** Bytes per element of the dtypes kept inline, as tfjs counts them (complex64 by its components). */
const ELEMENT_BYTES: readonly number[] = [4, 4, 1, 0];
/** Dimensions kept inline per tensor; higher ranks keep the tensor itself (rare). */
const INLINE_RANK = 6;
/** A record's `meta` byte: the dtype code in its low bits, the rank above them, KEPT on top. */
const CODE_BITS = 7;
const RANK_SHIFT = 3;
/** The record keeps its tensor (strings, other dtypes, high ranks): its dtype, shape and bytes are read from it. */
const KEPT = 64;
/** A free record's id (tfjs numbers tensors from 0). */
const EMPTY = -1;
/** Distinct phase paths kept before unused ones are dropped (paths with step numbers in them). */
const MAX_PATHS = 4096;
/** Slots of a new table; it doubles when its overflow fills. */
const INITIAL_SLOTS = 1024;

/**
 * Tensor ids to overflow records: open addressing (linear probing, backward-shift deletion) on typed
 * arrays, for the few tensors that do not sit in their slot of {@link LiveTensors}.
 */
class OverflowIndex {
  private keys = new Float64Array(0);
  private records = new Int32Array(0);
  private shift = 32;
  private size = 0;

  constructor() {
    this.resize(64);
  }

  /** The record of `id`, or -1. */
  get(id: number): number {
    const keys = this.keys;
    const mask = keys.length - 1;
    for (let i = Math.imul(id | 0, 0x9e3779b1) >>> this.shift; ; i = (i + 1) & mask) {
      const key = keys[i] as number;
      if (key === EMPTY) return -1;
      if (key === id) return this.records[i] as number;
    }
  }

  /** Adds `id`, which is not in the index. */
  set(id: number, record: number): void {
    if ((this.size + 1) * 2 > this.keys.length) this.resize(this.keys.length * 2);
    const keys = this.keys;
    const mask = keys.length - 1;
    let i = Math.imul(id | 0, 0x9e3779b1) >>> this.shift;
    while ((keys[i] as number) !== EMPTY) i = (i + 1) & mask;
    keys[i] = id;
    this.records[i] = record;
    this.size++;
  }

  /** Removes `id`; returns its record, or -1 when it was not there. */
  delete(id: number): number {
    const keys = this.keys;
    const mask = keys.length - 1;
    let i = Math.imul(id | 0, 0x9e3779b1) >>> this.shift;
    for (;;) {
      const key = keys[i] as number;
      if (key === EMPTY) return -1;
      if (key === id) break;
      i = (i + 1) & mask;
    }
    const record = this.records[i] as number;
    this.size--;
    // Backward shift: move later entries of the probe run into the hole, so lookups need no tombstones.
    let hole = i;
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const key = keys[j] as number;
      if (key === EMPTY) break;
      const home = Math.imul(key | 0, 0x9e3779b1) >>> this.shift;
      // Stays when its home lies cyclically in (hole, j].
      if (hole <= j ? hole < home && home <= j : hole < home || home <= j) continue;
      keys[hole] = key;
      this.records[hole] = this.records[j] as number;
      hole = j;
    }
    keys[hole] = EMPTY;
    return record;
  }

  private resize(capacity: number): void {
    const oldKeys = this.keys;
    const oldRecords = this.records;
    this.shift = 32 - Math.log2(capacity);
    this.keys = new Float64Array(capacity).fill(EMPTY);
    this.records = new Int32Array(capacity);
    this.size = 0;
    for (let s = 0; s < oldKeys.length; s++) {
      const key = oldKeys[s] as number;
      if (key !== EMPTY) this.set(key, oldRecords[s] as number);
    }
  }
}

/**
 * The live tensors of one engine with their birth phase, as records in typed arrays: tracking
 * allocates nothing and stores no object (no write barriers). tfjs numbers its tensors in order, so
 * a tensor's record is its slot `id & mask` (no hashing, no probing). A tensor still live when a
 * newer id takes its slot (weights, optimizer state) moves to an overflow record after the slots,
 * found by id in an {@link OverflowIndex}; when the overflow fills, the slots double.
 */
class LiveTensors {
  /** Tensor id per record, EMPTY when free: the slots [0, slots), then the overflow records. */
  keys = new Float64Array(0);
  phase = new Int32Array(0);
  /** dtype code | rank << RANK_SHIFT | KEPT. */
  meta = new Uint8Array(0);
  /** INLINE_RANK dimensions per record. */
  dims = new Int32Array(0);
  /** Records in use lie below it: the slots, and the overflow records handed out so far. */
  end = 0;
  private mask = 0;
  private overflow = new OverflowIndex();
  private overflowFree = new Int32Array(0);
  private overflowFreeTop = 0;
  /** No overflow record has a larger id, so that new ids (the rule) skip the overflow lookup. */
  private overflowMaxId = Number.NEGATIVE_INFINITY;
  /** The tensors of KEPT records, by record. */
  kept = new Map<number, TfTrackedTensor>();
  // What changed since the last grouping (`live()`), so that it can skip grouping when nothing did.
  /** The largest id live at the last grouping; later ids are new since. */
  watermark = Number.NEGATIVE_INFINITY;
  /** Live tensors with ids above `watermark`. */
  fresh = 0;
  /** Additions and removals of ids up to `watermark`. */
  stale = 0;
  /** The record freed by the last removal counted in `stale`, or -1. */
  private staleFreed = -1;
  private readonly savedDims = new Int32Array(INLINE_RANK);

  constructor() {
    this.allocate(INITIAL_SLOTS);
  }

  /**
   * Records `tensor` (whose id is `id`) as born in `phase`, and returns its record; one tracked again
   * keeps its record, with the newer birth.
   */
  add(tensor: TfTrackedTensor, id: number, phase: number): number {
    const keys = this.keys;
    let record = id & this.mask;
    const occupant = keys[record] as number;
    if (occupant !== id) {
      // The rule: a new id, newer than any in the overflow, and its slot free.
      if (occupant === EMPTY && !(id <= this.overflowMaxId)) keys[record] = id;
      else record = this.recordOf(id);
    } else if ((this.meta[record] as number) >= KEPT) this.kept.delete(record);
    this.phase[record] = phase;
    const dtype = tensor.dtype;
    const code =
      dtype === "float32"
        ? FLOAT32
        : dtype === "int32"
          ? INT32
          : dtype === "bool"
            ? BOOL
            : dtype === "complex64"
              ? COMPLEX64
              : dtype === "string"
                ? STRING
                : OTHER;
    const shape = code < STRING ? tensor.shape : undefined;
    if (shape !== undefined && shape.length <= INLINE_RANK) {
      const rank = shape.length;
      this.meta[record] = code | (rank << RANK_SHIFT);
      const dims = this.dims;
      const base = record * INLINE_RANK;
      for (let d = 0; d < rank; d++) dims[base + d] = shape[d] as number;
    } else {
      // Strings' bytes are known once their values are written; other dtypes and high ranks are rare.
      this.meta[record] = KEPT | code;
      this.kept.set(record, tensor);
    }
    if (id > this.watermark) this.fresh++;
    else this.stale++;
    return record;
  }

  /**
   * `add` for the tensor removed last, tracked again with its birth phase (`Variable.assign()` does so
   * every optimizer step): with the same dtype and shape as it had at the last grouping, it is no change.
   */
  addAgain(tensor: TfTrackedTensor, id: number, phase: number): void {
    const freed = this.staleFreed;
    const meta = freed >= 0 ? (this.meta[freed] as number) : KEPT;
    // New since the last grouping, or a string (its new value may have other bytes): counted by `add`.
    if (id > this.watermark || meta >= KEPT) {
      this.add(tensor, id, phase);
      return;
    }
    const rank = meta >>> RANK_SHIFT;
    const saved = this.savedDims;
    for (let d = 0; d < rank; d++) saved[d] = this.dims[freed * INLINE_RANK + d] as number;
    const record = this.add(tensor, id, phase);
    if (this.meta[record] !== meta) return;
    const base = record * INLINE_RANK;
    for (let d = 0; d < rank; d++) if (this.dims[base + d] !== saved[d]) return;
    // Its removal and this addition cancel out.
    this.stale -= 2;
  }

  /** After grouping: what is live now is what the next grouping compares with. */
  grouped(largestLiveId: number): void {
    this.watermark = largestLiveId;
    this.fresh = 0;
    this.stale = 0;
    this.staleFreed = -1;
  }

  /** The record of `id` when its slot holds another id: its overflow record, or a new record. */
  private recordOf(id: number): number {
    let record = id <= this.overflowMaxId ? this.overflow.get(id) : -1;
    if (record >= 0) {
      if ((this.meta[record] as number) >= KEPT) this.kept.delete(record);
      return record;
    }
    record = this.place(id);
    if (record >= 0) return record;
    this.grow();
    return this.place(id);
  }

  /** Removes the tensor; returns its phase, or -1 when it was not tracked. */
  remove(id: number): number {
    let record = id & this.mask;
    if ((this.keys[record] as number) !== id) {
      if (!(id <= this.overflowMaxId)) return -1;
      record = this.overflow.delete(id);
      if (record < 0) return -1;
      this.overflowFree[this.overflowFreeTop++] = record;
      // The overflow emptied: `live()` scans the slots only, and new ids skip the lookup again.
      if (this.overflowFreeTop === this.end - this.slots()) this.clearOverflow();
    }
    this.keys[record] = EMPTY;
    if ((this.meta[record] as number) >= KEPT) this.kept.delete(record);
    if (id > this.watermark) this.fresh--;
    else {
      this.stale++;
      this.staleFreed = record;
    }
    return this.phase[record] as number;
  }

  private slots(): number {
    return this.mask + 1;
  }

  /**
   * A record for the new `id`: its slot, whose older tensor moves to the overflow, or an overflow
   * record when the slot holds a newer id; -1 when that needs an overflow record and none is left.
   */
  private place(id: number): number {
    const keys = this.keys;
    const slot = id & this.mask;
    const occupant = keys[slot] as number;
    if (occupant === EMPTY) {
      keys[slot] = id;
      return slot;
    }
    if (this.overflowFreeTop === 0 && this.end === keys.length) return -1;
    if (id < occupant) return this.overflowRecord(id);
    const record = this.overflowRecord(occupant);
    this.phase[record] = this.phase[slot] as number;
    const meta = this.meta[slot] as number;
    this.meta[record] = meta;
    if (meta >= KEPT) {
      this.kept.set(record, this.kept.get(slot) as TfTrackedTensor);
      this.kept.delete(slot);
    } else this.dims.copyWithin(record * INLINE_RANK, slot * INLINE_RANK, (slot + 1) * INLINE_RANK);
    keys[slot] = id;
    return slot;
  }

  private overflowRecord(id: number): number {
    const record =
      this.overflowFreeTop > 0 ? (this.overflowFree[--this.overflowFreeTop] as number) : this.end++;
    this.keys[record] = id;
    this.overflow.set(id, record);
    if (id > this.overflowMaxId) this.overflowMaxId = id;
    return record;
  }

  /** Once no overflow record is in use (its index is then empty, as deletion leaves nothing behind). */
  private clearOverflow(): void {
    this.end = this.slots();
    this.overflowFreeTop = 0;
    this.overflowMaxId = Number.NEGATIVE_INFINITY;
  }

  private allocate(slots: number): void {
    // As many overflow records as half the slots: the table doubles when they are all taken.
    const records = slots + slots / 2;
    this.keys = new Float64Array(records).fill(EMPTY);
    this.phase = new Int32Array(records);
    this.meta = new Uint8Array(records);
    this.dims = new Int32Array(records * INLINE_RANK);
    this.overflowFree = new Int32Array(slots / 2);
    this.mask = slots - 1;
    this.kept = new Map();
    this.overflow = new OverflowIndex();
    this.clearOverflow();
  }

  /** Doubles the slots until every live tensor is placed again with an overflow record to spare. */
  private grow(): void {
    const { keys, phase, meta, dims, kept, end } = this;
    this.staleFreed = -1;
    placing: for (let slots = this.slots() * 2; ; slots *= 2) {
      this.allocate(slots);
      for (let from = 0; from < end; from++) {
        const id = keys[from] as number;
        if (id === EMPTY) continue;
        const record = this.place(id);
        if (record < 0) continue placing;
        this.phase[record] = phase[from] as number;
        const code = meta[from] as number;
        this.meta[record] = code;
        if (code >= KEPT) this.kept.set(record, kept.get(from) as TfTrackedTensor);
        else this.dims.set(dims.subarray(from * INLINE_RANK, (from + 1) * INLINE_RANK), record * INLINE_RANK);
      }
      if (this.end < this.keys.length) return;
    }
  }
}

/** A group of KEPT records while sampling (strings, rare dtypes, high ranks), found by a built key. */
interface KeptGroup {
  readonly phase: number;
  readonly dtype: string;
  readonly shape: readonly number[];
  bytes: number;
  count: number;
}

/**
 * What `live()` computes, without building objects, so that an unchanged result is recognised before
 * anything is allocated: live records grouped by (birth phase, dtype, dims) in an open-addressing
 * table on typed arrays (a group is named by its first record), then per phase the tensors, bytes and
 * the {@link LARGEST_GROUPS} largest groups. A group handle is its table slot, or -1 - its index in
 * `keptGroups`. The arrays are kept between samples.
 */
class LiveSummary {
  private groupHash = new Int32Array(0);
  /** The first record of each group slot's group, -1 when the slot is free. */
  private groupRecord = new Int32Array(0);
  private groupCount = new Int32Array(0);
  private groupBytes = new Float64Array(0);
  /** The slots in use. */
  private groupSlots = new Int32Array(0);
  private groups = 0;
  private keptGroups: KeptGroup[] = [];
  private readonly keptGroupIndex = new Map<string, number>();
  private table: LiveTensors | undefined;
  /** Per phase index. */
  tensors = new Float64Array(0);
  bytes = new Float64Array(0);
  private largest = new Int32Array(0);
  private largestCount = new Uint8Array(0);
  /** The phases with live tensors, `phaseCount` of them. */
  phases = new Int32Array(0);
  phaseCount = 0;
  /** The largest live tensor id. */
  largestId = Number.NEGATIVE_INFINITY;

  constructor() {
    this.resizeGroups(256);
  }

  summarize(table: LiveTensors, tensorInfo: TfEngineState["tensorInfo"], pathCount: number): void {
    this.reset(pathCount);
    this.table = table;
    const { keys, meta, phase, dims } = table;
    const end = table.end;
    let largestId = Number.NEGATIVE_INFINITY;
    for (let record = 0; record < end; record++) {
      const id = keys[record] as number;
      if (id === EMPTY) continue;
      if (id > largestId) largestId = id;
      const code = meta[record] as number;
      if (code >= KEPT) {
        this.addKept(table, record, code, tensorInfo);
        continue;
      }
      const birth = phase[record] as number;
      const rank = code >>> RANK_SHIFT;
      const base = record * INLINE_RANK;
      let hash = Math.imul(birth + 1, 0x9e3779b1) ^ code;
      for (let d = 0; d < rank; d++) hash = Math.imul(hash ^ (dims[base + d] as number), 0x85ebca6b);
      hash ^= hash >>> 15;
      const groupRecord = this.groupRecord;
      const mask = groupRecord.length - 1;
      let slot = hash & mask;
      search: for (;;) {
        const first = groupRecord[slot] as number;
        if (first < 0) break;
        if (
          (this.groupHash[slot] as number) === hash &&
          (meta[first] as number) === code &&
          (phase[first] as number) === birth
        ) {
          const firstBase = first * INLINE_RANK;
          for (let d = 0; d < rank; d++) {
            if ((dims[firstBase + d] as number) !== (dims[base + d] as number)) {
              slot = (slot + 1) & mask;
              continue search;
            }
          }
          this.groupCount[slot] = (this.groupCount[slot] as number) + 1;
          break;
        }
        slot = (slot + 1) & mask;
      }
      if ((groupRecord[slot] as number) < 0) this.addGroup(slot, hash, record);
    }
    this.largestId = largestId;
    for (let g = 0; g < this.groups; g++) {
      const slot = this.groupSlots[g] as number;
      const first = this.groupRecord[slot] as number;
      const code = meta[first] as number;
      const base = first * INLINE_RANK;
      let elements = 1;
      for (let d = 0, rank = code >>> RANK_SHIFT; d < rank; d++) elements *= dims[base + d] as number;
      const count = this.groupCount[slot] as number;
      const bytes = count * elements * (ELEMENT_BYTES[code & CODE_BITS] as number);
      this.groupBytes[slot] = bytes;
      this.addToPhase(phase[first] as number, slot, count, bytes);
    }
    for (let k = 0; k < this.keptGroups.length; k++) {
      const group = this.keptGroups[k] as KeptGroup;
      this.addToPhase(group.phase, -1 - k, group.count, group.bytes);
    }
  }

  private addKept(
    table: LiveTensors,
    record: number,
    code: number,
    tensorInfo: TfEngineState["tensorInfo"],
  ): void {
    const tensor = table.kept.get(record);
    if (tensor === undefined) return;
    const dtypeCode = code & CODE_BITS;
    // String bytes are what tfjs counted when the values were written (2 bytes a character).
    const bytes =
      dtypeCode === STRING
        ? (tensorInfo?.get(tensor.dataId)?.bytes ?? 0)
        : tensor.size * (dtypeCode === OTHER ? 4 : (ELEMENT_BYTES[dtypeCode] as number));
    const birth = table.phase[record] as number;
    const key = `${birth}:${tensor.dtype}:${tensor.shape.join(",")}`;
    const index = this.keptGroupIndex.get(key);
    if (index === undefined) {
      this.keptGroupIndex.set(key, this.keptGroups.length);
      this.keptGroups.push({ phase: birth, dtype: tensor.dtype, shape: tensor.shape, bytes, count: 1 });
      return;
    }
    const group = this.keptGroups[index] as KeptGroup;
    group.bytes += bytes;
    group.count++;
  }

  private addGroup(slot: number, hash: number, record: number): void {
    this.groupRecord[slot] = record;
    this.groupHash[slot] = hash;
    this.groupCount[slot] = 1;
    this.groupSlots[this.groups++] = slot;
    if (this.groups * 2 > this.groupRecord.length) this.resizeGroups(this.groupRecord.length * 2);
  }

  private resizeGroups(capacity: number): void {
    const { groupHash, groupRecord, groupCount, groupSlots, groups } = this;
    this.groupHash = new Int32Array(capacity);
    this.groupRecord = new Int32Array(capacity).fill(-1);
    this.groupCount = new Int32Array(capacity);
    this.groupBytes = new Float64Array(capacity);
    this.groupSlots = new Int32Array(capacity);
    const mask = capacity - 1;
    for (let g = 0; g < groups; g++) {
      const from = groupSlots[g] as number;
      const hash = groupHash[from] as number;
      let slot = hash & mask;
      while ((this.groupRecord[slot] as number) >= 0) slot = (slot + 1) & mask;
      this.groupHash[slot] = hash;
      this.groupRecord[slot] = groupRecord[from] as number;
      this.groupCount[slot] = groupCount[from] as number;
      this.groupSlots[g] = slot;
    }
  }

  /** Clears what the last call left (only the slots and phases it used), for `pathCount` phases. */
  private reset(pathCount: number): void {
    for (let g = 0; g < this.groups; g++) this.groupRecord[this.groupSlots[g] as number] = -1;
    this.groups = 0;
    if (this.keptGroups.length > 0) {
      this.keptGroups = [];
      this.keptGroupIndex.clear();
    }
    for (let i = 0; i < this.phaseCount; i++) {
      const p = this.phases[i] as number;
      this.tensors[p] = 0;
      this.bytes[p] = 0;
      this.largestCount[p] = 0;
    }
    this.phaseCount = 0;
    if (this.tensors.length < pathCount) {
      const length = Math.max(pathCount, this.tensors.length * 2, 16);
      this.tensors = new Float64Array(length);
      this.bytes = new Float64Array(length);
      this.largest = new Int32Array(length * LARGEST_GROUPS);
      this.largestCount = new Uint8Array(length);
      this.phases = new Int32Array(length);
    }
  }

  private addToPhase(birth: number, group: number, count: number, bytes: number): void {
    if ((this.tensors[birth] as number) === 0) this.phases[this.phaseCount++] = birth;
    this.tensors[birth] = (this.tensors[birth] as number) + count;
    this.bytes[birth] = (this.bytes[birth] as number) + bytes;
    // Insertion into the phase's largest groups, at most LARGEST_GROUPS of them.
    const base = birth * LARGEST_GROUPS;
    const held = this.largestCount[birth] as number;
    let at = held;
    while (at > 0 && this.before(group, this.largest[base + at - 1] as number)) at--;
    if (at >= LARGEST_GROUPS) return;
    for (let i = Math.min(held, LARGEST_GROUPS - 1); i > at; i--)
      this.largest[base + i] = this.largest[base + i - 1] as number;
    this.largest[base + at] = group;
    if (held < LARGEST_GROUPS) this.largestCount[birth] = held + 1;
  }

  /** Whether group `a` comes before `b`: more bytes, then more tensors, then dtype and shape text. */
  private before(a: number, b: number): boolean {
    const bytesA = this.bytesOf(a);
    const bytesB = this.bytesOf(b);
    if (bytesA !== bytesB) return bytesA > bytesB;
    const countA = this.countOf(a);
    const countB = this.countOf(b);
    if (countA !== countB) return countA > countB;
    const dtypeA = this.dtypeOf(a);
    const dtypeB = this.dtypeOf(b);
    if (dtypeA !== dtypeB) return dtypeA < dtypeB;
    return this.shapeOf(a).join(",") < this.shapeOf(b).join(",");
  }

  private bytesOf(group: number): number {
    return group >= 0 ? (this.groupBytes[group] as number) : (this.keptGroups[-1 - group] as KeptGroup).bytes;
  }

  private countOf(group: number): number {
    return group >= 0 ? (this.groupCount[group] as number) : (this.keptGroups[-1 - group] as KeptGroup).count;
  }

  private dtypeOf(group: number): string {
    if (group < 0) return (this.keptGroups[-1 - group] as KeptGroup).dtype;
    const table = this.table as LiveTensors;
    return DTYPES[(table.meta[this.groupRecord[group] as number] as number) & CODE_BITS] as string;
  }

  /** The group's shape, a new array. */
  private shapeOf(group: number): number[] {
    if (group < 0) return [...(this.keptGroups[-1 - group] as KeptGroup).shape];
    const table = this.table as LiveTensors;
    const first = this.groupRecord[group] as number;
    const rank = (table.meta[first] as number) >>> RANK_SHIFT;
    const shape = new Array<number>(rank);
    for (let d = 0; d < rank; d++) shape[d] = table.dims[first * INLINE_RANK + d] as number;
    return shape;
  }

  private sameShape(group: number, shape: readonly number[]): boolean {
    if (group < 0) {
      const own = (this.keptGroups[-1 - group] as KeptGroup).shape;
      if (own.length !== shape.length) return false;
      for (let d = 0; d < own.length; d++) if (own[d] !== shape[d]) return false;
      return true;
    }
    const table = this.table as LiveTensors;
    const first = this.groupRecord[group] as number;
    const rank = (table.meta[first] as number) >>> RANK_SHIFT;
    if (rank !== shape.length) return false;
    for (let d = 0; d < rank; d++) if (table.dims[first * INLINE_RANK + d] !== shape[d]) return false;
    return true;
  }

  /** Whether `phase`'s summary is what `entry` says. */
  matches(phase: number, entry: LivePhaseTensors): boolean {
    const count = this.largestCount[phase] as number;
    if (entry.tensors !== this.tensors[phase] || entry.bytes !== this.bytes[phase]) return false;
    if (entry.largest.length !== count) return false;
    for (let i = 0; i < count; i++) {
      const group = this.largest[phase * LARGEST_GROUPS + i] as number;
      const old = entry.largest[i] as LiveTensorGroup;
      if (
        old.bytes !== this.bytesOf(group) ||
        old.count !== this.countOf(group) ||
        old.dtype !== this.dtypeOf(group) ||
        !this.sameShape(group, old.shape)
      )
        return false;
    }
    return true;
  }

  entry(phase: number): LivePhaseTensors {
    const count = this.largestCount[phase] as number;
    const largest: LiveTensorGroup[] = new Array(count);
    for (let i = 0; i < count; i++) {
      const group = this.largest[phase * LARGEST_GROUPS + i] as number;
      largest[i] = {
        dtype: this.dtypeOf(group),
        shape: this.shapeOf(group),
        bytes: this.bytesOf(group),
        count: this.countOf(group),
      };
    }
    return { tensors: this.tensors[phase] as number, bytes: this.bytes[phase] as number, largest };
  }
}

/**
 * The birth phase of every live tensor of one engine. Its wrappers of `engine.trackTensor` (every
 * creation path, kernels included, goes through it) and `engine.disposeTensor` keep each tensor's
 * phase, dtype and shape until it is disposed; grouping (and bytes) wait for `live()` (sampling).
 */
class BirthPhases {
  private table = new LiveTensors();
  private state: TfEngineState;
  private readonly subscribers = new Set<Subscription>();
  private context: PhaseContextLike | null = null;
  /** Phase paths by index; index 0 is "" (outside any phase). */
  private paths: string[] = [""];
  private readonly pathIndex = new Map<string, number>([["", 0]]);
  private lastPath = "";
  private lastIndex = 0;
  /** The byte count's highest value since any subscription's last `takeHighWater()`. */
  private highWater: number;
  /** `Variable.assign()` disposes and re-tracks the same tensor: it keeps its birth phase. */
  private lastDisposedId = -1;
  private lastDisposedPhase = -1;
  private readonly summary = new LiveSummary();
  /** The last `live()` result, returned again while it stays the same, and the table it came from. */
  private lastResult: Record<string, LivePhaseTensors> | undefined = undefined;
  private lastTable: LiveTensors | undefined = undefined;
  /** The last result's phases in order, and its values by phase index (no lookups by path). */
  private lastOrder: number[] = [];
  private lastEntries: (LivePhaseTensors | undefined)[] = [];
  /** Made once: sampling allocates no closure. */
  private readonly phaseComparator = (a: number, b: number): number => this.comparePhases(a, b);
  active = true;
  error: string | undefined = undefined;
  readonly originalTrack: TrackTensor;
  private readonly patches: Patch[];

  /**
   * Wraps the methods where they are defined, on the engine's prototype: adding (and later deleting)
   * own properties would change the engine's hidden class, and a delete leaves it in dictionary mode,
   * slowing every tfjs call afterwards. Only calls on this engine are attributed.
   */
  constructor(
    readonly engine: HookableEngine,
    trackHolder: Record<string, unknown>,
    disposeHolder: Record<string, unknown>,
  ) {
    this.state = engine.state;
    this.highWater = engine.state.numBytes;
    const track = engine.trackTensor;
    const dispose = engine.disposeTensor;
    this.originalTrack = track;
    const hook = this;
    const wrappedTrack = function trackTensor(
      this: unknown,
      tensor: TfTrackedTensor,
      backend: unknown,
    ): void {
      track.call(this, tensor, backend);
      if (this === engine && hook.active) hook.born(tensor);
    };
    const wrappedDispose = function disposeTensor(this: unknown, tensor: TfTrackedTensor): void {
      if (this === engine && hook.active) hook.died(tensor);
      dispose.call(this, tensor);
    };
    (wrappedTrack as { [HOOK_KEY]?: BirthPhases })[HOOK_KEY] = this;
    (wrappedDispose as { [HOOK_KEY]?: BirthPhases })[HOOK_KEY] = this;
    this.patches = [
      {
        holder: trackHolder,
        name: "trackTensor",
        original: track as Method,
        wrapper: wrappedTrack as Method,
      },
      {
        holder: disposeHolder,
        name: "disposeTensor",
        original: dispose as Method,
        wrapper: wrappedDispose as Method,
      },
    ];
    for (const patch of this.patches) patch.holder[patch.name] = patch.wrapper;
  }

  private born(tensor: TfTrackedTensor): void {
    try {
      // engine.reset() replaced the state: the tensors recorded before it are gone.
      if (this.engine.state !== this.state) this.restart();
      const id = tensor.id;
      if (id === this.lastDisposedId) {
        const phase = this.lastDisposedPhase;
        this.lastDisposedId = -1;
        // A variable that existed before attribution began: its birth is unknown, as its first value's.
        if (phase >= 0) this.table.addAgain(tensor, id, phase);
        return;
      }
      const context = this.context;
      const path = context === null ? "" : context.currentPhasePath();
      this.table.add(tensor, id, path === this.lastPath ? this.lastIndex : this.indexOf(path));
      const bytes = this.state.numBytes;
      if (bytes > this.highWater) this.highWater = bytes;
    } catch (error) {
      this.fail(error);
    }
  }

  private died(tensor: TfTrackedTensor): void {
    try {
      const id = tensor.id;
      this.lastDisposedPhase = this.table.remove(id);
      this.lastDisposedId = id;
    } catch (error) {
      this.fail(error);
    }
  }

  private indexOf(path: string): number {
    let index = this.pathIndex.get(path);
    if (index === undefined) {
      if (typeof path !== "string") throw new TypeError(`currentPhasePath() returned ${String(path)}`);
      index = this.paths.length;
      this.paths.push(path);
      this.pathIndex.set(path, index);
    }
    this.lastPath = path;
    this.lastIndex = index;
    return index;
  }

  /** Stops attributing after an unexpected error: training goes on, samples say why. */
  private fail(error: unknown): void {
    this.active = false;
    this.error = `birth-phase attribution stopped: ${error instanceof Error ? error.message : String(error)}`;
    this.table = new LiveTensors();
  }

  private restart(): void {
    // The old state's top still belongs to the windows open across the reset.
    this.foldHighWater(null);
    this.state = this.engine.state;
    this.table = new LiveTensors();
    this.lastDisposedId = -1;
    this.highWater = this.state.numBytes;
  }

  /** Hands the top since the last take to every window but `except`'s, and starts counting again. */
  private foldHighWater(except: Subscription | null): void {
    const top = this.highWater;
    for (const other of this.subscribers)
      if (other !== except && top > other.windowHigh) other.windowHigh = top;
    this.highWater = this.state.numBytes;
  }

  /** See `BirthPhaseSubscription.takeHighWater`: `subscription`'s window ends now, the others' go on. */
  takeHighWater(subscription: Subscription): number | null {
    if (this.engine.state !== this.state) this.restart();
    const now = this.state.numBytes;
    const high = Math.max(subscription.windowHigh, this.highWater);
    this.foldHighWater(subscription);
    const start = subscription.windowStart;
    subscription.windowHigh = now;
    subscription.windowStart = now;
    return high > now && high > start ? high : null;
  }

  subscribe(): Subscription {
    // A new window starts now: the top so far belongs to the others' windows only.
    this.foldHighWater(null);
    const subscription = new Subscription(this, this.state.numBytes);
    this.subscribers.add(subscription);
    return subscription;
  }

  bind(subscription: Subscription, context: PhaseContextLike | null): void {
    subscription.context = context;
    this.context = context;
  }

  unsubscribe(subscription: Subscription): void {
    if (!this.subscribers.delete(subscription)) return;
    if (this.context === subscription.context) {
      // Another collector's tracker may still run: its phases take over.
      this.context = null;
      for (const other of this.subscribers) if (other.context !== null) this.context = other.context;
    }
    if (this.subscribers.size === 0) this.uninstall();
  }

  private uninstall(): void {
    this.active = false;
    this.table = new LiveTensors();
    // Wrapped again by someone after us: putting ours back would remove theirs; ours stays, inert,
    // and whoever uninstalls the wrapper above it skips it.
    for (const patch of this.patches) {
      if (patch.holder[patch.name] === patch.wrapper)
        patch.holder[patch.name] = skipInert(patch.original, patch.name);
    }
  }

  /** What this hook wrapped under `name`. */
  originalOf(name: string): Method | undefined {
    return this.patches.find((patch) => patch.name === name)?.original;
  }

  /**
   * Live tensors by birth phase. While nothing changed (same paths, tensors, bytes and largest groups)
   * it returns the previous call's object itself, so that encoders downstream can tell by identity;
   * callers must not change it. Unchanged phases of a changed result keep their previous objects.
   * Sampling runs between training steps with the caches full of tensor data: it touches little
   * code and memory (no iterator, no sort call for a few phases, no lookup by path).
   */
  live(): Record<string, LivePhaseTensors> {
    if (this.engine.state !== this.state) this.restart();
    const table = this.table;
    const previous = this.lastResult;
    // The same live tensors as last time, none read from the tensor itself (a string's bytes): the same result.
    if (
      previous !== undefined &&
      table === this.lastTable &&
      table.fresh === 0 &&
      table.stale === 0 &&
      table.kept.size === 0
    )
      return previous;
    const summary = this.summary;
    summary.summarize(table, this.state.tensorInfo, this.paths.length);
    const order = this.phaseOrder();
    const result = previous !== undefined && this.unchanged(order) ? previous : this.build(order, previous);
    this.dropUnusedPaths();
    this.lastResult = result;
    this.lastTable = table;
    table.grouped(summary.largestId);
    return result;
  }

  /** The phases with live tensors, most bytes first, then by path (sorted in place: `summary.phases`). */
  private phaseOrder(): Int32Array {
    const { phases, phaseCount } = this.summary;
    const order = phases.subarray(0, phaseCount);
    if (phaseCount > 16) return order.sort(this.phaseComparator);
    for (let i = 1; i < phaseCount; i++) {
      const phase = order[i] as number;
      let at = i;
      for (; at > 0 && this.comparePhases(phase, order[at - 1] as number) < 0; at--)
        order[at] = order[at - 1] as number;
      order[at] = phase;
    }
    return order;
  }

  private comparePhases(a: number, b: number): number {
    const bytes = this.summary.bytes;
    return (
      (bytes[b] as number) - (bytes[a] as number) || compare(this.paths[a] as string, this.paths[b] as string)
    );
  }

  /** Whether the phases of `order` are those of the last result, each as it was. */
  private unchanged(order: Int32Array): boolean {
    if (order.length !== this.lastOrder.length) return false;
    for (let i = 0; i < order.length; i++) {
      const phase = order[i] as number;
      const entry = this.lastEntries[phase];
      if (entry === undefined || !this.summary.matches(phase, entry)) return false;
    }
    return true;
  }

  /** A new result in `order`, keeping the previous objects of unchanged phases. */
  private build(
    order: Int32Array,
    previous: Record<string, LivePhaseTensors> | undefined,
  ): Record<string, LivePhaseTensors> {
    const lastOrder = this.lastOrder;
    let sameOrder = previous !== undefined && order.length === lastOrder.length;
    for (let i = 0; sameOrder && i < order.length; i++) sameOrder = order[i] === lastOrder[i];
    // Same phases in the same order: a copy of the previous object (its shape) with the changed ones replaced.
    const result: Record<string, LivePhaseTensors> = sameOrder ? { ...previous } : {};
    const entries: LivePhaseTensors[] = [];
    for (let i = 0; i < order.length; i++) {
      const phase = order[i] as number;
      const old = this.lastEntries[phase];
      const entry = old !== undefined && this.summary.matches(phase, old) ? old : this.summary.entry(phase);
      entries.push(entry);
      if (!sameOrder || entry !== old) result[this.paths[phase] as string] = entry;
    }
    for (const phase of lastOrder) this.lastEntries[phase] = undefined;
    const nextOrder: number[] = [];
    for (let i = 0; i < order.length; i++) {
      nextOrder.push(order[i] as number);
      this.lastEntries[order[i] as number] = entries[i];
    }
    this.lastOrder = nextOrder;
    return result;
  }

  /** Phase paths with step numbers in them would pile up: keep only those of live tensors (after `summarize`). */
  private dropUnusedPaths(): void {
    if (this.paths.length <= MAX_PATHS) return;
    const summary = this.summary;
    const remap = new Int32Array(this.paths.length).fill(-1);
    const paths = [""];
    remap[0] = 0;
    for (let i = 1; i < this.paths.length; i++) {
      if ((summary.tensors[i] as number) === 0) continue;
      remap[i] = paths.length;
      paths.push(this.paths[i] as string);
    }
    const { keys, phase, end } = this.table;
    for (let record = 0; record < end; record++) {
      const id = keys[record] as number;
      if (id !== EMPTY) phase[record] = remap[phase[record] as number] as number;
    }
    const entries: (LivePhaseTensors | undefined)[] = [];
    for (let i = 0; i < this.lastOrder.length; i++) {
      const remapped = remap[this.lastOrder[i] as number] as number;
      entries[remapped] = this.lastEntries[this.lastOrder[i] as number];
      this.lastOrder[i] = remapped;
    }
    this.lastEntries = entries;
    this.paths = paths;
    this.pathIndex.clear();
    for (let i = 0; i < paths.length; i++) this.pathIndex.set(paths[i] as string, i);
    this.lastPath = "";
    this.lastIndex = 0;
    this.lastDisposedId = -1;
  }
}

class Subscription implements BirthPhaseSubscription {
  context: PhaseContextLike | null = null;
  /** Its high-water window: the byte count where it began, and its highest value in it as far as known. */
  windowStart: number;
  windowHigh: number;
  private released = false;

  constructor(
    private readonly hook: BirthPhases,
    bytesNow: number,
  ) {
    this.windowStart = bytesNow;
    this.windowHigh = bytesNow;
  }

  get error(): string | undefined {
    return this.hook.error;
  }

  live(): Record<string, LivePhaseTensors> {
    return this.released || !this.hook.active ? {} : this.hook.live();
  }

  bind(context: PhaseContextLike | null): void {
    if (!this.released) this.hook.bind(this, context);
  }

  takeHighWater(): number | null {
    return this.released || !this.hook.active ? null : this.hook.takeHighWater(this);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.hook.unsubscribe(this);
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Subscribes to the birth phases of `engine`'s tensors, wrapping its `trackTensor` and
 * `disposeTensor` on first use (later collectors share the wrappers; the last `release()` puts the
 * engine's methods back). Returns a reason instead when the engine lacks those methods.
 */
export function subscribeBirthPhases(engine: TfEngine | undefined): BirthPhaseSubscription | string {
  if (engine === undefined || engine === null || typeof engine !== "object")
    return "tf.engine() is not available";
  try {
    const hookable = engine as unknown as HookableEngine;
    const trackHolder = holderOf(engine, "trackTensor");
    const disposeHolder = holderOf(engine, "disposeTensor");
    if (
      typeof hookable.trackTensor !== "function" ||
      typeof hookable.disposeTensor !== "function" ||
      trackHolder === undefined ||
      disposeHolder === undefined
    ) {
      return "tf.engine() has no trackTensor/disposeTensor (not a tfjs 4.x engine)";
    }
    if (hookable.state === undefined || hookable.state === null) return "tf.engine().state is not available";
    const hook = hookOf(hookable) ?? new BirthPhases(hookable, trackHolder, disposeHolder);
    return hook.subscribe();
  } catch (error) {
    // A frozen engine or prototype, a proxy that throws: the collector works without attribution.
    return `could not wrap tf.engine()'s methods: ${error instanceof Error ? error.message : String(error)}`;
  }
}
