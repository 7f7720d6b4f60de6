import {
  type JsonObject,
  MEMORY_COUNTER_FIELDS,
  type MemoryCapabilities,
  type MemoryReading,
  type TelemetryEvent,
} from "@stormlog/core";
import { phaseBoundaryContext, phaseScopePayload, type RecordedPhase } from "@stormlog/phases";
import { markFloatIfIntegral } from "./health.js";

const FIELDS = MEMORY_COUNTER_FIELDS.length;
/** Index of each counter in a slot's counter row. */
export const COUNTER_INDEX: Readonly<Record<string, number>> = Object.fromEntries(
  MEMORY_COUNTER_FIELDS.map((field, index) => [field, index]),
);

/** `flags` bits of a slot. */
export const PHASE_ENTER = 1;
export const PHASE_EXIT = 2;
/** A phase record whose counters were read at the boundary (else: the last sample's). */
export const BOUNDARY_READ = 4;

/** What a record needs of its device group (a `DeviceGroup`, or its copy in the sink worker). */
export interface StoredGroup {
  readonly collectorString: string;
  readonly deviceId: number;
  readonly capabilities: MemoryCapabilities;
}

/** What every record of a session shares. */
export interface RecordContext {
  readonly schemaVersion: 3 | 4;
  readonly sessionId: string;
  readonly samplingIntervalMs: number;
  readonly pid: number;
  readonly host: string;
  readonly jobId: string | null;
  readonly rank: number;
  readonly localRank: number;
  readonly worldSize: number;
}

/**
 * The tracker's recent records as columns in a ring: typed arrays for times and counters, shared
 * references for everything else. Records are built as objects only when someone reads them (or a
 * sink needs one), so keeping 10000 of them costs the garbage collector next to nothing: a phase
 * boundary stores numbers and a reference to its (already allocated) scope.
 */
