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
  /** Live tensors by birth phase path ("" outside any phase); only paths with live tensors. */
  live(): Record<string, LivePhaseTensors>;
  /** Routes later tensor births to this context's current phase. */
  bind(context: PhaseContextLike | null): void;
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
/** Dimensions kept inline per tensor; higher ranks keep the tensor itself (rare). */
const INLINE_RANK = 6;
const EMPTY = -1;
/** Distinct phase paths kept before unused ones are dropped (paths with step numbers in them). */
const MAX_PATHS = 4096;

/**
 * The live tensors of one engine with their birth phase: an open-addressing table keyed by tensor id
 * (linear probing, backward-shift deletion) over records in typed arrays. Tracking allocates nothing
 * and stores no object (no write barriers); a JS Map costs three to four times as much per tensor.
 */
class LiveTensors {
  /** Tensor id per slot, or EMPTY. */
  private keys = new Float64Array(0);
  /** Record index per slot. */
  private slots = new Int32Array(0);
  private shift = 32;
  private capacity = 0;
  size = 0;
  // Records, one column each.
  phase = new Int32Array(0);
  bytes = new Float64Array(0);
  dtype = new Uint8Array(0);
  rank = new Uint8Array(0);
  dims = new Int32Array(0);
  private free = new Int32Array(0);
  private freeTop = 0;
  private records = 0;
  /** Tensors whose dtype or shape is not kept inline, or whose bytes are known later (strings). */
  readonly kept = new Map<number, TfTrackedTensor>();

  constructor() {
    this.resize(1024);
  }

  add(tensor: TfTrackedTensor, phase: number): void {
    if ((this.size + 1) * 2 > this.capacity) this.resize(this.capacity * 2);
    const id = tensor.id;
    const keys = this.keys;
    const mask = this.capacity - 1;
    let i = Math.imul(id | 0, 0x9e3779b1) >>> this.shift;
    let record: number;
    for (;;) {
      const key = keys[i] as number;
      if (key === EMPTY) {
        record = this.allocate();
        keys[i] = id;
        this.slots[i] = record;
        this.size++;
        break;
      }
      if (key === id) {
        // Tracked again without a dispose: the newer birth wins.
        record = this.slots[i] as number;
        this.kept.delete(record);
        break;
      }
      i = (i + 1) & mask;
    }
    this.phase[record] = phase;
    const dtype = tensor.dtype;
    const shape = tensor.shape;
    const rank = shape.length;
    let code: number;
    let bytes: number;
    if (dtype === "float32") {
      code = FLOAT32;
      bytes = tensor.size * 4;
    } else if (dtype === "int32") {
      code = INT32;
      bytes = tensor.size * 4;
    } else if (dtype === "bool") {
      code = BOOL;
      bytes = tensor.size;
    } else if (dtype === "complex64") {
      // As tfjs counts them: by their real and imaginary components.
      code = COMPLEX64;
      bytes = 0;
    } else {
      // Strings' bytes are known once their values are written; other dtypes keep their name.
      code = dtype === "string" ? STRING : OTHER;
      bytes = dtype === "string" ? 0 : tensor.size * 4;
      this.kept.set(record, tensor);
    }
    this.bytes[record] = bytes;
    this.dtype[record] = code;
    this.rank[record] = rank;
    if (rank <= INLINE_RANK) {
      const base = record * INLINE_RANK;
      for (let d = 0; d < rank; d++) this.dims[base + d] = shape[d] as number;
    } else if (code < STRING) {
      this.kept.set(record, tensor);
    }
  }

