import type { Scheduler, SessionStatus, SessionSummary, TelemetryEvent, TimerHandle } from "@stormlog/core";
import { TelemetrySink, type TelemetrySinkOptions } from "@stormlog/sink";
import type { EventStore, RecordContext } from "../records/store.js";
import { canWriteOffThread, OffThreadSink, SinkWorkerError } from "./off-thread-sink.js";
import { RecordRingWriter, ringBuffers } from "./record-ring.js";
import {
  isTelemetryWriter,
  type TelemetryWriter,
  type TrackerSinkOption,
  type WriterDiagnostics,
} from "./writer.js";

/** The fields of the session summary a sink registers. */
export type SessionStart = Partial<Omit<SessionSummary, "status" | "ended_at_ns">>;

/**
 * How stored records reach the sink, chosen once per session at `start()`: built here and appended
 * to a `TelemetryWriter` (`MainThreadPipeline`), or written into shared memory that the sink's
 * worker reads (`WorkerPipeline`). Methods may throw; the tracker then stops using the pipeline.
 */
export interface RecordPipeline {
  /**
   * Registers the session; resolves with the summary the sink keeps (if it says), once the sink has
   * written the manifest naming it where it can tell.
   */
  startSession(start: SessionStart): Promise<SessionSummary | undefined>;
  /** What every record of the session shares; before the first `commit`. */
  begin(context: RecordContext): void;
  /** Hands stored record `index` over, in order; `built` is its object when the tracker built it already (an alert). */
  commit(index: number, built: TelemetryEvent | null): void;
  /** Hands over what waits now. */
  flush(): void;
  close(status: SessionStatus): Promise<void>;
  /** Closes on `process.exit()`, blocking until written where the sink can. */
  closeSync(status: SessionStatus): void;
  diagnostics(): WriterDiagnostics | undefined;
}

/**
 * A pipeline's hand-over timer callback: `flush` (which forgets the timer) and, should it throw, the
 * failure to the tracker, which stops using the pipeline: background work never throws into training.
 */
function handOverTask(flush: () => void, failed: (error: unknown) => void): () => void {
  return () => {
    try {
      flush();
    } catch (error) {
      failed(error);
    }
  };
}

/** What a pipeline needs of the tracker. */
export interface PipelineHost {
  readonly store: EventStore;
  readonly scheduler: Scheduler;
  warn(message: string): void;
  /** A hand-over on a timer failed: the tracker stops using the pipeline (background work never throws). */
  failed(operation: string, error: unknown): void;
}

/**
 * The pipeline for the tracker's `sink` option: a given writer's, or a sink made from the options on
 * its worker (`sinkThread: "worker"`, unless the options hold a clock or scheduler) or this thread.
 * Resolves once the worker is ready (its start-up is paid here, not in the first training steps).
 */
export async function openPipeline(
  option: TrackerSinkOption | undefined,
  thread: "worker" | "main",
  host: PipelineHost,
): Promise<RecordPipeline | null> {
  if (option === undefined) return null;
  if (isTelemetryWriter(option)) return new MainThreadPipeline(option, host, false);
  const options: TelemetrySinkOptions = { source: "stormlog.tracker", ...option };
  const real = canWriteOffThread(options);
  if (thread === "worker" && real) {
    const sink = new OffThreadSink(options, { handOver: true });
    if (await sink.ready()) return new WorkerPipeline(sink, host);
    host.warn("the sink's worker thread did not start: writing the sink on the training thread instead");
  }
  return new MainThreadPipeline(new TelemetrySink(options), host, real);
}

/**
 * How long stored records wait before they are built and appended (sooner when a batch fills, and
 * at every alert and `stop`). Far below the sink's own flush interval, so it delays nothing a reader
 * sees; long enough that a training step's boundaries are built together, with warm caches, between
 * steps rather than inside them (built after each microtask, a tracked tfjs step spent ~25 % more of
 * its time in Stormlog: `bench:in-situ` of examples/tfjs-training).
 */
const COMMIT_DELAY_MS = 50;
/** At most this many records wait to be built (a faster phase loop builds them sooner). */
const COMMIT_BATCH_LIMIT = 256;

