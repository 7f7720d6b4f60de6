import {
  type JsonObject,
  MEMORY_COUNTER_FIELDS,
  type MemoryCapabilities,
  type MemoryReading,
  type TelemetryEvent,
} from "@stormlog/core";
import type { PhaseScopeTemplate, RecordedPhase } from "@stormlog/phases";
import {
  type PhaseScopeFacts,
  phaseBoundaryContext,
  phaseScopePayload,
  scopeFromTemplate,
} from "@stormlog/phases/internal";
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
 * A stored record's numbers, one row of `ROW` cells each: the counters (NaN when unread), change,
 * boundary sequence and flags (`copyNumbers`' layout), then the timestamp's 64 bits, then the
 * sequences of a scope kept as its template (`SCOPE_SEQUENCE` NaN: the scope itself is kept).
 */
const CHANGE = FIELDS;
const SEQUENCE = FIELDS + 1;
const FLAGS = FIELDS + 2;
const TIMESTAMP = FIELDS + 3;
const SCOPE_SEQUENCE = TIMESTAMP + 1;
/** The parent scope's sequence, -1 at the top. */
const PARENT_SEQUENCE = TIMESTAMP + 2;
const ROW = TIMESTAMP + 3;
/** A stored record's references, one row of `REFS` entries each. */
const TYPE = 0;
const CONTEXT = 1;
const GROUP = 2;
const BASE = 3;
const EXTRA = 4;
const SCOPE = 5;
const REFS = 6;

/**
 * The tracker's recent records in a ring: each record's numbers in one row of a Float64Array (its
 * timestamp in the same row, through a BigInt64Array view) and its references (type, context,
 * group, base and detail, scope) in one row of an array. Records are built as objects only when
 * someone reads them (or a sink needs one), so keeping 10000 of them costs the garbage collector
 * next to nothing: a phase boundary stores numbers and its scope's template (one per path and thread).
 * Rows, not a column per field: inside a training step, between two boundaries, tfjs's data evicts
 * ours from the caches, and a record written or read then costs a cache miss per line it touches
 * (two rows of lines here, where thirteen columns took about thirteen).
 */
export class EventStore {
  readonly capacity: number;
  private readonly phaseMetadata = new PhaseMetadataBuilder();
  /** Records ever pushed since the last `reset()`. */
  written = 0;
  private readonly numbers: Float64Array;
  /** `numbers`' memory as 64-bit integers (the timestamps) and as 32-bit words (`copyTimestamp`). */
  private readonly ts: BigInt64Array;
  private readonly tsWords: Int32Array;
  private readonly refs: unknown[];
  /** The index `slotOf` mapped last, and its slot (a pair that always agrees: index 0 is slot 0). */
  private lastIndex = 0;
  private lastSlot = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.numbers = new Float64Array(capacity * ROW);
    this.ts = new BigInt64Array(this.numbers.buffer);
    this.tsWords = new Int32Array(this.numbers.buffer);
    this.refs = new Array(capacity * REFS).fill(null);
  }

  /**
   * Where record `index` lives. Readers take several fields of one record, then the next: the last
   * answer and its successor come without a division (an integer division costs ~10 ns, and a phase
   * record read by the leak watch or the sink's ring took five of them).
   */
  private slotOf(index: number): number {
    const step = index - this.lastIndex;
    if (step === 0) return this.lastSlot;
    let slot: number;
    if (step === 1) {
      slot = this.lastSlot + 1;
      if (slot === this.capacity) slot = 0;
    } else slot = index % this.capacity;
    this.lastIndex = index;
    this.lastSlot = slot;
    return slot;
  }

  /** Forgets everything. */
  reset(): void {
    this.written = 0;
    this.refs.fill(null);
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
    const slot = this.slotOf(index);
    const row = slot * ROW;
    const numbers = this.numbers;
    if (reading === null) {
      numbers.fill(Number.NaN, row, row + FIELDS);
    } else {
      numbers[row] = reading.allocator_allocated_bytes ?? Number.NaN;
      numbers[row + 1] = reading.allocator_reserved_bytes ?? Number.NaN;
      numbers[row + 2] = reading.allocator_active_bytes ?? Number.NaN;
      numbers[row + 3] = reading.allocator_inactive_bytes ?? Number.NaN;
      numbers[row + 4] = reading.device_used_bytes ?? Number.NaN;
      numbers[row + 5] = reading.device_free_bytes ?? Number.NaN;
      numbers[row + 6] = reading.device_total_bytes ?? Number.NaN;
    }
    numbers[row + CHANGE] = change ?? Number.NaN;
    numbers[row + SEQUENCE] = sequence;
    numbers[row + FLAGS] = flags;
    this.ts[row + TIMESTAMP] = ts;
    // A recorder's scope is kept as its path's template and its sequences: the scope, a new object
    // per phase, then dies young instead of being kept (and copied by the collector) with the record.
    const template = scope === null ? undefined : scope.template;
    if (template !== undefined && (scope as RecordedPhase).attributes === undefined) {
      numbers[row + SCOPE_SEQUENCE] = (scope as RecordedPhase).sequence;
      numbers[row + PARENT_SEQUENCE] = (scope as RecordedPhase).parentSequence ?? -1;
      this.setRefs(slot, eventType, context, group, base, extra, template);
    } else {
      numbers[row + SCOPE_SEQUENCE] = Number.NaN;
      this.setRefs(slot, eventType, context, group, base, extra, scope);
    }
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
    scope: PhaseScopeFacts | null,
  ): number {
    const index = this.written++;
    const slot = this.slotOf(index);
    const row = slot * ROW;
    const own = this.numbers;
    for (let f = 0; f < RECORD_NUMBERS; f++) own[row + f] = numbers[at + f] as number;
    this.ts[row + TIMESTAMP] = ts;
    own[row + SCOPE_SEQUENCE] = Number.NaN;
    this.setRefs(slot, eventType, context, group, base, extra, scope);
    return index;
  }

  private setRefs(
    slot: number,
    eventType: string,
    context: string | null,
    group: StoredGroup,
    base: JsonObject,
    extra: JsonObject | null,
    scope: PhaseScopeFacts | PhaseScopeTemplate | null,
  ): void {
    const refs = this.refs;
    const at = slot * REFS;
    refs[at + TYPE] = eventType;
    refs[at + CONTEXT] = context;
    refs[at + GROUP] = group;
    refs[at + BASE] = base;
    refs[at + EXTRA] = extra;
    refs[at + SCOPE] = scope;
  }

  /** Overwrites one counter of a stored record (a boundary reading). */
  setCounter(index: number, counterIndex: number, value: number): void {
    this.numbers[this.slotOf(index) * ROW + counterIndex] = value;
  }

  /** Attaches collector metadata (e.g. tfjs tensor counts read at a phase boundary) to a stored record. */
  mergeExtra(index: number, extra: JsonObject): void {
    const at = this.slotOf(index) * REFS + EXTRA;
    const current = this.refs[at] as JsonObject | null;
    this.refs[at] = current === null ? extra : { ...current, ...extra };
  }

  /** Sets flag bits of a stored record. */
  addFlags(index: number, flags: number): void {
    const at = this.slotOf(index) * ROW + FLAGS;
    this.numbers[at] = (this.numbers[at] as number) | flags;
  }

  eventType(index: number): string {
    return this.refs[this.slotOf(index) * REFS + TYPE] as string;
  }

  /**
   * The leak watch's read of a phase record, one slot lookup: its allocated, reserved and device-used
   * counters (NaN when unread) and its `tfjs_num_tensors` detail (NaN when absent) into `out` from
   * `valuesAt`, its timestamp as two 32-bit words (in memory order, `timestampOf`) at `wordsAt`; returns
   * its flag bits.
   */
  readPhaseRecord(index: number, out: Float64Array, valuesAt: number, wordsAt: number): number {
    const slot = this.slotOf(index);
    const row = slot * ROW;
    const numbers = this.numbers;
    out[valuesAt] = numbers[row] as number;
    out[valuesAt + 1] = numbers[row + 1] as number;
    out[valuesAt + 2] = numbers[row + 4] as number;
    const extra = this.refs[slot * REFS + EXTRA] as JsonObject | null;
    const tensors = extra === null ? undefined : extra.tfjs_num_tensors;
    out[valuesAt + 3] = typeof tensors === "number" ? tensors : Number.NaN;
    const from = (row + TIMESTAMP) * 2;
    out[wordsAt] = this.tsWords[from] as number;
    out[wordsAt + 1] = this.tsWords[from + 1] as number;
    return numbers[row + FLAGS] as number;
  }

  /**
   * A phase record's scope as kept: its path's template, with its sequence and its parent's (-1 at
   * the top) written to `sequences[0]` and `[1]`; or the scope itself, `sequences[0]` NaN.
   */
  keptScope(index: number, sequences: Float64Array): PhaseScopeTemplate | RecordedPhase {
    const slot = this.slotOf(index);
    const row = slot * ROW;
    sequences[0] = this.numbers[row + SCOPE_SEQUENCE] as number;
    sequences[1] = this.numbers[row + PARENT_SEQUENCE] as number;
    return this.refs[slot * REFS + SCOPE] as PhaseScopeTemplate | RecordedPhase;
  }

  /** A stored record's flag bits (`PHASE_ENTER`, `PHASE_EXIT`, `BOUNDARY_READ`). */
  flagsAt(index: number): number {
    return this.numbers[this.slotOf(index) * ROW + FLAGS] as number;
  }

  /** The collector detail attached to a stored record (`mergeExtra`), or null. */
  extra(index: number): JsonObject | null {
    return (this.refs[this.slotOf(index) * REFS + EXTRA] as JsonObject | null) ?? null;
  }

  /**
   * Copies a record's timestamp into `out[at]`, `out` an Int32Array view of a BigInt64Array's memory
   * (two words per timestamp): no bigint made (the sink ring's hot path).
   */
  copyTimestamp(index: number, out: Int32Array, at: number): void {
    const words = this.tsWords;
    const from = (this.slotOf(index) * ROW + TIMESTAMP) * 2;
    out[at * 2] = words[from] as number;
    out[at * 2 + 1] = words[from + 1] as number;
  }

  timestamp(index: number): bigint {
    return this.ts[this.slotOf(index) * ROW + TIMESTAMP] as bigint;
  }

  /**
   * Copies a stored record's numbers into `out` from `at`: the counters (NaN when unread), change,
   * boundary sequence and flags (`RECORD_NUMBERS` of them).
   */
  copyNumbers(index: number, out: Float64Array, at: number): void {
    const row = this.slotOf(index) * ROW;
    const numbers = this.numbers;
    for (let f = 0; f < RECORD_NUMBERS; f++) out[at + f] = numbers[row + f] as number;
  }

  group(index: number): StoredGroup {
    return this.refs[this.slotOf(index) * REFS + GROUP] as StoredGroup;
  }

  base(index: number): JsonObject {
    return this.refs[this.slotOf(index) * REFS + BASE] as JsonObject;
  }

  context(index: number): string | null {
    return (this.refs[this.slotOf(index) * REFS + CONTEXT] as string | null) ?? null;
  }

  /** A phase record's scope (rebuilt from its template when that is what was kept), else null. */
  scope(index: number): PhaseScopeFacts | null {
    return this.scopeAt(this.slotOf(index));
  }

  private scopeAt(slot: number): PhaseScopeFacts | null {
    const kept = this.refs[slot * REFS + SCOPE] ?? null;
    if (kept === null) return null;
    const row = slot * ROW;
    const sequence = this.numbers[row + SCOPE_SEQUENCE] as number;
    if (Number.isNaN(sequence)) return kept as PhaseScopeFacts;
    const parent = this.numbers[row + PARENT_SEQUENCE] as number;
    return scopeFromTemplate(kept as PhaseScopeTemplate, sequence, parent < 0 ? null : parent);
  }

  deviceId(index: number): number {
    return this.group(index).deviceId;
  }

  /** The record at `index`, as a new object. */
  materialize(index: number, context: RecordContext): TelemetryEvent {
    const slot = this.slotOf(index);
    const row = slot * ROW;
    const c = this.numbers;
    const refs = this.refs;
    const ref = slot * REFS;
    const group = refs[ref + GROUP] as StoredGroup;
    const flags = c[row + FLAGS] as number;
    const scope = this.scopeAt(slot);
    const base = refs[ref + BASE] as JsonObject;
    const extra = refs[ref + EXTRA] as JsonObject | null;
    let metadata: JsonObject;
    let recordContext: string | null;
    if (scope !== null) {
      const enter = (flags & PHASE_ENTER) !== 0;
      metadata = this.phaseMetadata.build(
        phaseScopePayload(
          scope,
          enter ? "enter" : "exit",
          c[row + SEQUENCE] as number,
        ) as unknown as JsonObject,
        extra,
        base,
        (flags & BOUNDARY_READ) !== 0 ? "boundary_read" : "last_sample",
      );
      recordContext = phaseBoundaryContext(enter ? "phase_enter" : "phase_exit", scope.phasePath);
    } else {
      metadata = extra === null ? { ...base } : { ...extra, ...base };
      if (extra !== null) {
        markFloatIfIntegral(metadata, "usage_percent");
        markFloatIfIntegral(metadata, "fragmentation");
        markFloatIfIntegral(metadata, "collector_retry_delay_s");
      }
      recordContext = refs[ref + CONTEXT] as string | null;
    }
    if (metadata.collector_next_retry_epoch_s !== null)
      markFloatIfIntegral(metadata, "collector_next_retry_epoch_s");

    const change = c[row + CHANGE] as number;
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
        timestamp_ns: this.ts[row + TIMESTAMP] as bigint,
        event_type: refs[ref + TYPE] as string,
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
      timestamp_ns: this.ts[row + TIMESTAMP] as bigint,
      event_type: refs[ref + TYPE] as string,
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
