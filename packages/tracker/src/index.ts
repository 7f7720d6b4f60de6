/**
 * @stormlog/tracker: the memory tracker (sampling, collector health, alerts, phases, sink session,
 * OOM flight recorder) and the Node process collector.
 */
export {
  type AlertPolicy,
  type AlertThresholds,
  DEFAULT_THRESHOLDS,
  evaluateAlerts,
  type PendingAlert,
  type ResolvedAlertPolicy,
  resolveAlertPolicy,
} from "./alerts.js";
export {
  aggregateHealth,
  type CollectorHealth,
  type CollectorHealthStatus,
  HEALTHY,
  healthMetadata,
  type RetryBackoff,
  retryDelaySeconds,
} from "./health.js";
export type { EventQuery } from "./history/history.js";
export {
  type CollectorHealthStatistics,
  type CollectorStatistics,
  type DeviceStatistics,
  statisticsToJson,
  type TrackerStatistics,
} from "./history/statistics.js";
export {
  DEFAULT_LEAK_CHECK_INTERVAL_MS,
  LEAK_WINDOW_OCCURRENCES,
  LEAK_WINDOW_PATHS,
  LEAK_WINDOW_SNAPSHOTS,
  type LeakAlertOptions,
  type ResolvedLeakAlerts,
  resolveLeakAlerts,
} from "./leak-alerts.js";
export { SinkWorkerError } from "./off-thread-sink.js";
export {
  classifyOOMError,
  legacyEventPayload,
  OOM_MESSAGE_PATTERNS,
  type OOMClassification,
  OOMFlightRecorder,
  type OOMFlightRecorderOptions,
  type ResolvedOOMOptions,
  resolveOOMOptions,
} from "./oom.js";
export type { OOMCaptureOptions } from "./oom-dump.js";
export {
  consoleTrackerLogger,
  type MemoryTrackerOptions,
  type TrackerLogger,
} from "./options/tracker-options.js";
export * from "./process-collector.js";
export type { AlertCallback } from "./records/record-log.js";
export { MemoryTracker } from "./tracker.js";
export {
  createSink,
  isTelemetryWriter,
  type TelemetryWriter,
  type TrackerSinkOption,
  type WriterDiagnostics,
} from "./writer.js";
