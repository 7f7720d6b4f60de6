import type {
  Clock,
  DistributedIdentity,
  JsonObject,
  MemoryReading,
  PhaseHost,
  PhaseOptions,
  PhaseScope,
  SampleResult,
  SessionStatus,
  SessionSummary,
  TelemetryEvent,
} from "@stormlog/core";
import { InvalidConfigError, stringifyJson } from "@stormlog/core";
import { jsonValueProblem } from "@stormlog/core/internal";
import {
  clearGlobalPhaseHost,
  getPhaseHost,
  noopPhaseHost,
  type PhaseBoundary,
  PhaseRecorder,
  setGlobalPhaseHost,
} from "@stormlog/phases";
import { registerExitParticipant } from "@stormlog/sink/internal";
import type { AlertThresholds } from "./alerts/alerts.js";
import { LeakWatch } from "./alerts/leak-alerts.js";
import { describeError } from "./describe-error.js";
import { CollectorHealthMachine } from "./health/collector-health.js";
import { healthMetadata } from "./health/health.js";
import { type EventQuery, History } from "./history/history.js";
import { collectStatistics, statisticsToJson, type TrackerStatistics } from "./history/statistics.js";
import { TrackerMetrics } from "./metrics/tracker-metrics.js";
import { classifyOOMError, OOMFlightRecorder } from "./oom/oom.js";
import { dumpOOM, type OOMCaptureOptions } from "./oom/oom-dump.js";
import {
  type MemoryTrackerOptions,
  type ResolvedTrackerOptions,
  resolveTrackerOptions,
} from "./options/tracker-options.js";
import { openPipeline } from "./pipeline/record-pipeline.js";
import { type AlertCallback, RecordLog } from "./records/record-log.js";
import { BOUNDARY_READ, COUNTER_INDEX, EventStore, PHASE_ENTER, PHASE_EXIT } from "./records/store.js";
import { CollectorReader } from "./sampling/collector-reader.js";
import { CollectorSet } from "./sampling/collector-set.js";
import { type CollectorState, type DeviceGroup, readSyncOver } from "./sampling/device-group.js";
import { SampleProcessor } from "./sampling/sample-processor.js";
import { SamplingLoop } from "./sampling/sampling-loop.js";
import { TrackerSession } from "./session/tracker-session.js";

/**
 * The memory tracker: samples collectors on an unref'd timer, records the reference's events
 * (`start`, `peak`, `allocation`/`deallocation`, alerts, `sample`, `collector_degraded`/`_recovered`,
 * `phase_enter`/`phase_exit`, `stop`) as schema v3 (or v4) telemetry records, keeps a bounded history,
 * streams to a sink, and is the `PhaseHost` of your training loop.
 *
 * A facade: it keeps the session's lifecycle and the phase boundaries, and wires collaborators with
 * one job each: the resolved options, the collector set, the sampling loop (`SamplingLoop`, reading
 * through `CollectorReader`), sample processing (`SampleProcessor`), collector health
 * (`CollectorHealthMachine`), the records and their pipeline (`RecordLog`), the history and its
 * statistics (`History`, `collectStatistics`), leak alerts (`LeakWatch`) and the OOM flight recorder.
 *
 * @example
 * await using tracker = new MemoryTracker({ collectors: [processCollector()] });
 * await tracker.start();
 * await tracker.phase("train", async () => { ... });
 */
export class MemoryTracker implements PhaseHost, AsyncDisposable {
  /** The resolved identity written into every record. */
  readonly identity: DistributedIdentity;
  readonly samplingIntervalMs: number;
  readonly maxEvents: number;
  readonly schemaVersion: 3 | 4;
  readonly host: string;
  readonly pid: number;

  private readonly options: ResolvedTrackerOptions;
  private readonly clock: Clock;
  private readonly store: EventStore;
  private readonly records: RecordLog;
  private readonly collectors: CollectorSet;
  private readonly processor: SampleProcessor;
  private readonly loop: SamplingLoop;
  private readonly history: History;
  private readonly recorder: PhaseRecorder;
  /** The leak watch (`leakAlerts`), or null when turned off. */
  private readonly leakWatch: LeakWatch | null;
  private readonly oom: OOMFlightRecorder;
  private readonly session: TrackerSession;
  /** Live metrics (OpenTelemetry), read from the store at each tick and from state when collected. */
  private readonly metrics: TrackerMetrics;

