/**
 * @stormlog/tracker: the memory tracker (sampling, collector health, alerts, phases, sink session,
 * OOM flight recorder) and the Node process collector.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 * The tracker's parts (alert evaluation, health, the leak watch, the OOM recorder) stay inside.
 */

// The tracker and its options.

export type { AlertPolicy, AlertThresholds } from "./alerts/alerts.js";
export type { LeakAlertOptions } from "./alerts/leak-alerts.js";
export type { RetryBackoff } from "./health/health.js";
export type { OOMFlightRecorderOptions } from "./oom/oom.js";
export type { MemoryTrackerOptions, TrackerLogger } from "./options/tracker-options.js";
export { MemoryTracker, type StopOptions } from "./tracker.js";

// Live metrics through the OpenTelemetry metrics API (a no-op until a MeterProvider is registered).

export {
  METER_NAME,
  type MetricsMeterProvider,
  type TrackerMetricsOptions,
} from "./metrics/tracker-metrics.js";

// Where records go: a `TelemetrySink`, sink options, or a writer of your own.

export { SinkWorkerError } from "./pipeline/off-thread-sink.js";
export type { TelemetryWriter, TrackerSinkOption, WriterDiagnostics } from "./pipeline/writer.js";

// What the tracker's methods take and give back.

export type { CollectorHealthStatus } from "./health/health.js";
export type { EventQuery } from "./history/history.js";
export type {
  CollectorHealthStatistics,
  CollectorStatistics,
  DeviceStatistics,
  TrackerStatistics,
} from "./history/statistics.js";
export type { OOMCaptureOptions } from "./oom/oom-dump.js";
export type { AlertCallback } from "./records/record-log.js";

// The Node process collector: host memory (RSS), the tracker's default.

export {
  PROCESS_COLLECTOR_NAME,
  type ProcessCollector,
  type ProcessCollectorOptions,
  processCollector,
} from "./collectors/process-collector.js";
