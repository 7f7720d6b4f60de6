import type {
  JsonObject,
  MemoryReading,
  SessionStatus,
  SessionSummary,
  TelemetryEvent,
} from "@stormlog/core";
import { describeError } from "../describe-error.js";
import { healthMetadata } from "../health/health.js";
import type { TrackerLogger } from "../options/tracker-options.js";
import type { RecordPipeline, SessionStart } from "../pipeline/record-pipeline.js";
import {
  emptySinkCounters,
  type SinkCounters,
  sinkCounters,
  type WriterDiagnostics,
} from "../pipeline/writer.js";
import type { DeviceGroup } from "../sampling/device-group.js";
import type { EventStore, RecordContext } from "./store.js";

/** Called with every `warning`, `critical` and `error` record. Exceptions are caught and logged. */
export type AlertCallback = (record: TelemetryEvent) => unknown;

/** The event types that are alerts: built at once and handed to the alert callbacks. */
export const ALERT_TYPES: ReadonlySet<string> = new Set(["warning", "critical", "error"]);

/**
 * Where the tracker's records go: stored in the `EventStore`, then committed, that is handed to the
 * session's `RecordPipeline` (which builds and writes them later, or on its worker) and, for alerts,
 * built now for the alert callbacks. The first failure of the pipeline turns it off for the session;
 * tracking goes on.
 */
export class RecordLog {
  /** What every record of the session shares; null before the first session. */
  context: RecordContext | null = null;
  /** Alerts committed since the session started (or the history was cleared). */
  alertCount = 0;
  private pipeline: RecordPipeline | null = null;
  private failed = false;
  private counters: SinkCounters = emptySinkCounters();
  private readonly callbacks = new Set<AlertCallback>();
  /** Told of every record `emit` stores (the leak watch reads its waiting phase records before they are overwritten). */
  onStored: ((index: number) => void) | null = null;

  constructor(
    readonly store: EventStore,
    private readonly logger: TrackerLogger,
    /** The pipeline failed: the session is incomplete. */
    private readonly onFailure: () => void,
  ) {}

  /** A new session's pipeline (null: no sink): forgets the last session's counters and failure. */
  open(pipeline: RecordPipeline | null): void {
    this.store.reset();
    this.pipeline = pipeline;
    this.failed = false;
    this.counters = emptySinkCounters();
    this.alertCount = 0;
  }

  /** Registers the session with the sink: the summary it keeps, if it says (undefined after a failure). */
  async startSession(start: SessionStart): Promise<SessionSummary | undefined> {
    if (this.pipeline === null) return undefined;
    try {
      return await this.pipeline.startSession(start);
    } catch (error) {
      this.disable("start the session", error);
      return undefined;
    }
  }

  /** Sets what every record of the session shares, before its first record. */
  begin(context: RecordContext): void {
    this.context = context;
    if (this.pipeline === null) return;
    try {
      this.pipeline.begin(context);
    } catch (error) {
      this.disable("start the session", error);
    }
  }

  /**
   * Stores and commits a record of `group`; `base` is the metadata it shares with others (not
   * modified), by default the group's health and capabilities.
   */
  emit(
    group: DeviceGroup,
    eventType: string,
    ts: bigint,
    reading: MemoryReading | null,
    change: number | null,
    context: string,
    extra: JsonObject | undefined,
    base: JsonObject = group.baseMetadata(healthMetadata),
  ): void {
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
    this.onStored?.(index);
    this.committed(index, eventType);
  }

  /**
   * Hands stored record `index` to the session's pipeline and, for alerts, to the callbacks: at a phase
   * boundary inside a training step the tracker only stores numbers, and the pipeline builds the
   * record later (or the worker does).
   */
  committed(index: number, eventType: string): void {
    if (!ALERT_TYPES.has(eventType)) {
      this.committedPlain(index);
      return;
    }
    const pipeline = this.failed ? null : this.pipeline;
    const record = this.store.materialize(index, this.context as RecordContext);
    if (pipeline !== null) {
      try {
        pipeline.commit(index, record);
      } catch (error) {
        this.disable("append", error);
      }
    }
    this.alertCount++;
    for (const callback of this.callbacks) {
      try {
        const result = callback(record);
        if (typeof (result as PromiseLike<unknown> | null)?.then === "function") {
          Promise.resolve(result).catch((error: unknown) =>
            this.logger.debug?.(`alert callback failed (ignored): ${describeError(error)}`),
          );
        }
      } catch (error) {
        this.logger.debug?.(`alert callback failed (ignored): ${describeError(error)}`);
      }
    }
  }

  /** `committed` for a record that is no alert (a phase boundary): no type to look up on the hot path. */
  committedPlain(index: number): void {
    const pipeline = this.failed ? null : this.pipeline;
    if (pipeline === null) return;
    try {
      pipeline.commit(index, null);
    } catch (error) {
      this.disable("append", error);
    }
  }

  /** Calls `callback` with every alert record; returns a function that removes it. */
  addAlertCallback(callback: AlertCallback): () => void {
    this.callbacks.add(callback);
    return () => this.callbacks.delete(callback);
  }

  removeAlertCallback(callback: AlertCallback): void {
    this.callbacks.delete(callback);
  }

  /** Stops using the pipeline after a failed `operation`: tracking goes on without the sink. */
  disable(operation: string, error: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.logger.warn(
      `disabling the telemetry sink after a failed ${operation}: ${describeError(error)}; tracking goes on`,
    );
    this.onFailure();
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

  /** The sink's counters now, or undefined without a live sink (live metrics read them). */
  sinkDiagnostics(): WriterDiagnostics | undefined {
    if (this.pipeline === null || this.failed) return undefined;
    try {
      return this.pipeline.diagnostics();
    } catch {
      return undefined;
    }
  }

  /** The sink's rollover and retention counters (the last known ones once it failed or closed). */
  sinkCounters(): SinkCounters {
    if (this.pipeline !== null && !this.failed) {
      try {
        this.counters = sinkCounters(this.pipeline.diagnostics());
      } catch {
        // Keep the last counters.
      }
    }
    return this.counters;
  }

  /**
   * Closes the session's pipeline with `status` (`sync`: blocking, on `process.exit()`); a promise
   * while it closes, or undefined once closed (or when there is nothing to close).
   */
  close(status: SessionStatus, sync: boolean): Promise<void> | undefined {
    const pipeline = this.pipeline;
    if (pipeline === null || this.failed) return undefined;
    try {
      if (sync) {
        pipeline.closeSync(status);
        return undefined;
      }
      return pipeline.close(status).then(
        () => undefined,
        (error: unknown) => this.disable("close", error),
      );
    } catch (error) {
      this.disable("close", error);
      return undefined;
    }
  }

  /** After `close()`: lets the pipeline go; true when the session lost records (or its sink). */
  end(): boolean {
    let diagnostics: WriterDiagnostics | undefined;
    try {
      diagnostics = this.pipeline?.diagnostics();
    } catch {
      diagnostics = undefined;
    }
    this.pipeline = null;
    if (diagnostics !== undefined) this.counters = sinkCounters(diagnostics);
    const lost = (diagnostics?.dropped_events ?? 0) > 0 || (diagnostics?.rejected_events ?? 0) > 0;
    return this.failed || lost;
  }
}
