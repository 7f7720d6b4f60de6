import { join } from "node:path";
import {
  type Clock,
  createSessionSummary,
  encodeTelemetryRecord,
  type SessionStatus,
  type SessionSummary,
  type TelemetryEvent,
  TelemetryLineEncoder,
  type TimerHandle,
} from "@stormlog/core";
import { type ResolvedSinkConfig, resolveSinkConfig, type TelemetrySinkOptions } from "./config.js";
import { SinkSessionMismatchError } from "./errors.js";
import { registerExitParticipant } from "./exit-hooks.js";
import { execAsync, execSync, IO_OK, type IoOp, type IoResult } from "./io.js";
import {
  type SinkSegment,
  type SinkSessionLoss,
  segmentFilename,
  serializeManifest,
  writeManifestTextSync,
} from "./manifest.js";
import { whyNotWritable } from "./record-check.js";
import { type RecoveryReport, recoverSinkDirectory } from "./recovery.js";
import {
  buildTelemetryRollups,
  type RollupCoverage,
  rollupCoverageFromManifest,
  writeTelemetryRollups,
} from "./rollups.js";
import { RetryPolicy } from "./writer/retry-policy.js";
import { claimSinkDirectory, SinkDirectoryLockedError, type WriterLock } from "./writer-lock.js";

/** The reference's five counters (`get_diagnostics()`), then this package's queue and failure counters. */
export interface SinkDiagnostics {
  /** Segments closed because they reached a rollover limit (this sink instance). */
  rollover_count: number;
  /** Segments deleted by retention (this sink instance). */
  pruned_segment_count: number;
  /** Bytes of the segments deleted by retention (this sink instance). */
  pruned_bytes: number;
  /** Segments in the directory now. */
  final_retained_files: number;
  /** Bytes of the segments in the directory now. */
  final_retained_bytes: number;
  /** Records given to `append`. */
  appended_events: number;
  /** Records written to a segment. */
  written_events: number;
  /** Records lost, for any reason below (queue full, disk failure, deleted segment). */
  dropped_events: number;
  /** Records dropped by `append` because `maxQueueEvents` were already waiting. */
  dropped_queue_full: number;
  /** Records dropped because the disk failed (ENOSPC, EACCES, directory removed...). */
  dropped_io_error: number;
  /** Records refused because they are not valid telemetry (they would break readers). */
  rejected_events: number;
  /** Records waiting in memory for the disk. */
  queued_events: number;
  /** The queue's bound (`maxQueueEvents`). */
  max_queue_events: number;
  /** Disk operations that failed (each retried after a growing delay). */
  io_failures: number;
  /** Failures since the last success; 0 when healthy. */
  consecutive_io_failures: number;
  /** The last disk error, e.g. `ENOSPC: no space left on device, write`. */
  last_error: string | null;
  /** `ok`, or `retrying` while the disk fails. */
  state: "ok" | "retrying";
  /** The open session, if any. */
  session_id: string | null;
}

/** Options of `startSession`: a full or partial summary (snake_case, as core's `SessionSummary`). */
export type StartSessionOptions = Partial<Omit<SessionSummary, "status" | "ended_at_ns">>;

/**
 * The `running` summary `startSession(options)` registers: the given fields, a new id and the
 * current time where they are missing, rank 0 of a world of 1 by default.
 */
export function runningSessionSummary(
  options: StartSessionOptions,
  source: string,
  clock?: Clock,
): SessionSummary {
  return createSessionSummary({
    source: options.source ?? source,
    status: "running",
    sessionId: options.session_id ?? null,
    startedAtNs: options.started_at_ns ?? null,
    host: options.host ?? null,
    pid: options.pid ?? null,
    jobId: options.job_id ?? null,
    rank: options.rank ?? 0,
    localRank: options.local_rank ?? 0,
    worldSize: options.world_size ?? 1,
    ...(clock === undefined ? {} : { clock }),
  });
}

/** Flushes (`flush()`), periodic flushes, and session closes travel in the queue, in order with the records. */
class Barrier {
  constructor(
    readonly kind: "flush" | "tick" | "close",
    readonly resolve: (() => void) | null,
    readonly sessionId: string | null = null,
    readonly status: SessionStatus = "completed",
    readonly endedAtNs: bigint = 0n,
    /** Write rollups.json after closing (not when closing for a signal: the process must go). */
    readonly rollups: boolean = true,
  ) {}
}

type QueueEntry = TelemetryEvent | Barrier;
/** The writer's steps: disk operations, and waiting for the write left running (see settle). */
const SETTLE = { op: "settle" } as const;
type Step = IoOp | typeof SETTLE;
type Work = Generator<Step, void, IoResult>;
type WriteOp = Extract<IoOp, { op: "write" }>;

/** A write started at the end of a pass and not waited for yet. */
interface DetachedWrite {
  readonly op: WriteOp;
  readonly pending: PendingWrite;
  readonly segment: SinkSegment;
  readonly promise: Promise<IoResult>;
  /** Set when the write is over. */
  result: IoResult | null;
}

/**
 * Encoded records of one session waiting to be written together (one or more reference "flushes"):
 * the first `bytes` bytes of the writer's chunk buffer.
 */
interface PendingWrite {
  readonly sessionId: string;
  events: number;
  bytes: number;
  /** Per flush unit: [events, bytes]; rollover and retention are checked after each, as the reference does. */
  readonly units: [number, number][];
  /** The last unit reaches a rollover limit: write before anything else goes in. */
  endsSegment: boolean;
}

type Latin1Writer = { latin1Write?: (text: string, offset: number) => number };
/** `buffer.write(text, offset, "latin1")` without its argument juggling (Node's own fast method when present). */
const latin1Write: (buffer: Buffer, text: string, offset: number) => number =
  typeof (Buffer.prototype as Latin1Writer).latin1Write === "function"
    ? (buffer, text, offset) => (buffer as Latin1Writer).latin1Write!(text, offset)
    : (buffer, text, offset) => buffer.write(text, offset, "latin1");

/** Free room kept at the chunk's end before encoding a line into it (longer lines take core's path). */
const ENCODE_ROOM = 64 << 10;
/** Pending bytes that start a write without waiting for the rest of the queue. */
const WRITE_AT_BYTES = 4 << 20;
/**
 * A chunk buffer's starting size; a burst grows it (doubling) up to what a pass holds before it writes.
 * Small because V8 counts a buffer's whole size as external memory: two 4 MB chunks per session made a
 * tracked training loop run about one more full collection per session (measured with --trace-gc).
 */
const CHUNK_BYTES = 4 * ENCODE_ROOM;
/** A chunk buffer grown beyond this by a burst is replaced by a small one once it is empty. */
const KEEP_CHUNK_BYTES = 16 << 20;
/** Why the manifest must be rewritten: segments or sessions changed (at once), or only counts (on the tick). */
const STRUCTURAL = 2;
const COUNTS = 1;
/** Space kept in `manifest.reserve` while a session runs: what closing it needs on a disk that fills up. */
const RESERVE_BYTES = 64 << 10;
export const MANIFEST_RESERVE_FILENAME = "manifest.reserve";