  private running = false;
  /** The last `start()`/`stop()` (settled, never rejecting): the next one runs after it. */
  private lifecycle: Promise<void> = Promise.resolve();
  private stopping: Promise<void> | null = null;
  private lastOomDumpPath: string | null = null;
  private registeredGlobal = false;
  private unregisterExit: (() => void) | null = null;

  constructor(options: MemoryTrackerOptions = {}) {
    const resolved = resolveTrackerOptions(options);
    const { clock, scheduler, logger } = resolved;
    this.options = resolved;
    this.clock = clock;
    this.identity = resolved.identity;
    this.samplingIntervalMs = resolved.samplingIntervalMs;
    this.maxEvents = resolved.maxEvents;
    this.schemaVersion = resolved.schemaVersion;
    this.host = resolved.host;
    this.pid = resolved.pid;
    this.oom = new OOMFlightRecorder(resolved.oom);
    this.store = new EventStore(Math.max(this.maxEvents, resolved.oom.enabled ? resolved.oom.bufferSize : 0));
    const session = new TrackerSession(resolved);
    this.session = session;
    const records = new RecordLog(this.store, logger, () => session.incomplete());
    this.records = records;
    const collectors = new CollectorSet(
      resolved.collectors,
      this.schemaVersion === 4,
      resolved.boundaryReadings,
      logger,
    );
    this.collectors = collectors;
    this.leakWatch = resolved.leakAlerts.enabled
      ? new LeakWatch(
          resolved.leakAlerts,
          {
            clock,
            scheduler,
            warn: (message) => logger.warn(message),
            emit: (context, metadata) => {
              const primary = collectors.primary;
              records.emit(primary, "warning", clock.nowNs(), primary.lastReading, 0, context, metadata);
            },
          },
          this.store,
        )
      : null;
    const leakWatch = this.leakWatch;
    if (leakWatch !== null) records.onStored = (index) => leakWatch.recordStored(index);
    const health = new CollectorHealthMachine(records, resolved.retryBackoff);
    this.processor = new SampleProcessor(
      records,
      collectors,
      health,
      clock,
      logger,
      resolved.alerts,
      resolved.thresholds,
      this.leakWatch,
    );
    const reader = new CollectorReader(collectors, health, clock, scheduler, resolved.sampleTimeoutMs);
    const metrics = new TrackerMetrics(
      resolved.metrics,
      {
        store: this.store,
        collectors,
        identity: this.identity,
        host: this.host,
        sinkDiagnostics: () => records.sinkDiagnostics(),
      },
      (message) => logger.warn(message),
    );
    this.metrics = metrics;
    const processor = this.processor;
    // Each tick's records, then the metrics' read of what the store gained since the last tick.
    this.loop = new SamplingLoop(clock, scheduler, this.samplingIntervalMs, reader, {
      process: (results) => {
        processor.process(results);
        metrics.catchUp();
      },
      failed: (error) => processor.failed(error),
    });
    this.history = new History(records, this.maxEvents);
    this.recorder = new PhaseRecorder({
      onBoundary: (boundary) => this.onPhaseBoundary(boundary),
      asyncContext: resolved.asyncContext,
      onListenerError: (error) => logger.warn(`recording a phase boundary failed: ${describeError(error)}`),
      // The store and the leak watch keep a scope's template and sequences, never the scope.
      reuseScopes: true,
    });
  }

  // ------------------------------------------------------------------ lifecycle

  /** True between `start()` and `stop()`. */
  get isTracking(): boolean {
    return this.running;
  }

  /** The OOM ring's size (the reference's `oom_buffer_size`). */
  get oomBufferSize(): number {
    return this.oom.options.bufferSize;
  }

  /** The current thresholds (a copy). */
  get thresholds(): AlertThresholds {
    return this.processor.thresholds;
  }

