/**
 * Live metrics: the tracker's state through the OpenTelemetry metrics API, which does nothing until
 * the application registers a MeterProvider (or passes one), so it costs nothing by default.
 *
 * Nothing here runs inside `phase()`: gauges (memory per device, process RSS, collector health, sink
 * counters) are observed from the tracker's latest state when a reader collects; phase durations,
 * alerts and collector transitions are read from the tracker's record store in one batch per
 * sampling tick (and at `stop()`), as the leak watch reads phase records.
 */
import { createRequire } from "node:module";
import type {
  Attributes,
  BatchObservableCallback,
  Counter,
  Histogram,
  Meter,
  MeterProvider,
  Observable,
  ObservableGauge,
} from "@opentelemetry/api";
import { type DistributedIdentity, InvalidConfigError, type MemoryCounterField } from "@stormlog/core";
import type { WriterDiagnostics } from "../pipeline/writer.js";
import type { EventStore } from "../records/store.js";
import { PHASE_ENTER, PHASE_EXIT } from "../records/store.js";
import type { CollectorSet } from "../sampling/collector-set.js";

/** The instrumentation scope of every instrument (its name is the package's). */
export const METER_NAME = "@stormlog/tracker";

/**
 * What the tracker needs of an OpenTelemetry `MeterProvider` (`@opentelemetry/api`'s interface,
 * written structurally so that this package's types do not require the optional peer dependency).
 */
export interface MetricsMeterProvider {
  getMeter(name: string, version?: string, options?: { schemaUrl?: string }): unknown;
}

/** `metrics` of `MemoryTrackerOptions`. */
export interface TrackerMetricsOptions {
  /** Default true: publish when `@opentelemetry/api` is installed (a no-op until a provider is registered). */
  readonly enabled?: boolean;
  /**
   * The provider to publish through (default: the global one of `@opentelemetry/api`, looked up at
   * each `start()`, so register it before starting the tracker).
   */
  readonly meterProvider?: MetricsMeterProvider;
}

/** `TrackerMetricsOptions` with defaults filled in. */
export interface ResolvedMetricsOptions {
  readonly enabled: boolean;
  readonly meterProvider: MetricsMeterProvider | null;
}

const OPTION_KEYS: ReadonlySet<string> = new Set(["enabled", "meterProvider"]);

/** Resolves `metrics: boolean | TrackerMetricsOptions`; throws `InvalidConfigError`. */
export function resolveMetricsOptions(
  option: boolean | TrackerMetricsOptions | undefined,
): ResolvedMetricsOptions {
  if (option === undefined || option === true) return { enabled: true, meterProvider: null };
  if (option === false) return { enabled: false, meterProvider: null };
  if (typeof option !== "object" || option === null || Array.isArray(option))
    throw new InvalidConfigError(
      "metrics",
      `expected true, false or { enabled?: boolean, meterProvider?: MeterProvider }, got ${describe(option)}`,
    );
  for (const key of Object.keys(option)) {
    if (!OPTION_KEYS.has(key))
      throw new InvalidConfigError(
        "metrics",
        `unknown key '${key}'; the keys are 'enabled' (boolean) and 'meterProvider' (an OpenTelemetry MeterProvider)`,
      );
  }
  const { enabled, meterProvider } = option;
  if (enabled !== undefined && typeof enabled !== "boolean")
    throw new InvalidConfigError(
      "metrics.enabled",
      `expected true or false, got ${describe(enabled)}; use metrics: false to publish nothing`,
    );
  if (
    meterProvider !== undefined &&
    (typeof meterProvider !== "object" ||
      meterProvider === null ||
      typeof (meterProvider as { getMeter?: unknown }).getMeter !== "function")
  )
    throw new InvalidConfigError(
      "metrics.meterProvider",
      `expected an OpenTelemetry MeterProvider (an object with getMeter()), got ${describe(meterProvider)}`,
    );
  return { enabled: enabled ?? true, meterProvider: meterProvider ?? null };
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return "an array";
  return String(value);
}

const requireOptional = createRequire(import.meta.url);

/** `@opentelemetry/api`, or null when the package is not installed. */
function openTelemetryApi(): typeof import("@opentelemetry/api") | null {
  try {
    return requireOptional("@opentelemetry/api") as typeof import("@opentelemetry/api");
  } catch {
    return null;
  }
}

