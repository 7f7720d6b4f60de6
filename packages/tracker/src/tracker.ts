import { writeFileSync } from "node:fs";
import { hostname as osHostname } from "node:os";
import {
  type Clock,
  COLLECTOR_SPECIFICATION_VERSION,
  createSessionSummary,
  DEFAULT_SCHEMA_VERSION,
  type DistributedIdentity,
  type DistributedIdentityInput,
  encodeTelemetryRecord,
  finalizeSessionSummary,
  formatBytes,
  InvalidConfigError,
  type JsonObject,
  type JsonValue,
  type MemoryCollector,
  type MemoryReading,
  type PhaseHost,
  type PhaseOptions,
  type PhaseScope,
  resolveDistributedIdentity,
  type SampleResult,
  type Scheduler,
  type SessionStatus,
  type SessionSummary,
  stringifyJson,
  systemClock,
  systemScheduler,
  type TelemetryEvent,
  type TimerHandle,
  updateSessionSummary,
} from "@stormlog/core";
import {
  type AsyncContextMode,
  clearGlobalPhaseHost,
  getPhaseHost,
  noopPhaseHost,
  type PhaseBoundary,
  PhaseRecorder,
  setGlobalPhaseHost,
} from "@stormlog/phases";
import { registerExitParticipant } from "@stormlog/sink";
import {
  type AlertPolicy,
  type AlertThresholds,
  checkThreshold,
  DEFAULT_THRESHOLDS,
  evaluateAlerts,
  type ResolvedAlertPolicy,
  resolveAlertPolicy,
  thresholdKey,
} from "./alerts.js";
import {
  type CheckedFailure,
  type CheckedReading,
  type CollectorState,
  checkSample,
  DeviceGroup,
  groupByDevice,
} from "./device-group.js";
import {
  aggregateHealth,
  type CollectorHealth,
  HEALTHY,
  healthMetadata,
  markFloatIfIntegral,
  type RetryBackoff,
  retryDelaySeconds,
} from "./health.js";
import { type LeakAlertOptions, LeakWatch, resolveLeakAlerts } from "./leak-alerts.js";
import {
  classifyOOMError,
  OOMFlightRecorder,
  type OOMFlightRecorderOptions,
  resolveOOMOptions,
} from "./oom.js";
import { openPipeline, type RecordPipeline } from "./pipeline/record-pipeline.js";
import { processCollector } from "./process-collector.js";
import { type DeviceStatistics, statisticsToJson, type TrackerStatistics } from "./statistics.js";
import {
  BOUNDARY_READ,
  COUNTER_INDEX,
  EventStore,
  PHASE_ENTER,
  PHASE_EXIT,
  type RecordContext,
} from "./store.js";
import {
  emptySinkCounters,
  type SinkCounters,
  sinkCounters,
  type TrackerSinkOption,
  type WriterDiagnostics,
} from "./writer.js";

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

/** Filters of `getEvents()`. */
export interface EventQuery {
  readonly eventType?: string;
  /** Only the last N (after the other filters). */
  readonly lastN?: number;
  /** Only records at or after this time (ns since the epoch). */
  readonly sinceNs?: bigint;
}

/** Options of `captureOOM()` / `handleError()`. */
export interface OOMCaptureOptions {
  /** What was running (default `runtime`). */
  readonly context?: string;
  /** Extra fields for the dump's `custom_metadata`. */
  readonly metadata?: JsonObject;
}

/** Called with every `warning`, `critical` and `error` record. Exceptions are caught and logged. */
export type AlertCallback = (record: TelemetryEvent) => unknown;

const ALERT_TYPES: ReadonlySet<string> = new Set(["warning", "critical", "error"]);
const SKIPPED = Symbol("skipped");
type Outcome = CheckedReading | CheckedFailure | typeof SKIPPED;