export class EventStore {
  readonly capacity: number;
  private readonly phaseMetadata = new PhaseMetadataBuilder();
  /** Records ever pushed since the last `reset()`. */
  written = 0;
  private readonly ts: BigInt64Array;
  private readonly types: string[];
  private readonly contexts: (string | null)[];
  private readonly groups: (StoredGroup | undefined)[];
  private readonly counters: Float64Array;
  private readonly changes: Float64Array;
  private readonly bases: (JsonObject | undefined)[];
  private readonly extras: (JsonObject | null)[];
  private readonly scopes: (RecordedPhase | null)[];
  private readonly sequences: Float64Array;
  private readonly flags: Uint8Array;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.ts = new BigInt64Array(capacity);
    this.types = new Array(capacity).fill("");
    this.contexts = new Array(capacity).fill(null);
    this.groups = new Array(capacity).fill(undefined);
    this.counters = new Float64Array(capacity * FIELDS);
    this.changes = new Float64Array(capacity);
    this.bases = new Array(capacity).fill(undefined);
    this.extras = new Array(capacity).fill(null);
    this.scopes = new Array(capacity).fill(null);
    this.sequences = new Float64Array(capacity);
    this.flags = new Uint8Array(capacity);
  }

  /** Forgets everything. */
  reset(): void {
    this.written = 0;
    this.groups.fill(undefined);
    this.bases.fill(undefined);
    this.extras.fill(null);
    this.scopes.fill(null);
    this.contexts.fill(null);
  }

  /**
   * Stores one record and returns its absolute index. `reading` null or a missing counter is
   * stored as NaN (null or 0 on output, as the schema wants); `change` null likewise.
   */
  push(
    ts: bigint,
    eventType: string,
    context: string | null,
    group: StoredGroup,
    reading: MemoryReading | null,
    change: number | null,
    base: JsonObject,
    extra: JsonObject | null,
    scope: RecordedPhase | null,
    sequence: number,
    flags: number,
  ): number {
    const index = this.written++;
    const slot = index % this.capacity;
    this.ts[slot] = ts;
    this.types[slot] = eventType;
    this.contexts[slot] = context;
    this.groups[slot] = group;
    const row = slot * FIELDS;
    const counters = this.counters;
    if (reading === null) {
      counters.fill(Number.NaN, row, row + FIELDS);
    } else {
      counters[row] = reading.allocator_allocated_bytes ?? Number.NaN;
      counters[row + 1] = reading.allocator_reserved_bytes ?? Number.NaN;
      counters[row + 2] = reading.allocator_active_bytes ?? Number.NaN;
      counters[row + 3] = reading.allocator_inactive_bytes ?? Number.NaN;
      counters[row + 4] = reading.device_used_bytes ?? Number.NaN;
      counters[row + 5] = reading.device_free_bytes ?? Number.NaN;
      counters[row + 6] = reading.device_total_bytes ?? Number.NaN;
    }
    this.changes[slot] = change ?? Number.NaN;
    this.bases[slot] = base;
    this.extras[slot] = extra;
    this.scopes[slot] = scope;
    this.sequences[slot] = sequence;
    this.flags[slot] = flags;
    return index;
  }

  /** Overwrites one counter of a stored record (a boundary reading). */
  setCounter(index: number, counterIndex: number, value: number): void {
    this.counters[(index % this.capacity) * FIELDS + counterIndex] = value;
  }

  /** Attaches collector metadata (e.g. tfjs tensor counts read at a phase boundary) to a stored record. */
  mergeExtra(index: number, extra: JsonObject): void {
    const slot = index % this.capacity;
    const current = this.extras[slot];
    this.extras[slot] = current === null || current === undefined ? extra : { ...current, ...extra };
  }

  /** Sets flag bits of a stored record. */
  addFlags(index: number, flags: number): void {
    this.flags[index % this.capacity] = (this.flags[index % this.capacity] as number) | flags;
  }

  /** Whether `index` is still held (not overwritten). */
  holds(index: number): boolean {
    return index < this.written && index >= this.written - this.capacity;
  }

  eventType(index: number): string {
    return this.types[index % this.capacity] as string;
  }

  /**
   * Copies a stored record's allocated, reserved and device-used counters as written (NaN when
   * unread) into `out` from `at`, and returns its flag bits (`BOUNDARY_READ`...): the leak watch's
   * read of a phase record, one slot lookup.
   */
  readCounters(index: number, out: Float64Array, at: number): number {
    const slot = index % this.capacity;
    const row = slot * FIELDS;
    const counters = this.counters;
    out[at] = counters[row] as number;
    out[at + 1] = counters[row + 1] as number;
    out[at + 2] = counters[row + 4] as number;
    return this.flags[slot] as number;
  }

  /** The collector detail attached to a stored record (`mergeExtra`), or null. */
  extra(index: number): JsonObject | null {
    return this.extras[index % this.capacity] ?? null;
  }

  timestamp(index: number): bigint {
    return this.ts[index % this.capacity] as bigint;
  }

  deviceId(index: number): number {
    return (this.groups[index % this.capacity] as StoredGroup).deviceId;
  }

  /**
   * Copies stored records into a batch for the sink worker: numbers into typed arrays (transferred,
   * not copied); event types, groups, base metadata and phase scopes once each by id (`ids`
   * remembers them), a scope as its phase kind's id and its own few fields.
   */
  pack(indices: readonly number[], ids: BatchIds): StoredBatch {
    const count = indices.length;
    const timestamps = new BigInt64Array(count);
    const numbers = new Float64Array(count * BATCH_WIDTH);
    const objects: BatchObjects = {
      contexts: new Array(count),
      extras: new Array(count),
      texts: [],
      groups: [],
      bases: [],
      kinds: [],
      scopes: [],
    };
    const counters = this.counters;
    for (let i = 0; i < count; i++) {
      const slot = (indices[i] as number) % this.capacity;
      timestamps[i] = this.ts[slot] as bigint;
      objects.contexts[i] = this.contexts[slot] as string | null;
      objects.extras[i] = this.extras[slot] ?? null;
      const out = i * BATCH_WIDTH;
      const row = slot * FIELDS;
      for (let f = 0; f < FIELDS; f++) numbers[out + f] = counters[row + f] as number;
      numbers[out + FIELDS] = this.changes[slot] as number;
      numbers[out + FIELDS + 1] = this.sequences[slot] as number;
      numbers[out + FIELDS + 2] = this.flags[slot] as number;
      numbers[out + FIELDS + 3] = ids.idOfGroup(this.groups[slot] as StoredGroup, objects.groups);
      numbers[out + FIELDS + 4] = ids.idOfBase(this.bases[slot] as JsonObject, objects.bases);
      const scope = this.scopes[slot];
      numbers[out + FIELDS + 5] = scope === null || scope === undefined ? -1 : ids.idOfScope(scope, objects);
      numbers[out + FIELDS + 6] = ids.idOfText(this.types[slot] as string, objects.texts);
    }
    ids.endBatch();
    return { count, timestamps, numbers, objects: asText(objects) };
  }

  /** Stores the `i`-th record of a batch (after `tables.learn(batch)`) and returns its index. */
  unpack(batch: StoredBatch, i: number, tables: BatchTables): number {
    const objects = tables.objects;
    const index = this.written++;
    const slot = index % this.capacity;
    const source = batch.numbers;
    const at = i * BATCH_WIDTH;
    this.counters.set(source.subarray(at, at + FIELDS), slot * FIELDS);
    this.ts[slot] = batch.timestamps[i] as bigint;
    this.types[slot] = tables.texts.get(source[at + FIELDS + 6] as number) as string;
    this.contexts[slot] = objects.contexts[i] ?? null;
    this.extras[slot] = objects.extras[i] ?? null;
    this.changes[slot] = source[at + FIELDS] as number;
    this.sequences[slot] = source[at + FIELDS + 1] as number;
    const flags = source[at + FIELDS + 2] as number;
    this.flags[slot] = flags;
    this.groups[slot] = tables.groups.get(source[at + FIELDS + 3] as number);
    this.bases[slot] = tables.bases.get(source[at + FIELDS + 4] as number);
    const scopeId = source[at + FIELDS + 5] as number;
    const scope = scopeId < 0 ? null : (tables.scopes.get(scopeId) ?? null);
    this.scopes[slot] = scope;
    // A scope is referenced by its enter and its exit record: after the exit, never again.
    if (scope !== null && (flags & PHASE_EXIT) !== 0) tables.scopes.delete(scopeId);
    return index;
  }

  /** The record at `index`, as a new object. */
  materialize(index: number, context: RecordContext): TelemetryEvent {
    const slot = index % this.capacity;
    const group = this.groups[slot] as StoredGroup;
    const flags = this.flags[slot] as number;
    const scope = this.scopes[slot] as RecordedPhase | null;
    const base = this.bases[slot] as JsonObject;
    let metadata: JsonObject;
    let recordContext: string | null;
    if (scope !== null) {
      const enter = (flags & PHASE_ENTER) !== 0;
      const extra = this.extras[slot];
      metadata = this.phaseMetadata.build(
        phaseScopePayload(
          scope,
          enter ? "enter" : "exit",
          this.sequences[slot] as number,
        ) as unknown as JsonObject,
        extra ?? null,
        base,
        (flags & BOUNDARY_READ) !== 0 ? "boundary_read" : "last_sample",
      );
      recordContext = phaseBoundaryContext(enter ? "phase_enter" : "phase_exit", scope.phasePath);
    } else {
      const extra = this.extras[slot];
      metadata = extra === null ? { ...base } : { ...extra, ...base };
      if (extra !== null) {
        markFloatIfIntegral(metadata, "usage_percent");
        markFloatIfIntegral(metadata, "fragmentation");
        markFloatIfIntegral(metadata, "collector_retry_delay_s");
      }
      recordContext = this.contexts[slot] as string | null;
    }
    if (metadata.collector_next_retry_epoch_s !== null)
      markFloatIfIntegral(metadata, "collector_next_retry_epoch_s");

    const row = slot * FIELDS;
    const c = this.counters;
    const change = this.changes[slot] as number;
    if (context.schemaVersion === 3) {
      // v3 has no null for these three: derive an unread one as the reference's own collectors and
      // loaders do (allocated from device used, reserved from allocated, device used = max of both)
      // rather than invent a zero; the `supports_*` metadata keys say what was really measured.
      const readAllocated = c[row] as number;
      const readReserved = c[row + 1] as number;
      const readUsed = c[row + 4] as number;
      const allocated = firstMeasured(readAllocated, readUsed, readReserved);
      const reserved = Number.isNaN(readReserved) ? allocated : readReserved;
      const used = Number.isNaN(readUsed) ? Math.max(allocated, reserved) : readUsed;
      const active = c[row + 2] as number;
      const inactive = c[row + 3] as number;
      const free = c[row + 5] as number;
      const total = c[row + 6] as number;
      return {
        schema_version: 3,
        session_id: context.sessionId,
        timestamp_ns: this.ts[slot] as bigint,
        event_type: this.types[slot] as string,
        collector: group.collectorString,
        sampling_interval_ms: context.samplingIntervalMs,
        pid: context.pid,
        host: context.host,
        job_id: context.jobId,
        rank: context.rank,
        local_rank: context.localRank,
        world_size: context.worldSize,
        device_id: group.deviceId,
        allocator_allocated_bytes: allocated,
        allocator_reserved_bytes: reserved,
        allocator_active_bytes: Number.isNaN(active) ? null : active,
        allocator_inactive_bytes: Number.isNaN(inactive) ? null : inactive,
        allocator_change_bytes: Number.isNaN(change) ? 0 : change,
        device_used_bytes: used,
        device_free_bytes: Number.isNaN(free) ? null : free,
        device_total_bytes: Number.isNaN(total) ? null : total,
        context: recordContext,
        metadata,
      };
    }
    const caps = group.capabilities;
    const value = (supported: boolean, v: number) => (supported && !Number.isNaN(v) ? v : null);
    return {
      schema_version: 4,
      session_id: context.sessionId,
      timestamp_ns: this.ts[slot] as bigint,
      event_type: this.types[slot] as string,
      collector: group.collectorString,
      sampling_interval_ms: context.samplingIntervalMs,
      pid: context.pid,
      host: context.host,
      job_id: context.jobId,
      rank: context.rank,
      local_rank: context.localRank,
      world_size: context.worldSize,
      device_id: group.deviceId,
      allocator_allocated_bytes: value(caps.supports_allocator_allocated, c[row] as number),
      allocator_reserved_bytes: value(caps.supports_allocator_reserved, c[row + 1] as number),
      allocator_active_bytes: value(caps.supports_allocator_active, c[row + 2] as number),
      allocator_inactive_bytes: value(caps.supports_allocator_inactive, c[row + 3] as number),
      allocator_change_bytes: value(caps.supports_allocator_allocated, change),
      device_used_bytes: value(caps.supports_device_used, c[row + 4] as number),
      device_free_bytes: value(caps.supports_device_free, c[row + 5] as number),
      device_total_bytes: value(caps.supports_device_total, c[row + 6] as number),
      context: recordContext,
      metadata,
    };
  }
}