/** Allocator gauges per device: the counter each reads from the device's last merged reading. */
const ALLOCATOR_GAUGES: readonly (readonly [string, MemoryCounterField, string])[] = [
  [
    "stormlog.memory.allocated",
    "allocator_allocated_bytes",
    "Bytes the allocator has handed out (tfjs, onnxruntime, the process RSS on the host).",
  ],
  [
    "stormlog.memory.reserved",
    "allocator_reserved_bytes",
    "Bytes the allocator holds from the device, in use or cached.",
  ],
];

/** A GPU's memory as the driver reports it (NVML), under the semantic conventions' hardware names. */
const GPU_COUNTERS: readonly (readonly [string, MemoryCounterField, string])[] = [
  ["hw.gpu.memory.usage", "device_used_bytes", "GPU memory in use, as the driver reports it (NVML)."],
  ["hw.gpu.memory.limit", "device_total_bytes", "The GPU's total memory."],
];

/** The collector health states, observed as a state set (1 for the current one, 0 for the others). */
const HEALTH_STATES = ["healthy", "degraded", "unhealthy"] as const;

/** Durations' bucket bounds in seconds: from a fast kernel's phase to a whole epoch. */
const DURATION_BUCKETS_S = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
];

/** Distinct phase paths given their own attribute value; later ones are counted as `(other)`. */
const MAX_PHASE_PATHS = 256;
/** Open phases remembered between ticks (the oldest are forgotten: phases never closed). */
const MAX_OPEN_PHASES = 1024;

/** What the metrics read of the tracker. */
export interface MetricsSource {
  readonly store: EventStore;
  readonly collectors: CollectorSet;
  readonly identity: DistributedIdentity;
  readonly host: string;
  /** The sink's counters now (the last known ones once it closed), or undefined without a sink. */
  sinkDiagnostics(): WriterDiagnostics | undefined;
}

/** The instruments, made once per meter. */
interface Instruments {
  readonly meter: Meter;
  readonly memory: readonly (readonly [ObservableGauge, MemoryCounterField])[];
  readonly gpu: readonly (readonly [Observable, MemoryCounterField])[];
  readonly processMemory: Observable;
  readonly health: ObservableGauge;
  readonly sinkWritten: Observable;
  readonly sinkDropped: Observable;
  readonly sinkQueue: ObservableGauge;
  readonly phaseDuration: Histogram;
  readonly alerts: Counter;
  readonly transitions: Counter;
  readonly observables: Observable[];
}

/**
 * Publishes one tracker's state (see the file's comment). `begin()` at each session start picks the
 * provider (the given one, else the global one); `catchUp()` reads the records stored since the last
 * call; `end()` reads the last ones and stops observing, so that a provider outliving the tracker does
 * not keep it (nor report a stopped session's gauges).
 */
export class TrackerMetrics {
  private instruments: Instruments | null = null;
  private provider: MeterProvider | null = null;
  private base: Attributes = {};
  private seen = 0;
  private rssBytes: number | null = null;
  /** Start times of open phases by their scope's sequence (unique within a session). */
  private readonly openStarts = new Map<number, bigint>();
  private readonly pathAttributes = new Map<string, Attributes>();
  private readonly severityAttributes = new Map<string, Attributes>();
  private readonly callback: BatchObservableCallback = (result) => this.observe(result);

  constructor(
    private readonly options: ResolvedMetricsOptions,
    private readonly source: MetricsSource,
    private readonly warn: (message: string) => void,
  ) {}

  /** Starts publishing a session: its attributes, and records from now on. Never throws. */
  begin(): void {
    if (!this.options.enabled) return;
    try {
      const given = this.options.meterProvider as MeterProvider | null;
      const api = given === null ? openTelemetryApi() : null;
      const provider = given ?? api?.metrics.getMeterProvider() ?? null;
      if (provider !== this.provider) {
        this.release();
        this.provider = provider;
        const meter = provider?.getMeter(METER_NAME);
        // No provider registered: the API's no-op meter, and nothing to read at ticks either.
        this.instruments =
          meter === undefined || meter === api?.createNoopMeter()
            ? null
            : makeInstruments(meter, this.callback);
      }
      const { identity, host } = this.source;
      this.base = {
        "stormlog.job_id": identity.job_id ?? "",
        "stormlog.rank": identity.rank,
        "host.name": host,
      };
      this.pathAttributes.clear();
      this.severityAttributes.clear();
      this.openStarts.clear();
      this.rssBytes = null;
      this.seen = this.source.store.written;
    } catch (error) {
      this.fail(error);
    }
  }