  /**
   * Starts a session: resets statistics and history, opens the sink session, records `start` and
   * starts sampling. Idempotent. Throws only for configuration errors (e.g. sink options).
   */
  start(): Promise<void> {
    return this.inOrder(async () => {
      if (this.stopping !== null) await this.stopping;
      if (this.running) return;
      await this.begin();
    });
  }

  /**
   * Runs `step` after every `start()`/`stop()` called before it: `start(); stop(); start()` without
   * awaiting ends tracking, as the last call says (each used to join whatever was under way).
   */
  private inOrder(step: () => Promise<void>): Promise<void> {
    const next = this.lifecycle.then(step, step);
    this.lifecycle = next.catch(() => undefined);
    return next;
  }

  private async begin(): Promise<void> {
    const { options, records, identity } = this;
    const { logger } = options;
    // First, as it may wait: a worker's start-up is paid here, not in the first training steps.
    const pipeline = await openPipeline(options.sink, options.sinkThread, {
      store: this.store,
      scheduler: options.scheduler,
      warn: (message) => logger.warn(message),
      failed: (operation, error) => records.disable(operation, error),
    });
    this.collectors.prepare();
    records.open(pipeline);
    this.history.reset();
    this.lastOomDumpPath = null;

    let summary = this.session.create();
    // Registered before the sink's own hooks, so that `stop` is written before the sink closes.
    if (options.handleProcessExit) {
      this.unregisterExit = registerExitParticipant({
        onSignal: () => this.finish("interrupted"),
        onBeforeExit: (code) => this.finish(code === 0 ? "completed" : "interrupted"),
        onExit: (code) => {
          void this.finish(code === 0 ? "completed" : "interrupted", true);
        },
      });
    }
    if (pipeline !== null) {
      // Resolves once the manifest naming the session is on disk (a kill right after start() finds it).
      const kept = await records.startSession(TrackerSession.start(summary));
      if (kept?.session_id !== undefined) summary = { ...kept, source: summary.source };
    }
    const context = this.session.begin(summary);
    records.begin(context);
    this.metrics.begin();
    this.running = true;
    this.recorder.begin(summary.session_id);
    // Collectors that attribute allocations to phases (tfjs birth phases) ask the recorder where code runs.
    for (const state of this.collectors.states) {
      try {
        state.collector.bindPhases?.(this.recorder);
      } catch (error) {
        logger.warn(`collector ${state.name} could not bind the phases: ${describeError(error)}`);
      }
    }
    if (options.registerGlobal && getPhaseHost() === noopPhaseHost) {
      setGlobalPhaseHost(this);
      this.registeredGlobal = true;
    }
    const primary = this.collectors.primary;
    const ts = this.clock.nowNs();
    // What came before the session is not its peak.
    if (this.collectors.highWaterStates.length > 0) this.processor.takeHighWater(ts, false);
    records.emit(
      primary,
      "start",
      ts,
      this.boundaryReading(primary),
      0,
      "Memory tracking started",
      undefined,
    );
    this.loop.start();
    this.leakWatch?.begin({
      sessionId: summary.session_id,
      rank: identity.rank,
      schemaVersion: this.schemaVersion,
    });
    // A first reading now, so phases opened right after start() have real counters to carry.
    if (options.initialSample) await this.loop.sampleNow();
  }

  /**
   * Records `stop`, closes the sink session (`completed`, or `incomplete` when the sink lost records)
   * and stops sampling. Idempotent. A sample still in flight is discarded. `options` say why tracking
   * ended in the `stop` record's metadata (a workload's exit, for instance); they are checked before
   * anything stops (`InvalidConfigError`).
   */
  stop(options?: StopOptions): Promise<void> {
    let extra: JsonObject | undefined;
    try {
      extra = stopMetadata(options);
    } catch (error) {
      return Promise.reject(error);
    }
    // After a start still waiting for its sink's worker: stops the session it is about to begin.
    return this.inOrder(() => this.finish("completed", false, extra));
  }