/**
 * An append-only JSONL telemetry sink that writes the Python reference's layout
 * (`segment-NNNNNN.jsonl` + `manifest.json`), with rollover, retention and recovery as the reference.
 *
 * `append()` is synchronous and cheap: it queues the record and returns. Encoding happens right after
 * the caller's synchronous code (a microtask) or on the flush timer, and every disk operation is
 * asynchronous (libuv's thread pool). Disk failures never reach the caller:
 * records are counted as dropped, the session ends `incomplete`, one message is logged, and
 * `getDiagnostics()` tells the state. See the package README for the fsync policy and layouts.
 */
export class TelemetrySink {
  readonly config: ResolvedSinkConfig;
  /** What opening the directory found and repaired. */
  readonly recovery: RecoveryReport | null;

  /** The directory written: `config.rootDir`, or the one beside it when another live process writes that. */
  private directory: string;
  /** Held from opening the directory until its last session is closed (taken again by the next session). */
  private lock: WriterLock | null = null;
  private segments: SinkSegment[] = [];
  private readonly sessions = new Map<string, SessionSummary>();
  private activeSessionId: string | null = null;
  private nextSegmentIndex = 1;

  private queue: QueueEntry[] = [];
  // Copies of two options read on every append.
  private readonly maxQueue: number;
  private readonly flushEvery: number;
  private queuedRecords = 0;
  private barriersQueued = 0;

  // Encoded lines go straight into a reused byte buffer: first the pending write, then the lines
  // not yet flushed (the reference's buffer, fewer than flushEveryEvents). Building strings and
  // converting them later costs several times more, most of it in garbage collection. A write takes
  // the buffer and encoding goes on in the other one (takeChunk).
  private chunk: Buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  private chunkLength = 0;
  private bufferCount = 0;
  private bufferBytes = 0;
  private bufferSession: string | null = null;
  private pending: PendingWrite | null = null;
  /** The chunk's other buffer: while one is being written, lines are encoded into the other. */
  private spare: Buffer | null = null;
  /** The buffer a write is reading from. */
  private writing: Buffer | null = null;
  /** The last write of a pass, left running while the next records are encoded (see settle). */
  private detached: DetachedWrite | null = null;
  private readonly encoder = new TelemetryLineEncoder();

  private current: SinkSegment | null = null;
  private fd: number | null = null;

  private pumpRunning = false;
  private kickPending = false;
  private pumpToken = 0;
  private activeWork: Work | null = null;
  private inflightOp: Step | null = null;
  private idleWaiters: (() => void)[] = [];
  private tickTimer: TimerHandle | null = null;
  private manifestDirty = 0;
  /** A manifest write running in the background (see writeManifestBehind), and whether another is due. */
  private manifestJob: Promise<void> | null = null;
  private manifestOwed = false;
  private needsMkdir = false;
  private needsRecovery = false;
  private finalized = false;
  private unregisterExit: (() => void) | null = null;
  private rollupJobs: Promise<void>[] = [];
  /** Rolled-over segments being synced and closed while writing goes on. */
  private readonly backgroundCloses = new Set<Promise<void>>();
  /** A rolled-over segment waiting for the next segment to be open before its sync and close. */
  private deferredClose: { fd: number; segment: SinkSegment } | null = null;
  private readonly sessionLoss = new Map<string, number>();

  private rolloverCount = 0;
  private prunedSegmentCount = 0;
  private prunedBytes = 0;
  private appended = 0;
  private written = 0;
  private droppedQueueFull = 0;
  private droppedIo = 0;
  private rejected = 0;
  private retryPolicy: RetryPolicy | null = null;
  /** What each session lost, written in the manifest (`session_losses`). */
  private readonly losses = new Map<string, SinkSessionLoss>();
  /** `manifest.reserve` is on disk (see RESERVE_BYTES). */
  private reserveHeld = false;
  private reserveTried = false;
  private warnedQueueFull = false;
  private warnedRejected = false;

  /**
   * Opens (or creates) the sink directory and recovers what a previous writer left (blocking, once).
   * Throws `InvalidConfigError` for bad options only: a directory that cannot be opened is logged
   * and retried like any disk failure.
   */
  constructor(options: TelemetrySinkOptions) {
    this.config = resolveSinkConfig(options);
    this.directory = this.config.rootDir;
    this.maxQueue = this.config.maxQueueEvents;
    this.flushEvery = this.config.flushEveryEvents;
    this.recovery = this.recover(true);
    this.needsRecovery = this.recovery === null;
  }

  /** The directory this sink writes: `rootDir` as given, or the one beside it (see `onLockedDirectory`). */
  get rootDir(): string {
    return this.directory;
  }

  /**
   * Takes the directory (`writer.lock`), then runs the reference's recovery on it: what other
   * writers left is read again, as they may have written since this sink last held it. On failure,
   * logs, and the writer retries later; a refused directory throws while constructing.
   */
  private recover(constructing = false): RecoveryReport | null {
    try {
      this.claimDirectory();
      const state = recoverSinkDirectory(this.directory, {
        clock: this.config.clock,
        fsync: this.config.fsync !== "never",
        onWarning: (message) => this.config.logger.info?.(`${this.directory}: ${message}`),
      });
      this.segments = state.segments;
      this.adoptLosses(state.losses);
      const active = this.currentSession();
      this.sessions.clear();
      for (const [id, summary] of state.sessions) this.sessions.set(id, summary);
      if (active !== null) this.sessions.set(active.session_id, active);
      this.nextSegmentIndex = Math.max(this.nextSegmentIndex, state.nextSegmentIndex);
      return state.report;
    } catch (error) {
      if (constructing && SinkDirectoryLockedError.isInstance(error)) throw error;
      this.recordFailure(error as Error, "open the sink directory");
      return null;
    }
  }

  private claimDirectory(): void {
    if (this.lock !== null) return;
    const claimed = claimSinkDirectory(this.config.rootDir, {
      policy: this.config.onLockedDirectory,
      ...(this.config.rank === undefined ? {} : { rank: this.config.rank }),
    });
    this.lock = claimed.lock;
    if (claimed.directory !== this.directory) this.nextSegmentIndex = 1;
    this.directory = claimed.directory;
    const owner = claimed.movedAsideFrom;
    if (owner !== null)
      this.config.logger.info?.(
        `${this.config.rootDir} is being written by pid ${owner.pid} on ${owner.host}: this process writes ` +
          `beside it, to ${claimed.directory} (readers given ${this.config.rootDir} read both)`,
      );
  }

  /** Before a session after the last one closed: take the directory again (it may have had other writers). */
  private reopen(): void {
    if (this.lock !== null || this.finalized || this.needsRecovery) return;
    if (this.recover() === null) this.needsRecovery = true;
  }

  private releaseLock(): void {
    this.lock?.release();
    this.lock = null;
  }

