import {
  CAPABILITY_FOR_COUNTER,
  type JsonObject,
  MEMORY_COUNTER_FIELDS,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryCounterField,
  type MemoryReading,
  type SampleResult,
} from "@stormlog/core";
import { type AlertState, newAlertState } from "../alerts/alerts.js";
import { aggregateHealth, type CollectorHealth, HEALTHY } from "../health/health.js";

/** One collector inside the tracker: its health and the counters it owns in its device's records. */
export class CollectorState {
  health: CollectorHealth = HEALTHY;
  /** Counter fields its capabilities declare. */
  readonly supported: readonly MemoryCounterField[];
  /** Supported fields no earlier collector of the same device provides: what it contributes. */
  owned: MemoryCounterField[] = [];

  constructor(
    readonly collector: MemoryCollector,
    /** Position among the tracker's available collectors. */
    public index: number,
  ) {
    this.supported = MEMORY_COUNTER_FIELDS.filter(
      (field) => collector.capabilities[CAPABILITY_FOR_COUNTER[field]],
    );
  }

  get name(): string {
    return this.collector.name;
  }
}

/** A reading that passed the contract checks: supported counters only, and what is missing. */
export interface CheckedReading {
  readonly reading: MemoryReading;
  /** Supported fields not read this time. */
  readonly missing: readonly MemoryCounterField[];
  /** Why fields are missing (a partial sample's reason). */
  readonly reason: string | null;
  readonly metadata: JsonObject | undefined;
}

/** A failed or invalid sample, as the reference's core failure. */
export interface CheckedFailure {
  readonly error: string;
}