  /** `await using tracker = ...` stops it. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  private finish(status: SessionStatus, sync = false, stopExtra?: JsonObject): Promise<void> {
    if (!this.running) return this.stopping ?? Promise.resolve();
    // A last leak check before `stop` (not inside a synchronous exit handler).
    this.leakWatch?.end(!sync);
    this.running = false;
    this.loop.stop();
    const primary = this.collectors.primary;
    const ts = this.clock.nowNs();
    if (this.collectors.highWaterStates.length > 0) this.processor.takeHighWater(ts, true);
    const reading = this.boundaryReading(primary) ?? primary.lastReading;
    this.records.emit(primary, "stop", ts, reading, 0, "Memory tracking stopped", stopExtra);
    this.metrics.end();
    this.recorder.end();
    if (this.registeredGlobal) {
      clearGlobalPhaseHost(this);
      this.registeredGlobal = false;
    }
    const unregister = this.unregisterExit;
    this.unregisterExit = null;
    unregister?.();
    const closing = this.records.close(status, sync);
    if (closing === undefined) {
      this.ended(status);
      return Promise.resolve();
    }
    this.stopping = closing.then(() => this.ended(status));
    return this.stopping;
  }

  /** The pipeline closed: the session's summary gets its final status. */
  private ended(status: SessionStatus): void {
    this.session.close(status, this.records.end());
    this.collectors.closeOwned();
    this.stopping = null;
  }

  /**
   * Takes one sample of every collector now, as a timer tick would, and records its events (after
   * a tick still reading, if any). Resolves when they are recorded. Useful at the end of a step.
   */
  sampleNow(): Promise<void> {
    return this.loop.sampleNow();
  }

  // ------------------------------------------------------------------ phases

  /** Runs `fn` inside the phase and returns what it returns; closes the phase when it throws or rejects. */
  phase<T>(name: string, fn: () => T, options?: PhaseOptions): T;
  /** Opens a phase for `using scope = tracker.phase("forward")`. */
  phase(name: string, options?: PhaseOptions): PhaseScope;
  phase<T>(name: string, fnOrOptions?: (() => T) | PhaseOptions, options?: PhaseOptions): T | PhaseScope {
    if (typeof fnOrOptions === "function") return this.recorder.phase(name, fnOrOptions, options);
    return this.recorder.enterPhase(name, fnOrOptions);
  }

  /** Opens a phase that the caller closes with `close()` (idempotent). A no-op while not tracking. */
  enterPhase(name: string, options?: PhaseOptions): PhaseScope {
    return this.recorder.enterPhase(name, options);
  }

  private onPhaseBoundary(boundary: PhaseBoundary): void {
    const collectors = this.collectors;
    const group = collectors.primary;
    const eventType = boundary.eventType;
    const ts = this.clock.nowNs();
    // A peak since the last record happened in the phase this boundary ends or leaves for a child.
    if (collectors.highWaterStates.length > 0) this.processor.takeHighWater(ts, true);
    const index = this.store.push(
      ts,
      eventType,
      null,
      group,
      group.lastReading,
      0,
      group.baseMetadata(healthMetadata),
      null,
      boundary.scope,
      boundary.sequence,
      eventType === "phase_enter" ? PHASE_ENTER : PHASE_EXIT,
    );
    // Counters read now, written over the last sample's in place (no merged object on this path).
    if (collectors.boundaryStates.length > 0) this.readInto(index, collectors.boundaryStates, "readSync");
    // A phase that asks for readings (an onnxruntime run) also reads the costlier collectors; other
    // boundaries pay only this check.
    if (boundary.scope.readings === true && collectors.onDemandStates.length > 0)
      this.readInto(index, collectors.onDemandStates, "readOnDemand");
    this.leakWatch?.phaseStored(index);
    this.records.committedPlain(index);
  }

