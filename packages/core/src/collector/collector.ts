import type { JsonObject } from "../codec/json.js";
import type { MemoryCounterField } from "../schema/schema.js";

/** The version of the collector contract below. Bump on any breaking change to it. */
export const COLLECTOR_SPECIFICATION_VERSION = "v1" as const;

/**
 * The telemetry `collector` of host-memory readings, as the reference's CPU tracker writes it: the
 * process's resident memory as reserved and device used, on `HOST_DEVICE_ID`.
 */
export const CPU_TRACKER_COLLECTOR = "stormlog.cpu_tracker";
/** The `device_id` of host (CPU) records. */
export const HOST_DEVICE_ID = -1;

/**
 * What a collector can measure: exactly the keys of the v4 `metadata.memory_capabilities` object.
 * A counter whose `supports_*` flag is false is never reported (not even as zero).
 */
export interface MemoryCapabilities {
  backend: string;
  telemetry_collector: string;
  sampling_source: string;
  supports_allocator_allocated: boolean;
  supports_allocator_reserved: boolean;
  supports_allocator_active: boolean;
  supports_allocator_inactive: boolean;
  supports_device_used: boolean;
  supports_device_free: boolean;
  supports_device_total: boolean;
  supports_native_allocator_history: boolean;
  supports_fragmentation_analysis: boolean;
  supports_allocator_attribution: boolean;
  supports_bounded_profiling: boolean;
}

/** Memory counters of one reading, by telemetry field name. Absent or null means "not measured". */
export type MemoryReading = Partial<Record<MemoryCounterField, number | null>>;

/** Every counter the collector supports was read. */
export interface FullSample {
  readonly kind: "full";
  readonly reading: MemoryReading;
  /**
   * Collector-specific detail (tensor counts, backend flags) merged into the event's metadata. The
   * tracker keeps it, and its nested objects, as given: return new objects for new values and never
   * change one after returning it (an unchanged one may be returned again, and crosses to the sink's
   * worker once).
   */
  readonly metadata?: JsonObject;
}

/** Some supported counters could not be read this time; `missing` names them. */
export interface PartialSample {
  readonly kind: "partial";
  readonly reading: MemoryReading;
  readonly missing: readonly MemoryCounterField[];
  readonly reason: string;
  readonly metadata?: JsonObject;
}

/** Nothing could be read. The tracker records the failure; it never invents zeros. */
export interface SampleFailure {
  readonly kind: "failure";
  readonly error: string;
  readonly cause?: unknown;
}

/** The outcome of one collector reading. */
export type SampleResult = FullSample | PartialSample | SampleFailure;

/** Whether a collector can work in this process, and if not, why (one line). */
export type CollectorAvailability =
  | { readonly available: true }
  | { readonly available: false; readonly reason: string };

/**
 * The tracker's phases as a collector sees them: where code runs now. For collectors that attribute
 * memory to the phase that allocated it, so `currentPhasePath()` runs per allocation: it is cheap
 * (no allocation; a few nanoseconds without async phases) and does not throw.
 */
export interface PhaseContextLike {
  /** The innermost open phase's path where code runs now (`train / backward`), or "" outside any. */
  currentPhasePath(): string;
}

/**
 * The contract every backend adapter implements (tfjs, NVML, onnxruntime, the Node process).
 * Adapters depend on `@stormlog/core` only and declare `specificationVersion` so the tracker can
 * refuse an adapter built against an incompatible contract.
 */
export interface MemoryCollector {
  readonly specificationVersion: typeof COLLECTOR_SPECIFICATION_VERSION;
  /** The telemetry `collector` string, e.g. `stormlog.tfjs_tracker`. */
  readonly name: string;
  /** Telemetry `device_id`: the device index, or -1 for host/CPU memory. */
  readonly deviceId: number;
  readonly capabilities: MemoryCapabilities;
  /** Whether the collector can read anything here; the tracker skips unavailable collectors. */
  availability(): CollectorAvailability;
  /** One reading. May be asynchronous (device queries off the main thread). Must not throw. */
  sample(): SampleResult | Promise<SampleResult>;
  /**
   * A synchronous, cheap reading (well under a microsecond), taken at phase boundaries.
   * Absent when the backend has no such counter (NVML, /proc).
   */
  readSync?(): SampleResult;
  /**
   * A synchronous reading too costly for every phase boundary (microseconds: a file read, a system
   * call), taken only at the boundaries of phases opened with `{ readings: true }`
   * (`PhaseOptions.readings`), so that such phases carry what they measured rather than the last
   * sample. Ignored when the collector also has `readSync()`. Should not throw; a throw or a
   * failure leaves the record with the last sample's counters.
   */
  readOnDemand?(): SampleResult;
  /**
   * The counters at their highest since the previous call, for those that went above both their
   * values then and now (a transient that the readings at both ends miss), else null; each call starts
   * a new window. For collectors that follow a counter between readings (the tfjs collector follows
   * the engine's byte count at every tensor; NVML polled on its thread). The tracker calls it right
   * before every record of the first device (samples, phase boundaries, start, stop; not with
   * `boundaryReadings: false`), and records what it returns as a `sample` inside the phase it
   * happened in. Must be cheap and must not throw.
   */
  takeHighWater?(): MemoryReading | null;
  /**
   * Receives the tracker's phase context at `start()`, for collectors that attribute memory to the
   * phase that allocated it (the tfjs collector's birth phases). Optional; must not throw.
   */
  bindPhases?(context: PhaseContextLike): void;
  /** Releases native handles. */
  close?(): void | Promise<void>;
}

/** Capabilities with every flag false, to spread and override. */
export function noCapabilities(
  backend: string,
  telemetryCollector: string,
  samplingSource: string,
): MemoryCapabilities {
  return {
    backend,
    telemetry_collector: telemetryCollector,
    sampling_source: samplingSource,
    supports_allocator_allocated: false,
    supports_allocator_reserved: false,
    supports_allocator_active: false,
    supports_allocator_inactive: false,
    supports_device_used: false,
    supports_device_free: false,
    supports_device_total: false,
    supports_native_allocator_history: false,
    supports_fragmentation_analysis: false,
    supports_allocator_attribution: false,
    supports_bounded_profiling: false,
  };
}

/** The capability flag that governs a counter field. */
export const CAPABILITY_FOR_COUNTER: Readonly<Record<MemoryCounterField, keyof MemoryCapabilities>> = {
  allocator_allocated_bytes: "supports_allocator_allocated",
  allocator_reserved_bytes: "supports_allocator_reserved",
  allocator_active_bytes: "supports_allocator_active",
  allocator_inactive_bytes: "supports_allocator_inactive",
  device_used_bytes: "supports_device_used",
  device_free_bytes: "supports_device_free",
  device_total_bytes: "supports_device_total",
};
