import type { JsonObject } from "../codec/json.js";

/** Schema versions this SDK reads. v3 is what it writes by default; v4 is writable by option. */
export const SUPPORTED_SCHEMA_VERSIONS = [2, 3, 4] as const;
/** A telemetry schema version. */
export type SchemaVersion = (typeof SUPPORTED_SCHEMA_VERSIONS)[number];
/** The schema version written unless a writer asks for another (the Python reference writes v3). */
export const DEFAULT_SCHEMA_VERSION = 3 satisfies SchemaVersion;

/** The seven memory counters of a record, by their telemetry names. */
export const MEMORY_COUNTER_FIELDS = [
  "allocator_allocated_bytes",
  "allocator_reserved_bytes",
  "allocator_active_bytes",
  "allocator_inactive_bytes",
  "device_used_bytes",
  "device_free_bytes",
  "device_total_bytes",
] as const;
/** One of the seven memory counter field names. */
export type MemoryCounterField = (typeof MEMORY_COUNTER_FIELDS)[number];

/** Top-level fields of a v3 record in the order the reference's `telemetry_event_to_dict` emits them. */
export const TELEMETRY_V3_FIELDS = [
  "schema_version",
  "session_id",
  "timestamp_ns",
  "event_type",
  "collector",
  "sampling_interval_ms",
  "pid",
  "host",
  "job_id",
  "rank",
  "local_rank",
  "world_size",
  "device_id",
  "allocator_allocated_bytes",
  "allocator_reserved_bytes",
  "allocator_active_bytes",
  "allocator_inactive_bytes",
  "allocator_change_bytes",
  "device_used_bytes",
  "device_free_bytes",
  "device_total_bytes",
  "context",
  "metadata",
] as const;
/** A top-level telemetry field name. */
export type TelemetryField = (typeof TELEMETRY_V3_FIELDS)[number];

/** Top-level fields that hold integers (a float token there breaks the reference's strict typing). */
export const INTEGER_TELEMETRY_FIELDS = [
  "schema_version",
  "timestamp_ns",
  "sampling_interval_ms",
  "pid",
  "rank",
  "local_rank",
  "world_size",
  "device_id",
  "allocator_allocated_bytes",
  "allocator_reserved_bytes",
  "allocator_active_bytes",
  "allocator_inactive_bytes",
  "allocator_change_bytes",
  "device_used_bytes",
  "device_free_bytes",
  "device_total_bytes",
] as const satisfies readonly TelemetryField[];

/** Fields that may be absent from a record (they default to null/0/0/1). */
export const OPTIONAL_TELEMETRY_FIELDS = ["job_id", "rank", "local_rank", "world_size"] as const;

/** Distributed identity of the process that produced a record. */
export interface DistributedIdentity {
  job_id: string | null;
  rank: number;
  local_rank: number;
  world_size: number;
}

interface TelemetryRecordBase extends DistributedIdentity {
  /** Nanoseconds since the Unix epoch; a `bigint` because values near 1.7e18 exceed 2^53. */
  timestamp_ns: bigint;
  event_type: string;
  collector: string;
  sampling_interval_ms: number;
  pid: number;
  host: string;
  device_id: number;
  context: string | null;
  metadata: JsonObject;
}

/** Schema v2: v3 without `session_id`. Read only; loaders upgrade it to v3. */
export interface TelemetryRecordV2 extends TelemetryRecordBase {
  schema_version: 2;
  allocator_allocated_bytes: number;
  allocator_reserved_bytes: number;
  allocator_active_bytes: number | null;
  allocator_inactive_bytes: number | null;
  allocator_change_bytes: number;
  device_used_bytes: number;
  device_free_bytes: number | null;
  device_total_bytes: number | null;
}

/** Schema v3, the Python reference's snapshot format and this SDK's default. */
export interface TelemetryRecordV3 extends Omit<TelemetryRecordV2, "schema_version"> {
  schema_version: 3;
  session_id: string;
}

/** Schema v4 (newer upstream): every counter nullable, `metadata.memory_capabilities` required. */
export interface TelemetryRecordV4 extends TelemetryRecordBase {
  schema_version: 4;
  session_id: string;
  allocator_allocated_bytes: number | null;
  allocator_reserved_bytes: number | null;
  allocator_active_bytes: number | null;
  allocator_inactive_bytes: number | null;
  allocator_change_bytes: number | null;
  device_used_bytes: number | null;
  device_free_bytes: number | null;
  device_total_bytes: number | null;
}

/** Any record this SDK reads. */
export type TelemetryRecord = TelemetryRecordV2 | TelemetryRecordV3 | TelemetryRecordV4;
/** A record with a session: what loaders hand to analysis (v2 is upgraded to v3 on load). */
export type TelemetryEvent = TelemetryRecordV3 | TelemetryRecordV4;

/** Event types the reference produces (`event_type` itself is free-form). */
export const KNOWN_EVENT_TYPES = [
  "start",
  "stop",
  "sample",
  "peak",
  "allocation",
  "deallocation",
  "warning",
  "critical",
  "error",
  "cleanup",
  "collector_degraded",
  "collector_recovered",
  "phase_enter",
  "phase_exit",
] as const;

/** Event types counted as alerts. */
export const ALERT_EVENT_TYPES: ReadonlySet<string> = new Set(["warning", "critical", "error"]);