  /**
   * Writes what `states`' collectors read now (`readSync()` at every boundary, `readOnDemand()` at those
   * of phases that ask) over the record's last-sample counters, with their detail (tfjs tensor counts,
   * so analysis counts tensors per phase). A throw or a failure leaves the record as it is: health
   * follows samples.
   */
  private readInto(
    index: number,
    states: readonly CollectorState[],
    read: "readSync" | "readOnDemand",
  ): void {
    for (let i = 0; i < states.length; i++) {
      const state = states[i] as CollectorState;
      let result: SampleResult;
      try {
        result = (state.collector[read] as () => SampleResult)();
      } catch {
        continue;
      }
      // A collector breaking its contract (no reading) is ignored here; samples report it.
      if (result === null || typeof result !== "object" || result.kind === "failure" || !result.reading)
        continue;
      const owned = state.owned;
      let fresh = false;
      for (let j = 0; j < owned.length; j++) {
        const field = owned[j] as keyof MemoryReading;
        const value = result.reading[field];
        if (typeof value === "number" && value >= 0) {
          this.store.setCounter(index, COUNTER_INDEX[field] as number, value);
          fresh = true;
        }
      }
      if (fresh) this.store.addFlags(index, BOUNDARY_READ);
      if (result.metadata !== undefined) this.store.mergeExtra(index, result.metadata);
    }
  }

  /**
   * The last sample's counters with what `readSync()` collectors read now, or null when no collector
   * of the device reads synchronously. A failed boundary read is ignored (health follows samples).
   */
  private boundaryReading(group: DeviceGroup): MemoryReading | null {
    const states = this.collectors.boundaryStates;
    if (states.length === 0 || group !== this.collectors.primary) return null;
    return readSyncOver(states, group.lastReading);
  }

  // ------------------------------------------------------------------ queries

  /** Records kept in memory, oldest first, filtered. Each call builds new objects. */
  getEvents(query: EventQuery = {}): TelemetryEvent[] {
    return this.history.events(query);
  }

  /** `warning`, `critical` and `error` records kept in memory. */
  getAlerts(lastN?: number): TelemetryEvent[] {
    return this.history.alerts(lastN);
  }

  /** Forgets kept records and resets the counters (as the reference's `clear_events`). */
  clearEvents(): void {
    this.history.clear();
    for (const group of this.collectors.groups) group.clearStats();
    this.records.alertCount = 0;
  }

  /** Changes one threshold (`memory_warning_percent` or `memoryWarningPercent`...). */
  setThreshold(name: string, value: number): void {
    this.processor.setThreshold(name, value);
  }

  /** Calls `callback` with every alert record; returns a function that removes it. */
  addAlertCallback(callback: AlertCallback): () => void {
    return this.records.addAlertCallback(callback);
  }

  /** Removes an alert callback. */
  removeAlertCallback(callback: AlertCallback): void {
    this.records.removeAlertCallback(callback);
  }

  /** The session being recorded, or the last one after `stop()`. */
  getSessionSummary(): SessionSummary | null {
    return this.session.summary;
  }

  /** The reference's statistics (camelCase; `getStatisticsJson()` for its snake_case keys). */
  getStatistics(): TrackerStatistics {
    return collectStatistics({
      nowNs: this.clock.nowNs(),
      history: this.history,
      collectors: this.collectors,
      records: this.records,
      trackingStartTime: this.session.trackingStartTime,
      oomFlightRecorderEnabled: this.oom.options.enabled,
      lastOomDumpPath: this.lastOomDumpPath,
      session: this.session.summary,
    });
  }

  /** `getStatistics()` with the reference's snake_case keys, ready to serialise. */
  getStatisticsJson(): JsonObject {
    return statisticsToJson(this.getStatistics());
  }

  /**
   * The reference's `get_memory_timeline(interval)`: the last record of each `intervalS`-second
   * bucket from the first kept record (primary device), as parallel arrays.
   */
  getMemoryTimeline(intervalS = 1): {
    timestamps: number[];
    allocated: (number | null)[];
    reserved: (number | null)[];
    device_used: (number | null)[];
    device_free: (number | null)[];
    device_total: (number | null)[];
  } {
    return this.history.timeline(intervalS, this.collectors.primary.deviceId);
  }

  /**
   * Writes the records kept in memory to a file: `jsonl` (one canonical sink line per record, what
   * the loaders and the Python reference read) or `json` (an array, indented). Returns how many.
   */
  exportEvents(path: string, format: "json" | "jsonl" = "jsonl"): number {
    return this.history.export(path, format);
  }