/** Numbers per record in a `StoredBatch`: the counters, change, sequence, flags, group, base, scope, event type. */
const BATCH_WIDTH = FIELDS + 7;

/**
 * Stored records on their way from the tracker to its sink worker (see `EventStore.pack`): numbers
 * in typed arrays, the rest as JSON text, which crosses threads as one copy where structured clone
 * walks every object (~5x the training thread's time for a batch of phase records).
 */
export interface StoredBatch {
  readonly count: number;
  readonly timestamps: BigInt64Array;
  readonly numbers: Float64Array;
  /** `BatchObjects` as JSON, or itself when it holds what JSON cannot (a bigint). */
  readonly objects: string | BatchObjects;
}

/** What phase scopes of one phase path (on one thread) share: sent once, then named by id. */
export interface PhaseKind {
  readonly name: string;
  readonly path: readonly string[];
  readonly phasePath: string;
  readonly depth: number;
  readonly threadId: number;
  readonly threadName: string;
}

/**
 * A scope new in a batch: its id, its kind's id, its scope id and its parent's as a prefix (a text
 * id: the session's, in the recorder's ids) and the rest, its sequence and its attributes.
 */
export type PackedScope = [
  id: number,
  kind: number,
  prefix: number,
  suffix: string,
  parentPrefix: number,
  parentSuffix: string | null,
  sequence: number,
  attributes: JsonObject | null,
];

