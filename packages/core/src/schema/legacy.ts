import type { JsonObject, JsonValue } from "../codec/json.js";
import { FLOAT_KEYS, markFloat, setJsonMember } from "../codec/json-codec.js";
import { CPU_TRACKER_COLLECTOR, HOST_DEVICE_ID, type MemoryCapabilities } from "../collector/collector.js";
import { InvalidConfigError, type SourceLocation, TelemetryValidationError } from "../runtime/errors.js";
import { pythonStr } from "../text/pyrepr.js";
import { resolveDistributedIdentity } from "./identity.js";
import {
  type DistributedIdentity,
  INTEGER_TELEMETRY_FIELDS,
  SUPPORTED_SCHEMA_VERSIONS,
  type TelemetryEvent,
  type TelemetryRecord,
} from "./schema.js";
import { stableLegacySessionId } from "./session.js";
import { validateTelemetryRecord } from "./validate.js";

/** `pid` of a legacy record that has none. */
export const UNKNOWN_PID = -1;
/** `host` of a legacy record that has none. */
export const UNKNOWN_HOST = "unknown";
/** `collector` of a legacy record whose producer cannot be told. */
export const DEFAULT_LEGACY_COLLECTOR = "legacy.unknown";

/** Collector strings of legacy records that name their backend. */
export const LEGACY_BACKEND_COLLECTORS: Readonly<Record<string, string>> = {
  mps: "stormlog.mps_tracker",
  rocm: "stormlog.rocm_tracker",
  cuda: "stormlog.cuda_tracker",
  cpu: CPU_TRACKER_COLLECTOR,
};

/** Options of `normalizeTelemetryRecord`. */
export interface NormalizeOptions {
  /**
   * Session of records that carry none (loaders pass the file's synthetic id). Without it, each
   * sessionless record gets `stableLegacySessionId([timestamp, host, pid])`.
   */
  readonly defaultSessionId?: string | null | undefined;
  /** `collector` of legacy records that do not reveal one. Default `legacy.unknown`. */
  readonly defaultCollector?: string | undefined;
  /** `sampling_interval_ms` of legacy records without one. Default 0. */
  readonly defaultSamplingIntervalMs?: number | undefined;
  /** Convert records without `schema_version` (default true). False rejects them. */
  readonly permissiveLegacy?: boolean | undefined;
  /**
   * Schema that v2/v3/legacy records become: 3 (default, the Python snapshot's loaders) or 4 (the
   * newer upstream's loaders, with `metadata.memory_capabilities` inferred). v4 records stay v4.
   */
  readonly upgradeTo?: 3 | 4 | undefined;
  /**
   * Strict (default): an integer field written as a float token (`1024.0`, marked by `parseJson`) is
   * rejected, as the reference rejects it. Lenient: accepted and reported through `onNote`.
   */
  readonly strict?: boolean | undefined;
  /** Receives notes about input accepted only in lenient mode. */
  readonly onNote?: ((note: string) => void) | undefined;
  /** Named in error messages (`file:line`). */
  readonly location?: SourceLocation | undefined;
}

type Int = number | bigint;
type FloatMarked = { [FLOAT_KEYS]?: ReadonlySet<string | number> };

const IDENTITY_KEYS = ["job_id", "rank", "local_rank", "world_size"] as const;
const BACKEND_HINTS = ["cuda", "rocm", "mps", "cpu", "tensorflow", "jax"] as const;

function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Python's `key in record` for decoded JSON (an `undefined` value counts as absent). */
function has(record: JsonObject, key: string): boolean {
  return Object.hasOwn(record, key) && record[key] !== undefined;
}

function isFloatToken(container: JsonObject, key: string): boolean {
  return (container as FloatMarked)[FLOAT_KEYS]?.has(key) === true;
}

