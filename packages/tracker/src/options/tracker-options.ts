import { hostname as osHostname } from "node:os";
import {
  type Clock,
  COLLECTOR_SPECIFICATION_VERSION,
  DEFAULT_SCHEMA_VERSION,
  type DistributedIdentity,
  type DistributedIdentityInput,
  InvalidConfigError,
  type MemoryCollector,
  resolveDistributedIdentity,
  type Scheduler,
  systemClock,
  systemScheduler,
} from "@stormlog/core";
import { guardedLogger } from "@stormlog/core/internal";
import type { AsyncContextMode } from "@stormlog/phases";
import {
  type AlertPolicy,
  type AlertThresholds,
  checkThreshold,
  DEFAULT_THRESHOLDS,
  type ResolvedAlertPolicy,
  resolveAlertPolicy,
  thresholdKey,
} from "../alerts/alerts.js";
import { type LeakAlertOptions, type ResolvedLeakAlerts, resolveLeakAlerts } from "../alerts/leak-alerts.js";
import type { RetryBackoff } from "../health/health.js";
import {
  type ResolvedMetricsOptions,
  resolveMetricsOptions,
  type TrackerMetricsOptions,
} from "../metrics/tracker-metrics.js";
import { type OOMFlightRecorderOptions, type ResolvedOOMOptions, resolveOOMOptions } from "../oom/oom.js";
import type { TrackerSinkOption } from "../pipeline/writer.js";

/** Where the tracker reports its own trouble. It never throws into your code for it. */
export interface TrackerLogger {
  warn(message: string): void;
  debug?(message: string): void;
}

/** The default logger: warnings on stderr, prefixed `[stormlog tracker]`; debug dropped. */
export const consoleTrackerLogger: TrackerLogger = {
  warn: (message) => console.warn(`[stormlog tracker] ${message}`),
};

/** Options of `MemoryTracker`. Everything has a default. */
export interface MemoryTrackerOptions {
  /**
   * What to read (the core collector contract): tfjs, NVML, onnxruntime, the process... Several at
   * once are fine; collectors with the same `deviceId` are merged into one record per tick (see the
   * README). Default: the Node process collector (`stormlog.cpu_tracker`, RSS).
   */
  readonly collectors?: readonly MemoryCollector[];
  /** Milliseconds between samples (default 100, the reference's 0.1 s). */
  readonly samplingIntervalMs?: number;
  /** Records kept in memory (`getEvents()`); older ones are counted as dropped (default 10000). */
  readonly maxEvents?: number;
  /** Alert thresholds; unset ones keep the reference's defaults. */
  readonly thresholds?: Partial<AlertThresholds>;
  /** `false` disables alerts; an object tunes them (default: one alert per episode). */
  readonly alerts?: boolean | AlertPolicy;
  /**
   * Leak alerts (default on, checked every 10 s and at `stop()`): the phase paths that `stormlog
   * analyze` would call leaking raise one `warning` each (`Leak suspected: ...`). `false` turns them off.
   */
  readonly leakAlerts?: boolean | LeakAlertOptions;
  /**
   * Live metrics through the OpenTelemetry metrics API (default on: a no-op until the application
   * registers a MeterProvider, and nothing without the optional `@opentelemetry/api`): memory per
   * device, process RSS, phase durations, alerts, collector health and sink counters. `false` turns
   * them off; `{ meterProvider }` publishes through a given provider instead of the global one.
   */
  readonly metrics?: boolean | TrackerMetricsOptions;
  /** Explicit distributed identity; what is missing comes from the environment, then defaults. */
  readonly identity?: DistributedIdentityInput;
  /** Environment read for identity (default `process.env`; `false` ignores it). */
  readonly env?: Readonly<Record<string, string | undefined>> | false;
  /** A writer (e.g. a `TelemetrySink`) or `TelemetrySinkOptions` to create one at each start. */
  readonly sink?: TrackerSinkOption;
  /**
   * Where a sink made from options writes (default `"worker"`): on a worker thread, which builds,
   * encodes and writes the records so that the training thread only stores numbers; or `"main"`, the
   * training thread. Sink options with a `clock` or `scheduler` (test fakes) always write on `"main"`.
   */
  readonly sinkThread?: "worker" | "main";
  /** Schema of the records written (default 3, what the reference's readers accept; 4 writes nulls). */
  readonly schemaVersion?: 3 | 4;
  /**
   * Read collectors that have `readSync()` at every phase boundary, so phase records carry exact
   * counters rather than the last sample's (default true).
   */
  readonly boundaryReadings?: boolean;
  /**
   * Sample once inside `start()` (default true), so phases opened right after it carry real counters
   * even from collectors without `readSync()`; the reference waits one interval for its first sample.
   */
  readonly initialSample?: boolean;
  /** How phases follow async code (default `auto`; see `AsyncContextMode`). */
  readonly asyncContext?: AsyncContextMode;
  /** Register as the process-wide phase host while running, if none is (default true). */
  readonly registerGlobal?: boolean;
  /** Stop cleanly on SIGINT/SIGTERM and at process exit (default true). */
  readonly handleProcessExit?: boolean;
  /** The OOM flight recorder (default disabled, as the reference). */
  readonly oom?: OOMFlightRecorderOptions;
  /** Retry backoff after collector failures (default `min(30, 2^(n-1))` s). */
  readonly retryBackoff?: RetryBackoff;
  /** An asynchronous `sample()` slower than this counts as a failure (default 5000 ms). */
  readonly sampleTimeoutMs?: number;
  /** `source` of the session summary (default `stormlog.tracker`). */
  readonly sessionSource?: string;
  readonly clock?: Clock;
  readonly scheduler?: Scheduler;
  readonly logger?: TrackerLogger;
  /** Telemetry `host` (default `os.hostname()`). */
  readonly hostname?: string;
  /** Telemetry `pid` (default `process.pid`). */
  readonly pid?: number;
}

