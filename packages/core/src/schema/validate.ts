import type { JsonObject } from "../codec/json.js";
import { CAPABILITY_FOR_COUNTER, type MemoryCapabilities } from "../collector/collector.js";
import { inputText, type SourceLocation, TelemetryValidationError } from "../runtime/errors.js";
import { type ExactCounterField, setExactCounters } from "./exact-counters.js";
import {
  MEMORY_COUNTER_FIELDS,
  type SchemaVersion,
  SUPPORTED_SCHEMA_VERSIONS,
  TELEMETRY_V3_FIELDS,
  type TelemetryRecord,
} from "./schema.js";

/** Options of `validateTelemetryRecord`. */
export interface ValidateOptions {
  /** Named in error messages (`file:line`). */
  readonly location?: SourceLocation;
}

const KNOWN_FIELDS: ReadonlySet<string> = new Set(TELEMETRY_V3_FIELDS);
const OPTIONAL: ReadonlySet<string> = new Set(["job_id", "rank", "local_rank", "world_size"]);
const REQUIRED_V3 = TELEMETRY_V3_FIELDS.filter((field) => !OPTIONAL.has(field));
const REQUIRED_V2 = REQUIRED_V3.filter((field) => field !== "session_id");

/** The boolean keys of v4 `metadata.memory_capabilities` (besides three strings). */
const CAPABILITY_BOOLEANS = [
  "supports_allocator_allocated",
  "supports_allocator_reserved",
  "supports_allocator_active",
  "supports_allocator_inactive",
  "supports_device_used",
  "supports_device_free",
  "supports_device_total",
  "supports_native_allocator_history",
  "supports_fragmentation_analysis",
  "supports_allocator_attribution",
  "supports_bounded_profiling",
] as const satisfies readonly (keyof MemoryCapabilities)[];
const CAPABILITY_STRINGS = ["backend", "telemetry_collector", "sampling_source"] as const;

type Candidate = Record<string, unknown>;

function invalid(message: string, field: string | undefined, location: SourceLocation | undefined): never {
  throw new TelemetryValidationError(message, {
    ...(field ? { field } : {}),
    ...(location ? { location } : {}),
  });
}

function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** An exact integer that fits a double (bigints inside 2^53 are accepted and converted). */
function readInt(record: Candidate, field: string, location: SourceLocation | undefined): number {
  const value = record[field];
  if (typeof value === "number") {
    if (Number.isInteger(value)) {
      if (Math.abs(value) > Number.MAX_SAFE_INTEGER) {
        invalid(`Field '${field}' exceeds 2^53 and cannot be held exactly`, field, location);
      }
      return value;
    }
    invalid(`Field '${field}' must be an integer, got ${value}`, field, location);
  }
  if (typeof value === "bigint") {
    if (value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= -BigInt(Number.MAX_SAFE_INTEGER))
      return Number(value);
    invalid(`Field '${field}' exceeds 2^53 and cannot be held exactly`, field, location);
  }
  return invalid(`Field '${field}' must be an integer, got ${describe(value)}`, field, location);
}

/**
 * A memory counter: an exact integer, which may pass 2^53 when it was read exactly (a `bigint` from
 * the lossless parser). Returns the value as read; a double past 2^53 is refused (it is not exact).
 */
function readCounter(
  record: Candidate,
  field: string,
  nullable: boolean,
  location: SourceLocation | undefined,
): number | bigint | null {
  const value = record[field];
  if (nullable && value === null) return null;
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value;
  return readInt(record, field, location);
}

/** A counter as the record holds it: the nearest double of one read exactly past 2^53. */
function nearestDouble(counter: number | bigint | null | undefined): number | null {
  return counter === undefined || counter === null ? null : Number(counter);
}

function atLeast(
  value: number | null,
  min: number,
  field: string,
  location: SourceLocation | undefined,
): void {
  if (value !== null && value < min)
    invalid(`Field '${field}' must be >= ${min}, got ${value}`, field, location);
}

function readNonEmptyString(record: Candidate, field: string, location: SourceLocation | undefined): string {
  const value = record[field];
  if (typeof value !== "string")
    invalid(`Field '${field}' must be a string, got ${describe(value)}`, field, location);
  if (value.trim() === "") invalid(`Field '${field}' must be a non-empty string`, field, location);
  return value;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return `the string ${JSON.stringify(value)}`;
  if (typeof value === "bigint") return value.toString();
  return typeof value === "object" ? "an object" : `${typeof value} ${String(value)}`;
}