  /** Removes the tensor; returns its phase, or -1 when it was not tracked. */
  remove(id: number): number {
    const keys = this.keys;
    if (this.size === 0) return -1;
    const mask = this.capacity - 1;
    let i = Math.imul(id | 0, 0x9e3779b1) >>> this.shift;
    for (;;) {
      const key = keys[i] as number;
      if (key === EMPTY) return -1;
      if (key === id) break;
      i = (i + 1) & mask;
    }
    const record = this.slots[i] as number;
    const phase = this.phase[record] as number;
    if ((this.dtype[record] as number) >= STRING || (this.rank[record] as number) > INLINE_RANK) {
      this.kept.delete(record);
    }
    this.free[this.freeTop++] = record;
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
      this.slots[hole] = this.slots[j] as number;
      hole = j;
    }
    keys[hole] = EMPTY;
    return phase;
  }

  /** Calls `visit` with the record index of every live tensor. */
  forEach(visit: (record: number) => void): void {
    const keys = this.keys;
    for (let i = 0; i < this.capacity; i++) if ((keys[i] as number) !== EMPTY) visit(this.slots[i] as number);
  }

  private allocate(): number {
    if (this.freeTop > 0) return this.free[--this.freeTop] as number;
    if (this.records === this.phase.length) this.growRecords(Math.max(1024, this.phase.length * 2));
    return this.records++;
  }

  private growRecords(count: number): void {
    const grow = <T extends Float64Array | Int32Array | Uint8Array>(
      old: T,
      make: (n: number) => T,
      n: number,
    ): T => {
      const next = make(n);
      next.set(old);
      return next;
    };
    this.phase = grow(this.phase, (n) => new Int32Array(n), count);
    this.bytes = grow(this.bytes, (n) => new Float64Array(n), count);
    this.dtype = grow(this.dtype, (n) => new Uint8Array(n), count);
    this.rank = grow(this.rank, (n) => new Uint8Array(n), count);
    this.dims = grow(this.dims, (n) => new Int32Array(n), count * INLINE_RANK);
    this.free = grow(this.free, (n) => new Int32Array(n), count);
  }

  private resize(capacity: number): void {
    const oldKeys = this.keys;
    const oldSlots = this.slots;
    this.capacity = capacity;
    this.shift = 32 - Math.log2(capacity);
    this.keys = new Float64Array(capacity).fill(EMPTY);
    this.slots = new Int32Array(capacity);
    const mask = capacity - 1;
    for (let s = 0; s < oldKeys.length; s++) {
      const key = oldKeys[s] as number;
      if (key === EMPTY) continue;
      let i = Math.imul(key | 0, 0x9e3779b1) >>> this.shift;
      while ((this.keys[i] as number) !== EMPTY) i = (i + 1) & mask;
      this.keys[i] = key;
      this.slots[i] = oldSlots[s] as number;
    }
  }
}

/**
 * The birth phase of every live tensor of one engine. Its wrappers of `engine.trackTensor` (every
 * creation path, kernels included, goes through it) and `engine.disposeTensor` keep each tensor's
 * phase, dtype, shape and bytes until it is disposed; grouping waits for `live()` (sampling).
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
  /** `Variable.assign()` disposes and re-tracks the same tensor: it keeps its birth phase. */
  private lastDisposedId = -1;
  private lastDisposedPhase = -1;
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
      let phase: number;
      if (tensor.id === this.lastDisposedId) {
        phase = this.lastDisposedPhase;
        this.lastDisposedId = -1;
        // A variable that existed before attribution began: its birth is unknown, as its first value's.
        if (phase < 0) return;
      } else {
        const context = this.context;
        const path = context === null ? "" : context.currentPhasePath();
        phase = path === this.lastPath ? this.lastIndex : this.indexOf(path);
      }
      this.table.add(tensor, phase);
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
    this.state = this.engine.state;
    this.table = new LiveTensors();
    this.lastDisposedId = -1;
  }

  subscribe(): Subscription {
    const subscription = new Subscription(this);
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

  live(): Record<string, LivePhaseTensors> {
    if (this.engine.state !== this.state) this.restart();
    const table = this.table;
    const tensorInfo = this.state.tensorInfo;
    const totals: (PhaseTotals | undefined)[] = new Array(this.paths.length);
    const dims = table.dims;
    table.forEach((record) => {
      const phase = table.phase[record] as number;
      let phaseTotals = totals[phase];
      if (phaseTotals === undefined) {
        phaseTotals = new PhaseTotals(this.paths[phase] as string);
        totals[phase] = phaseTotals;
      }
      const code = table.dtype[record] as number;
      const rank = table.rank[record] as number;
      if (code < STRING && rank <= INLINE_RANK) {
        phaseTotals.addInline(code, dims, record * INLINE_RANK, rank, table.bytes[record] as number);
        return;
      }
      const tensor = table.kept.get(record);
      if (tensor === undefined) return;
      // String bytes are what tfjs counted when the values were written (2 bytes a character).
      const bytes =
        code === STRING ? (tensorInfo?.get(tensor.dataId)?.bytes ?? 0) : (table.bytes[record] as number);
      phaseTotals.add(tensor.dtype, tensor.shape, bytes);
    });
    this.dropUnusedPaths(totals);
    const present = totals.filter((t): t is PhaseTotals => t !== undefined);
    present.sort((a, b) => b.bytes - a.bytes || compare(a.path, b.path));
    const result: Record<string, LivePhaseTensors> = {};
    for (const phaseTotals of present) result[phaseTotals.path] = phaseTotals.toJson();
    return result;
  }

  /** Phase paths with step numbers in them would pile up: keep only those of live tensors. */
  private dropUnusedPaths(totals: readonly (PhaseTotals | undefined)[]): void {
    if (this.paths.length <= MAX_PATHS) return;
    const remap = new Int32Array(this.paths.length).fill(-1);
    const paths = [""];
    remap[0] = 0;
    for (let i = 1; i < totals.length; i++) {
      if (totals[i] === undefined) continue;
      remap[i] = paths.length;
      paths.push(this.paths[i] as string);
    }
    const table = this.table;
    table.forEach((record) => {
      table.phase[record] = remap[table.phase[record] as number] as number;
    });
    this.paths = paths;
    this.pathIndex.clear();
    for (let i = 0; i < paths.length; i++) this.pathIndex.set(paths[i] as string, i);
    this.lastPath = "";
    this.lastIndex = 0;
    this.lastDisposedId = -1;
  }
}