/** Records built on the training thread and appended to a `TelemetryWriter`, in batches. */
class MainThreadPipeline implements RecordPipeline {
  private pending: number[] = [];
  private timer: TimerHandle | null = null;
  private context: RecordContext | null = null;
  /** Never let the store's ring overwrite a record that the writer has not received. */
  private readonly batchLimit: number;
  private readonly flushTask = handOverTask(
    () => this.flush(),
    (error) => this.host.failed("append", error),
  );

  /** `awaitManifest`: the writer is a real `TelemetrySink`, whose flush puts the manifest on disk. */
  constructor(
    private readonly writer: TelemetryWriter,
    private readonly host: PipelineHost,
    private readonly awaitManifest: boolean,
  ) {
    this.batchLimit = Math.min(COMMIT_BATCH_LIMIT, host.store.capacity);
  }

  async startSession(start: SessionStart): Promise<SessionSummary | undefined> {
    const kept = this.writer.startSession?.(start);
    if (this.awaitManifest && this.writer instanceof TelemetrySink) await this.writer.flush();
    return kept;
  }

  begin(context: RecordContext): void {
    this.context = context;
  }

  commit(index: number, built: TelemetryEvent | null): void {
    if (built !== null) {
      this.flush();
      this.writer.append(built);
      return;
    }
    this.pending.push(index);
    if (this.pending.length >= this.batchLimit) this.flush();
    else if (this.timer === null)
      this.timer = this.host.scheduler.setTimeout(this.flushTask, COMMIT_DELAY_MS);
  }

  flush(): void {
    if (this.timer !== null) {
      this.host.scheduler.clearTimeout(this.timer);
      this.timer = null;
    }
    const pending = this.pending;
    if (pending.length === 0) return;
    this.pending = [];
    const store = this.host.store;
    const context = this.context as RecordContext;
    for (let i = 0; i < pending.length; i++)
      this.writer.append(store.materialize(pending[i] as number, context));
  }

  async close(status: SessionStatus): Promise<void> {
    this.flush();
    await this.writer.close(status);
  }

  closeSync(status: SessionStatus): void {
    this.flush();
    if (this.writer.closeSync !== undefined) this.writer.closeSync(status);
    else void Promise.resolve(this.writer.close(status)).catch(() => undefined);
  }

  diagnostics(): WriterDiagnostics | undefined {
    return this.writer.getDiagnostics?.();
  }
}

/**
 * Records the sink's worker may be behind (in the ring and spill chunks) before further ones are
 * dropped and counted, as the sink's queue drops them on this thread (or its `maxQueueEvents`, if
 * more). A burst of this many (a loop of 32768 phases) is written whole; a loop the worker cannot
 * keep up with (it writes a record in ~3 us) costs at most ~15 MB of spill chunks instead of all
 * the memory it is ahead by (each spilled record is new memory to touch: ~230 bytes), and a kill
 * loses a bounded backlog.
 */
const MAX_WORKER_BACKLOG = 1 << 16;

/** Posted at once when this many objects wait. */
const POST_OBJECTS_AT = 512;

/**
 * Records written into shared memory that the sink's worker reads as it fills (`RecordRingWriter`).
 * A commit only notes the stored record: records are copied into the ring together, at the hand-over
 * (or when `batchLimit` wait), where the copying code and the ring stay in cache. Copied one by one
 * inside a tfjs step, between two boundaries that evict them, a record cost ~3 us instead of ~1. A kill
 * loses no more than before: records were shown to the worker only at the hand-over (or every 64)
 * anyway.
 */