  /** Reads the records stored since the last call: phase durations, alerts, transitions, RSS. Never throws. */
  catchUp(): void {
    const instruments = this.instruments;
    if (instruments === null) return;
    try {
      const store = this.source.store;
      const written = store.written;
      // Records the store overwrote before they were read are not counted (a burst between two ticks).
      let index = Math.max(this.seen, written - store.capacity);
      this.seen = written;
      for (; index < written; index++) {
        const flags = store.flagsAt(index);
        if ((flags & PHASE_ENTER) !== 0) this.entered(store, index);
        else if ((flags & PHASE_EXIT) !== 0) this.exited(instruments, store, index);
        else this.other(instruments, store, index);
      }
    } catch (error) {
      this.fail(error);
    }
  }

  /** Reads what the session stored last, then stops observing until the next `begin()`. */
  end(): void {
    this.catchUp();
    this.openStarts.clear();
    this.release();
    this.provider = null;
  }

  private entered(store: EventStore, index: number): void {
    const scope = store.scope(index);
    if (scope === null) return;
    if (this.openStarts.size >= MAX_OPEN_PHASES) {
      const oldest = this.openStarts.keys().next().value as number;
      this.openStarts.delete(oldest);
    }
    this.openStarts.set(scope.sequence, store.timestamp(index));
  }

  private exited(instruments: Instruments, store: EventStore, index: number): void {
    const scope = store.scope(index);
    if (scope === null) return;
    const started = this.openStarts.get(scope.sequence);
    if (started === undefined) return;
    this.openStarts.delete(scope.sequence);
    const seconds = Number(store.timestamp(index) - started) / 1e9;
    instruments.phaseDuration.record(seconds, this.phaseAttributes(scope.phasePath));
  }

  private other(instruments: Instruments, store: EventStore, index: number): void {
    const eventType = store.eventType(index);
    if (eventType === "sample") {
      const rss = store.extra(index)?.rss_bytes;
      if (typeof rss === "number" && rss >= 0) this.rssBytes = rss;
    } else if (eventType === "warning" || eventType === "critical") {
      instruments.alerts.add(1, this.keyed(this.severityAttributes, "stormlog.alert.severity", eventType));
    } else if (eventType === "collector_degraded" || eventType === "collector_recovered") {
      instruments.transitions.add(1, {
        ...this.base,
        "stormlog.device": store.deviceId(index),
        "stormlog.collector.transition": eventType.slice("collector_".length),
      });
    }
  }

  private phaseAttributes(path: string): Attributes {
    const known = this.pathAttributes.get(path);
    if (known !== undefined) return known;
    const value = this.pathAttributes.size < MAX_PHASE_PATHS ? path : "(other)";
    const made = { ...this.base, "stormlog.phase.path": value };
    if (value !== "(other)") this.pathAttributes.set(path, made);
    return made;
  }

  private keyed(cache: Map<string, Attributes>, key: string, value: string): Attributes {
    let attributes = cache.get(value);
    if (attributes === undefined) {
      attributes = { ...this.base, [key]: value };
      cache.set(value, attributes);
    }
    return attributes;
  }