/**
 * A batch's strings and objects: per record, then the texts (event types, scope id prefixes),
 * groups, base metadata, phase kinds and scopes new in it, by id.
 */
export interface BatchObjects {
  readonly contexts: (string | null)[];
  readonly extras: (JsonObject | null)[];
  readonly texts: [number, string][];
  readonly groups: [number, StoredGroup][];
  readonly bases: [number, JsonObject][];
  readonly kinds: [number, PhaseKind][];
  readonly scopes: PackedScope[];
}

function asText(objects: BatchObjects): string | BatchObjects {
  try {
    return JSON.stringify(objects);
  } catch {
    return objects;
  }
}

/** The tracker's side of batch ids: each object gets one id, sent with the first batch that uses it. */
export class BatchIds {
  /** Device groups and phase scopes, by identity. */
  private readonly ids = new WeakMap<object, number>();
  /** Event types and scope id prefixes: a handful per session. */
  private readonly texts = new Map<string, number>();
  /** Phase kinds by thread id, then phase path. */
  private readonly kinds = new Map<number, Map<string, [number, PhaseKind]>>();
  /** Base metadata ids of the batch being packed, and of the one before. */
  private basesNow = new Map<JsonObject, number>();
  private basesBefore = new Map<JsonObject, number>();
  /** The last scope id prefix, and its text id. */
  private lastPrefix: string | null = null;
  private lastPrefixId = -1;
  private next = 0;