function describe(value: JsonValue | undefined): string {
  if (value === undefined || value === null) return "null";
  if (typeof value === "string") return `the string ${JSON.stringify(value)}`;
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "object") return Array.isArray(value) ? "an array" : "an object";
  return `${typeof value} ${String(value)}`;
}

/** A shallow copy that keeps the float-token marks of the keys it copies. */
function copyObject(source: JsonObject, skip: ReadonlySet<string> = new Set()): JsonObject {
  const copy: JsonObject = {};
  for (const [key, value] of Object.entries(source)) {
    if (skip.has(key)) continue;
    setJsonMember(copy, key, value);
    if (isFloatToken(source, key)) markFloat(copy, key);
  }
  return copy;
}

class Converter {
  constructor(private readonly options: NormalizeOptions) {}

  fail(message: string, field?: string, cause?: unknown): never {
    throw new TelemetryValidationError(message, {
      ...(field ? { field } : {}),
      ...(this.options.location ? { location: this.options.location } : {}),
      ...(cause === undefined ? {} : { cause }),
    });
  }

  /** The reference's `_coerce_int`: an integer, not a bool, not a float token (in strict mode). */
  int(container: JsonObject, key: string, field: string = key): Int {
    const value = container[key];
    if (typeof value === "bigint") return value;
    if (typeof value === "number" && Number.isInteger(value)) {
      if (isFloatToken(container, key)) {
        if (this.options.strict !== false) {
          this.fail(
            `${field} must be an integer, got a float token (${value}); the Python reference rejects it too. ` +
              "Write the integer (1, not 1.0); the API reads integral floats with { strict: false }",
            field,
          );
        }
        this.options.onNote?.(
          `Field '${field}' was written as a float (${value}); accepted as an integer in lenient mode`,
        );
      }
      return value;
    }
    return this.fail(`${field} must be an integer, got ${describe(value)}`, field);
  }

  optionalInt(container: JsonObject, key: string, field: string = key): Int | null {
    const value = container[key];
    return value === undefined || value === null ? null : this.int(container, key, field);
  }

  /** The reference's `_coerce_string`. */
  string(value: JsonValue | undefined, field: string, allowNone: boolean): string | null {
    if (value === undefined || value === null) {
      if (allowNone) return null;
      return this.fail(`${field} must be a non-empty string, got null`, field);
    }
    if (typeof value !== "string")
      return this.fail(`${field} must be a string, got ${describe(value)}`, field);
    if (!allowNone && value.trim() === "") return this.fail(`${field} must be a non-empty string`, field);
    return value;
  }

  /** Python's `int(float(x) * factor)`: the product in doubles, truncated toward zero. */
  scaledInt(value: number | bigint, factor: number, field: string): Int {
    const product = Number(value) * factor;
    if (!Number.isFinite(product)) {
      return this.fail(`${field} must be a finite number, got ${String(value)}`, field);
    }
    const truncated = Math.trunc(product);
    return Number.isSafeInteger(truncated) ? truncated : BigInt(truncated);
  }