/** `MemoryTrackerOptions` checked, with every default filled in. */
export interface ResolvedTrackerOptions {
  readonly samplingIntervalMs: number;
  readonly maxEvents: number;
  readonly sampleTimeoutMs: number;
  readonly schemaVersion: 3 | 4;
  readonly clock: Clock;
  readonly scheduler: Scheduler;
  readonly logger: TrackerLogger;
  readonly alerts: ResolvedAlertPolicy;
  readonly leakAlerts: ResolvedLeakAlerts;
  readonly metrics: ResolvedMetricsOptions;
  /** A fresh object: `setThreshold()` changes it. */
  readonly thresholds: AlertThresholds;
  readonly retryBackoff: RetryBackoff;
  readonly boundaryReadings: boolean;
  readonly initialSample: boolean;
  readonly asyncContext: AsyncContextMode;
  readonly registerGlobal: boolean;
  readonly handleProcessExit: boolean;
  readonly sessionSource: string;
  readonly sink: TrackerSinkOption | undefined;
  readonly sinkThread: "worker" | "main";
  readonly host: string;
  readonly pid: number;
  readonly identity: DistributedIdentity;
  /** The collectors given (checked against the contract's version); undefined: the process collector. */
  readonly collectors: readonly MemoryCollector[] | undefined;
  readonly oom: ResolvedOOMOptions;
}

function positive(name: string, value: number | undefined, fallback: number, integer: boolean): number {
  if (value === undefined) return fallback;
  const ok =
    typeof value === "number" &&
    Number.isFinite(value) &&
    value > 0 &&
    (!integer || Number.isSafeInteger(value));
  if (!ok)
    throw new InvalidConfigError(
      name,
      `expected ${integer ? "an integer >= 1" : "a number > 0"}, got ${String(value)}`,
    );
  return value;
}

/**
 * Checks the tracker's options and fills in the defaults. Throws `InvalidConfigError` for the first
 * invalid one (in the order the options are checked here).
 */
export function resolveTrackerOptions(options: MemoryTrackerOptions): ResolvedTrackerOptions {
  const samplingIntervalMs = positive("samplingIntervalMs", options.samplingIntervalMs, 100, false);
  const maxEvents = positive("maxEvents", options.maxEvents, 10_000, true);
  const sampleTimeoutMs = positive("sampleTimeoutMs", options.sampleTimeoutMs, 5_000, false);
  const schemaVersion = options.schemaVersion ?? DEFAULT_SCHEMA_VERSION;
  if (schemaVersion !== 3 && schemaVersion !== 4) {
    throw new InvalidConfigError(
      "schemaVersion",
      `the tracker writes schema 3 or 4, got ${String(schemaVersion)}`,
    );
  }
  const alerts = resolveAlertPolicy(options.alerts);
  const leakAlerts = resolveLeakAlerts(options.leakAlerts);
  const metrics = resolveMetricsOptions(options.metrics);
  const thresholds = { ...DEFAULT_THRESHOLDS };
  for (const [name, value] of Object.entries(options.thresholds ?? {})) {
    const key = thresholdKey(name);
    thresholds[key] = checkThreshold(key, value);
  }
  const { sinkThread } = options;
  if (sinkThread !== undefined && sinkThread !== "worker" && sinkThread !== "main")
    throw new InvalidConfigError("sinkThread", `expected "worker" or "main", got ${String(sinkThread)}`);
  const env = options.env === false ? undefined : (options.env ?? process.env);
  const identity = resolveDistributedIdentity(options.identity ?? {}, { env });
  for (const collector of options.collectors ?? []) {
    if (collector.specificationVersion !== COLLECTOR_SPECIFICATION_VERSION) {
      throw new InvalidConfigError(
        "collectors",
        `collector ${collector.name} implements contract ${String(collector.specificationVersion)}; this tracker ` +
          `needs ${COLLECTOR_SPECIFICATION_VERSION}. Upgrade the adapter package or the tracker.`,
      );
    }
  }
  return {
    samplingIntervalMs,
    maxEvents,
    sampleTimeoutMs,
    schemaVersion,
    clock: options.clock ?? systemClock,
    scheduler: options.scheduler ?? systemScheduler,
    logger: guardedLogger(options.logger ?? consoleTrackerLogger),
    alerts,
    leakAlerts,
    metrics,
    thresholds,
    retryBackoff: options.retryBackoff ?? {},
    boundaryReadings: options.boundaryReadings ?? true,
    initialSample: options.initialSample ?? true,
    asyncContext: options.asyncContext ?? "auto",
    registerGlobal: options.registerGlobal ?? true,
    handleProcessExit: options.handleProcessExit ?? true,
    sessionSource: options.sessionSource ?? "stormlog.tracker",
    sink: options.sink,
    sinkThread: sinkThread ?? "worker",
    host: options.hostname ?? osHostname(),
    pid: options.pid ?? process.pid,
    identity,
    collectors: options.collectors === undefined ? undefined : [...options.collectors],
    oom: resolveOOMOptions(options.oom, maxEvents),
  };
}