function isCounter(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/**
 * Checks a sample against the collector contract (the reference's `validate_device_memory_sample`):
 * counters are non-negative safe integers, only supported counters carry values, used and free do
 * not exceed total. A `full` sample that leaves a supported counter out is read as partial.
 */
export function checkSample(state: CollectorState, result: unknown): CheckedReading | CheckedFailure {
  const name = state.name;
  if (typeof result !== "object" || result === null) {
    return { error: `collector ${name} returned ${String(result)} instead of a sample result` };
  }
  const sample = result as SampleResult;
  if (sample.kind === "failure") {
    const error =
      typeof sample.error === "string" && sample.error.trim() !== "" ? sample.error : "Collector unavailable";
    return { error };
  }
  if (sample.kind !== "full" && sample.kind !== "partial") {
    const kind = String((sample as { kind?: unknown }).kind);
    return { error: `collector ${name} returned a sample of unknown kind ${JSON.stringify(kind)}` };
  }
  const raw = sample.reading;
  if (typeof raw !== "object" || raw === null)
    return { error: `collector ${name} returned a sample without a reading` };
  const reading: MemoryReading = {};
  const declaredMissing =
    sample.kind === "partial" && Array.isArray(sample.missing) ? sample.missing : undefined;
  // Declared missing fields first, in the collector's order (the reference keeps `partial_fields` as given).
  const missing: MemoryCounterField[] = (declaredMissing ?? []).filter(
    (field, index, list) => state.supported.includes(field) && list.indexOf(field) === index,
  );
  for (const field of MEMORY_COUNTER_FIELDS) {
    const value = raw[field];
    const supported = state.collector.capabilities[CAPABILITY_FOR_COUNTER[field]];
    if (value === undefined || value === null) {
      if (supported && !missing.includes(field)) missing.push(field);
      continue;
    }
    if (!supported) {
      return {
        error: `collector ${name} reported ${field}, which its capabilities mark unsupported; fix the collector's capabilities or reading`,
      };
    }
    if (!isCounter(value)) {
      return {
        error: `collector ${name} reported ${field} = ${String(value)}; counters must be non-negative integers`,
      };
    }
    if (missing.includes(field)) continue;
    reading[field] = value;
  }
  const total = reading.device_total_bytes;
  if (typeof total === "number") {
    for (const field of ["device_used_bytes", "device_free_bytes"] as const) {
      const value = reading[field];
      if (typeof value === "number" && value > total) {
        return {
          error: `collector ${name} reported ${field} = ${value} above device_total_bytes = ${total}`,
        };
      }
    }
  }
  if (missing.length === state.supported.length && state.supported.length > 0) {
    return {
      error: sample.kind === "partial" && sample.reason ? sample.reason : `collector ${name} read no counter`,
    };
  }
  let reason: string | null = null;
  if (missing.length > 0) {
    reason =
      sample.kind === "partial" && typeof sample.reason === "string" && sample.reason !== ""
        ? sample.reason
        : `collector ${name} did not report ${missing.join(", ")}`;
  }
  return { reading, missing, reason, metadata: sample.metadata };
}

/**
 * `base` (the last sample's counters) with what `states`' `readSync()` read now, or null when none
 * read anything; `read`, when given, gets the fields read. A throw or a failure is skipped: health
 * follows samples.
 */
export function readSyncOver(
  states: readonly CollectorState[],
  base: MemoryReading | null,
  read?: Set<string>,
): MemoryReading | null {
  let reading: MemoryReading | null = null;
  for (const state of states) {
    let result: SampleResult | undefined;
    try {
      result = state.collector.readSync?.();
    } catch {
      continue;
    }
    if (typeof result !== "object" || result === null || result.kind === "failure") continue;
    if (typeof result.reading !== "object" || result.reading === null) continue;
    for (const field of state.owned) {
      const value = result.reading[field];
      if (typeof value === "number" && value >= 0) {
        reading ??= { ...base };
        reading[field] = value;
        read?.add(field);
      }
    }
  }
  return reading;
}

/** Per-device statistics (the reference's `stats`, one set per device). */
export interface DeviceStats {
  peakMemory: number;
  peakDeviceUsed: number;
  totalAllocations: number;
  totalDeallocations: number;
  totalAllocationBytes: number;
  totalDeallocationBytes: number;
  /** Epoch seconds of the last successful sample; 0 before any. */
  lastMemoryCheck: number;
}

function newStats(): DeviceStats {
  return {
    peakMemory: 0,
    peakDeviceUsed: 0,
    totalAllocations: 0,
    totalDeallocations: 0,
    totalAllocationBytes: 0,
    totalDeallocationBytes: 0,
    lastMemoryCheck: 0,
  };
}

function joinDistinct(values: readonly string[]): string {
  return [...new Set(values)].join("+");
}

/**
 * The collectors of one device, read as one record per tick. Each counter comes from the first
 * collector (in the order given to the tracker) whose capabilities support it, so tfjs's allocator
 * counters and NVML's device counters land in the same `sample` record: what gap analysis compares.
 */
export class DeviceGroup {
  readonly collectorString: string;
  readonly capabilities: MemoryCapabilities;
  /** Flat capability hints of every record (reference v3) plus `memory_capabilities` (v4 only). */
  readonly capabilityMetadata: JsonObject;
  readonly states: CollectorState[] = [];
  stats: DeviceStats = newStats();
  alerts: AlertState = newAlertState();
  /** The last merged reading (counters of collectors that answered), or null before the first. */
  lastReading: MemoryReading | null = null;
  /** Fields missing from `lastReading` although supported. */
  lastMissing: readonly string[] = [];
  /** Allocated bytes of the previous sample; null before the first (so it is not an allocation). */
  lastAllocated: number | null = null;
  /** Latest device total seen, for usage alerts; 0 when unknown. */
  totalMemory = 0;
  private cachedBase: JsonObject | null = null;
  private healthVersion = 0;
  private cachedVersion = -1;

  constructor(
    readonly deviceId: number,
    states: readonly CollectorState[],
    /** Add the v4 `memory_capabilities` object to every record (schema 4 requires it). */
    withMemoryCapabilities = true,
  ) {
    this.states.push(...states);
    const claimed = new Set<MemoryCounterField>();
    for (const state of this.states) {
      state.owned = state.supported.filter((field) => !claimed.has(field));
      for (const field of state.owned) claimed.add(field);
    }
    const caps = this.states.map((state) => state.collector.capabilities);
    this.collectorString = joinDistinct(this.states.map((state) => state.name)) || "stormlog.tracker";
    const any = (key: keyof MemoryCapabilities) => caps.some((cap) => cap[key] === true);
    this.capabilities = {
      backend: joinDistinct(caps.map((cap) => cap.backend)) || "none",
      telemetry_collector: this.collectorString,
      sampling_source: joinDistinct(caps.map((cap) => cap.sampling_source)) || "none",
      supports_allocator_allocated: any("supports_allocator_allocated"),
      supports_allocator_reserved: any("supports_allocator_reserved"),
      supports_allocator_active: any("supports_allocator_active"),
      supports_allocator_inactive: any("supports_allocator_inactive"),
      supports_device_used: any("supports_device_used"),
      supports_device_free: any("supports_device_free"),
      supports_device_total: any("supports_device_total"),
      supports_native_allocator_history: any("supports_native_allocator_history"),
      supports_fragmentation_analysis: any("supports_fragmentation_analysis"),
      supports_allocator_attribution: any("supports_allocator_attribution"),
      supports_bounded_profiling: any("supports_bounded_profiling"),
    };
    this.capabilityMetadata = {
      backend: this.capabilities.backend,
      supports_device_total: this.capabilities.supports_device_total,
      supports_device_free: this.capabilities.supports_device_free,
      sampling_source: this.capabilities.sampling_source,
    };
    if (withMemoryCapabilities) this.capabilityMetadata.memory_capabilities = { ...this.capabilities };
  }

  /** The group's health: its collectors' health read as one. */
  health(): CollectorHealth {
    return aggregateHealth(this.states.map((state) => state.health));
  }

  /**
   * Health and capability metadata shared by the group's records, rebuilt only when health changes.
   * Callers spread it into a new object; it must not be modified.
   */
  baseMetadata(healthMetadata: (health: CollectorHealth) => JsonObject): JsonObject {
    if (this.cachedBase === null || this.cachedVersion !== this.healthVersion) {
      const base: JsonObject = { ...healthMetadata(this.health()), ...this.capabilityMetadata };
      if (this.states.length > 1) {
        const perCollector: JsonObject = {};
        for (const state of this.states) perCollector[state.name] = state.health.status;
        base.collectors_health = perCollector;
      }
      this.cachedBase = base;
      this.cachedVersion = this.healthVersion;
    }
    return this.cachedBase;
  }

  /** Zeroes the statistics (`clearEvents()`), keeping when the device was last read. */
  clearStats(): void {
    this.stats = { ...newStats(), lastMemoryCheck: this.stats.lastMemoryCheck };
  }

  /** Sets one collector's health (and drops the cached metadata). */
  setHealth(state: CollectorState, health: CollectorHealth): void {
    state.health = health;
    this.healthVersion++;
  }

  /** Back to the state of a new session. */
  reset(): void {
    for (const state of this.states) state.health = HEALTHY;
    this.healthVersion++;
    this.stats = newStats();
    this.alerts = newAlertState();
    this.lastReading = null;
    this.lastMissing = [];
    this.lastAllocated = null;
    this.totalMemory = 0;
    this.cachedBase = null;
  }
}

/** Groups collectors by `deviceId`, in the order each device first appears. */
export function groupByDevice(
  collectors: readonly MemoryCollector[],
  withMemoryCapabilities = true,
): DeviceGroup[] {
  const byDevice = new Map<number, CollectorState[]>();
  collectors.forEach((collector, index) => {
    let list = byDevice.get(collector.deviceId);
    if (list === undefined) {
      list = [];
      byDevice.set(collector.deviceId, list);
    }
    list.push(new CollectorState(collector, index));
  });
  return [...byDevice].map(([deviceId, states]) => new DeviceGroup(deviceId, states, withMemoryCapabilities));
}
