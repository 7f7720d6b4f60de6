import type { Worker } from "node:worker_threads";
import { type SessionStatus, type SessionSummary, StormlogError, type TelemetryEvent } from "@stormlog/core";
import { guardedLogger, startWorkerBeside } from "@stormlog/core/internal";
import type { SinkLogger, TelemetrySinkOptions } from "@stormlog/sink";
import {
  consoleSinkLogger,
  registerExitParticipant,
  resolveSinkConfig,
  runningSessionSummary,
} from "@stormlog/sink/internal";
import type { RecordContext } from "../records/store.js";
import { handOverDelayMs, workerFlushIntervalMs } from "./hand-over-delay.js";
import {
  DIAGNOSTIC_KEYS,
  readSharedDiagnostics,
  type SinkWorkerReply,
  type SinkWorkerRequest,
  type WorkerSinkOptions,
} from "./off-thread-protocol.js";
import type { RingBuffers, RingObject, SpillChunk } from "./record-ring.js";
import type { TelemetryWriter, WriterDiagnostics } from "./writer.js";

/** How long `closeSync` (process exit) waits for the worker to write what it holds. */
const CLOSE_SYNC_TIMEOUT_MS = 5000;
/** How long `ready()` waits for the worker to start and open the sink. */
const READY_TIMEOUT_MS = 15_000;

const SINK_WORKER_MARKER = Symbol.for("stormlog.error.sink_worker");

/** The sink worker stopped or failed: the records it had not written are lost. */
export class SinkWorkerError extends StormlogError {
  readonly [SINK_WORKER_MARKER] = true;
  override readonly name = "SinkWorkerError";

  constructor(reason: string) {
    super(
      `the telemetry sink's worker thread failed (${reason}); pass sinkThread: "main" to MemoryTracker ` +
        "to write the sink on the training thread",
    );
  }

  static override isInstance(error: unknown): error is SinkWorkerError {
    return StormlogError.hasMarker(error, SINK_WORKER_MARKER);
  }
}

/** True when the options can cross to a worker: a clock or scheduler (tests' fakes) keeps the sink here. */
export function canWriteOffThread(options: TelemetrySinkOptions): boolean {
  return options.clock === undefined && options.scheduler === undefined;
}

/**
 * A `TelemetrySink` on a worker thread. The tracker writes stored records into a shared ring that
 * the worker reads as it fills (`attachRing`, see `record-ring`); building the records, encoding them
 * and the disk work happen on the worker, not between training steps. One worker serves every sink of the process and stays for the
 * next session (it starts once, and never keeps the process alive). Counters are shared through
 * memory, and `closeSync` (process exit) blocks until the worker has written everything, as the
 * in-thread sink's does.
 */
export class OffThreadSink implements TelemetryWriter {
  private readonly connection: WorkerConnection;
  private readonly id: number;
  private readonly logger: SinkLogger;
  private readonly handleProcessExit: boolean;
  /** The summaries' `source`, as the worker's sink resolves it. */
  private readonly source: string;
  private readonly diagnostics: Float64Array;
  private readonly closedFlag: Int32Array;
  private failure: string | null = null;
  private finished = false;
  private onClosed: (() => void) | null = null;
  private onOpened: ((opened: boolean) => void) | null = null;
  private onSessionStarted: (() => void) | null = null;
  private readonly opened: Promise<boolean>;
  /** The sink's flush interval: how long it may hold records anyway. */
  readonly flushIntervalMs: number;
  /** How long the tracker holds records before they reach the worker (`handOverDelayMs`). */
  readonly handOverDelayMs: number;
  /** The sink's bound on waiting records (`maxQueueEvents`), which also bounds the worker's backlog. */
  readonly maxQueueEvents: number;
  private unregisterExit: (() => void) | null = null;

