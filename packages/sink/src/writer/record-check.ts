import { type TelemetryEvent, validateTelemetryRecord } from "@stormlog/core";
import { isPythonBlank } from "@stormlog/core/internal";

function isInt(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value);
}

function nonNegative(value: unknown): boolean {
  return isInt(value) && value >= 0;
}

function nullableNonNegative(value: unknown): boolean {
  return value === null || (isInt(value) && value >= 0);
}

function nonEmpty(value: unknown): boolean {
  if (typeof value !== "string" || value.length === 0) return false;
  const first = value.charCodeAt(0);
  return (first > 0x20 && first < 0x7f) || !isPythonBlank(value);
}

/**
 * Why a record cannot be written as a valid sink line, or `undefined` when it can. Checks what the
 * canonical encoder reads (every v3 field, types and ranges as the reference validates them) without
 * allocating; v4 records go through the full validator (their capability rules are involved).
 */
export function whyNotWritable(record: TelemetryEvent): string | undefined {
  if (typeof record !== "object" || record === null) return "a record must be an object";
  const version = record.schema_version;
  if (version === 4) {
    try {
      validateTelemetryRecord(record);
      return undefined;
    } catch (error) {
      return (error as Error).message;
    }
  }
  if (version !== 3) return `schema_version must be 3 or 4, got ${String(version)}`;
  if (!nonEmpty(record.session_id)) return "session_id must be a non-empty string";
  const ts = record.timestamp_ns as unknown;
  if (typeof ts === "bigint" ? ts < 0n : !nonNegative(ts)) return "timestamp_ns must be an integer >= 0";
  if (!nonEmpty(record.event_type)) return "event_type must be a non-empty string";
  if (!nonEmpty(record.collector)) return "collector must be a non-empty string";
  if (!nonNegative(record.sampling_interval_ms)) return "sampling_interval_ms must be an integer >= 0";
  if (!isInt(record.pid) || record.pid < -1) return "pid must be an integer >= -1";
  if (!nonEmpty(record.host)) return "host must be a non-empty string";
  if (record.job_id !== null && !nonEmpty(record.job_id)) return "job_id must be null or a non-empty string";
  const worldSize = record.world_size;
  if (!isInt(worldSize) || worldSize < 1) return "world_size must be an integer >= 1";
  if (!nonNegative(record.rank) || record.rank >= worldSize)
    return "rank must be an integer in [0, world_size)";
  if (!nonNegative(record.local_rank) || record.local_rank >= worldSize) {
    return "local_rank must be an integer in [0, world_size)";
  }
  if (!isInt(record.device_id)) return "device_id must be an integer";
  if (!nonNegative(record.allocator_allocated_bytes))
    return "allocator_allocated_bytes must be an integer >= 0";
  if (!nonNegative(record.allocator_reserved_bytes))
    return "allocator_reserved_bytes must be an integer >= 0";
  if (!nullableNonNegative(record.allocator_active_bytes))
    return "allocator_active_bytes must be null or >= 0";
  if (!nullableNonNegative(record.allocator_inactive_bytes))
    return "allocator_inactive_bytes must be null or >= 0";
  if (!isInt(record.allocator_change_bytes)) return "allocator_change_bytes must be an integer";
  const used = record.device_used_bytes;
  const free = record.device_free_bytes;
  const total = record.device_total_bytes;
  if (!nonNegative(used)) return "device_used_bytes must be an integer >= 0";
  if (!nullableNonNegative(free)) return "device_free_bytes must be null or >= 0";
  if (!nullableNonNegative(total)) return "device_total_bytes must be null or >= 0";
  if (total !== null && (used > total || (free !== null && free > total))) {
    return "device_used_bytes and device_free_bytes must be <= device_total_bytes";
  }
  if (record.context !== null && typeof record.context !== "string")
    return "context must be a string or null";
  const metadata = record.metadata as unknown;
  if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata))
    return "metadata must be an object";
  return undefined;
}
