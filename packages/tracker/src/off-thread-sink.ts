import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import {
  createSessionSummary,
  type SessionStatus,
  type SessionSummary,
  StormlogError,
  type TelemetryEvent,
} from "@stormlog/core";
import {
  consoleSinkLogger,
  registerExitParticipant,
  resolveSinkConfig,
  type SinkLogger,
  type TelemetrySinkOptions,
} from "@stormlog/sink";
import {
  DIAGNOSTIC_KEYS,
  readSharedDiagnostics,
  type SinkWorkerData,
  type SinkWorkerReply,
  type SinkWorkerRequest,
  type WorkerSinkOptions,
} from "./off-thread-protocol.js";
import { BatchIds, type EventStore, type RecordContext } from "./store.js";
import type { TelemetryWriter, WriterDiagnostics } from "./writer.js";

/** How long `closeSync` (process exit) waits for the worker to write what it holds. */
const CLOSE_SYNC_TIMEOUT_MS = 5000;

const SINK_WORKER_MARKER = Symbol.for("stormlog.error.sink_worker");

/** The sink worker stopped or failed: the records it had not written are lost. */
export class SinkWorkerError extends StormlogError {
  readonly [SINK_WORKER_MARKER] = true;
  override readonly name = "SinkWorkerError";

  constructor(reason: string) {
    super(
      `the telemetry sink's worker thread failed (${reason}); tracking goes on without the sink. ` +
        'Pass sinkThread: "main" to MemoryTracker to write the sink on the training thread instead.',
    );
  }

  static override isInstance(error: unknown): error is SinkWorkerError {
    return typeof error === "object" && error !== null && SINK_WORKER_MARKER in error;
  }
}

/** True when the options can cross to a worker: a clock or scheduler (tests' fakes) keeps the sink here. */
export function canWriteOffThread(options: TelemetrySinkOptions): boolean {
  return options.clock === undefined && options.scheduler === undefined;
}

/**
 * A `TelemetrySink` on a worker thread. The tracker hands it batches of stored records as typed
 * arrays (`appendStored`); building the records, encoding them and the disk work happen on the
 * worker, not between training steps. Counters are shared through memory, and `closeSync` (process
 * exit) blocks until the worker has written everything, as the in-thread sink's does.
 */
export class OffThreadSink implements TelemetryWriter {
  private readonly worker: Worker;
  private readonly logger: SinkLogger;
  private readonly handleProcessExit: boolean;
  private readonly diagnostics: Float64Array;
  private readonly closedFlag: Int32Array;
  private readonly ids = new BatchIds();
  private sentContext: RecordContext | null = null;
  private failure: string | null = null;
  private finished = false;
  private nextCloseId = 0;
  private readonly closing = new Map<number, () => void>();
  private unregisterExit: (() => void) | null = null;