class WorkerPipeline implements RecordPipeline {
  private readonly ring: RecordRingWriter;
  /**
   * How long committed records, objects new to the worker (a new context, phase path or detail shape)
   * and spilled records wait before they are copied into the ring, published and posted (records are
   * copied sooner when `COMMIT_BATCH_LIMIT` wait, objects posted when `POST_OBJECTS_AT` wait):
   * `OffThreadSink.handOverDelayMs`; the worker's sink flushes sooner by as much, so that a SIGKILL
   * still loses at most the flush interval plus 100 ms (hand-over-delay.ts).
   */
  private readonly postDelayMs: number;
  private timer: TimerHandle | null = null;
  /** The store's record count at the last timer hand-over: the timer stays armed while it grows. */
  private writtenAtHandOver = 0;
  /** Stored records committed and not yet in the ring: `waiting` of them from `firstWaiting`, in order. */
  private firstWaiting = 0;
  private waiting = 0;
  /** Never let the store's ring overwrite a record before it is copied. */
  private readonly batchLimit: number;
  private readonly postTask = handOverTask(
    () => this.handOver(),
    (error) => this.host.failed("append", error),
  );

  constructor(
    private readonly sink: OffThreadSink,
    private readonly host: PipelineHost,
  ) {
    this.postDelayMs = sink.handOverDelayMs;
    this.batchLimit = Math.min(COMMIT_BATCH_LIMIT, host.store.capacity);
    const buffers = ringBuffers();
    this.ring = new RecordRingWriter(
      {
        objects: (objects) => sink.postObjects(objects),
        spill: (chunk) => sink.postSpill(chunk),
      },
      buffers,
      Math.max(sink.maxQueueEvents, MAX_WORKER_BACKLOG),
    );
  }

  async startSession(start: SessionStart): Promise<SessionSummary> {
    const summary = this.sink.startSession(start);
    await this.sink.sessionStarted();
    return summary;
  }

  begin(context: RecordContext): void {
    this.ring.begin(context.sessionId);
    this.sink.attachRing(this.ring.buffers, context);
  }

  commit(index: number, _built: TelemetryEvent | null): void {
    if (this.sink.failed) throw new SinkWorkerError("it stopped");
    if (this.waiting > 0 && index !== this.firstWaiting + this.waiting) this.copyWaiting();
    if (this.waiting === 0) this.firstWaiting = index;
    if (++this.waiting >= this.batchLimit) {
      this.copyWaiting();
      if (this.ring.waitingObjects >= POST_OBJECTS_AT) {
        this.flush();
        return;
      }
    }
    if (this.timer === null) this.timer = this.host.scheduler.setTimeout(this.postTask, this.postDelayMs);
  }

  /**
   * Copies the records waiting into the ring, in order. Its publications every 64 records wake no
   * worker that reads on its own (a wake is a system call); one that went idle (a hold over ~100 ms)
   * is woken.
   */
  private copyWaiting(droppable = true): void {
    const ring = this.ring;
    const store = this.host.store;
    const end = this.firstWaiting + this.waiting;
    this.waiting = 0;
    for (let index = this.firstWaiting; index < end; index++) ring.write(store, index, false, droppable);
  }

  flush(): void {
    this.handOverAll(true);
  }

  /**
   * The timer's hand-over: published without a wake, read by the worker's own next read (an idle
   * worker, after a hold over ~100 ms, is woken). While records keep coming the timer is armed again
   * here, between steps, rather than by the next commit inside a step (a boundary that armed it cost ~20 us more in a tfjs step). After a quiet period the next
   * commit arms it.
   */
  private handOver(): void {
    this.timer = null;
    if (this.sink.failed) return;
    this.copyWaiting();
    this.ring.post(false);
    const written = this.host.store.written;
    if (written !== this.writtenAtHandOver) {
      this.writtenAtHandOver = written;
      this.timer = this.host.scheduler.setTimeout(this.postTask, this.postDelayMs);
    }
  }

  // The session's last records (`stop` among them) are never dropped.
  close(status: SessionStatus): Promise<void> {
    this.handOverAll(false);
    return this.sink.close(status);
  }

  closeSync(status: SessionStatus): void {
    this.handOverAll(false);
    this.sink.closeSync(status);
  }

  /** Copies what waits (`droppable`: see `RecordRingWriter.write`), posts it and wakes the worker. */
  private handOverAll(droppable: boolean): void {
    if (this.timer !== null) {
      this.host.scheduler.clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.sink.failed) return;
    this.copyWaiting(droppable);
    this.ring.post();
  }

  diagnostics(): WriterDiagnostics {
    return this.sink.getDiagnostics();
  }
}
