import {
  type JsonObject,
  MEMORY_COUNTER_FIELDS,
  type MemoryCapabilities,
  type MemoryReading,
  type TelemetryEvent,
} from "@stormlog/core";
import type { RecordedPhase } from "@stormlog/phases";
import { phaseBoundaryContext, phaseScopePayload } from "@stormlog/phases/internal";
import { markFloatIfIntegral } from "../health/health.js";

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
  /** `ts` as 32-bit words (`copyTimestamp`). */
  private readonly tsWords: Int32Array;
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
    this.tsWords = new Int32Array(this.ts.buffer);
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

  /** Stores a record whose numbers are `copyNumbers`' layout in `numbers` from `at` (the sink worker's side). */
  pushNumbers(
    ts: bigint,
    eventType: string,
    context: string | null,
    group: StoredGroup,
    numbers: Float64Array,
    at: number,
    base: JsonObject,
    extra: JsonObject | null,
    scope: RecordedPhase | null,
  ): number {
    const index = this.written++;
    const slot = index % this.capacity;
    this.ts[slot] = ts;
    this.types[slot] = eventType;
    this.contexts[slot] = context;
    this.groups[slot] = group;
    this.counters.set(numbers.subarray(at, at + FIELDS), slot * FIELDS);
    this.changes[slot] = numbers[at + FIELDS] as number;
    this.sequences[slot] = numbers[at + FIELDS + 1] as number;
    this.flags[slot] = numbers[at + FIELDS + 2] as number;
    this.bases[slot] = base;
    this.extras[slot] = extra;
    this.scopes[slot] = scope;
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

  /** A stored record's flag bits (`PHASE_ENTER`, `PHASE_EXIT`, `BOUNDARY_READ`). */
  flagsAt(index: number): number {
    return this.flags[index % this.capacity] as number;
  }

  /** The collector detail attached to a stored record (`mergeExtra`), or null. */
  extra(index: number): JsonObject | null {
    return this.extras[index % this.capacity] ?? null;
  }

  /**
   * Copies a record's timestamp into `out[at]`, `out` an Int32Array view of a BigInt64Array's memory
   * (two words per timestamp): no bigint made (the sink ring's hot path).
   */
  copyTimestamp(index: number, out: Int32Array, at: number): void {
    const words = this.tsWords;
    const from = (index % this.capacity) * 2;
    out[at * 2] = words[from] as number;
    out[at * 2 + 1] = words[from + 1] as number;
  }

  timestamp(index: number): bigint {
    return this.ts[index % this.capacity] as bigint;
  }

  /**
   * Copies a stored record's numbers into `out` from `at`: the counters (NaN when unread), change,
   * boundary sequence and flags (`RECORD_NUMBERS` of them).
   */
  copyNumbers(index: number, out: Float64Array, at: number): void {
    const slot = index % this.capacity;
    const row = slot * FIELDS;
    const counters = this.counters;
    for (let f = 0; f < FIELDS; f++) out[at + f] = counters[row + f] as number;
    out[at + FIELDS] = this.changes[slot] as number;
    out[at + FIELDS + 1] = this.sequences[slot] as number;
    out[at + FIELDS + 2] = this.flags[slot] as number;
  }

  group(index: number): StoredGroup {
    return this.groups[index % this.capacity] as StoredGroup;
  }

  base(index: number): JsonObject {
    return this.bases[index % this.capacity] as JsonObject;
  }

  context(index: number): string | null {
    return this.contexts[index % this.capacity] ?? null;
  }

  scope(index: number): RecordedPhase | null {
    return this.scopes[index % this.capacity] ?? null;
  }

  deviceId(index: number): number {
    return (this.groups[index % this.capacity] as StoredGroup).deviceId;
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

/** Numbers `copyNumbers` writes per record: the counters, change, boundary sequence and flags. */
export const RECORD_NUMBERS = FIELDS + 3;

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