/**
 * Validates a telemetry record with the Python reference's rules (§2.1) and returns it typed, with
 * its keys in canonical order and the optional identity fields filled (`null/0/0/1`).
 * `timestamp_ns` comes back as a `bigint`. Throws `TelemetryValidationError` naming the field.
 */
export function validateTelemetryRecord(value: unknown, options: ValidateOptions = {}): TelemetryRecord {
  const location = options.location;
  if (!isPlainObject(value))
    invalid(`A telemetry record must be a JSON object, got ${describe(value)}`, undefined, location);
  const record = value as Candidate;

  const version = record.schema_version;
  if (typeof version !== "number" || !SUPPORTED_SCHEMA_VERSIONS.includes(version as SchemaVersion)) {
    invalid(
      `Unsupported schema_version: ${describe(version)} (supported: ${SUPPORTED_SCHEMA_VERSIONS.join(", ")})`,
      "schema_version",
      location,
    );
  }
  const schemaVersion = version as SchemaVersion;

  const required = schemaVersion === 2 ? REQUIRED_V2 : REQUIRED_V3;
  const missing = required.filter((field) => !(field in record) || record[field] === undefined);
  if (missing.length > 0)
    invalid(`Missing required telemetry fields: ${missing.join(", ")}`, missing[0], location);
  if (schemaVersion === 2 && "session_id" in record) {
    invalid(
      "Unknown telemetry fields: session_id (schema_version 2 has no session_id)",
      "session_id",
      location,
    );
  }

  // Python reports missing fields before unknown ones.
  const unknown = Object.keys(record).filter((key) => !KNOWN_FIELDS.has(key));
  if (unknown.length > 0) {
    invalid(`Unknown telemetry fields: ${unknown.sort().map(inputText).join(", ")}`, unknown[0], location);
  }

  const sessionId = schemaVersion === 2 ? undefined : readNonEmptyString(record, "session_id", location);

  const rawTimestamp = record.timestamp_ns;
  let timestampNs: bigint;
  if (typeof rawTimestamp === "bigint") timestampNs = rawTimestamp;
  else if (typeof rawTimestamp === "number" && Number.isInteger(rawTimestamp)) {
    if (Math.abs(rawTimestamp) > Number.MAX_SAFE_INTEGER) {
      invalid(
        "Field 'timestamp_ns' was already rounded (parsed as a double); read it with parseJson or decodeTelemetryLine",
        "timestamp_ns",
        location,
      );
    }
    timestampNs = BigInt(rawTimestamp);
  } else {
    return invalid(
      `Field 'timestamp_ns' must be an integer, got ${describe(rawTimestamp)}`,
      "timestamp_ns",
      location,
    );
  }
  if (timestampNs < 0n)
    invalid(`Field 'timestamp_ns' must be >= 0, got ${timestampNs}`, "timestamp_ns", location);

  const eventType = readNonEmptyString(record, "event_type", location);
  const collector = readNonEmptyString(record, "collector", location);
  const samplingIntervalMs = readInt(record, "sampling_interval_ms", location);
  atLeast(samplingIntervalMs, 0, "sampling_interval_ms", location);
  const pid = readInt(record, "pid", location);
  atLeast(pid, -1, "pid", location);
  const host = readNonEmptyString(record, "host", location);

  const jobIdValue = record.job_id;
  let jobId: string | null = null;
  if (jobIdValue !== undefined && jobIdValue !== null) {
    if (typeof jobIdValue !== "string" || jobIdValue.trim() === "") {
      invalid(
        `Field 'job_id' must be null or a non-empty string, got ${describe(jobIdValue)}`,
        "job_id",
        location,
      );
    }
    jobId = jobIdValue;
  }
  const worldSize = record.world_size === undefined ? 1 : readInt(record, "world_size", location);
  atLeast(worldSize, 1, "world_size", location);
  const rank = record.rank === undefined ? 0 : readInt(record, "rank", location);
  // A missing local rank is the rank, as the reference resolves identity.
  const localRank = record.local_rank === undefined ? rank : readInt(record, "local_rank", location);
  for (const [field, value] of [
    ["rank", rank],
    ["local_rank", localRank],
  ] as const) {
    atLeast(value, 0, field, location);
    if (value >= worldSize)
      invalid(`Field '${field}' (${value}) must be < world_size (${worldSize})`, field, location);
  }

  const deviceId = readInt(record, "device_id", location);
  const counterNullable = schemaVersion === 4;
  // Exact values (bigint past 2^53) for the checks; the record gets doubles, the exact ones aside.
  const counters: Record<string, number | bigint | null> = {};
  let exact: Partial<Record<ExactCounterField, bigint>> | null = null;
  for (const field of MEMORY_COUNTER_FIELDS) {
    const nullable =
      counterNullable ||
      field === "allocator_active_bytes" ||
      field === "allocator_inactive_bytes" ||
      field === "device_free_bytes" ||
      field === "device_total_bytes";
    const counter = readCounter(record, field, nullable, location);
    if (counter !== null && counter < 0)
      invalid(`Field '${field}' must be >= 0, got ${counter}`, field, location);
    counters[field] = counter;
    if (typeof counter === "bigint") {
      exact ??= {};
      exact[field] = counter;
    }
  }
  const change = readCounter(record, "allocator_change_bytes", counterNullable, location);
  if (typeof change === "bigint") {
    exact ??= {};
    exact.allocator_change_bytes = change;
  }
  const changeBytes = change === null ? null : Number(change);
  const total = counters.device_total_bytes ?? null;
  if (total !== null) {
    for (const field of ["device_used_bytes", "device_free_bytes"] as const) {
      const counter = counters[field] ?? null;
      if (counter !== null && counter > total) {
        invalid(`Field '${field}' (${counter}) must be <= device_total_bytes (${total})`, field, location);
      }
    }
  }

  const context = record.context;
  if (context !== null && typeof context !== "string") {
    invalid(`Field 'context' must be a string or null, got ${describe(context)}`, "context", location);
  }
  const metadata = record.metadata;
  if (!isPlainObject(metadata))
    invalid(`Field 'metadata' must be an object, got ${describe(metadata)}`, "metadata", location);
  if (schemaVersion === 4) validateCapabilities(metadata, counters, change, location);

  const validated = {
    schema_version: schemaVersion,
    ...(sessionId === undefined ? {} : { session_id: sessionId }),
    timestamp_ns: timestampNs,
    event_type: eventType,
    collector,
    sampling_interval_ms: samplingIntervalMs,
    pid,
    host,
    job_id: jobId,
    rank,
    local_rank: localRank,
    world_size: worldSize,
    device_id: deviceId,
    allocator_allocated_bytes: nearestDouble(counters.allocator_allocated_bytes),
    allocator_reserved_bytes: nearestDouble(counters.allocator_reserved_bytes),
    allocator_active_bytes: nearestDouble(counters.allocator_active_bytes),
    allocator_inactive_bytes: nearestDouble(counters.allocator_inactive_bytes),
    allocator_change_bytes: changeBytes,
    device_used_bytes: nearestDouble(counters.device_used_bytes),
    device_free_bytes: nearestDouble(counters.device_free_bytes),
    device_total_bytes: nearestDouble(counters.device_total_bytes),
    context: context as string | null,
    metadata,
  } as TelemetryRecord;
  if (exact !== null) setExactCounters(validated, exact);
  return validated;
}