  /** What the manifest says earlier sessions lost (this instance's open session keeps its own count). */
  private adoptLosses(recorded: readonly SinkSessionLoss[]): void {
    const active = this.activeSessionId === null ? undefined : this.losses.get(this.activeSessionId);
    this.losses.clear();
    for (const loss of recorded) this.losses.set(loss.session_id, { ...loss });
    if (active !== undefined) this.losses.set(active.session_id, active);
  }

  // ---------------------------------------------------------------- public API

  /**
   * Registers the session that the following records belong to and gives the ledger a `running`
   * entry. Returns the active session unchanged if one is open (as the reference).
   */
  startSession(options: StartSessionOptions = {}): SessionSummary {
    const active = this.currentSession();
    if (active !== null) return active;
    this.reopen();
    const summary = runningSessionSummary(options, this.config.source, this.config.clock);
    this.sessions.set(summary.session_id, summary);
    this.sessionLoss.set(summary.session_id, 0);
    this.activeSessionId = summary.session_id;
    this.manifestDirty = STRUCTURAL;
    if (this.config.handleProcessExit && this.unregisterExit === null && !this.finalized) {
      this.unregisterExit = registerExitParticipant({
        onSignal: () => this.closeSession("interrupted", false),
        onBeforeExit: (code) => this.closeBeforeExit(code),
        onExit: (code) => this.closeSync(code === 0 ? "completed" : "interrupted"),
      });
    }
    this.ensureTick();
    this.kick();
    return summary;
  }

  /** The open session's summary, or null. */
  currentSession(): SessionSummary | null {
    return this.activeSessionId === null ? null : (this.sessions.get(this.activeSessionId) ?? null);
  }

  /**
   * Queues a record; never waits for the disk and never throws because of it. Starts a session
   * (adopting the record's `session_id` and identity) if none is open. Throws
   * `SinkSessionMismatchError` for a record of another session than the open one. The record is
   * read later, when it is encoded: do not change it after appending.
   */
  append(record: TelemetryEvent): void {
    if (record.session_id !== this.activeSessionId) this.adoptSession(record);
    if (this.queuedRecords >= this.maxQueue) {
      this.dropQueueFull();
      return;
    }
    this.queuedRecords++;
    this.appended++;
    this.queue.push(record);
    if (this.queue.length >= this.flushEvery && !this.kickPending) this.kick();
  }