  // ------------------------------------------------------------------ OOM

  /**
   * Runs `fn` (sync or async); if it throws an OOM-like error, records an `error` event and writes
   * a dump bundle (when the recorder is enabled), then rethrows. Returns what `fn` returns.
   */
  captureOOM<T>(fn: () => T, options: OOMCaptureOptions = {}): T {
    let result: T;
    try {
      result = fn();
    } catch (error) {
      this.handleError(error, options);
      throw error;
    }
    if (typeof (result as PromiseLike<unknown> | null)?.then === "function") {
      return Promise.resolve(result).catch((error: unknown) => {
        this.handleError(error, options);
        throw error;
      }) as T;
    }
    return result;
  }

  /**
   * Classifies `error`; for an OOM, records an `error` event `OOM detected (<reason>)` and, when the
   * flight recorder is enabled, writes a dump bundle. Returns the bundle's path or null. Never throws.
   */
  handleError(error: unknown, options: OOMCaptureOptions = {}): string | null {
    try {
      return this.recordOOM(error, options);
    } catch (failure) {
      this.options.logger.warn(`handling an error failed: ${describeError(failure)}`);
      return null;
    }
  }

  private recordOOM(error: unknown, options: OOMCaptureOptions): string | null {
    const classification = classifyOOMError(error);
    if (!classification.isOOM || classification.reason === null) return null;
    const group = this.collectors.primary;
    const reading = this.boundaryReading(group) ?? group.lastReading;
    if (this.running) {
      const context = `OOM detected (${classification.reason})`;
      const ts = this.clock.nowNs();
      // The peak the failed allocation came on top of.
      if (this.collectors.highWaterStates.length > 0) this.processor.takeHighWater(ts, true);
      this.records.emit(group, "error", ts, reading, 0, context, {
        oom_reason: classification.reason,
      });
    }
    if (!this.oom.options.enabled) return null;
    const state = {
      group,
      reading,
      statistics: this.getStatisticsJson(),
      samplingIntervalMs: this.samplingIntervalMs,
      session: this.session.summary,
      identity: this.identity,
      records: this.records,
    };
    const path = dumpOOM(this.oom, classification.reason, error, options, state, this.options.logger);
    if (path !== null) this.lastOomDumpPath = path;
    return path;
  }
}

/** What `stop()` records about why tracking ended, in the `stop` record's metadata. */
export interface StopOptions {
  /** Why tracking ended, as `metadata.stop_reason` (e.g. "exited with code 3"). */
  readonly reason?: string;
  /** More keys for the `stop` record's metadata (JSON values; the tracker's own keys win a clash). */
  readonly metadata?: JsonObject;
}

/** `stop()`'s options as the `stop` record's extra metadata; throws `InvalidConfigError` for bad ones. */
function stopMetadata(options: StopOptions | undefined): JsonObject | undefined {
  if (options === undefined) return undefined;
  if (options === null || typeof options !== "object")
    throw new InvalidConfigError("stop", `expected { reason?, metadata? }, got ${String(options)}`);
  const { reason, metadata } = options;
  if (reason !== undefined && typeof reason !== "string")
    throw new InvalidConfigError("stop.reason", `expected a string, got ${typeof reason}`);
  if (metadata !== undefined) {
    if (metadata === null || typeof metadata !== "object" || Array.isArray(metadata))
      throw new InvalidConfigError("stop.metadata", "expected an object of JSON values");
    const problem = jsonValueProblem(metadata, "metadata");
    if (problem !== null)
      throw new InvalidConfigError(
        "stop.metadata",
        `expected JSON values only (strings, numbers, bigints, booleans, null, arrays, plain objects): ${problem}`,
      );
    try {
      stringifyJson(metadata);
    } catch (error) {
      throw new InvalidConfigError(
        "stop.metadata",
        `expected JSON values without cycles: ${describeError(error)}`,
      );
    }
  }
  if (reason === undefined && metadata === undefined) return undefined;
  return reason === undefined ? { ...metadata } : { ...metadata, stop_reason: reason };
}