  /** A device group's id (a session has a few, fixed: sent once). */
  idOfGroup(group: StoredGroup, fresh: [number, StoredGroup][]): number {
    let id = this.ids.get(group);
    if (id === undefined) {
      id = this.next++;
      this.ids.set(group, id);
      fresh.push([id, copyGroup(group)]);
    }
    return id;
  }

  /**
   * A base metadata object's id. Bases come and go with collector health (a flapping collector makes
   * new ones every sample), so both sides keep only those of the last batch: one used again after
   * a batch without it is sent again.
   */
  idOfBase(base: JsonObject, fresh: [number, JsonObject][]): number {
    let id = this.basesNow.get(base);
    if (id !== undefined) return id;
    id = this.basesBefore.get(base);
    if (id === undefined) {
      id = this.next++;
      fresh.push([id, base]);
    }
    this.basesNow.set(base, id);
    return id;
  }

  /** Ends a batch (see `idOfBase`). */
  endBatch(): void {
    this.basesBefore = this.basesNow;
    this.basesNow = new Map();
  }

  idOfText(value: string, fresh: [number, string][]): number {
    let id = this.texts.get(value);
    if (id === undefined) {
      id = this.next++;
      this.texts.set(value, id);
      fresh.push([id, value]);
    }
    return id;
  }

  /**
   * A scope's id; a new scope goes into the batch as its kind (name, path, thread: the same at
   * every step) and its own fields, so that a step's scopes cost the batch a few bytes each.
   */
  idOfScope(scope: RecordedPhase, objects: BatchObjects): number {
    let id = this.ids.get(scope);
    if (id !== undefined) return id;
    id = this.next++;
    this.ids.set(scope, id);
    const scopeId = scope.scopeId;
    const prefix = this.prefixOf(scopeId, objects.texts);
    const suffix = scopeId.slice((this.lastPrefix as string).length);
    const parentScopeId = scope.parentScopeId;
    let parentPrefix = -1;
    let parentSuffix: string | null = null;
    if (parentScopeId !== null) {
      parentPrefix = this.prefixOf(parentScopeId, objects.texts);
      parentSuffix = parentScopeId.slice((this.lastPrefix as string).length);
    }
    objects.scopes.push([
      id,
      this.idOfKind(scope, objects.kinds),
      prefix,
      suffix,
      parentPrefix,
      parentSuffix,
      scope.sequence,
      scope.attributes ?? null,
    ]);
    return id;
  }

  /**
   * The text id of a scope id's prefix, up to its last ":" (the session's, in the recorder's ids);
   * `lastPrefix` is that prefix after the call.
   */
  private prefixOf(scopeId: string, fresh: [number, string][]): number {
    const last = this.lastPrefix;
    if (last !== null && scopeId.startsWith(last) && scopeId.indexOf(":", last.length) < 0)
      return this.lastPrefixId;
    const prefix = scopeId.slice(0, scopeId.lastIndexOf(":") + 1);
    this.lastPrefix = prefix;
    this.lastPrefixId = this.idOfText(prefix, fresh);
    return this.lastPrefixId;
  }

  private idOfKind(scope: RecordedPhase, fresh: [number, PhaseKind][]): number {
    let byPath = this.kinds.get(scope.threadId);
    if (byPath === undefined) {
      byPath = new Map();
      this.kinds.set(scope.threadId, byPath);
    }
    const known = byPath.get(scope.phasePath);
    // Names may contain " / ": two paths can join into one phase path.
    if (
      known !== undefined &&
      known[1].threadName === scope.threadName &&
      samePath(known[1].path, scope.path)
    )
      return known[0];
    const kind: PhaseKind = {
      name: scope.name,
      path: scope.path,
      phasePath: scope.phasePath,
      depth: scope.depth,
      threadId: scope.threadId,
      threadName: scope.threadName,
    };
    const id = this.next++;
    byPath.set(scope.phasePath, [id, kind]);
    fresh.push([id, kind]);
    return id;
  }
}