  /**
   * Writes everything appended so far, and the manifest. Resolves when it is on disk (or counted as
   * dropped); while the disk is failing, at once (the records wait in the queue for the retry).
   * Never rejects.
   */
  flush(): Promise<void> {
    if (this.finalized) return Promise.resolve();
    if (
      this.queue.length === 0 &&
      this.bufferCount === 0 &&
      this.pending === null &&
      this.detached === null &&
      this.manifestDirty === 0 &&
      this.manifestJob === null &&
      !this.manifestOwed
    ) {
      return this.pumpRunning ? this.whenIdle() : Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      this.pushBarrier(new Barrier("flush", resolve));
      this.kick(true);
    });
  }

  /**
   * Flushes and closes the open session with `status` (`completed` by default; `incomplete` instead
   * when records of it were lost), then writes `rollups.json` if enabled. Resolves when done; never
   * rejects. A later `append` opens a new session, as in the reference.
   */
  close(status: SessionStatus = "completed"): Promise<void> {
    return this.closeSession(status, true);
  }

  private closeSession(status: SessionStatus, rollups: boolean): Promise<void> {
    const sessionId = this.activeSessionId;
    if (sessionId === null) return this.flush().then(() => this.rollupsSettled());
    this.activeSessionId = null;
    const closed = new Promise<void>((resolve) => {
      this.pushBarrier(new Barrier("close", resolve, sessionId, status, this.config.clock.nowNs(), rollups));
      this.kick(true);
    });
    return closed.then(() => this.rollupsSettled());
  }

  /** Resolves when the segments closed at rollover are synced (close() waits for them). */
  private backgroundSettled(): Promise<void> {
    return Promise.all(this.backgroundCloses).then(() => undefined);
  }

  /**
   * Closes the open session synchronously (blocking I/O): what runs on `process.exit()`. Redoes a
   * write that was in flight, writes what is queued and the manifest. Rollups are not written here.
   * The sink accepts nothing afterwards.
   */
  closeSync(status: SessionStatus = "completed"): void {
    if (this.finalized) return;
    this.finalized = true;
    this.unregister();
    const sessionId = this.activeSessionId;
    if (sessionId !== null) {
      this.activeSessionId = null;
      this.pushBarrier(new Barrier("close", null, sessionId, status, this.config.clock.nowNs()));
    } else {
      this.pushBarrier(new Barrier("flush", null));
    }
    this.cancelTimers();
    // Take over from the asynchronous driver: it stops at its next step.
    this.pumpToken++;
    const interrupted = this.activeWork;
    const inflight = this.inflightOp;
    this.activeWork = null;
    this.inflightOp = null;
    this.pumpRunning = false;
    this.retry.attemptNow();
    try {
      if (interrupted !== null) {
        let result = inflight === null ? IO_OK : inflight.op === "close" ? IO_OK : this.runSync(inflight);
        for (;;) {
          const step = interrupted.next(result);
          if (step.done) break;
          result = this.runSync(step.value);
        }
      }
      const work = this.work();
      let result: IoResult = IO_OK;
      for (;;) {
        const step = work.next(result);
        if (step.done) break;
        result = this.runSync(step.value);
      }
      // One last try at the ledger even if the disk failed above.
      if (this.manifestDirty !== 0) {
        const last = this.writeLedgerHard();
        let outcome: IoResult = IO_OK;
        for (;;) {
          const step = last.next(outcome);
          if (step.done) break;
          outcome = this.runSync(step.value);
        }
      }
    } catch (error) {
      this.config.logger.warn(`closing ${this.rootDir} on exit failed: ${(error as Error).message}`);
    }
    this.releaseLock();
    this.resolveIdle();
  }

  /** The reference's counters plus this package's queue and failure state. */
  getDiagnostics(): SinkDiagnostics {
    let retainedBytes = 0;
    for (const segment of this.segments) retainedBytes += segment.size_bytes;
    const lostInFlight =
      this.bufferCount + (this.pending?.events ?? 0) + (this.detached?.pending.events ?? 0);
    return {
      rollover_count: this.rolloverCount,
      pruned_segment_count: this.prunedSegmentCount,
      pruned_bytes: this.prunedBytes,
      final_retained_files: this.segments.length,
      final_retained_bytes: retainedBytes,
      appended_events: this.appended,
      written_events: this.written,
      dropped_events: this.droppedQueueFull + this.droppedIo,
      dropped_queue_full: this.droppedQueueFull,
      dropped_io_error: this.droppedIo,
      rejected_events: this.rejected,
      queued_events: this.queuedRecords + lostInFlight,
      max_queue_events: this.config.maxQueueEvents,
      io_failures: this.retry.failures,
      consecutive_io_failures: this.retry.failuresInARow,
      last_error: this.retry.lastError,
      state: this.retry.failing ? "retrying" : "ok",
      session_id: this.activeSessionId,
    };
  }

  /**
   * Records appended but not yet written (queued, or encoded and waiting for their flush). Cheap to
   * read: a producer that must not lose records can wait while it is high (backpressure).
   */
  get pendingEvents(): number {
    return (
      this.queuedRecords +
      this.bufferCount +
      (this.pending?.events ?? 0) +
      (this.detached?.pending.events ?? 0)
    );
  }

  /** The sessions ledger as it stands in memory (what the next manifest will hold). */
  getSessions(): SessionSummary[] {
    return [...this.sessions.values()];
  }

  /** The segments list as it stands in memory. */
  getSegments(): SinkSegment[] {
    return this.segments.map((segment) => ({ ...segment }));
  }

  /** `await using sink = new TelemetrySink(...)` closes the session as `completed`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---------------------------------------------------------------- hot path helpers

  private adoptSession(record: TelemetryEvent): void {
    const sessionId = (record as { session_id?: unknown }).session_id;
    if (this.activeSessionId === null) {
      const valid = typeof sessionId === "string" && sessionId.trim() !== "";
      this.startSession({
        ...(valid ? { session_id: sessionId } : {}),
        ...(typeof record.host === "string" && record.host.trim() !== "" ? { host: record.host } : {}),
        ...(Number.isSafeInteger(record.pid) ? { pid: record.pid } : {}),
        ...(typeof record.job_id === "string" ? { job_id: record.job_id } : {}),
        ...(Number.isSafeInteger(record.rank) ? { rank: record.rank } : {}),
        ...(Number.isSafeInteger(record.local_rank) ? { local_rank: record.local_rank } : {}),
        ...(Number.isSafeInteger(record.world_size) ? { world_size: record.world_size } : {}),
      });
      return;
    }
    // A record without a usable id is refused later, when it is checked.
    if (typeof sessionId !== "string") return;
    throw new SinkSessionMismatchError(this.activeSessionId, sessionId);
  }

  private dropQueueFull(): void {
    this.droppedQueueFull++;
    this.appended++;
    this.noteLoss(this.activeSessionId, 1, "queue");
    if (!this.warnedQueueFull) {
      this.warnedQueueFull = true;
      this.config.logger.warn(
        `${this.rootDir}: ${this.config.maxQueueEvents} records are already waiting for the disk; further records ` +
          "are dropped and counted (getDiagnostics().dropped_queue_full) and the session will close as incomplete. " +
          "The disk is slower than the producer: raise maxQueueEvents or sample less often",
      );
    }
  }

  private noteLoss(sessionId: string | null, count: number, cause: "io" | "queue" = "io"): void {
    if (sessionId === null || count === 0) return;
    this.sessionLoss.set(sessionId, (this.sessionLoss.get(sessionId) ?? 0) + count);
    let loss = this.losses.get(sessionId);
    if (loss === undefined) {
      loss = { session_id: sessionId, dropped_events: 0, dropped_io_error: 0, dropped_queue_full: 0 };
      this.losses.set(sessionId, loss);
    }
    loss.dropped_events += count;
    if (cause === "io") loss.dropped_io_error += count;
    else loss.dropped_queue_full += count;
    // The counts reach the disk with the next manifest (the tick's, or the retry's once the disk works).
    this.manifestDirty ||= COUNTS;
  }

  private pushBarrier(barrier: Barrier): void {
    this.barriersQueued++;
    this.queue.push(barrier);
  }

  // ---------------------------------------------------------------- scheduling

  /**
   * Starts the writer once the caller's current synchronous work is done (a microtask: never inside
   * `append`, and before the next event-loop turn, so a fast producer cannot outrun it), or now for
   * `flush`/`close`.
   */
  private kick(now = false): void {
    if (this.finalized) return;
    if (now) {
      this.startPump();
      return;
    }
    // While the disk fails, the retry timer drives the writer; records just wait (bounded).
    if (this.kickPending || this.pumpRunning || this.retry.failing) return;
    this.kickPending = true;
    queueMicrotask(() => {
      this.kickPending = false;
      this.startPump();
    });
  }

  private ensureTick(): void {
    if (this.tickTimer !== null || this.finalized) return;
    let delayMs = this.config.flushEverySeconds * 1000;
    if (this.retry.failing) delayMs = Math.min(delayMs, this.retry.msUntilRetry());
    this.tickTimer = this.config.scheduler.setTimeout(() => this.onTick(), delayMs);
  }

  private onTick(): void {
    this.tickTimer = null;
    if (this.finalized) return;
    const hasWork =
      this.queue.length > 0 ||
      this.bufferCount > 0 ||
      this.pending !== null ||
      this.detached !== null ||
      this.manifestDirty !== 0 ||
      this.fd !== null ||
      this.needsRecovery;
    if (hasWork && !this.inBackoff()) {
      this.pushBarrier(new Barrier("tick", null));
      this.startPump();
    }
    if (this.activeSessionId !== null || hasWork) this.ensureTick();
  }

  private cancelTimers(): void {
    if (this.tickTimer !== null) this.config.scheduler.clearTimeout(this.tickTimer);
    this.tickTimer = null;
  }

  private inBackoff(): boolean {
    return this.retry.inBackoff();
  }

  private whenIdle(): Promise<void> {
    if (!this.pumpRunning) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private resolveIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private startPump(): void {
    if (this.pumpRunning || this.finalized) return;
    this.pumpRunning = true;
    const token = ++this.pumpToken;
    const work = this.work();
    this.activeWork = work;
    void this.driveAsync(work, token);
  }

  /** A step on the calling thread: a write left running is done again (writes are positional). */
  private runSync(step: Step): IoResult {
    if (step.op !== "settle") return execSync(step);
    return this.detached === null ? IO_OK : execSync(this.detached.op);
  }

  private runAsync(step: Step): Promise<IoResult> {
    if (step.op !== "settle") return execAsync(step);
    return this.detached === null ? Promise.resolve(IO_OK) : this.detached.promise;
  }

  /** Runs the writer's steps with asynchronous I/O. Never rejects. */
  private async driveAsync(work: Work, token: number): Promise<void> {
    let result: IoResult = IO_OK;
    try {
      for (;;) {
        const step = work.next(result);
        if (step.done) break;
        this.inflightOp = step.value;
        if (step.value.op === "manifest" && this.manifestJob !== null) {
          // One manifest write at a time (they share manifest.tmp).
          while (this.manifestJob !== null) await this.manifestJob;
          if (token !== this.pumpToken) return;
        }
        result = await this.runAsync(step.value);
        if (token !== this.pumpToken) {
          // The exit path took over while this step ran. A manifest rename already handed to the
          // thread pool can land after closeSync's own: write the current ledger once more.
          if (step.value.op === "manifest") this.rewriteManifestSync();
          return;
        }
        this.inflightOp = null;
      }
    } catch (error) {
      this.config.logger.warn(
        `${this.rootDir}: internal error in the sink writer: ${(error as Error).stack ?? error}`,
      );
    }
    if (token !== this.pumpToken) return;
    this.activeWork = null;
    this.pumpRunning = false;
    if (this.tickTimer === null && (this.activeSessionId !== null || this.queue.length > 0))
      this.ensureTick();
    // Work that arrived meanwhile: records beyond a unit, or a barrier.
    const more =
      this.barriersQueued > 0 ||
      this.queue.length >= this.flushEvery ||
      this.pending !== null ||
      (this.detached !== null && this.detached.result !== null) ||
      this.manifestDirty === STRUCTURAL;
    if (more && !this.inBackoff()) {
      this.startPump();
      return;
    }
    this.resolveIdle();
  }

  // ---------------------------------------------------------------- the writer (a generator of I/O steps)

  private *work(): Work {
    if (this.needsRecovery && !this.inBackoff()) {
      this.needsRecovery = false;
      if (this.recover() === null) this.needsRecovery = true;
    }
    // A new session's ledger entry goes to disk before its first record.
    if (this.manifestDirty === STRUCTURAL && !this.inBackoff() && !this.needsRecovery)
      yield* this.writeManifest();
    // Units kept pending while the disk failed are written at the retry, even with nothing queued.
    while (this.queue.length > 0 || this.pending !== null) {
      if (this.inBackoff() || this.needsRecovery) {
        yield* this.settle();
        const closed = this.passWithoutIo();
        if (closed.length > 0) {
          // close() tries hard: the ledger is written now, off the schedule, with the reserve if need be.
          const current = this.current;
          if (current?.closed) yield* this.closeSegment(current, "nosync");
          if (!this.needsRecovery) yield* this.writeLedgerHard();
          for (const resolve of closed) resolve();
        }
        break;
      }
      yield* this.pass();
    }
    // The last write is booked when it is over (the next pass or barrier would wait for it anyway).
    if (this.detached !== null && this.detached.result !== null) yield* this.settle();
    yield* this.closeDeferred();
    // Segment changes (rollover, pruning): written behind; session changes were written at once.
    if (this.manifestDirty === STRUCTURAL && !this.inBackoff()) this.writeManifestBehind();
  }

  /** One pass over the queue: encode records into flush units, write them, handle barriers in order. */
  private *pass(): Work {
    const entries = this.queue;
    this.queue = [];
    const flushEvery = this.flushEvery;
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!;
      if (entry instanceof Barrier) {
        this.flushUnit();
        yield* this.writePending();
        yield* this.settle();
        // The disk just failed: the barrier is handled without I/O (see passWithoutIo).
        if (this.inBackoff()) return this.requeue(entries, i);
        this.barriersQueued--;
        if (entry.kind === "close") yield* this.finishSession(entry);
        else if (entry.kind === "tick") yield* this.tickChecks();
        else if (this.manifestDirty !== 0 || this.manifestJob !== null || this.manifestOwed)
          // A flush resolves once the manifest is on disk, a background write's included.
          yield* this.writeManifest();
        entry.resolve?.();
        if (this.inBackoff()) return this.requeue(entries, i + 1);
        continue;
      }
      const problem = whyNotWritable(entry);
      if (problem !== undefined) {
        this.queuedRecords--;
        this.reject(problem);
        continue;
      }
      if (this.bufferCount > 0 && this.bufferSession !== entry.session_id) this.flushUnit();
      if (this.pending !== null && this.pending.sessionId !== entry.session_id) {
        yield* this.writePending();
        // The earlier session's lines wait for the retry: this record waits behind them.
        if (this.inBackoff()) return this.requeue(entries, i);
      }
      this.queuedRecords--;
      const bytes = this.encodeLine(entry);
      if (bytes === 0) continue;
      this.bufferSession = entry.session_id;
      this.bufferCount++;
      this.bufferBytes += bytes;
      if (this.bufferCount >= flushEvery) {
        this.flushUnit();
        const pending = this.pending;
        if (pending !== null && (pending.endsSegment || pending.bytes >= WRITE_AT_BYTES)) {
          yield* this.writePending();
          if (this.inBackoff()) return this.requeue(entries, i + 1);
        }
      }
    }
    yield* this.writePending();
    // New or closed segments, pruning: the manifest follows at once (counts alone wait for the tick),
    // without holding up the records.
    if (this.manifestDirty === STRUCTURAL && !this.inBackoff()) this.writeManifestBehind();
  }

  /** Puts back what a pass did not reach because the disk failed; it waits for the retry. */
  private requeue(entries: QueueEntry[], from: number): void {
    if (from < entries.length) this.queue = entries.slice(from).concat(this.queue);
  }

  /**
   * While the disk is failing: records stay queued (bounded), flush barriers resolve at once, and a
   * session close drops what its session still had waiting and closes it as `incomplete`.
   */
  private passWithoutIo(): (() => void)[] {
    const closed: (() => void)[] = [];
    const entries = this.queue;
    this.queue = [];
    const kept: QueueEntry[] = [];
    for (const entry of entries) {
      if (!(entry instanceof Barrier)) {
        kept.push(entry);
        continue;
      }
      this.barriersQueued--;
      if (entry.kind === "close") {
        let dropped = this.bufferCount + (this.pending?.events ?? 0);
        this.clearUnwritten();
        dropped += kept.length;
        this.queuedRecords -= kept.length;
        kept.length = 0;
        this.droppedIo += dropped;
        this.noteLoss(entry.sessionId, dropped);
        this.endSession(entry);
        if (this.current !== null && this.current.session_id === entry.sessionId) this.current.closed = true;
        if (entry.resolve !== null) closed.push(entry.resolve);
        continue;
      }
      entry.resolve?.();
    }
    this.queue = kept.concat(this.queue);
    return closed;
  }

  private clearUnwritten(): void {
    this.chunkLength = 0;
    this.bufferCount = 0;
    this.bufferBytes = 0;
    this.pending = null;
  }

  /** Makes room for `bytes` more bytes after the chunk's content. */
  private reserve(bytes: number): void {
    const needed = this.chunkLength + bytes;
    if (needed <= this.chunk.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(needed, this.chunk.length * 2));
    this.chunk.copy(grown, 0, 0, this.chunkLength);
    this.chunk = grown;
  }

  /** Drops the first `bytes` of the chunk (written or given up), keeping the lines after them. */
  private consumeChunk(bytes: number): void {
    if (bytes < this.chunkLength) this.chunk.copy(this.chunk, 0, bytes, this.chunkLength);
    this.chunkLength -= bytes;
    this.shrinkIdleChunk();
  }

  /** A burst may have grown the buffer: give the memory back once it is empty. */
  private shrinkIdleChunk(): void {
    if (this.chunkLength === 0 && this.chunk.length > KEEP_CHUNK_BYTES)
      this.chunk = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  }

  /**
   * Hands the chunk's first `bytes` to a write and goes on in the other buffer with the lines after
   * them (fewer than flushEveryEvents: a small copy), so encoding can go on during the write.
   */
  private takeChunk(bytes: number): Buffer {
    const full = this.chunk;
    const rest = this.chunkLength - bytes;
    let next = this.spare;
    this.spare = null;
    if (next === null || next.length < rest + ENCODE_ROOM)
      next = Buffer.allocUnsafeSlow(Math.max(CHUNK_BYTES, rest + ENCODE_ROOM));
    if (rest > 0) full.copy(next, 0, bytes, this.chunkLength);
    this.chunk = next;
    this.chunkLength = rest;
    this.writing = full;
    return full.subarray(0, bytes);
  }

  /** The written buffer becomes the spare one (unless a burst made it large: memory goes back). */
  private releaseChunk(): void {
    const done = this.writing;
    this.writing = null;
    if (done !== null && done.length <= KEEP_CHUNK_BYTES) this.spare = done;
    this.shrinkIdleChunk();
  }

  /**
   * Encodes a checked record's line and newline at the end of the chunk: straight into the bytes (no
   * string, nothing for the garbage collector), or through core's general encoder for unusual
   * records. Returns the bytes added; 0 for a record that is not JSON (refused).
   */
  private encodeLine(record: TelemetryEvent): number {
    try {
      this.reserve(ENCODE_ROOM);
      const start = this.chunkLength;
      let end = this.encoder.encodeInto(record, this.chunk, start);
      if (end < 0 || end >= this.chunk.length) {
        // ASCII by construction (ensure_ascii escaping): one byte per character.
        const line = encodeTelemetryRecord(record);
        this.reserve(line.length + 1);
        end = start + latin1Write(this.chunk, line, start);
      }
      this.chunk[end] = 0x0a;
      this.chunkLength = end + 1;
      return end + 1 - start;
    } catch (error) {
      this.reject(`it cannot be encoded as JSON (${(error as Error).message})`);
      return 0;
    }
  }

  private reject(reason: string): void {
    this.rejected++;
    if (!this.warnedRejected) {
      this.warnedRejected = true;
      this.config.logger.warn(
        `${this.rootDir}: a record was refused because ${reason}; refused records are counted ` +
          "(getDiagnostics().rejected_events) and not written, so that readers never meet an invalid line",
      );
    }
  }

  /** Moves the buffer into the pending write: one reference "flush" (rollover is checked after it). */
  private flushUnit(): void {
    if (this.bufferCount === 0) return;
    const sessionId = this.bufferSession!;
    let pending = this.pending;
    if (pending === null) {
      pending = { sessionId, events: 0, bytes: 0, units: [], endsSegment: false };
      this.pending = pending;
    }
    const current = this.current;
    // A write in flight (see settle) is not in the segment's counts yet.
    const inflight = this.detached === null ? null : this.detached.pending;
    const reuse =
      current !== null &&
      !current.closed &&
      current.session_id === sessionId &&
      (inflight === null || !inflight.endsSegment);
    const inflightEvents = reuse && inflight !== null ? inflight.events : 0;
    const inflightBytes = reuse && inflight !== null ? inflight.bytes : 0;
    const baseEvents = (reuse ? current.event_count : 0) + inflightEvents + pending.events + this.bufferCount;
    const baseBytes = (reuse ? current.size_bytes : 0) + inflightBytes + pending.bytes + this.bufferBytes;
    pending.events += this.bufferCount;
    pending.bytes += this.bufferBytes;
    pending.units.push([this.bufferCount, this.bufferBytes]);
    if (baseEvents >= this.config.rolloverMaxEvents || baseBytes >= this.config.rolloverMaxBytes) {
      pending.endsSegment = true;
    }
    this.bufferCount = 0;
    this.bufferBytes = 0;
  }

  /**
   * Writes the pending units to the session's open segment (opening a new one if needed). The write
   * is started and left running: the writer waits for it (settle) before its next disk operation, so
   * the next records are encoded while the thread pool writes. On the exit path, and with fsync
   * "always" (a sync follows each write), it is waited for at once.
   */
  private *writePending(): Work {
    if (this.pending === null) return;
    yield* this.settle();
    // The last write failed: these records wait for the retry (as records not yet encoded do).
    if (this.inBackoff()) return;
    const pending = this.pending;
    this.pending = null;
    let segment = this.current;
    if (segment === null || segment.closed || segment.session_id !== pending.sessionId) {
      if (segment !== null && !segment.closed) yield* this.closeSegment(segment);
      if (this.needsMkdir) {
        const made = yield { op: "mkdir", path: this.rootDir };
        if (!made.ok) {
          this.consumeChunk(pending.bytes);
          return this.failWrite(made.error, pending, "create the sink directory");
        }
        this.needsMkdir = false;
      }
      const filename = segmentFilename(this.nextSegmentIndex);
      const opened = yield { op: "open", path: join(this.rootDir, filename) };
      if (!opened.ok) {
        this.consumeChunk(pending.bytes);
        return this.failWrite(opened.error, pending, `create ${filename}`);
      }
      this.nextSegmentIndex++;
      segment = { filename, event_count: 0, size_bytes: 0, closed: false, session_id: pending.sessionId };
      this.segments.push(segment);
      this.current = segment;
      this.fd = opened.value;
      this.manifestDirty = STRUCTURAL;
    }
    yield* this.closeDeferred();
    const fd = this.fd!;
    const data = this.takeChunk(pending.bytes);
    const op: WriteOp = { op: "write", fd, data, position: segment.size_bytes };
    if (this.config.fsync !== "always" && !this.finalized) {
      const write: DetachedWrite = { op, pending, segment, promise: execAsync(op), result: null };
      this.detached = write;
      void write.promise.then((result) => {
        write.result = result;
        if (this.detached === write && !this.pumpRunning) this.kick();
      });
      return;
    }
    const written = yield op;
    yield* this.afterWrite(written, pending, segment, fd);
  }

  /** Waits for the write left running by the last pass, and books it. */
  private *settle(): Work {
    const write = this.detached;
    if (write === null) return;
    const result = yield SETTLE;
    this.detached = null;
    yield* this.afterWrite(result, write.pending, write.segment, write.op.fd);
  }

  /** Books a write: counts, rollover and retention after each unit (as the reference), or the failure. */
  private *afterWrite(written: IoResult, pending: PendingWrite, segment: SinkSegment, fd: number): Work {
    // The write is over (or given up): its buffer is free again.
    this.releaseChunk();
    if (!written.ok) {
      // Cut back what part of the chunk may have reached the file, and start a new segment later.
      yield { op: "truncate", fd, size: segment.size_bytes };
      yield* this.closeSegment(segment, "nosync");
      if (segment.size_bytes === 0) yield* this.removeEmptySegment(segment);
      return this.failWrite(written.error, pending, `write ${segment.filename}`);
    }
    if (this.config.fsync === "always") {
      const synced = yield { op: "fsync", fd };
      if (!synced.ok) this.recordFailure(synced.error, `fsync ${segment.filename}`);
    }
    this.succeeded("records");
    this.written += pending.events;
    this.manifestDirty ||= COUNTS;
    let rolled = false;
    for (const [events, bytes] of pending.units) {
      segment.event_count += events;
      segment.size_bytes += bytes;
      if (
        !segment.closed &&
        (segment.event_count >= this.config.rolloverMaxEvents ||
          segment.size_bytes >= this.config.rolloverMaxBytes)
      ) {
        segment.closed = true;
        rolled = true;
        this.rolloverCount++;
      }
      yield* this.applyRetention();
    }
    if (rolled) yield* this.closeSegment(segment, "background");
  }

  /** A segment whose first write failed: no empty file per retry (and its space back on a full disk). */
  private *removeEmptySegment(segment: SinkSegment): Work {
    const removed = yield { op: "unlink", path: join(this.rootDir, segment.filename) };
    if (!removed.ok) return;
    const index = this.segments.indexOf(segment);
    if (index >= 0) this.segments.splice(index, 1);
    this.manifestDirty = STRUCTURAL;
  }

  private failWrite(error: Error, pending: PendingWrite, action: string): void {
    this.droppedIo += pending.events;
    this.noteLoss(pending.sessionId, pending.events);
    this.needsMkdir = true;
    this.recordFailure(error, action);
  }

  /** Deletes the first closed segment while over a retention limit, as the reference (never the open one). */
  private *applyRetention(): Work {
    for (;;) {
      let total = 0;
      for (const segment of this.segments) total += segment.size_bytes;
      const over =
        this.segments.length > this.config.retentionMaxFiles || total > this.config.retentionMaxTotalBytes;
      if (!over) return;
      const victim = this.segments.find((segment) => segment.closed);
      if (victim === undefined) return;
      const removed = yield { op: "unlink", path: join(this.rootDir, victim.filename) };
      if (!removed.ok) {
        this.recordFailure(removed.error, `delete ${victim.filename} (retention)`);
        return;
      }
      this.segments.splice(this.segments.indexOf(victim), 1);
      this.prunedSegmentCount++;
      this.prunedBytes += victim.size_bytes;
      this.manifestDirty = STRUCTURAL;
    }
  }

  /**
   * Closes a segment's file: `sync` syncs it first and waits; `background` (rollover) syncs and
   * closes it on the thread pool while writing goes on in the next segment; `nosync` just closes.
   */
  private *closeSegment(segment: SinkSegment, mode: "sync" | "background" | "nosync" = "sync"): Work {
    yield* this.settle();
    if (this.current === segment && this.fd !== null) {
      const fd = this.fd;
      this.fd = null;
      this.current = null;
      const fsync = mode !== "nosync" && this.config.fsync !== "never";
      if (mode === "background" && fsync && !this.finalized) {
        // Synced once the next segment is open: a sync running meanwhile makes creating a file wait
        // for the journal (see closeDeferred).
        this.closeDeferredInBackground();
        this.deferredClose = { fd, segment };
      } else {
        const closed = yield { op: "close", fd, fsync };
        if (!closed.ok && fsync) this.recordFailure(closed.error, `fsync ${segment.filename}`);
      }
    }
    if (this.current === segment) this.current = null;
    segment.closed = true;
    this.manifestDirty = STRUCTURAL;
  }

  /** Starts the sync and close of a rolled-over segment on the thread pool; close() waits for it. */
  private closeDeferredInBackground(): void {
    const deferred = this.deferredClose;
    if (deferred === null) return;
    this.deferredClose = null;
    const { fd, segment } = deferred;
    const job = execAsync({ op: "close", fd, fsync: true }).then((closed) => {
      if (!closed.ok) this.recordFailure(closed.error, `fsync ${segment.filename}`);
    });
    this.backgroundCloses.add(job);
    void job.finally(() => this.backgroundCloses.delete(job));
  }

  /** The rolled-over segment's sync and close: in the background, or now on the exit path. */
  private *closeDeferred(): Work {
    const deferred = this.deferredClose;
    if (deferred === null) return;
    if (!this.finalized) {
      this.closeDeferredInBackground();
      return;
    }
    this.deferredClose = null;
    const closed = yield { op: "close", fd: deferred.fd, fsync: true };
    if (!closed.ok) this.recordFailure(closed.error, `fsync ${deferred.segment.filename}`);
  }

  private *finishSession(barrier: Barrier): Work {
    const current = this.current;
    if (current !== null && current.session_id === barrier.sessionId) yield* this.closeSegment(current);
    yield* this.closeDeferred();
    this.endSession(barrier);
    yield* this.writeManifest();
    // The directory is free for the next writer once its last session is on disk.
    if (this.activeSessionId === null && this.manifestDirty === 0 && !this.finalized) this.releaseLock();
    if (this.config.writeRollups && barrier.rollups && !this.finalized) {
      // Coverage as of this close, with this instance's pruning counters (as the reference).
      this.scheduleRollups(
        rollupCoverageFromManifest(
          { segments: this.segments },
          { segmentCount: this.prunedSegmentCount, bytes: this.prunedBytes },
        ),
      );
    }
  }

  /** Records the end of a session in the ledger; lost records turn `completed` into `incomplete`. */
  private endSession(barrier: Barrier): void {
    const sessionId = barrier.sessionId!;
    const summary = this.sessions.get(sessionId);
    const lost = (this.sessionLoss.get(sessionId) ?? 0) > 0;
    const status: SessionStatus = lost && barrier.status === "completed" ? "incomplete" : barrier.status;
    if (summary !== undefined)
      this.sessions.set(sessionId, { ...summary, status, ended_at_ns: barrier.endedAtNs });
    this.sessionLoss.delete(sessionId);
    this.manifestDirty = STRUCTURAL;
    if (this.activeSessionId === null) this.unregister();
  }

  /** Periodic work: refresh the manifest's counts, and notice an open segment deleted under us. */
  private *tickChecks(): Work {
    yield* this.settle();
    const fd = this.fd;
    const segment = this.current;
    if (fd !== null && segment !== null) {
      const links = yield { op: "nlink", fd };
      if (links.ok && links.value === 0) {
        // The file (or the whole directory) was deleted: what it held is gone.
        this.fd = null;
        this.current = null;
        yield { op: "close", fd, fsync: false };
        this.segments.splice(this.segments.indexOf(segment), 1);
        this.droppedIo += segment.event_count;
        this.written -= segment.event_count;
        this.noteLoss(segment.session_id, segment.event_count);
        this.needsMkdir = true;
        this.manifestDirty = STRUCTURAL;
        const error = Object.assign(new Error(`${segment.filename} was deleted while open`), {
          code: "ENOENT",
        });
        this.recordFailure(error, "keep writing (was the sink directory removed?)");
        return;
      }
    }
    if (this.manifestDirty !== 0) yield* this.writeManifest();
  }

  /** Writes the current manifest with blocking I/O (after closeSync, nothing else writes it). */
  private rewriteManifestSync(): void {
    try {
      writeManifestTextSync(this.rootDir, this.ledgerText(), false);
    } catch (error) {
      this.config.logger.warn(`${this.rootDir}: rewriting manifest.json failed: ${(error as Error).message}`);
    }
  }

  private *writeManifest(): Work {
    if (this.needsMkdir) {
      const made = yield { op: "mkdir", path: this.rootDir };
      if (!made.ok) {
        this.recordFailure(made.error, "create the sink directory");
        return;
      }
      this.needsMkdir = false;
    }
    const { text, fsync } = this.takeManifest();
    const token = this.pumpToken;
    const stillCurrent = (): boolean => token === this.pumpToken;
    const result = yield { op: "manifest", dir: this.rootDir, text, fsync, stillCurrent };
    if (!result.ok) {
      this.manifestFailed(result.error);
      return;
    }
    this.succeeded("ledger");
    yield* this.keepReserve();
  }

  /**
   * The manifest, trying hard (a session close while the disk fails, and the exit path): at once,
   * whatever the retry schedule; on a full disk, again after giving back the reserve. A failure here
   * leaves the ledger owed to the next retry without moving the schedule.
   */
  private *writeLedgerHard(): Work {
    if (this.needsMkdir) {
      const made = yield { op: "mkdir", path: this.rootDir };
      if (!made.ok) return;
      this.needsMkdir = false;
    }
    for (let attempt = 0; attempt < 2; attempt++) {
      const { text, fsync } = this.takeManifest();
      const result = yield { op: "manifest", dir: this.rootDir, text, fsync };
      if (result.ok) {
        this.succeeded("ledger");
        yield* this.keepReserve();
        return;
      }
      this.manifestDirty = STRUCTURAL;
      if (!this.reserveHeld || attempt > 0) return;
      const freed = yield { op: "unlink", path: join(this.rootDir, MANIFEST_RESERVE_FILENAME) };
      if (!freed.ok) return;
      this.reserveHeld = false;
    }
  }

  /**
   * Holds `manifest.reserve` while a session runs (made once per session, after its ledger entry is
   * on disk) and gives it back when none does.
   */
  private *keepReserve(): Work {
    const path = join(this.rootDir, MANIFEST_RESERVE_FILENAME);
    if (this.activeSessionId === null) {
      this.reserveTried = false;
      if (!this.reserveHeld) return;
      const removed = yield { op: "unlink", path };
      if (removed.ok) this.reserveHeld = false;
      return;
    }
    if (this.reserveHeld || this.reserveTried || this.finalized) return;
    this.reserveTried = true;
    const made = yield { op: "reserve", path, bytes: RESERVE_BYTES };
    this.reserveHeld = made.ok;
  }

  /** The ledger's text: sessions, segments, and what sessions lost. */
  private ledgerText(): string {
    return serializeManifest(this.sessions.values(), this.segments, this.losses.values());
  }

  /** The whole ledger is written again at the retry (the directory made first: it may be gone). */
  private manifestFailed(error: Error): void {
    this.manifestDirty = STRUCTURAL;
    this.manifestOwed = false;
    this.needsMkdir = true;
    this.recordFailure(error, "write manifest.json");
  }

  /**
   * The ledger to write now, and whether to sync it (segment changes are synced under "segment");
   * what was owed is then no longer owed.
   */
  private takeManifest(): { text: string; fsync: boolean } {
    const structural = this.manifestDirty === STRUCTURAL || this.manifestOwed;
    this.manifestDirty = 0;
    this.manifestOwed = false;
    const text = this.ledgerText();
    return { text, fsync: this.config.fsync === "always" || (structural && this.config.fsync === "segment") };
  }

  /**
   * Writes the manifest after a segment change (rollover, new segment, pruning) on the thread pool
   * while records keep being written: its sync (fsync "segment") then costs the writer no time, as
   * the rolled-over segment's own sync. One write at a time: a change made meanwhile is written when
   * it ends; the writer's own manifest writes (session start and close, flush, tick) wait for it.
   */
  private writeManifestBehind(): void {
    // The directory must be made first: the writer's own path does that.
    if (this.needsMkdir || this.finalized) return;
    if (this.manifestJob !== null) {
      this.manifestOwed = true;
      this.manifestDirty = 0;
      return;
    }
    const { text, fsync } = this.takeManifest();
    // After closeSync (the exit path) took over, this write must not replace its manifest.
    const stillCurrent = (): boolean => !this.finalized;
    this.manifestJob = execAsync({ op: "manifest", dir: this.rootDir, text, fsync, stillCurrent }).then(
      (result) => {
        this.manifestJob = null;
        if (this.finalized) return;
        if (!result.ok) {
          this.manifestFailed(result.error);
          return;
        }
        this.succeeded("ledger");
        if (!this.manifestOwed) return;
        if (this.inBackoff() || this.needsMkdir) {
          this.manifestOwed = false;
          this.manifestDirty = STRUCTURAL;
          this.kick();
        } else {
          this.writeManifestBehind();
        }
      },
    );
  }

  // ---------------------------------------------------------------- failures

  /** The retry schedule and failure messages (made on first use: recovery may fail in the constructor). */
  private get retry(): RetryPolicy {
    this.retryPolicy ??= new RetryPolicy({
      firstSeconds: this.config.failureBackoffSeconds,
      maxSeconds: this.config.failureBackoffMaxSeconds,
      clock: this.config.clock,
      logger: this.config.logger,
      subject: () => this.rootDir,
      lostSoFar: () => this.droppedIo,
    });
    return this.retryPolicy;
  }

  private recordFailure(error: Error, action: string): void {
    this.retry.fail(error, action);
    // The tick re-arms for the retry's time.
    if (this.tickTimer !== null) {
      this.config.scheduler.clearTimeout(this.tickTimer);
      this.tickTimer = null;
    }
    this.ensureTick();
  }

  /**
   * A write reached the disk. A manifest written while records still wait is no recovery: the
   * records decide (their write is the one that failed), so the schedule goes on.
   */
  private succeeded(what: "records" | "ledger"): void {
    if (!this.retry.failing) return;
    if (what === "ledger" && (this.queuedRecords > 0 || this.pending !== null || this.bufferCount > 0))
      return;
    this.retry.succeed();
  }

  // ---------------------------------------------------------------- process exit

  private async closeBeforeExit(exitCode: number): Promise<void> {
    if (this.activeSessionId !== null) await this.close(exitCode === 0 ? "completed" : "interrupted");
  }

  private unregister(): void {
    const unregister = this.unregisterExit;
    this.unregisterExit = null;
    unregister?.();
  }

  // ---------------------------------------------------------------- rollups

  /** Rebuilds rollups.json from the directory (after the session's close); a failure is logged, never raised. */
  private scheduleRollups(coverage: RollupCoverage): void {
    const job = this.buildRollups(coverage).catch((error: unknown) => {
      this.config.logger.warn(`${this.rootDir}: rollups.json was not written: ${(error as Error).message}`);
    });
    this.rollupJobs.push(job);
    void job.finally(() => {
      this.rollupJobs = this.rollupJobs.filter((pending) => pending !== job);
    });
  }

  private async buildRollups(coverage: RollupCoverage): Promise<void> {
    const rollups = await buildTelemetryRollups(this.rootDir, {
      windowSeconds: this.config.rollupWindowSeconds,
      coverage,
      clock: this.config.clock,
    });
    await writeTelemetryRollups(this.rootDir, rollups);
  }

  private rollupsSettled(): Promise<void> {
    return Promise.all([...this.rollupJobs, this.backgroundSettled()]).then(() => undefined);
  }
}
