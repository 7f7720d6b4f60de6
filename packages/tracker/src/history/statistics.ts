import type { JsonObject, MemoryCapabilities, SessionStatus, SessionSummary } from "@stormlog/core";
import type { CollectorHealthStatus } from "../health/health.js";
import { aggregateHealth, markFloatIfIntegral } from "../health/health.js";
import type { RecordLog } from "../records/record-log.js";
import type { CollectorSet } from "../sampling/collector-set.js";
import type { DeviceGroup } from "../sampling/device-group.js";
import type { History } from "./history.js";

/** A collector's (or the primary device's) health, as `getStatistics()` reports it. */
export interface CollectorHealthStatistics {
  collectorHealthStatus: CollectorHealthStatus;
  telemetryPartial: boolean;
  collectorPartialFields: string[];
  collectorLastError: string | null;
  collectorConsecutiveFailures: number;
  collectorNextRetryEpochS: number | null;
}

/** One collector's health, as `getStatistics().collectors` lists it. */
export interface CollectorStatistics extends CollectorHealthStatistics {
  name: string;
  deviceId: number;
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
 * device (the first collector's), then per-device and per-collector detail. `getStatisticsJson()`
 * gives the reference's snake_case object.
 */
export interface TrackerStatistics extends CollectorHealthStatistics {
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

/** What `collectStatistics()` reads: the tracker's collaborators and its session. */
export interface StatisticsSources {
  readonly nowNs: bigint;
  readonly history: History;
  readonly collectors: CollectorSet;
  readonly records: RecordLog;
  /** Epoch seconds when tracking started; null before the first start. */
  readonly trackingStartTime: number | null;
  readonly oomFlightRecorderEnabled: boolean;
  readonly lastOomDumpPath: string | null;
  readonly session: SessionSummary | null;
}

const HOUR_NS = 3_600_000_000_000n;

/** The tracker's statistics (`getStatistics()`), gathered now. */
export function collectStatistics(sources: StatisticsSources): TrackerStatistics {
  const { nowNs, history, collectors, records, trackingStartTime, session } = sources;
  const [from, to] = history.range();
  const retained = to - from;
  const group = collectors.primary;
  const device = deviceStatistics(group);
  const health = aggregateHealth(collectors.states.map((state) => state.health));
  const counters = records.sinkCounters();
  const allocator = group.capabilities.supports_allocator_allocated;
  const stats = group.stats;
  const statistics: TrackerStatistics = {
    peakMemory: device.peakMemory,
    peakDeviceUsed: device.peakDeviceUsed,
    totalAllocations: device.totalAllocations,
    totalDeallocations: device.totalDeallocations,
    totalAllocationBytes: device.totalAllocationBytes,
    totalDeallocationBytes: device.totalDeallocationBytes,
    alertCount: records.alertCount,
    trackingStartTime,
    lastMemoryCheck: stats.lastMemoryCheck,
    totalEvents: retained,
    eventsLastHour: history.countAfter(nowNs - HOUR_NS),
    historyWindowLimitEvents: history.maxEvents,
    historyRetainedEvents: retained,
    historyDroppedEvents: history.dropped,
    backend: group.capabilities.backend,
    oomFlightRecorderEnabled: sources.oomFlightRecorderEnabled,
    lastOomDumpPath: sources.lastOomDumpPath,
    sessionId: session?.session_id ?? null,
    sessionStatus: session?.status ?? null,
    currentMemoryAllocated: device.currentMemoryAllocated,
    currentMemoryReserved: device.currentMemoryReserved,
    currentDeviceUsed: device.currentDeviceUsed,
    currentDeviceFree: device.currentDeviceFree,
    deviceTotal: device.deviceTotal,
    memoryUtilizationPercent: device.memoryUtilizationPercent,
    memoryCapabilities: { ...group.capabilities },
    averageAllocationSize: allocator
      ? stats.totalAllocationBytes / Math.max(stats.totalAllocations, 1)
      : null,
    averageDeallocationSize: allocator
      ? stats.totalDeallocationBytes / Math.max(stats.totalDeallocations, 1)
      : null,
    collectorHealthStatus: health.status,
    telemetryPartial: health.telemetryPartial,
    collectorPartialFields: [...health.partialFields],
    collectorLastError: health.lastError,
    collectorConsecutiveFailures: health.consecutiveFailures,
    collectorNextRetryEpochS: health.nextRetryEpochS,
    rolloverCount: counters.rollover_count,
    prunedSegmentCount: counters.pruned_segment_count,
    prunedBytes: counters.pruned_bytes,
    finalRetainedFiles: counters.final_retained_files,
    finalRetainedBytes: counters.final_retained_bytes,
    alertsSuppressed: collectors.groups.reduce((sum, g) => sum + g.alerts.suppressed, 0),
    devices: collectors.groups.map(deviceStatistics),
    collectors: collectors.states.map((state) => ({
      name: state.name,
      deviceId: state.collector.deviceId,
      collectorHealthStatus: state.health.status,
      telemetryPartial: state.health.telemetryPartial,
      collectorPartialFields: [...state.health.partialFields],
      collectorLastError: state.health.lastError,
      collectorConsecutiveFailures: state.health.consecutiveFailures,
      collectorNextRetryEpochS: state.health.nextRetryEpochS,
    })),
  };
  if (trackingStartTime !== null) {
    const duration = Number(nowNs) / 1e9 - trackingStartTime;
    statistics.trackingDurationSeconds = duration;
    statistics.allocationsPerSecond = allocator ? stats.totalAllocations / Math.max(duration, 1) : null;
    statistics.bytesAllocatedPerSecond = allocator
      ? stats.totalAllocationBytes / Math.max(duration, 1)
      : null;
  }
  return statistics;
}

/** One device's statistics; its current counters are hidden (null) while all its collectors are unhealthy. */
function deviceStatistics(group: DeviceGroup): DeviceStatistics {
  const allocator = group.capabilities.supports_allocator_allocated;
  const stale = group.states.length > 0 && group.states.every((state) => state.health.status === "unhealthy");
  const reading = stale ? null : group.lastReading;
  const used = reading?.device_used_bytes ?? null;
  const total = group.totalMemory;
  const stats = group.stats;
  return {
    deviceId: group.deviceId,
    collector: group.collectorString,
    backend: group.capabilities.backend,
    peakMemory: allocator ? stats.peakMemory : null,
    peakDeviceUsed: stats.peakDeviceUsed,
    totalAllocations: allocator ? stats.totalAllocations : null,
    totalDeallocations: allocator ? stats.totalDeallocations : null,
    totalAllocationBytes: allocator ? stats.totalAllocationBytes : null,
    totalDeallocationBytes: allocator ? stats.totalDeallocationBytes : null,
    currentMemoryAllocated: reading?.allocator_allocated_bytes ?? null,
    currentMemoryReserved: reading?.allocator_reserved_bytes ?? null,
    currentDeviceUsed: used,
    currentDeviceFree: reading?.device_free_bytes ?? null,
    deviceTotal: reading?.device_total_bytes ?? null,
    memoryUtilizationPercent: used !== null && total > 0 ? (used / total) * 100 : null,
    collectorHealthStatus: group.health().status,
  };
}