  /**
   * Checks the options (throws `InvalidConfigError` as `TelemetrySink` does) and opens the sink on the
   * worker. `handOver`: records reach the worker through the tracker's ring, held `handOverDelayMs`
   * first; the worker's sink then flushes that much sooner (`workerFlushIntervalMs`).
   */
  constructor(options: TelemetrySinkOptions, { handOver = false }: { readonly handOver?: boolean } = {}) {
    const resolved = resolveSinkConfig(options);
    this.source = resolved.source;
    this.flushIntervalMs = resolved.flushEverySeconds * 1000;
    this.handOverDelayMs = handOverDelayMs(this.flushIntervalMs);
    this.maxQueueEvents = resolved.maxQueueEvents;
    const { logger, clock: _clock, scheduler: _scheduler, ...own } = options;
    const crossing = handOver
      ? {
          ...own,
          flushEverySeconds: workerFlushIntervalMs(this.flushIntervalMs, this.handOverDelayMs) / 1000,
        }
      : own;
    this.logger = guardedLogger(logger ?? consoleSinkLogger);
    this.handleProcessExit = options.handleProcessExit ?? true;
    const diagnostics = new SharedArrayBuffer(DIAGNOSTIC_KEYS.length * Float64Array.BYTES_PER_ELEMENT);
    const closed = new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT);
    this.diagnostics = new Float64Array(diagnostics);
    this.closedFlag = new Int32Array(closed);
    this.opened = new Promise<boolean>((resolve) => {
      this.onOpened = resolve;
    });
    this.connection = WorkerConnection.shared();
    this.id = this.connection.add(this);
    this.post({
      kind: "open",
      sink: this.id,
      options: crossing satisfies WorkerSinkOptions,
      diagnostics,
      closed,
    });
  }

  /**
   * Resolves true once the worker has opened the sink (recovery of the directory included), false
   * if it failed or took longer than 15 s (the worker is then stopped). Keeps the process alive
   * meanwhile. The tracker's `start()` waits for it, so that the worker's start-up is not paid
   * during the first training steps, and falls back to the training thread on false.
   */
  ready(): Promise<boolean> {
    if (this.onOpened === null) return this.opened;
    this.connection.hold();
    const timer = setTimeout(
      () => this.connection.abandon(`it did not open the sink within ${READY_TIMEOUT_MS / 1000} s`),
      READY_TIMEOUT_MS,
    );
    return this.opened.then((opened) => {
      clearTimeout(timer);
      this.connection.release();
      return opened;
    });
  }

  startSession(partial: Partial<Omit<SessionSummary, "status" | "ended_at_ns">>): SessionSummary {
    this.ensureRunning();
    // The summary the worker's sink registers too (the tracker gives the id and the start time).
    const summary = runningSessionSummary(partial, this.source);
    this.post({
      kind: "session",
      sink: this.id,
      summary: { ...partial, session_id: summary.session_id, started_at_ns: summary.started_at_ns },
    });
    if (this.handleProcessExit && this.unregisterExit === null) {
      this.unregisterExit = registerExitParticipant({
        onSignal: () => this.close("interrupted"),
        onBeforeExit: (code) => this.close(code === 0 ? "completed" : "interrupted"),
        onExit: (code) => this.closeSync(code === 0 ? "completed" : "interrupted"),
      });
    }
    return summary;
  }

  /**
   * Resolves once the worker's sink has registered the session and written the manifest naming it
   * (or the worker failed). Call after `startSession`.
   */
  sessionStarted(): Promise<void> {
    if (this.failure !== null) return Promise.resolve();
    this.connection.hold();
    return new Promise<void>((resolve) => {
      this.onSessionStarted = resolve;
    }).then(() => this.connection.release());
  }

  /**
   * Sends one record as an object. The tracker writes stored records into the ring; this is for
   * other callers (an integral float that the tracker writes `1.0` loses its mark here).
   */
  append(record: TelemetryEvent): void {
    this.ensureRunning();
    this.post({ kind: "records", sink: this.id, records: [record] });
  }

  /** Hands the worker the ring the session's stored records are written into, and their context. */
  attachRing(buffers: RingBuffers, context: RecordContext): void {
    this.ensureRunning();
    this.post({ kind: "ring", sink: this.id, buffers, context });
  }

  /** Objects the ring's records name by id, new to the worker. */
  postObjects(objects: readonly RingObject[]): void {
    this.ensureRunning();
    this.post({ kind: "objects", sink: this.id, objects });
  }

  /** Records that did not fit in the ring. */
  postSpill(chunk: SpillChunk): void {
    this.ensureRunning();
    this.connection.post({ kind: "spill", sink: this.id, chunk }, [
      chunk.numbers.buffer as ArrayBuffer,
      chunk.timestamps.buffer as ArrayBuffer,
    ]);
  }

  /** Whether the worker failed (nothing more reaches the disk). */
  get failed(): boolean {
    return this.failure !== null;
  }

  /** Writes what the worker holds for this sink and closes the session. Never rejects. */
  close(status: SessionStatus = "completed"): Promise<void> {
    if (this.finished) return Promise.resolve();
    this.finished = true;
    this.unregister();
    if (this.failure !== null) return Promise.resolve();
    // Waiting for the worker must keep the process alive (a `beforeExit` close).
    this.connection.hold();
    return new Promise<void>((resolve) => {
      this.onClosed = resolve;
      this.post({ kind: "close", sink: this.id, status });
    }).then(() => {
      // A later `closeSync` (an exit hook) has nothing left to wait for.
      Atomics.store(this.closedFlag, 0, 1);
      this.connection.release();
      this.connection.remove(this.id);
    });
  }

  /** Closes on `process.exit()`: blocks until the worker has written everything (at most 5 s). */
  closeSync(status: SessionStatus = "completed"): void {
    if (this.failure !== null || Atomics.load(this.closedFlag, 0) === 1) return;
    const wasClosing = this.finished;
    this.finished = true;
    this.unregister();
    this.post({ kind: "closeSync", sink: this.id, status });
    if (Atomics.wait(this.closedFlag, 0, 0, CLOSE_SYNC_TIMEOUT_MS) === "timed-out")
      this.logger.warn(
        `the sink worker did not finish writing within ${CLOSE_SYNC_TIMEOUT_MS} ms of process exit; ` +
          `the session is left for recovery${wasClosing ? " (it was closing)" : ""}`,
      );
  }

  getDiagnostics(): WriterDiagnostics {
    return readSharedDiagnostics(this.diagnostics);
  }

  /** A reply of the worker for this sink. */
  receive(reply: SinkWorkerReply): void {
    switch (reply.kind) {
      case "log":
        if (reply.level === "warn") this.logger.warn(reply.message);
        else this.logger.info?.(reply.message);
        return;
      case "opened":
        this.onOpened?.(true);
        this.onOpened = null;
        return;
      case "session-started":
        this.onSessionStarted?.();
        this.onSessionStarted = null;
        return;
      case "closed":
        this.onClosed?.();
        this.onClosed = null;
        return;
      case "failed":
        this.fail(reply.message);
        return;
    }
  }

  /**
   * The worker failed, or refused this sink's records: nothing more is sent but, if the worker still
   * runs, a close that ends the session `incomplete` there.
   */
  fail(reason: string): void {
    if (this.failure !== null) return;
    this.failure = reason;
    this.logger.warn(new SinkWorkerError(reason).message);
    this.onOpened?.(false);
    this.onOpened = null;
    this.onSessionStarted?.();
    this.onSessionStarted = null;
    this.onClosed?.();
    this.onClosed = null;
    this.post({ kind: "close", sink: this.id, status: "incomplete" });
    this.connection.remove(this.id);
  }

  private post(request: SinkWorkerRequest): void {
    this.connection.post(request);
  }

  private ensureRunning(): void {
    if (this.failure !== null) throw new SinkWorkerError(this.failure);
  }

  private unregister(): void {
    const unregister = this.unregisterExit;
    this.unregisterExit = null;
    unregister?.();
  }
}