  identity(input: JsonObject, metadata?: JsonObject): DistributedIdentity {
    try {
      return resolveDistributedIdentity(
        { jobId: input.job_id, rank: input.rank, localRank: input.local_rank, worldSize: input.world_size },
        metadata ? { metadata } : {},
      );
    } catch (error) {
      if (InvalidConfigError.isInstance(error)) {
        return this.fail(error.message.replace(/^Invalid option '[^']*': /, ""), error.option, error);
      }
      throw error;
    }
  }

  /** Record `session_id`, else `metadata.session_id`, else the default, else a synthetic id. */
  sessionId(record: JsonObject, metadata: JsonObject | undefined): string {
    let raw = record.session_id;
    if ((raw === undefined || raw === null) && metadata !== undefined) raw = metadata.session_id;
    if (typeof raw === "string" && raw.trim() !== "") return raw;
    const fallback = this.options.defaultSessionId;
    if (fallback !== undefined && fallback !== null) return fallback;
    const timestampKey = has(record, "timestamp_ns")
      ? "timestamp_ns"
      : has(record, "timestamp")
        ? "timestamp"
        : undefined;
    const timestamp = timestampKey === undefined ? "unknown" : record[timestampKey];
    const host = has(record, "host") ? record.host : UNKNOWN_HOST;
    const pid = has(record, "pid") ? record.pid : UNKNOWN_PID;
    const part = (value: JsonValue | undefined, key: string | undefined): string | null => {
      if (value === undefined || value === null) return null;
      if (typeof value === "object") return JSON.stringify(value); // validation rejects these later
      const float = typeof value === "number" && key !== undefined && isFloatToken(record, key);
      return pythonStr(value, { float });
    };
    return stableLegacySessionId([part(timestamp, timestampKey), part(host, "host"), part(pid, "pid")]);
  }

  validate(candidate: Record<string, unknown>): TelemetryRecord {
    return validateTelemetryRecord(
      candidate,
      this.options.location ? { location: this.options.location } : {},
    );
  }
}

/**
 * The validated record with the reference's identity: `validateTelemetryRecord` returns a fresh
 * object in canonical key order but fills a missing `local_rank` with 0 where the reference's
 * loaders use the rank.
 */
function withIdentity(record: TelemetryRecord, identity: DistributedIdentity): TelemetryEvent {
  record.job_id = identity.job_id;
  record.rank = identity.rank;
  record.local_rank = identity.local_rank;
  record.world_size = identity.world_size;
  return record as TelemetryEvent;
}

function pythonStrOfJson(value: JsonValue | undefined): string {
  if (value === undefined || value === null) return "None";
  if (typeof value === "object") return JSON.stringify(value);
  return pythonStr(value);
}

/** The counters and collector capabilities are inferred from. */
export type CapabilityEvidence = Partial<Record<string, JsonValue | undefined>>;

/**
 * `metadata.memory_capabilities` for a record that predates schema v4, as the newer reference
 * infers it: backend from `metadata.backend` or the collector name, each `supports_<counter>` true
 * when that counter is not null, fragmentation/attribution when allocated and reserved are known.
 */
export function inferMemoryCapabilities(
  record: CapabilityEvidence,
  metadata: JsonObject,
): MemoryCapabilities {
  const collector = pythonStrOfJson(record.collector ?? DEFAULT_LEGACY_COLLECTOR);
  const declared = metadata.backend;
  const backend =
    typeof declared === "string" && declared.trim() !== ""
      ? declared
      : (BACKEND_HINTS.find((hint) => collector.toLowerCase().includes(hint)) ?? "unknown");
  const known = (field: string) => record[field] !== undefined && record[field] !== null;
  const allocated = known("allocator_allocated_bytes");
  const reserved = known("allocator_reserved_bytes");
  return {
    backend,
    telemetry_collector: collector,
    sampling_source: has(metadata, "sampling_source") ? pythonStrOfJson(metadata.sampling_source) : "legacy",
    supports_allocator_allocated: allocated,
    supports_allocator_reserved: reserved,
    supports_allocator_active: known("allocator_active_bytes"),
    supports_allocator_inactive: known("allocator_inactive_bytes"),
    supports_device_used: known("device_used_bytes"),
    supports_device_free: known("device_free_bytes"),
    supports_device_total: known("device_total_bytes"),
    supports_native_allocator_history: false,
    supports_fragmentation_analysis: allocated && reserved,
    supports_allocator_attribution: allocated && reserved,
    supports_bounded_profiling: false,
  };
}

/** Metadata with `memory_capabilities` added (inferred) unless it already has them. */
function withCapabilities(metadata: JsonObject, record: CapabilityEvidence): JsonObject {
  if (Object.hasOwn(metadata, "memory_capabilities")) return metadata;
  const copy = copyObject(metadata);
  copy.memory_capabilities = { ...inferMemoryCapabilities(record, metadata) };
  return copy;
}

function upgradeToV4(
  converter: Converter,
  record: TelemetryRecord,
  identity: DistributedIdentity,
): TelemetryEvent {
  const evidence = record as unknown as CapabilityEvidence;
  const candidate = { ...record, schema_version: 4, metadata: withCapabilities(record.metadata, evidence) };
  return withIdentity(converter.validate(candidate), identity);
}

function normalizeVersioned(
  record: JsonObject,
  options: NormalizeOptions,
  converter: Converter,
): TelemetryEvent {
  const version = converter.int(record, "schema_version");
  if (!SUPPORTED_SCHEMA_VERSIONS.some((supported) => BigInt(supported) === BigInt(version))) {
    converter.fail(
      `Unsupported schema_version: ${version}; this reader understands ${SUPPORTED_SCHEMA_VERSIONS.join(", ")} ` +
        "(omit schema_version for legacy records)",
      "schema_version",
    );
  }
  const metadata = has(record, "metadata") ? record.metadata : {};
  if (!isPlainObject(metadata))
    return converter.fail(`metadata must be an object, got ${describe(metadata)}`, "metadata");
  // Identity comes from the record alone: metadata identity keys stay opaque for versioned records.
  const identity = converter.identity(record);
  // Only records read by parseJson carry float-token marks; skip the scan for the others.
  if ((record as FloatMarked)[FLOAT_KEYS] !== undefined) {
    for (const field of INTEGER_TELEMETRY_FIELDS) {
      if (field !== "schema_version" && typeof record[field] === "number") converter.int(record, field);
    }
  }
  const sessionId = converter.sessionId(record, metadata);

  if (Number(version) === 4) {
    const candidate: Record<string, unknown> = { ...record, schema_version: 4, session_id: sessionId };
    // The newer reference reads v4 records without capabilities by inferring them.
    if (isPlainObject(record.metadata)) {
      candidate.metadata = withCapabilities(record.metadata, record as CapabilityEvidence);
    }
    return withIdentity(converter.validate(candidate), identity);
  }
  const v3 = converter.validate({ ...record, schema_version: 3, session_id: sessionId });
  return options.upgradeTo === 4 ? upgradeToV4(converter, v3, identity) : withIdentity(v3, identity);
}

function legacyTimestampNs(record: JsonObject, converter: Converter): Int {
  if (has(record, "timestamp_ns")) return converter.int(record, "timestamp_ns");
  const timestamp = record.timestamp;
  if (typeof timestamp === "number" || typeof timestamp === "bigint") {
    return converter.scaledInt(timestamp, 1_000_000_000, "timestamp");
  }
  return converter.fail(
    "Legacy record is missing a valid timestamp: give timestamp_ns (integer nanoseconds) or timestamp (seconds)",
    "timestamp",
  );
}

function legacyDeviceId(record: JsonObject, converter: Converter): Int {
  if (has(record, "device_id")) return converter.int(record, "device_id");
  const device = record.device;
  if (typeof device === "string") {
    const lowered = device.toLowerCase();
    if (lowered.includes("cpu")) return -1;
    const colon = device.lastIndexOf(":");
    if (colon >= 0) {
      const tail = device.slice(colon + 1);
      if (/^[0-9]+$/.test(tail)) {
        const index = Number(tail);
        return Number.isSafeInteger(index) ? index : BigInt(tail);
      }
    }
    if (lowered.startsWith("/gpu")) return 0;
  }
  return has(record, "memory_mb") ? 0 : -1;
}

function legacyAllocated(record: JsonObject, converter: Converter): Int {
  if (has(record, "allocator_allocated_bytes")) return converter.int(record, "allocator_allocated_bytes");
  if (has(record, "memory_allocated")) return converter.int(record, "memory_allocated");
  const memoryMb = record.memory_mb;
  if (typeof memoryMb === "number" || typeof memoryMb === "bigint") {
    return converter.scaledInt(memoryMb, 1024 * 1024, "memory_mb");
  }
  if (has(record, "device_used_bytes")) return converter.int(record, "device_used_bytes");
  return 0;
}

function firstInt(record: JsonObject, keys: readonly string[], converter: Converter): Int | undefined {
  for (const key of keys) {
    if (has(record, key)) return converter.int(record, key);
  }
  return undefined;
}

function legacyTotal(record: JsonObject, metadata: JsonObject, converter: Converter): Int | null {
  if (has(record, "device_total_bytes")) return converter.optionalInt(record, "device_total_bytes");
  for (const container of [record, metadata]) {
    for (const key of ["total_memory", "device_total", "total_bytes"]) {
      if (has(container, key)) return converter.optionalInt(container, key);
    }
  }
  return null;
}

function legacyFree(record: JsonObject, used: Int, total: Int | null, converter: Converter): Int | null {
  if (has(record, "device_free_bytes")) return converter.optionalInt(record, "device_free_bytes");
  if (total === null) return null;
  if (typeof total === "number" && typeof used === "number") return Math.max(total - used, 0);
  const free = BigInt(total) - BigInt(used);
  return free > 0n ? free : 0n;
}

function legacyCollector(
  record: JsonObject,
  metadata: JsonObject,
  deviceId: Int,
  options: NormalizeOptions,
): string {
  const collector = record.collector;
  if (typeof collector === "string" && collector.trim() !== "") return collector;
  // Like `record.get("backend", metadata.get("backend"))`: a record key wins even when null.
  const backend = has(record, "backend") ? record.backend : metadata.backend;
  if (typeof backend === "string") {
    const mapped = LEGACY_BACKEND_COLLECTORS[backend.trim().toLowerCase()];
    if (mapped !== undefined) return mapped;
  }
  if (has(record, "memory_mb")) return "stormlog.tensorflow.memory_tracker";
  if (has(record, "memory_allocated")) {
    return deviceId === HOST_DEVICE_ID || deviceId === -1n ? CPU_TRACKER_COLLECTOR : "stormlog.cuda_tracker";
  }
  return options.defaultCollector ?? DEFAULT_LEGACY_COLLECTOR;
}

/** Record `metadata` merged with every top-level `metadata_<key>` (prefix removed). */
function legacyMetadata(record: JsonObject, converter: Converter): JsonObject {
  const raw = record.metadata;
  let metadata: JsonObject = {};
  if (raw !== undefined && raw !== null) {
    if (!isPlainObject(raw)) {
      return converter.fail(`metadata must be an object when provided, got ${describe(raw)}`, "metadata");
    }
    metadata = copyObject(raw);
  }
  for (const [key, value] of Object.entries(record)) {
    if (!key.startsWith("metadata_") || value === undefined) continue;
    const name = key.slice("metadata_".length);
    setJsonMember(metadata, name, value);
    if (isFloatToken(record, key)) markFloat(metadata, name);
  }
  return metadata;
}

function convertLegacy(record: JsonObject, options: NormalizeOptions, converter: Converter): TelemetryEvent {
  let metadata = legacyMetadata(record, converter);
  const timestampNs = legacyTimestampNs(record, converter);
  const deviceId = legacyDeviceId(record, converter);
  const allocated = legacyAllocated(record, converter);
  const reserved = firstInt(record, ["allocator_reserved_bytes", "memory_reserved"], converter) ?? allocated;
  const change = firstInt(record, ["allocator_change_bytes", "memory_change"], converter) ?? 0;
  const active = converter.optionalInt(record, "allocator_active_bytes");
  const inactive = converter.optionalInt(record, "allocator_inactive_bytes");
  const used = has(record, "device_used_bytes") ? converter.int(record, "device_used_bytes") : allocated;
  const total = legacyTotal(record, metadata, converter);
  const free = legacyFree(record, used, total, converter);

  const eventTypeValue = has(record, "event_type")
    ? record.event_type
    : has(record, "type")
      ? record.type
      : "sample";
  const eventType = converter.string(eventTypeValue, "event_type", false) as string;
  const samplingIntervalMs = has(record, "sampling_interval_ms")
    ? converter.int(record, "sampling_interval_ms")
    : (options.defaultSamplingIntervalMs ?? 0);

  const pid = has(record, "pid")
    ? converter.int(record, "pid")
    : has(metadata, "pid")
      ? converter.int(metadata, "pid")
      : UNKNOWN_PID;
  const host = has(record, "host")
    ? (converter.string(record.host, "host", false) as string)
    : has(metadata, "host")
      ? (converter.string(metadata.host, "host", false) as string)
      : UNKNOWN_HOST;
  const collector = legacyCollector(record, metadata, deviceId, options);
  const identity = converter.identity(record, metadata);
  metadata = copyObject(metadata, new Set(IDENTITY_KEYS));
  const sessionId = converter.sessionId(record, metadata);
  metadata = copyObject(metadata, new Set(["session_id"]));

  const contextValue = has(record, "context") ? record.context : record.message;
  const context = converter.string(contextValue, "context", true);

  const v3 = converter.validate({
    schema_version: 3,
    session_id: sessionId,
    timestamp_ns: timestampNs,
    event_type: eventType,
    collector,
    sampling_interval_ms: samplingIntervalMs,
    pid,
    host,
    ...identity,
    device_id: deviceId,
    allocator_allocated_bytes: allocated,
    allocator_reserved_bytes: reserved,
    allocator_active_bytes: active,
    allocator_inactive_bytes: inactive,
    allocator_change_bytes: change,
    device_used_bytes: used,
    device_free_bytes: free,
    device_total_bytes: total,
    context,
    metadata,
  });
  return options.upgradeTo === 4 ? upgradeToV4(converter, v3, identity) : withIdentity(v3, identity);
}

/**
 * Turns any record the Python Stormlog reads into a validated, session-aware event, with the
 * reference's rules (`telemetry_event_from_record`, §2.5):
 *
 * - with `schema_version`: it must be the integer 2, 3 or 4 (a bool, a string or another number is
 *   rejected, with no legacy fallback). v2/v3 become v3 (or v4 with `upgradeTo: 4`), v4 stays v4;
 *   the session is the record's, else `metadata.session_id`, else `defaultSessionId`, else synthetic.
 *   Identity comes from the record's own fields only; metadata identity keys stay as they are.
 * - without it (a legacy gpumemprof/tfmemprof/CPU record, unless `permissiveLegacy` is false): the
 *   fields are mapped (first match wins: `memory_allocated`, `memory_mb`, `device`, `type`,
 *   `message`, `metadata_<key>`...), identity falls back to metadata and is then removed from it, and
 *   a record without session gets `stableLegacySessionId([timestamp, host, pid])`.
 *
 * Accepts decoded JSON (`parseJson`) or a record from `decodeTelemetryLine` (to upgrade v2 lines).
 * Throws `TelemetryValidationError` naming the field (and `location`).
 */
export function normalizeTelemetryRecord(
  input: JsonObject | TelemetryRecord,
  options: NormalizeOptions = {},
): TelemetryEvent {
  const converter = new Converter(options);
  const record = input as JsonObject;
  if (!isPlainObject(record)) {
    return converter.fail(`A telemetry record must be a JSON object, got ${describe(record as JsonValue)}`);
  }
  if (has(record, "schema_version")) {
    return normalizeVersioned(record, options, converter);
  }
  if (options.permissiveLegacy === false) {
    converter.fail(
      "Legacy record conversion is disabled: the record has no schema_version. " +
        "Enable permissiveLegacy to convert records from older Stormlog versions",
      "schema_version",
    );
  }
  return convertLegacy(record, options, converter);
}