function samePath(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The sink worker's side: what the ids stand for, and the current batch's objects. */
export class BatchTables {
  readonly texts = new Map<number, string>();
  readonly groups = new Map<number, StoredGroup>();
  /** The base metadata of the current batch's records (`BatchIds.idOfBase`). */
  bases = new Map<number, JsonObject>();
  readonly kinds = new Map<number, PhaseKind>();
  readonly scopes = new Map<number, RecordedPhase>();
  objects: BatchObjects = {
    contexts: [],
    extras: [],
    texts: [],
    groups: [],
    bases: [],
    kinds: [],
    scopes: [],
  };

  /** Reads a batch's objects and learns what it introduces. */
  learn(batch: StoredBatch): void {
    const objects =
      typeof batch.objects === "string" ? (JSON.parse(batch.objects) as BatchObjects) : batch.objects;
    this.objects = objects;
    for (const [id, text] of objects.texts) this.texts.set(id, text);
    for (const [id, group] of objects.groups) this.groups.set(id, group);
    const previous = this.bases;
    const fresh = new Map(objects.bases);
    this.bases = new Map();
    const numbers = batch.numbers;
    for (let at = FIELDS + 4; at < numbers.length; at += BATCH_WIDTH) {
      const id = numbers[at] as number;
      if (!this.bases.has(id)) this.bases.set(id, (fresh.get(id) ?? previous.get(id)) as JsonObject);
    }
    for (const [id, kind] of objects.kinds) this.kinds.set(id, kind);
    for (const [
      id,
      kindId,
      prefix,
      suffix,
      parentPrefix,
      parentSuffix,
      sequence,
      attributes,
    ] of objects.scopes) {
      const kind = this.kinds.get(kindId) as PhaseKind;
      // Only `materialize` reads it, and it reads only these fields.
      const scope = {
        scopeId: (this.texts.get(prefix) as string) + suffix,
        name: kind.name,
        path: kind.path,
        phasePath: kind.phasePath,
        depth: kind.depth,
        parentScopeId: parentSuffix === null ? null : (this.texts.get(parentPrefix) as string) + parentSuffix,
        sequence,
        threadId: kind.threadId,
        threadName: kind.threadName,
        attributes: attributes ?? undefined,
      };
      this.scopes.set(id, scope as unknown as RecordedPhase);
    }
  }
}

/** A group's fields as plain data (a `DeviceGroup` holds collectors, which cannot cross threads). */
function copyGroup(group: StoredGroup): StoredGroup {
  return {
    collectorString: group.collectorString,
    deviceId: group.deviceId,
    capabilities: group.capabilities,
  };
}

/** The first counter that was read (NaN marks unread), else 0. */
function firstMeasured(...values: number[]): number {
  for (const value of values) if (!Number.isNaN(value)) return value;
  return 0;
}

/**
 * A phase record's metadata, `{ phase_scope, ...extra, ...base, phase_counters }` (the collectors'
 * boundary detail, then the device group's shared health and capabilities), built by copying a
 * template of that exact key order and setting what changes: V8 copies a same-shaped object in one
 * step, where the spreads cost several microseconds per record inside a training step. The template
 * is remade when `base` is another object (the group makes a new one when health changes) or the
 * detail has other keys.
 */
export class PhaseMetadataBuilder {
  private template: JsonObject | null = null;
  private base: JsonObject | null = null;
  private extraKeys: string[] = [];
  /** Detail keys whose value survives the spreads (not overridden by `base` or `phase_counters`). */
  private ownKeys: string[] = [];
  /** Whether the scope survives the spreads (no detail or base key of that name). */
  private scopeKept = true;

  build(scope: JsonObject, extra: JsonObject | null, base: JsonObject, counters: string): JsonObject {
    if (base !== this.base || !this.sameKeys(extra)) this.learn(extra, base);
    const metadata: JsonObject = { ...(this.template as JsonObject) };
    if (this.scopeKept) metadata.phase_scope = scope;
    const own = this.ownKeys;
    for (let i = 0; i < own.length; i++) metadata[own[i]!] = (extra as JsonObject)[own[i]!]!;
    metadata.phase_counters = counters;
    return metadata;
  }

  private sameKeys(extra: JsonObject | null): boolean {
    const keys = this.extraKeys;
    if (extra === null) return keys.length === 0;
    let i = 0;
    for (const key in extra) {
      if (i === keys.length || key !== keys[i]) return false;
      i++;
    }
    return i === keys.length;
  }

  private learn(extra: JsonObject | null, base: JsonObject): void {
    this.template = { phase_scope: null, ...extra, ...base, phase_counters: "" };
    this.base = base;
    this.extraKeys = extra === null ? [] : Object.keys(extra);
    this.ownKeys = this.extraKeys.filter((key) => !Object.hasOwn(base, key) && key !== "phase_counters");
    this.scopeKept =
      !Object.hasOwn(base, "phase_scope") && (extra === null || !Object.hasOwn(extra, "phase_scope"));
  }
}