/** A group while sampling: its dtype code and dims are compared in place, without building keys. */
interface Group {
  readonly code: number;
  readonly dtype: string;
  readonly shape: number[];
  bytes: number;
  count: number;
}

/** Totals of one birth phase while sampling. */
class PhaseTotals {
  tensors = 0;
  bytes = 0;
  /** Inline-kept tensors' groups by a hash of dtype and dims (collisions are compared). */
  private readonly byHash = new Map<number, Group[]>();
  /** Other groups (strings, rare dtypes, high ranks) by a built key. */
  private readonly byKey = new Map<string, Group>();

  constructor(readonly path: string) {}

  addInline(code: number, dims: Int32Array, base: number, rank: number, bytes: number): void {
    this.tensors++;
    this.bytes += bytes;
    let hash = Math.imul(code + 1, 0x9e3779b1) ^ rank;
    for (let d = 0; d < rank; d++) hash = Math.imul(hash ^ (dims[base + d] as number), 0x85ebca6b);
    let bucket = this.byHash.get(hash);
    if (bucket === undefined) {
      bucket = [];
      this.byHash.set(hash, bucket);
    }
    search: for (const group of bucket) {
      if (group.code !== code || group.shape.length !== rank) continue;
      for (let d = 0; d < rank; d++) if (group.shape[d] !== dims[base + d]) continue search;
      group.bytes += bytes;
      group.count++;
      return;
    }
    bucket.push({
      code,
      dtype: DTYPES[code] as string,
      shape: Array.from(dims.subarray(base, base + rank)),
      bytes,
      count: 1,
    });
  }

  add(dtype: string, shape: readonly number[], bytes: number): void {
    this.tensors++;
    this.bytes += bytes;
    const key = `${dtype}:${shape.join(",")}`;
    const group = this.byKey.get(key);
    if (group === undefined) this.byKey.set(key, { code: OTHER, dtype, shape: [...shape], bytes, count: 1 });
    else {
      group.bytes += bytes;
      group.count++;
    }
  }

  toJson(): LivePhaseTensors {
    const groups: Group[] = [...this.byKey.values()];
    for (const bucket of this.byHash.values()) groups.push(...bucket);
    const largest = groups
      .sort(
        (a, b) =>
          b.bytes - a.bytes ||
          b.count - a.count ||
          compare(a.dtype, b.dtype) ||
          compare(a.shape.join(","), b.shape.join(",")),
      )
      .slice(0, LARGEST_GROUPS)
      .map(({ dtype, shape, bytes, count }) => ({ dtype, shape, bytes, count }));
    return { tensors: this.tensors, bytes: this.bytes, largest };
  }
}

class Subscription implements BirthPhaseSubscription {
  context: PhaseContextLike | null = null;
  private released = false;

  constructor(private readonly hook: BirthPhases) {}

  get error(): string | undefined {
    return this.hook.error;
  }

  live(): Record<string, LivePhaseTensors> {
    return this.released || !this.hook.active ? {} : this.hook.live();
  }

  bind(context: PhaseContextLike | null): void {
    if (!this.released) this.hook.bind(this, context);
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
