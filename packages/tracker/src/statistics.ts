import type { JsonObject, MemoryCapabilities, SessionStatus } from "@stormlog/core";
import type { CollectorHealthStatus } from "./health.js";
import { markFloatIfIntegral } from "./health.js";

/** One collector's health, as `getStatistics().collectors` lists it. */
export interface CollectorStatistics {
  name: string;
  deviceId: number;
  collectorHealthStatus: CollectorHealthStatus;
  telemetryPartial: boolean;
  collectorPartialFields: string[];
  collectorLastError: string | null;
  collectorConsecutiveFailures: number;
  collectorNextRetryEpochS: number | null;
}

/** One device's counters, as `getStatistics().devices` lists them (the top level is the primary device). */
export interface DeviceStatistics {
  deviceId: number;
  collector: string;
  backend: string;
  peakMemory: number | null;
  peakDeviceUsed: number;
  totalAllocations: number | null;
  totalDeallocations: number | null;
  totalAllocationBytes: number | null;
  totalDeallocationBytes: number | null;
  currentMemoryAllocated: number | null;
  currentMemoryReserved: number | null;
  currentDeviceUsed: number | null;
  currentDeviceFree: number | null;
  deviceTotal: number | null;
  memoryUtilizationPercent: number | null;
  collectorHealthStatus: CollectorHealthStatus;
}

/**
 * `getStatistics()`: the reference's keys (§3.5, plus its v4 additions) in camelCase for the primary
 * device (the first collector's), then per-device and per-collector detail. `statisticsToJson()`
 * gives the reference's snake_case object.
 */
export interface TrackerStatistics {
  peakMemory: number | null;
  peakDeviceUsed: number;
  totalAllocations: number | null;
  totalDeallocations: number | null;
  totalAllocationBytes: number | null;
  totalDeallocationBytes: number | null;
  alertCount: number;
  /** Epoch seconds when tracking started; null before the first start. */
  trackingStartTime: number | null;
  /** Epoch seconds of the last successful sample; 0 before any. */
  lastMemoryCheck: number;
  totalEvents: number;
  eventsLastHour: number;
  historyWindowLimitEvents: number;
  historyRetainedEvents: number;
  historyDroppedEvents: number;
  backend: string;
  oomFlightRecorderEnabled: boolean;
  lastOomDumpPath: string | null;
  sessionId: string | null;
  sessionStatus: SessionStatus | null;
  /** Null while the primary device's collectors are unhealthy (stale values hidden, as the reference). */
  currentMemoryAllocated: number | null;
  currentMemoryReserved: number | null;
  currentDeviceUsed: number | null;
  currentDeviceFree: number | null;
  deviceTotal: number | null;
  /** Device used over total, in %. */
  memoryUtilizationPercent: number | null;
  memoryCapabilities: MemoryCapabilities;
  averageAllocationSize: number | null;
  averageDeallocationSize: number | null;
  collectorHealthStatus: CollectorHealthStatus;
  telemetryPartial: boolean;
  collectorPartialFields: string[];
  collectorLastError: string | null;
  collectorConsecutiveFailures: number;
  collectorNextRetryEpochS: number | null;
  rolloverCount: number;
  prunedSegmentCount: number;
  prunedBytes: number;
  finalRetainedFiles: number;
  finalRetainedBytes: number;
  /** Present once tracking has started. */
  trackingDurationSeconds?: number;
  allocationsPerSecond?: number | null;
  bytesAllocatedPerSecond?: number | null;
  /** Alerts not raised because their episode was already reported (episode mode). */
  alertsSuppressed: number;
  devices: DeviceStatistics[];
  collectors: CollectorStatistics[];
}

const FLOAT_KEYS = [
  "tracking_start_time",
  "last_memory_check",
  "memory_utilization_percent",
  "average_allocation_size",
  "average_deallocation_size",
  "collector_next_retry_epoch_s",
  "tracking_duration_seconds",
  "allocations_per_second",
  "bytes_allocated_per_second",
] as const;

function snake(key: string): string {
  return key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

function toSnake(value: unknown): JsonObject {
  const out: JsonObject = {};
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    if (item === undefined) continue;
    out[snake(key)] =
      Array.isArray(item) && item.length > 0 && typeof item[0] === "object" && item[0] !== null
        ? item.map(toSnake)
        : (item as JsonObject[string]);
  }
  return out;
}

/** The statistics with the reference's snake_case keys (`memory_utilization_percent`...), in its order. */
export function statisticsToJson(statistics: TrackerStatistics): JsonObject {
  const json = toSnake(statistics);
  json.memory_capabilities = { ...statistics.memoryCapabilities };
  for (const key of FLOAT_KEYS) {
    // The reference's `last_memory_check` is the integer 0 until the first sample.
    if (key === "last_memory_check" && json[key] === 0) continue;
    markFloatIfIntegral(json, key);
  }
  return json;
}