  /** The gauges, from the tracker's latest state (a reader collects). */
  private observe(result: Parameters<BatchObservableCallback>[0]): void {
    const instruments = this.instruments;
    if (instruments === null) return;
    try {
      const { collectors } = this.source;
      for (const group of collectors.groups) {
        const reading = group.lastReading;
        if (reading === null) continue;
        const attributes = {
          ...this.base,
          "stormlog.device": group.deviceId,
          "stormlog.collector": group.collectorString,
        };
        for (const [gauge, field] of instruments.memory) {
          const value = reading[field];
          if (typeof value === "number" && value >= 0) result.observe(gauge, value, attributes);
        }
        // Device ids from 0 are GPUs (the host is -1).
        if (group.deviceId < 0) continue;
        const gpuAttributes = { ...attributes, "hw.id": `gpu${group.deviceId}` };
        for (const [counter, field] of instruments.gpu) {
          const value = reading[field];
          if (typeof value === "number" && value >= 0) result.observe(counter, value, gpuAttributes);
        }
      }
      if (this.rssBytes !== null) result.observe(instruments.processMemory, this.rssBytes, this.base);
      for (const state of collectors.states) {
        for (const status of HEALTH_STATES) {
          result.observe(instruments.health, state.health.status === status ? 1 : 0, {
            ...this.base,
            "stormlog.collector": state.name,
            "stormlog.device": state.collector.deviceId ?? -1,
            "stormlog.collector.state": status,
          });
        }
      }
      const sink = this.source.sinkDiagnostics();
      if (sink !== undefined) {
        const { written_events: written, dropped_events: dropped, queued_events: queued } = sink;
        if (written !== undefined) result.observe(instruments.sinkWritten, written, this.base);
        result.observe(instruments.sinkDropped, dropped ?? 0, this.base);
        if (queued !== undefined) result.observe(instruments.sinkQueue, queued, this.base);
      }
    } catch (error) {
      this.fail(error);
    }
  }

  private release(): void {
    const instruments = this.instruments;
    this.instruments = null;
    if (instruments === null) return;
    try {
      instruments.meter.removeBatchObservableCallback(this.callback, instruments.observables);
    } catch {
      // A provider that cannot remove it keeps calling a callback that observes nothing.
    }
  }

  private failed = false;

  private fail(error: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.warn(
      `metrics: publishing failed (${error instanceof Error ? error.message : String(error)}); tracking goes on`,
    );
  }
}

/** The instruments on `meter`, observed by `callback`. */
function makeInstruments(meter: Meter, callback: BatchObservableCallback): Instruments {
  const memory = ALLOCATOR_GAUGES.map(
    ([name, field, description]) =>
      [meter.createObservableGauge(name, { unit: "By", description }), field] as const,
  );
  const gpu = GPU_COUNTERS.map(
    ([name, field, description]) =>
      [meter.createObservableUpDownCounter(name, { unit: "By", description }), field] as const,
  );
  // The semantic conventions' name for a process's resident memory.
  const processMemory = meter.createObservableUpDownCounter("process.memory.usage", {
    unit: "By",
    description: "Resident set size of the tracked process (with its descendants under `stormlog track`).",
  });
  const health = meter.createObservableGauge("stormlog.collector.health", {
    unit: "1",
    description:
      "1 for each collector's current health state (healthy, degraded, unhealthy), 0 for the others.",
  });
  const sinkWritten = meter.createObservableCounter("stormlog.sink.written", {
    unit: "{record}",
    description: "Records the telemetry sink has written.",
  });
  const sinkDropped = meter.createObservableCounter("stormlog.sink.dropped", {
    unit: "{record}",
    description: "Records the telemetry sink lost (queue full, disk failure, deleted segment).",
  });
  const sinkQueue = meter.createObservableGauge("stormlog.sink.queue.depth", {
    unit: "{record}",
    description: "Records waiting in memory for the disk.",
  });
  const phaseDuration = meter.createHistogram("stormlog.phase.duration", {
    unit: "s",
    description: "Duration of each closed phase, by phase path.",
    advice: { explicitBucketBoundaries: DURATION_BUCKETS_S },
  });
  const alerts = meter.createCounter("stormlog.alerts", {
    unit: "{alert}",
    description: "Alerts recorded (memory thresholds, leak suspicions), by severity.",
  });
  const transitions = meter.createCounter("stormlog.collector.transitions", {
    unit: "{transition}",
    description: "Collector health transitions (degraded, recovered).",
  });
  const observables: Observable[] = [
    ...memory.map(([gauge]) => gauge),
    ...gpu.map(([counter]) => counter),
    processMemory,
    health,
    sinkWritten,
    sinkDropped,
    sinkQueue,
  ];
  meter.addBatchObservableCallback(callback, observables);
  return {
    meter,
    memory,
    gpu,
    processMemory,
    health,
    sinkWritten,
    sinkDropped,
    sinkQueue,
    phaseDuration,
    alerts,
    transitions,
    observables,
  };
}