function isFailure(outcome: CheckedReading | CheckedFailure): outcome is CheckedFailure {
  return (outcome as CheckedFailure).error !== undefined;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
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
 * The memory tracker: samples collectors on an unref'd timer, records the reference's events
 * (`start`, `peak`, `allocation`/`deallocation`, alerts, `sample`, `collector_degraded`/`_recovered`,
 * `phase_enter`/`phase_exit`, `stop`) as schema v3 (or v4) telemetry records, keeps a bounded history,
 * streams to a sink, and is the `PhaseHost` of your training loop.
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

  private readonly clock: Clock;
  private readonly scheduler: Scheduler;
  private readonly logger: TrackerLogger;
  private readonly alertPolicy: ResolvedAlertPolicy;
  private readonly thresholdValues: AlertThresholds;
  private readonly retryBackoff: RetryBackoff;
  private readonly sampleTimeoutMs: number;
  private readonly boundaryReadings: boolean;
  private readonly takeInitialSample: boolean;
  private readonly registerGlobal: boolean;
  private readonly handleProcessExit: boolean;
  private readonly sessionSource: string;
  private readonly sinkOption: TrackerSinkOption | undefined;
  private readonly sinkThread: "worker" | "main";
  private readonly recorder: PhaseRecorder;
  private readonly oom: OOMFlightRecorder;
  private readonly store: EventStore;
  private readonly alertCallbacks = new Set<AlertCallback>();
  /** The leak watch (`leakAlerts`), or null when turned off. */
  private readonly leakWatch: LeakWatch | null;
  private readonly collectorsGiven: readonly MemoryCollector[] | undefined;

  private collectors: MemoryCollector[];
  private ownedCollector: ReturnType<typeof processCollector> | null = null;
  private groups: DeviceGroup[] = [];
  private states: CollectorState[] = [];
  private primary: DeviceGroup = new DeviceGroup(-1, []);
  private boundaryStates: CollectorState[] = [];
  /** Primary-device collectors read only at the boundaries of phases that ask (`readOnDemand()`). */
  private onDemandStates: CollectorState[] = [];

  private running = false;
  private generation = 0;
  private timer: TimerHandle | null = null;
  /** The asynchronous sampling iteration in progress, if any. */
  private busy: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;
  private session: SessionSummary | null = null;
  /** How this session's records reach its sink (null: no sink, or it failed). */
  private pipeline: RecordPipeline | null = null;
  private starting: Promise<void> | null = null;
  private writerFailed = false;
  private readonly onTimerTask = (): void => this.onTimer();
  private counters: SinkCounters = emptySinkCounters();
  private alertCount = 0;
  private trackingStartTime: number | null = null;
  private lastOomDumpPath: string | null = null;
  private registeredGlobal = false;
  private unregisterExit: (() => void) | null = null;
  private recordContext: RecordContext | null = null;
  /** Absolute store index where the in-memory history starts (moved by `clearEvents()`). */
  private historyStart = 0;

  constructor(options: MemoryTrackerOptions = {}) {
    this.samplingIntervalMs = positive("samplingIntervalMs", options.samplingIntervalMs, 100, false);
    this.maxEvents = positive("maxEvents", options.maxEvents, 10_000, true);
    this.sampleTimeoutMs = positive("sampleTimeoutMs", options.sampleTimeoutMs, 5_000, false);
    const schemaVersion = options.schemaVersion ?? DEFAULT_SCHEMA_VERSION;
    if (schemaVersion !== 3 && schemaVersion !== 4) {
      throw new InvalidConfigError(
        "schemaVersion",
        `the tracker writes schema 3 or 4, got ${String(schemaVersion)}`,
      );
    }
    this.schemaVersion = schemaVersion;
    this.clock = options.clock ?? systemClock;
    this.scheduler = options.scheduler ?? systemScheduler;
    this.logger = options.logger ?? consoleTrackerLogger;
    this.alertPolicy = resolveAlertPolicy(options.alerts);
    const leakAlerts = resolveLeakAlerts(options.leakAlerts);
    this.leakWatch = leakAlerts.enabled
      ? new LeakWatch(leakAlerts, {
          clock: this.clock,
          scheduler: this.scheduler,
          warn: (message) => this.logger.warn(message),
          emit: (context, metadata) =>
            this.emit(
              this.primary,
              "warning",
              this.clock.nowNs(),
              this.primary.lastReading,
              0,
              context,
              metadata,
            ),
        })
      : null;
    this.thresholdValues = { ...DEFAULT_THRESHOLDS };
    for (const [name, value] of Object.entries(options.thresholds ?? {})) {
      const key = thresholdKey(name);
      this.thresholdValues[key] = checkThreshold(key, value);
    }
    this.retryBackoff = options.retryBackoff ?? {};
    this.boundaryReadings = options.boundaryReadings ?? true;
    this.takeInitialSample = options.initialSample ?? true;
    this.registerGlobal = options.registerGlobal ?? true;
    this.handleProcessExit = options.handleProcessExit ?? true;
    this.sessionSource = options.sessionSource ?? "stormlog.tracker";
    this.sinkOption = options.sink;
    if (options.sinkThread !== undefined && options.sinkThread !== "worker" && options.sinkThread !== "main")
      throw new InvalidConfigError(
        "sinkThread",
        `expected "worker" or "main", got ${String(options.sinkThread)}`,
      );
    this.sinkThread = options.sinkThread ?? "worker";
    this.host = options.hostname ?? osHostname();
    this.pid = options.pid ?? process.pid;
    const env = options.env === false ? undefined : (options.env ?? process.env);
    this.identity = resolveDistributedIdentity(options.identity ?? {}, { env });
    for (const collector of options.collectors ?? []) {
      if (collector.specificationVersion !== COLLECTOR_SPECIFICATION_VERSION) {
        throw new InvalidConfigError(
          "collectors",
          `collector ${collector.name} implements contract ${String(collector.specificationVersion)}; this tracker ` +
            `needs ${COLLECTOR_SPECIFICATION_VERSION}. Upgrade the adapter package or the tracker.`,
        );
      }
    }
    this.collectorsGiven = options.collectors;
    this.collectors = [...(options.collectors ?? [])];
    this.oom = new OOMFlightRecorder(resolveOOMOptions(options.oom, this.maxEvents));
    const oomSize = this.oom.options.enabled ? this.oom.options.bufferSize : 0;
    this.store = new EventStore(Math.max(this.maxEvents, oomSize));
    this.recorder = new PhaseRecorder({
      onBoundary: (boundary) => this.onPhaseBoundary(boundary),
      asyncContext: options.asyncContext ?? "auto",
      onListenerError: (error) => this.logger.warn(`recording a phase boundary failed: ${describe(error)}`),
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
    return { ...this.thresholdValues };
  }

  /**
   * Starts a session: resets statistics and history, opens the sink session, records `start` and
   * starts sampling. Idempotent. Throws only for configuration errors (e.g. sink options).
   */
  async start(): Promise<void> {
    if (this.stopping !== null) await this.stopping;
    if (this.running) return;
    this.starting ??= this.begin().finally(() => {
      this.starting = null;
    });
    return this.starting;
  }

  private async begin(): Promise<void> {
    // First, as it may wait: a worker's start-up is paid here, not in the first training steps.
    const pipeline = await openPipeline(this.sinkOption, this.sinkThread, {
      store: this.store,
      scheduler: this.scheduler,
      warn: (message) => this.logger.warn(message),
      failed: (operation, error) => this.disableWriter(operation, error),
    });
    this.prepareCollectors();
    this.store.reset();
    this.historyStart = 0;
    this.alertCount = 0;
    this.lastOomDumpPath = null;
    this.counters = emptySinkCounters();
    this.writerFailed = false;
    this.pipeline = pipeline;

    let summary = createSessionSummary({
      source: this.sessionSource,
      status: "running",
      startedAtNs: this.clock.nowNs(),
      host: this.host,
      pid: this.pid,
      jobId: this.identity.job_id,
      rank: this.identity.rank,
      localRank: this.identity.local_rank,
      worldSize: this.identity.world_size,
      clock: this.clock,
    });
    // Registered before the sink's own hooks, so that `stop` is written before the sink closes.
    if (this.handleProcessExit) {
      this.unregisterExit = registerExitParticipant({
        onSignal: () => this.finish("interrupted"),
        onBeforeExit: (code) => this.finish(code === 0 ? "completed" : "interrupted"),
        onExit: (code) => {
          void this.finish(code === 0 ? "completed" : "interrupted", true);
        },
      });
    }
    if (pipeline !== null) {
      try {
        // Resolves once the manifest naming the session is on disk (a kill right after start() finds it).
        const kept = await pipeline.startSession({
          session_id: summary.session_id,
          started_at_ns: summary.started_at_ns,
          host: summary.host,
          pid: summary.pid,
          job_id: summary.job_id,
          rank: summary.rank,
          local_rank: summary.local_rank,
          world_size: summary.world_size,
          source: summary.source,
        });
        if (kept?.session_id !== undefined) summary = { ...kept, source: summary.source };
      } catch (error) {
        this.disableWriter("start the session", error);
      }
    }
    this.session = summary;
    const context: RecordContext = {
      schemaVersion: this.schemaVersion,
      sessionId: summary.session_id,
      samplingIntervalMs: Math.round(this.samplingIntervalMs),
      pid: this.pid,
      host: this.host,
      jobId: this.identity.job_id,
      rank: this.identity.rank,
      localRank: this.identity.local_rank,
      worldSize: this.identity.world_size,
    };
    this.recordContext = context;
    if (this.pipeline !== null) {
      try {
        this.pipeline.begin(context);
      } catch (error) {
        this.disableWriter("start the session", error);
      }
    }
    this.trackingStartTime = this.epochSeconds(this.clock.nowNs());
    this.running = true;
    this.generation++;
    this.recorder.begin(summary.session_id);
    // Collectors that attribute allocations to phases (tfjs birth phases) ask the recorder where code runs.
    for (const state of this.states) {
      try {
        state.collector.bindPhases?.(this.recorder);
      } catch (error) {
        this.logger.warn(`collector ${state.name} could not bind the phases: ${describe(error)}`);
      }
    }
    if (this.registerGlobal && getPhaseHost() === noopPhaseHost) {
      setGlobalPhaseHost(this);
      this.registeredGlobal = true;
    }
    const ts = this.clock.nowNs();
    this.emit(
      this.primary,
      "start",
      ts,
      this.boundaryReading(this.primary),
      0,
      "Memory tracking started",
      undefined,
    );
    this.schedule(this.samplingIntervalMs);
    this.leakWatch?.begin({
      sessionId: summary.session_id,
      rank: this.identity.rank,
      schemaVersion: this.schemaVersion,
    });
    // A first reading now, so phases opened right after start() have real counters to carry.
    if (this.takeInitialSample) await this.sampleNow();
  }

  /**
   * Records `stop`, closes the sink session (`completed`, or `incomplete` when the sink lost records)
   * and stops sampling. Idempotent. A sample still in flight is discarded.
   */
  stop(): Promise<void> {
    // A start still waiting for its sink's worker: stop the session it is about to begin.
    if (this.starting !== null && !this.running) return this.starting.then(() => this.finish("completed"));
    return this.finish("completed");
  }

  /** `await using tracker = ...` stops it. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  private finish(status: SessionStatus, sync = false): Promise<void> {
    if (!this.running) return this.stopping ?? Promise.resolve();
    // A last leak check before `stop` (not inside a synchronous exit handler).
    this.leakWatch?.end(!sync);
    this.running = false;
    this.generation++;
    if (this.timer !== null) {
      this.scheduler.clearTimeout(this.timer);
      this.timer = null;
    }
    this.busy = null;
    const ts = this.clock.nowNs();
    const reading = this.boundaryReading(this.primary) ?? this.primary.lastReading;
    this.emit(this.primary, "stop", ts, reading, 0, "Memory tracking stopped", undefined);
    this.recorder.end();
    if (this.registeredGlobal) {
      clearGlobalPhaseHost(this);
      this.registeredGlobal = false;
    }
    const unregister = this.unregisterExit;
    this.unregisterExit = null;
    unregister?.();
    const pipeline = this.pipeline;
    const done = () => {
      this.finalizeSession(status, pipeline);
      this.pipeline = null;
      this.ownedCollector?.close();
      this.stopping = null;
    };
    if (pipeline === null || this.writerFailed) {
      done();
      return Promise.resolve();
    }
    if (sync) {
      try {
        pipeline.closeSync(status);
      } catch (error) {
        this.disableWriter("close", error);
      }
      done();
      return Promise.resolve();
    }
    let closing: Promise<void>;
    try {
      closing = pipeline.close(status).then(
        () => undefined,
        (error: unknown) => this.disableWriter("close", error),
      );
    } catch (error) {
      this.disableWriter("close", error);
      closing = Promise.resolve();
    }
    this.stopping = closing.then(done);
    return this.stopping;
  }

  private finalizeSession(status: SessionStatus, pipeline: RecordPipeline | null): void {
    let diagnostics: WriterDiagnostics | undefined;
    try {
      diagnostics = pipeline?.diagnostics();
    } catch {
      diagnostics = undefined;
    }
    if (diagnostics !== undefined) this.counters = sinkCounters(diagnostics);
    const lost = (diagnostics?.dropped_events ?? 0) > 0 || (diagnostics?.rejected_events ?? 0) > 0;
    if (this.session === null) return;
    let summary = this.session;
    if (this.writerFailed || lost) summary = updateSessionSummary(summary, { status: "incomplete" });
    else if (summary.status === "running" && status !== "completed")
      summary = updateSessionSummary(summary, { status });
    this.session = finalizeSessionSummary(summary, { clock: this.clock });
  }

  private prepareCollectors(): void {
    if (this.collectorsGiven === undefined) {
      if (this.ownedCollector === null || this.ownedCollector.availability().available === false) {
        this.ownedCollector = processCollector();
      }
      this.collectors = [this.ownedCollector];
    }
    const available: MemoryCollector[] = [];
    for (const collector of this.collectors) {
      let availability: ReturnType<MemoryCollector["availability"]>;
      try {
        availability = collector.availability();
      } catch (error) {
        availability = { available: false, reason: describe(error) };
      }
      if (availability.available) available.push(collector);
      else
        this.logger.warn(
          `collector ${collector.name} is not available and will not be read: ${availability.reason}`,
        );
    }
    if (available.length === 0 && this.collectorsGiven !== undefined) {
      // No configured collector can read here (no NVML on a CPU machine, say): host memory is still
      // worth recording, and the run still gets a timeline.
      this.ownedCollector ??= processCollector();
      this.logger.warn("no configured collector is available; falling back to the process collector (RSS)");
      available.push(this.ownedCollector);
    }
    this.groups = groupByDevice(available, this.schemaVersion === 4);
    this.states = this.groups.flatMap((group) => group.states);
    this.states.forEach((state, index) => {
      state.index = index;
    });
    this.primary = this.groups[0] ?? new DeviceGroup(-1, [], this.schemaVersion === 4);
    this.boundaryStates = this.boundaryReadings
      ? this.primary.states.filter(
          (state) => typeof state.collector.readSync === "function" && state.owned.length > 0,
        )
      : [];
    this.onDemandStates = this.boundaryReadings
      ? this.primary.states.filter(
          (state) =>
            typeof state.collector.readSync !== "function" &&
            typeof state.collector.readOnDemand === "function" &&
            state.owned.length > 0,
        )
      : [];
  }

  // ------------------------------------------------------------------ sampling

  private schedule(delayMs: number): void {
    this.timer = this.scheduler.setTimeout(this.onTimerTask, delayMs);
  }

  private onTimer(): void {
    this.timer = null;
    if (!this.running) return;
    const generation = this.generation;
    const startedNs = this.clock.nowNs();
    // A `sampleNow()` still reading: this tick is skipped rather than overlapping it.
    if (this.busy !== null) {
      this.scheduleNext(generation, startedNs, 0);
      return;
    }
    let pending: Promise<void> | undefined;
    try {
      pending = this.iteration();
    } catch (error) {
      this.trackingError(error);
      this.scheduleNext(generation, startedNs, 1_000);
      return;
    }
    if (pending === undefined) {
      this.scheduleNext(generation, startedNs, 0);
      return;
    }
    this.busy = pending.then(
      () => {
        this.busy = null;
        this.scheduleNext(generation, startedNs, 0);
      },
      (error: unknown) => {
        this.busy = null;
        this.trackingError(error);
        this.scheduleNext(generation, startedNs, 1_000);
      },
    );
  }

  /**
   * The next tick, an interval after this one began (at least `backoffMs` from now). A method, not
   * a closure made per tick: a tick runs ten times a second inside training.
   */
  private scheduleNext(generation: number, startedNs: bigint, backoffMs: number): void {
    if (!this.running || generation !== this.generation || this.timer !== null) return;
    const elapsedMs = Number(this.clock.nowNs() - startedNs) / 1e6;
    this.schedule(Math.max(backoffMs, this.samplingIntervalMs - elapsedMs, 0));
  }

  /**
   * Takes one sample of every collector now, as a timer tick would, and records its events (after
   * a tick still reading, if any). Resolves when they are recorded. Useful at the end of a step.
   */
  async sampleNow(): Promise<void> {
    while (this.busy !== null) await this.busy;
    if (!this.running) return;
    let pending: Promise<void> | undefined;
    try {
      pending = this.iteration();
    } catch (error) {
      this.trackingError(error);
      return;
    }
    if (pending === undefined) return;
    const done = pending.then(
      () => {
        this.busy = null;
      },
      (error: unknown) => {
        this.busy = null;
        this.trackingError(error);
      },
    );
    this.busy = done;
    await done;
  }

  private trackingError(error: unknown): void {
    if (!this.running) return;
    this.logger.warn(`sampling failed: ${describe(error)}`);
    this.emit(
      this.primary,
      "error",
      this.clock.nowNs(),
      this.primary.lastReading,
      0,
      `Tracking error: ${describe(error)}`,
      undefined,
    );
  }

  private iteration(): Promise<void> | undefined {
    const generation = this.generation;
    const nowS = this.epochSeconds(this.clock.nowNs());
    const raw: (unknown | typeof SKIPPED)[] = new Array(this.states.length);
    let pending = false;
    for (const state of this.states) {
      const retryAt = state.health.nextRetryEpochS;
      if (retryAt !== null && nowS < retryAt) {
        raw[state.index] = SKIPPED;
        continue;
      }
      const result = this.sampleOne(state);
      if (result instanceof Promise) pending = true;
      raw[state.index] = result;
    }
    if (!pending) {
      this.process(raw);
      return undefined;
    }
    return Promise.all(raw).then((settled) => {
      if (this.running && generation === this.generation) this.process(settled);
    });
  }

  private sampleOne(state: CollectorState): unknown {
    let result: unknown;
    try {
      result = state.collector.sample();
    } catch (error) {
      return { kind: "failure", error: `collector ${state.name} threw: ${describe(error)}` };
    }
    if (typeof (result as PromiseLike<unknown> | null)?.then !== "function") return result;
    return new Promise<unknown>((resolve) => {
      const timer = this.scheduler.setTimeout(
        () =>
          resolve({
            kind: "failure",
            error: `collector ${state.name} did not answer within ${this.sampleTimeoutMs} ms`,
          }),
        this.sampleTimeoutMs,
      );
      Promise.resolve(result).then(
        (value) => {
          this.scheduler.clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          this.scheduler.clearTimeout(timer);
          resolve({ kind: "failure", error: `collector ${state.name} failed: ${describe(error)}` });
        },
      );
    });
  }

  private process(raw: readonly unknown[]): void {
    const ts = this.clock.nowNs();
    const nowS = this.epochSeconds(ts);
    for (const group of this.groups) {
      const outcomes: Outcome[] = group.states.map((state) => {
        const value = raw[state.index];
        return value === SKIPPED ? SKIPPED : checkSample(state, value);
      });
      this.processGroup(group, outcomes, ts, nowS);
    }
  }

  private processGroup(group: DeviceGroup, outcomes: readonly Outcome[], ts: bigint, nowS: number): void {
    const reading: MemoryReading = {};
    const missing: string[] = [];
    const metadata: JsonObject = {};
    let answered = false;
    group.states.forEach((state, i) => {
      const outcome = outcomes[i] as Outcome;
      if (outcome === SKIPPED || isFailure(outcome)) {
        for (const field of state.owned) missing.push(field);
        return;
      }
      answered = true;
      for (const field of outcome.missing) if (state.owned.includes(field)) missing.push(field);
      for (const field of state.owned) {
        const value = outcome.reading[field];
        if (value !== undefined && value !== null) reading[field] = value;
      }
      if (outcome.metadata !== undefined) Object.assign(metadata, outcome.metadata);
    });
    // Health transitions first, as the reference emits them before the sample's own events.
    group.states.forEach((state, i) => {
      const outcome = outcomes[i] as Outcome;
      if (outcome === SKIPPED) return;
      if (isFailure(outcome)) this.coreFailure(group, state, outcome.error, ts, nowS);
      else this.sampled(group, state, outcome, answered ? reading : group.lastReading, ts);
    });
    if (!answered) return;
    this.leakWatch?.sampled(group === this.primary, ts, metadata);

    group.lastReading = reading;
    group.lastMissing = missing;
    const stats = group.stats;
    stats.lastMemoryCheck = nowS;
    const total = reading.device_total_bytes;
    if (typeof total === "number") group.totalMemory = total;
    const used = reading.device_used_bytes;
    if (typeof used === "number" && used > stats.peakDeviceUsed) stats.peakDeviceUsed = used;

    const allocated = reading.allocator_allocated_bytes;
    let change: number | null = null;
    if (group.capabilities.supports_allocator_allocated && typeof allocated === "number") {
      // The first sample has no predecessor: it is not an allocation (the reference diffs against 0).
      change = group.lastAllocated === null ? 0 : allocated - group.lastAllocated;
      group.lastAllocated = allocated;
      if (allocated > stats.peakMemory) {
        stats.peakMemory = allocated;
        this.emit(
          group,
          "peak",
          ts,
          reading,
          change,
          `New peak memory: ${formatBytes(allocated)}`,
          undefined,
        );
      }
      if (change > 0) {
        stats.totalAllocations++;
        stats.totalAllocationBytes += change;
        this.emit(
          group,
          "allocation",
          ts,
          reading,
          change,
          `Memory allocated: ${formatBytes(change)}`,
          undefined,
        );
      } else if (change < 0) {
        stats.totalDeallocations++;
        stats.totalDeallocationBytes += -change;
        this.emit(
          group,
          "deallocation",
          ts,
          reading,
          change,
          `Memory freed: ${formatBytes(-change)}`,
          undefined,
        );
      }
    }
    if (this.alertPolicy.enabled) {
      const alerts = evaluateAlerts(
        reading,
        change,
        group.capabilities,
        group.totalMemory,
        this.thresholdValues,
        this.alertPolicy,
        group.alerts,
      );
      for (const alert of alerts)
        this.emit(group, alert.eventType, ts, reading, change, alert.context, alert.metadata);
    }
    const context =
      missing.length > 0
        ? `Collected partial telemetry sample (${missing.join(", ")}).`
        : "Collected telemetry sample.";
    this.emit(group, "sample", ts, reading, change, context, metadata);
  }

  private coreFailure(
    group: DeviceGroup,
    state: CollectorState,
    error: string,
    ts: bigint,
    nowS: number,
  ): void {
    const previous = state.health;
    const failures = previous.consecutiveFailures + 1;
    const delay = retryDelaySeconds(failures, this.retryBackoff);
    const health: CollectorHealth = {
      status: "unhealthy",
      telemetryPartial: true,
      partialFields: [],
      lastError: error,
      consecutiveFailures: failures,
      nextRetryEpochS: delay > 0 ? nowS + delay : null,
    };
    group.setHealth(state, health);
    if (previous.status !== "healthy") return;
    const metadata: JsonObject = {
      collector_transition: "degraded",
      collector_degraded_from: previous.status,
      collector_degradation_reason: error,
      collector_retry_delay_s: delay,
    };
    markFloatIfIntegral(metadata, "collector_retry_delay_s");
    this.emitTransition(
      group,
      state,
      health,
      "collector_degraded",
      ts,
      group.lastReading,
      metadata,
      "Collector unavailable; telemetry paused until recovery.",
    );
  }

  private sampled(
    group: DeviceGroup,
    state: CollectorState,
    outcome: CheckedReading,
    reading: MemoryReading | null,
    ts: bigint,
  ): void {
    const previous = state.health;
    if (outcome.missing.length > 0) {
      const health: CollectorHealth = {
        status: "degraded",
        telemetryPartial: true,
        partialFields: [...outcome.missing],
        lastError: outcome.reason,
        consecutiveFailures: 0,
        nextRetryEpochS: null,
      };
      group.setHealth(state, health);
      if (previous.status === "healthy") {
        this.emitTransition(
          group,
          state,
          health,
          "collector_degraded",
          ts,
          reading,
          {
            collector_transition: "degraded",
            collector_degraded_from: previous.status,
            collector_degradation_reason: outcome.reason,
          },
          "Collector degraded; telemetry is partial.",
        );
      }
      return;
    }
    if (previous.status === "healthy") return;
    group.setHealth(state, HEALTHY);
    this.emitTransition(
      group,
      state,
      HEALTHY,
      "collector_recovered",
      ts,
      reading,
      {
        collector_transition: "recovered",
        collector_recovered_from: previous.status,
        collector_previous_error: previous.lastError,
        collector_previous_failure_count: previous.consecutiveFailures,
      },
      "Collector recovered; full telemetry sampling resumed.",
    );
  }

  private emitTransition(
    group: DeviceGroup,
    state: CollectorState,
    health: CollectorHealth,
    eventType: string,
    ts: bigint,
    reading: MemoryReading | null,
    extra: JsonObject,
    context: string,
  ): void {
    // The event is about one collector: its own health, not its device's.
    const base: JsonObject = { ...healthMetadata(health), ...group.capabilityMetadata };
    if (group.states.length > 1) base.collector_name = state.name;
    const index = this.store.push(ts, eventType, context, group, reading, 0, base, extra, null, 0, 0);
    this.committed(index, eventType);
  }

  // ------------------------------------------------------------------ records

  private emit(
    group: DeviceGroup,
    eventType: string,
    ts: bigint,
    reading: MemoryReading | null,
    change: number | null,
    context: string,
    extra: JsonObject | undefined,
  ): void {
    const base = group.baseMetadata(healthMetadata);
    const index = this.store.push(
      ts,
      eventType,
      context,
      group,
      reading,
      change,
      base,
      extra ?? null,
      null,
      0,
      0,
    );
    this.committed(index, eventType);
  }

  /**
   * Hands a stored record to the session's pipeline and, for alerts, to the callbacks: at a phase
   * boundary inside a training step the tracker only stores numbers, and the pipeline builds the
   * record later (or the worker does).
   */
  private committed(index: number, eventType: string): void {
    const pipeline = this.writerFailed ? null : this.pipeline;
    if (!ALERT_TYPES.has(eventType)) {
      if (pipeline === null) return;
      try {
        pipeline.commit(index, null);
      } catch (error) {
        this.disableWriter("append", error);
      }
      return;
    }
    const record = this.store.materialize(index, this.recordContext as RecordContext);
    if (pipeline !== null) {
      try {
        pipeline.commit(index, record);
      } catch (error) {
        this.disableWriter("append", error);
      }
    }
    this.alertCount++;
    for (const callback of this.alertCallbacks) {
      try {
        const result = callback(record);
        if (typeof (result as PromiseLike<unknown> | null)?.then === "function") {
          Promise.resolve(result).catch((error: unknown) =>
            this.logger.debug?.(`alert callback failed (ignored): ${describe(error)}`),
          );
        }
      } catch (error) {
        this.logger.debug?.(`alert callback failed (ignored): ${describe(error)}`);
      }
    }
  }

  private disableWriter(operation: string, error: unknown): void {
    if (this.writerFailed) return;
    this.writerFailed = true;
    this.logger.warn(
      `disabling the telemetry sink after a failed ${operation}: ${describe(error)}; tracking goes on`,
    );
    if (this.session !== null) this.session = updateSessionSummary(this.session, { status: "incomplete" });
    const pipeline = this.pipeline;
    if (pipeline === null) return;
    try {
      this.counters = sinkCounters(pipeline.diagnostics());
    } catch {
      // Keep the last counters.
    }
    try {
      void pipeline.close("incomplete").catch(() => undefined);
    } catch {
      // Closing a failed sink may fail too; nothing more to do.
    }
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
    const group = this.primary;
    const eventType = boundary.eventType;
    const ts = this.clock.nowNs();
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
    if (this.boundaryStates.length > 0) this.readInto(index, this.boundaryStates, "readSync");
    // A phase that asks for readings (an onnxruntime run) also reads the costlier collectors; other
    // boundaries pay only this check.
    if (boundary.scope.readings === true && this.onDemandStates.length > 0)
      this.readInto(index, this.onDemandStates, "readOnDemand");
    this.leakWatch?.boundary(eventType === "phase_exit", boundary.scope, ts, this.store, index);
    this.committed(index, eventType);
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
      if (result === null || typeof result !== "object" || result.kind === "failure") continue;
      const owned = state.owned;
      for (let j = 0; j < owned.length; j++) {
        const field = owned[j] as keyof MemoryReading;
        const value = result.reading[field];
        if (typeof value === "number" && value >= 0) {
          this.store.setCounter(index, COUNTER_INDEX[field] as number, value);
          this.store.addFlags(index, BOUNDARY_READ);
        }
      }
      if (result.metadata !== undefined) this.store.mergeExtra(index, result.metadata);
    }
  }

  /**
   * The last sample's counters with what `readSync()` collectors read now, or null when no collector
   * of the device reads synchronously. A failed boundary read is ignored (health follows samples).
   */
  private boundaryReading(group: DeviceGroup): MemoryReading | null {
    const states = this.boundaryStates;
    if (states.length === 0 || group !== this.primary) return null;
    let reading: MemoryReading | null = null;
    for (const state of states) {
      let result: ReturnType<NonNullable<MemoryCollector["readSync"]>>;
      try {
        result = (state.collector.readSync as () => typeof result)();
      } catch {
        continue;
      }
      if (result.kind === "failure") continue;
      for (const field of state.owned) {
        const value = result.reading[field];
        if (typeof value === "number" && value >= 0) {
          reading ??= { ...group.lastReading };
          reading[field] = value;
        }
      }
    }
    return reading;
  }

  // ------------------------------------------------------------------ queries

  /** Absolute store indices of the in-memory history: [from, to). */
  private historyRange(): [number, number] {
    const written = this.store.written;
    return [Math.max(this.historyStart, written - this.maxEvents), written];
  }

  /** Records kept in memory, oldest first, filtered. Each call builds new objects. */
  getEvents(query: EventQuery = {}): TelemetryEvent[] {
    const context = this.recordContext;
    if (context === null) return [];
    const [from, to] = this.historyRange();
    const selected: number[] = [];
    for (let index = from; index < to; index++) {
      if (query.eventType !== undefined && this.store.eventType(index) !== query.eventType) continue;
      if (query.sinceNs !== undefined && this.store.timestamp(index) < query.sinceNs) continue;
      selected.push(index);
    }
    const kept = query.lastN !== undefined && query.lastN > 0 ? selected.slice(-query.lastN) : selected;
    return kept.map((index) => this.store.materialize(index, context));
  }

  /** `warning`, `critical` and `error` records kept in memory. */
  getAlerts(lastN?: number): TelemetryEvent[] {
    const context = this.recordContext;
    if (context === null) return [];
    const [from, to] = this.historyRange();
    const selected: number[] = [];
    for (let index = from; index < to; index++)
      if (ALERT_TYPES.has(this.store.eventType(index))) selected.push(index);
    const kept = lastN !== undefined && lastN > 0 ? selected.slice(-lastN) : selected;
    return kept.map((index) => this.store.materialize(index, context));
  }

  /** Forgets kept records and resets the counters (as the reference's `clear_events`). */
  clearEvents(): void {
    this.historyStart = this.store.written;
    for (const group of this.groups) {
      const { lastMemoryCheck } = group.stats;
      group.stats = {
        peakMemory: 0,
        peakDeviceUsed: 0,
        totalAllocations: 0,
        totalDeallocations: 0,
        totalAllocationBytes: 0,
        totalDeallocationBytes: 0,
        lastMemoryCheck,
      };
    }
    this.alertCount = 0;
  }

  /** Changes one threshold (`memory_warning_percent` or `memoryWarningPercent`...). */
  setThreshold(name: string, value: number): void {
    const key = thresholdKey(name);
    this.thresholdValues[key] = checkThreshold(key, value);
  }

  /** Calls `callback` with every alert record; returns a function that removes it. */
  addAlertCallback(callback: AlertCallback): () => void {
    this.alertCallbacks.add(callback);
    return () => this.alertCallbacks.delete(callback);
  }

  /** Removes an alert callback. */
  removeAlertCallback(callback: AlertCallback): void {
    this.alertCallbacks.delete(callback);
  }

  /** The session being recorded, or the last one after `stop()`. */
  getSessionSummary(): SessionSummary | null {
    return this.session;
  }

  /** The reference's statistics (camelCase; `getStatisticsJson()` for its snake_case keys). */
  getStatistics(): TrackerStatistics {
    const nowNs = this.clock.nowNs();
    const [from, to] = this.historyRange();
    const hourAgo = nowNs - 3_600_000_000_000n;
    let lastHour = 0;
    for (let index = from; index < to; index++) if (this.store.timestamp(index) > hourAgo) lastHour++;
    const retained = to - from;
    const group = this.primary;
    const device = this.deviceStatistics(group);
    const health = aggregateHealth(this.states.map((state) => state.health));
    if (this.pipeline !== null && !this.writerFailed) {
      try {
        this.counters = sinkCounters(this.pipeline.diagnostics());
      } catch {
        // Keep the last counters.
      }
    }
    const allocator = group.capabilities.supports_allocator_allocated;
    const stats = group.stats;
    const statistics: TrackerStatistics = {
      peakMemory: device.peakMemory,
      peakDeviceUsed: device.peakDeviceUsed,
      totalAllocations: device.totalAllocations,
      totalDeallocations: device.totalDeallocations,
      totalAllocationBytes: device.totalAllocationBytes,
      totalDeallocationBytes: device.totalDeallocationBytes,
      alertCount: this.alertCount,
      trackingStartTime: this.trackingStartTime,
      lastMemoryCheck: stats.lastMemoryCheck,
      totalEvents: retained,
      eventsLastHour: lastHour,
      historyWindowLimitEvents: this.maxEvents,
      historyRetainedEvents: retained,
      historyDroppedEvents: Math.max(0, this.store.written - this.historyStart - this.maxEvents),
      backend: group.capabilities.backend,
      oomFlightRecorderEnabled: this.oom.options.enabled,
      lastOomDumpPath: this.lastOomDumpPath,
      sessionId: this.session?.session_id ?? null,
      sessionStatus: this.session?.status ?? null,
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
      rolloverCount: this.counters.rollover_count,
      prunedSegmentCount: this.counters.pruned_segment_count,
      prunedBytes: this.counters.pruned_bytes,
      finalRetainedFiles: this.counters.final_retained_files,
      finalRetainedBytes: this.counters.final_retained_bytes,
      alertsSuppressed: this.groups.reduce((sum, g) => sum + g.alerts.suppressed, 0),
      devices: this.groups.map((g) => this.deviceStatistics(g)),
      collectors: this.states.map((state) => ({
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
    if (this.trackingStartTime !== null) {
      const duration = this.epochSeconds(nowNs) - this.trackingStartTime;
      statistics.trackingDurationSeconds = duration;
      statistics.allocationsPerSecond = allocator ? stats.totalAllocations / Math.max(duration, 1) : null;
      statistics.bytesAllocatedPerSecond = allocator
        ? stats.totalAllocationBytes / Math.max(duration, 1)
        : null;
    }
    return statistics;
  }

  /** `getStatistics()` with the reference's snake_case keys, ready to serialise. */
  getStatisticsJson(): JsonObject {
    return statisticsToJson(this.getStatistics());
  }

  private deviceStatistics(group: DeviceGroup): DeviceStatistics {
    const allocator = group.capabilities.supports_allocator_allocated;
    const stale =
      group.states.length > 0 && group.states.every((state) => state.health.status === "unhealthy");
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
    if (!(intervalS > 0)) throw new InvalidConfigError("interval", `must be > 0, got ${String(intervalS)}`);
    const timeline = {
      timestamps: [] as number[],
      allocated: [] as (number | null)[],
      reserved: [] as (number | null)[],
      device_used: [] as (number | null)[],
      device_free: [] as (number | null)[],
      device_total: [] as (number | null)[],
    };
    const events = this.getEvents().filter((event) => event.device_id === this.primary.deviceId);
    const first = events[0];
    if (first === undefined) return timeline;
    const start = this.epochSeconds(first.timestamp_ns);
    const push = (bucket: number, event: TelemetryEvent) => {
      timeline.timestamps.push(start + bucket * intervalS);
      timeline.allocated.push(event.allocator_allocated_bytes);
      timeline.reserved.push(event.allocator_reserved_bytes);
      timeline.device_used.push(event.device_used_bytes);
      timeline.device_free.push(event.device_free_bytes);
      timeline.device_total.push(event.device_total_bytes);
    };
    let current = 0;
    let last = first;
    for (const event of events.slice(1)) {
      const bucket = Math.floor((this.epochSeconds(event.timestamp_ns) - start) / intervalS);
      if (bucket !== current) {
        push(current, last);
        current = bucket;
      }
      last = event;
    }
    push(current, last);
    return timeline;
  }

  /**
   * Writes the records kept in memory to a file: `jsonl` (one canonical sink line per record, what
   * the loaders and the Python reference read) or `json` (an array, indented). Returns how many.
   */
  exportEvents(path: string, format: "json" | "jsonl" = "jsonl"): number {
    const events = this.getEvents();
    if (format === "jsonl") {
      writeFileSync(path, events.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""), "utf8");
    } else if (format === "json") {
      writeFileSync(path, `${stringifyJson(events as unknown as JsonValue, { indent: 2 })}\n`, "utf8");
    } else {
      throw new InvalidConfigError("format", `Unsupported format: ${String(format)}; use "json" or "jsonl"`);
    }
    return events.length;
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
      this.logger.warn(`handling an error failed: ${describe(failure)}`);
      return null;
    }
  }

  private recordOOM(error: unknown, options: OOMCaptureOptions): string | null {
    const classification = classifyOOMError(error);
    if (!classification.isOOM || classification.reason === null) return null;
    const group = this.primary;
    const reading = this.boundaryReading(group) ?? group.lastReading;
    if (this.running) {
      this.emit(group, "error", this.clock.nowNs(), reading, 0, `OOM detected (${classification.reason})`, {
        oom_reason: classification.reason,
      });
    }
    if (!this.oom.options.enabled) return null;
    const custom: JsonObject = {
      tracker_stats: this.getStatisticsJson(),
      collector_capabilities: { ...group.capabilities },
      total_memory_bytes: group.totalMemory,
      sampling_interval_s: this.samplingIntervalMs / 1000,
      session_id: this.session?.session_id ?? null,
      job_id: this.identity.job_id,
      rank: this.identity.rank,
      local_rank: this.identity.local_rank,
      world_size: this.identity.world_size,
      ...(options.metadata ?? {}),
      sample_allocated_bytes: reading?.allocator_allocated_bytes ?? null,
      sample_reserved_bytes: reading?.allocator_reserved_bytes ?? null,
      sample_used_bytes: reading?.device_used_bytes ?? null,
      sample_free_bytes: reading?.device_free_bytes ?? null,
      sample_total_bytes: reading?.device_total_bytes ?? null,
      sample_device_id: group.deviceId,
    };
    const context = this.recordContext;
    const written = this.store.written;
    const records: TelemetryEvent[] = [];
    if (context !== null) {
      for (let index = Math.max(0, written - this.oom.options.bufferSize); index < written; index++) {
        records.push(this.store.materialize(index, context));
      }
    }
    try {
      const path = this.oom.dump(
        {
          reason: classification.reason,
          error,
          context: options.context ?? "runtime",
          backend: group.capabilities.backend,
          metadata: custom,
          session: this.session,
        },
        records,
      );
      this.lastOomDumpPath = path;
      this.logger.warn(`OOM flight recorder dump saved to: ${path}`);
      return path;
    } catch (dumpError) {
      this.logger.warn(`the OOM flight recorder could not write its dump: ${describe(dumpError)}`);
      return null;
    }
  }

  private epochSeconds(ns: bigint): number {
    return Number(ns) / 1e9;
  }
}