function validateCapabilities(
  metadata: JsonObject,
  counters: Record<string, number | bigint | null>,
  changeBytes: number | bigint | null,
  location: SourceLocation | undefined,
): void {
  const field = "metadata.memory_capabilities";
  const capabilities = metadata.memory_capabilities;
  if (!isPlainObject(capabilities)) invalid(`Schema v4 requires '${field}' to be an object`, field, location);
  const expected = new Set<string>([...CAPABILITY_STRINGS, ...CAPABILITY_BOOLEANS]);
  const extra = Object.keys(capabilities).filter((key) => !expected.has(key));
  if (extra.length > 0) invalid(`Unknown keys in '${field}': ${extra.sort().join(", ")}`, field, location);
  for (const key of CAPABILITY_STRINGS) {
    const value = capabilities[key];
    if (typeof value !== "string" || value.trim() === "")
      invalid(`'${field}.${key}' must be a non-empty string`, field, location);
  }
  for (const key of CAPABILITY_BOOLEANS) {
    if (typeof capabilities[key] !== "boolean")
      invalid(`'${field}.${key}' must be a boolean`, field, location);
  }
  for (const counter of MEMORY_COUNTER_FIELDS) {
    if (capabilities[CAPABILITY_FOR_COUNTER[counter]] === false && counters[counter] !== null) {
      invalid(
        `Field '${counter}' must be null when ${CAPABILITY_FOR_COUNTER[counter]} is false`,
        counter,
        location,
      );
    }
  }
  if (capabilities.supports_allocator_allocated === false && changeBytes !== null) {
    invalid(
      "Field 'allocator_change_bytes' must be null when supports_allocator_allocated is false",
      "allocator_change_bytes",
      location,
    );
  }
}