  /** Checks the options (throws `InvalidConfigError` as `TelemetrySink` does) and starts the worker. */
  constructor(options: TelemetrySinkOptions) {
    resolveSinkConfig(options);
    const { logger, clock: _clock, scheduler: _scheduler, ...crossing } = options;
    this.logger = logger ?? consoleSinkLogger;
    this.handleProcessExit = options.handleProcessExit ?? true;
    const diagnostics = new SharedArrayBuffer(DIAGNOSTIC_KEYS.length * Float64Array.BYTES_PER_ELEMENT);
    const closed = new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT);
    this.diagnostics = new Float64Array(diagnostics);
    this.closedFlag = new Int32Array(closed);
    const data: SinkWorkerData = { options: crossing satisfies WorkerSinkOptions, diagnostics, closed };
    this.worker = startSinkWorker(data);
    this.worker.on("message", (reply: SinkWorkerReply) => this.onReply(reply));
    this.worker.on("error", (error) => this.fail(error.message));
    this.worker.on("exit", (code) => {
      if (!this.finished) this.fail(`it exited with code ${code}`);
    });
    // Like the sampling timers, the worker never keeps the process alive on its own (after the
    // listeners: adding a "message" listener refs it again).
    this.worker.unref();
  }

  startSession(partial: Partial<Omit<SessionSummary, "status" | "ended_at_ns">>): SessionSummary {
    this.ensureRunning();
    // The same summary the worker's sink makes of these fields (the tracker gives id and start time).
    const summary = createSessionSummary({
      source: partial.source ?? "stormlog.tracker",
      status: "running",
      sessionId: partial.session_id ?? null,
      startedAtNs: partial.started_at_ns ?? null,
      host: partial.host ?? null,
      pid: partial.pid ?? null,
      jobId: partial.job_id ?? null,
      rank: partial.rank ?? 0,
      localRank: partial.local_rank ?? 0,
      worldSize: partial.world_size ?? 1,
    });
    this.post({
      kind: "session",
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
   * Sends one record as an object. The tracker sends stored records with `appendStored`; this is for
   * other writers' callers (an integral float written `1.0` by the tracker loses its mark here).
   */
  append(record: TelemetryEvent): void {
    this.ensureRunning();
    this.post({ kind: "records", records: [record] });
  }

  /** Sends stored records (`indices` of `store`) to be built and written on the worker. */
  appendStored(store: EventStore, indices: readonly number[], context: RecordContext): void {
    this.ensureRunning();
    const batch = store.pack(indices, this.ids);
    const fresh = context !== this.sentContext;
    this.sentContext = context;
    const request: SinkWorkerRequest = fresh ? { kind: "batch", batch, context } : { kind: "batch", batch };
    this.worker.postMessage(request, [
      batch.timestamps.buffer as ArrayBuffer,
      batch.numbers.buffer as ArrayBuffer,
    ]);
  }

  /** Writes what the worker holds, closes the session, then stops the worker. Never rejects. */
  close(status: SessionStatus = "completed"): Promise<void> {
    if (this.finished) return Promise.resolve();
    this.finished = true;
    this.unregister();
    if (this.failure !== null) return Promise.resolve();
    const id = this.nextCloseId++;
    // Waiting for the worker must keep the process alive (a `beforeExit` close).
    this.worker.ref();
    return new Promise<void>((resolve) => {
      this.closing.set(id, resolve);
      this.post({ kind: "close", status, id });
    }).then(() => this.stopWorker());
  }

  /** Closes on `process.exit()`: blocks until the worker has written everything (at most 5 s). */
  closeSync(status: SessionStatus = "completed"): void {
    if (this.finished) return;
    this.finished = true;
    this.unregister();
    if (this.failure !== null) return;
    this.post({ kind: "closeSync", status });
    if (Atomics.wait(this.closedFlag, 0, 0, CLOSE_SYNC_TIMEOUT_MS) === "timed-out")
      this.logger.warn(
        `the sink worker did not finish writing within ${CLOSE_SYNC_TIMEOUT_MS} ms of process exit; the session stays as recovery finds it`,
      );
  }

  getDiagnostics(): WriterDiagnostics {
    return readSharedDiagnostics(this.diagnostics);
  }

  private post(request: SinkWorkerRequest): void {
    this.worker.postMessage(request);
  }

  private ensureRunning(): void {
    if (this.failure !== null) throw new SinkWorkerError(this.failure);
  }

  private onReply(reply: SinkWorkerReply): void {
    switch (reply.kind) {
      case "log":
        if (reply.level === "warn") this.logger.warn(reply.message);
        else this.logger.info?.(reply.message);
        return;
      case "closed":
        this.closing.get(reply.id)?.();
        this.closing.delete(reply.id);
        return;
      case "failed":
        this.fail(reply.message);
        return;
    }
  }

  private fail(reason: string): void {
    if (this.failure !== null) return;
    this.failure = reason;
    this.logger.warn(new SinkWorkerError(reason).message);
    for (const resolve of this.closing.values()) resolve();
    this.closing.clear();
    void this.worker.terminate();
  }

  private stopWorker(): void {
    this.worker.removeAllListeners("exit");
    void this.worker.terminate();
  }

  private unregister(): void {
    const unregister = this.unregisterExit;
    this.unregisterExit = null;
    unregister?.();
  }
}

/**
 * Starts `sink-worker` next to this module: the built `.js`/`.cjs`, or, when the tracker runs from
 * its TypeScript source (this repository's tests and examples), the `.ts` file through tsx.
 */
function startSinkWorker(workerData: SinkWorkerData): Worker {
  const here = import.meta.url;
  if (!here.endsWith(".ts")) {
    const entry = new URL(here.endsWith(".cjs") ? "./sink-worker.cjs" : "./sink-worker.js", here);
    return new Worker(entry, { workerData, execArgv: [] });
  }
  const entry = new URL("./sink-worker.ts", here).href;
  const tsx = tsxLoaderUrl(here);
  const bootstrap = `import(${JSON.stringify(tsx)}).then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}));`;
  return new Worker(bootstrap, { eval: true, workerData, execArgv: ["--conditions=@stormlog/source"] });
}

/** tsx's ESM loader API (`tsx/esm/api`, its `import` export), found from `from`. */
function tsxLoaderUrl(from: string): string {
  const manifestPath = createRequire(from).resolve("tsx/package.json");
  const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as {
    exports: Record<string, { import: { default: string } }>;
  };
  const api = manifest.exports["./esm/api"]?.import.default;
  if (api === undefined) throw new SinkWorkerError(`no tsx/esm/api in ${manifestPath}`);
  return new URL(api, pathToFileURL(manifestPath)).href;
}