/** The process's sink worker and the sinks it serves. */
class WorkerConnection {
  private static current: WorkerConnection | null = null;
  private readonly worker: Worker;
  private readonly sinks = new Map<number, OffThreadSink>();
  private nextId = 0;
  private holds = 0;
  private failed = false;

  /** The running worker, started on first use (and again after a failure). */
  static shared(): WorkerConnection {
    if (WorkerConnection.current === null) WorkerConnection.current = new WorkerConnection();
    return WorkerConnection.current;
  }

  private constructor() {
    this.worker = startSinkWorker();
    this.worker.on("message", (reply: SinkWorkerReply) => this.sinks.get(reply.sink)?.receive(reply));
    this.worker.on("error", (error) => this.abandon(error.message));
    this.worker.on("exit", (code) => this.abandon(`it exited with code ${code}`));
    // Like the sampling timers, the worker never keeps the process alive on its own (unref'd after
    // the listeners: adding a "message" listener refs it again).
    this.worker.unref();
  }

  add(sink: OffThreadSink): number {
    const id = this.nextId++;
    this.sinks.set(id, sink);
    return id;
  }

  remove(id: number): void {
    this.sinks.delete(id);
  }

  post(request: SinkWorkerRequest, transfer?: ArrayBuffer[]): void {
    if (this.failed) return;
    this.worker.postMessage(request, transfer);
  }

  /** Keeps the process alive while a close waits for the worker. */
  hold(): void {
    if (this.holds++ === 0) this.worker.ref();
  }

  release(): void {
    if (--this.holds === 0) this.worker.unref();
  }

  /** Gives up on the worker: every sink fails with `reason`, and the next sink starts a new worker. */
  abandon(reason: string): void {
    if (this.failed) return;
    this.failed = true;
    if (WorkerConnection.current === this) WorkerConnection.current = null;
    for (const sink of [...this.sinks.values()]) sink.fail(reason);
    void this.worker.terminate();
  }
}

/** Starts `sink-worker` next to this module. */
function startSinkWorker(): Worker {
  return startWorkerBeside(import.meta.url, "sink-worker");
}
