import { hostname } from "node:os";
import { dirname, join } from "node:path";
import type { Clock, SessionStatus, SessionSummary, TelemetryEvent, TimerHandle } from "@stormlog/core";
import { createSessionSummary } from "@stormlog/core/internal";
import {
  rewriteManifestInPlaceSync,
  type SinkSegment,
  writeManifestTextSync,
} from "../directory/manifest.js";
import { PROBE_FILENAME, type RecoveryReport, recoverSinkDirectory } from "../directory/recovery.js";
import { claimSinkDirectory, SinkDirectoryLockedError, type WriterLock } from "../directory/writer-lock.js";
import { SinkSessionMismatchError } from "../errors.js";
import {
  buildTelemetryRollups,
  type RollupCoverage,
  rollupCoverageFromManifest,
  writeTelemetryRollups,
} from "../rollups/rollups.js";
import { ChunkEncoder } from "./chunk-encoder.js";
import { type ResolvedSinkConfig, resolveSinkConfig, type TelemetrySinkOptions } from "./config.js";
import { SinkCounters, type SinkDiagnostics } from "./counters.js";
import { registerExitParticipant } from "./exit-hooks.js";
import {
  execAsync,
  execSync,
  FILE_DELETED,
  FILE_HERE,
  IO_OK,
  type IoOp,
  type IoResult,
  isDirectoryDenied,
  isOutOfSpace,
  MADE,
} from "./io.js";
import { ManifestLedger } from "./manifest-ledger.js";
import { whyNotWritable } from "./record-check.js";
import { RetryPolicy } from "./retry-policy.js";
import { SegmentSet } from "./segments.js";

export type { SinkDiagnostics } from "./counters.js";
export { MANIFEST_RESERVE_FILENAME } from "./manifest-ledger.js";

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
type Work<T = void> = Generator<Step, T, IoResult>;
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
 * the chunk's first `bytes` bytes.
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

/** Where the open segment's file went when its path no longer leads to it (`where`: when the system tells). */
interface Sighting {
  readonly deleted: boolean;
  readonly where: string | undefined;
}

/** Pending bytes that start a write without waiting for the rest of the queue. */
const WRITE_AT_BYTES = 4 << 20;
/**
 * After records failed, with none waiting to show that the disk takes them again: a file of a write's
 * size (a flush unit of ~50 records), `PROBE_FILENAME`, is written and removed.
 */
const PROBE_BYTES = 64 << 10;

/**
 * An append-only JSONL telemetry sink that writes the Python reference's layout
 * (`segment-NNNNNN.jsonl` + `manifest.json`), with rollover, retention and recovery as the reference.
 *
 * `append()` is synchronous and cheap: it queues the record and returns. Encoding happens right after
 * the caller's synchronous code (a microtask) or on the flush timer, and every disk operation is
 * asynchronous (libuv's thread pool). Disk failures never reach the caller:
 * records are counted as dropped, the session ends `incomplete`, one message is logged, and
 * `getDiagnostics()` tells the state. See the package README for the fsync policy and layouts.
 *
 * Inside, the writer is a generator of I/O steps (`work`) that a driver runs asynchronously, or
 * synchronously on process exit. It keeps the queue and the files open; the rest is in parts beside
 * it in `writer/`: the chunk encoder, the segment set (rollover, retention), the manifest ledger, the
 * retry policy and the counters.
 */
export class TelemetrySink {
  readonly config: ResolvedSinkConfig;
  /** What opening the directory found and repaired. */
  readonly recovery: RecoveryReport | null;

  private readonly segments: SegmentSet;
  private readonly ledger: ManifestLedger;
  private readonly chunk = new ChunkEncoder();
  private readonly counters: SinkCounters;
  private readonly retry: RetryPolicy;

  /** The directory written: `config.rootDir`, or the one beside it when another live process writes that. */
  private directory: string;
  /** Held from opening the directory until its last session is closed (taken again by the next session). */
  private lock: WriterLock | null = null;

  private queue: QueueEntry[] = [];
  // Copies of two options read on every append.
  private readonly maxQueue: number;
  private readonly flushEvery: number;
  private queuedRecords = 0;
  private barriersQueued = 0;

  /** Units encoded in the chunk and waiting for their write. */
  private pending: PendingWrite | null = null;
  /** The last write of a pass, left running while the next records are encoded (see settle). */
  private detached: DetachedWrite | null = null;
  /** The open segment and its file. */
  private current: SinkSegment | null = null;
  private fd: number | null = null;
  /** A rolled-over segment waiting for the next segment to be open before its sync and close. */
  private deferredClose: { fd: number; segment: SinkSegment } | null = null;
  private needsMkdir = false;
  private needsRecovery = false;

  // The driver: one run of `work` at a time; closeSync takes over by moving the token.
  private pumpRunning = false;
  private kickPending = false;
  private pumpToken = 0;
  private activeWork: Work | null = null;
  private inflightOp: Step | null = null;
  /** The thread-pool promise of `inflightOp`. */
  private inflightPromise: Promise<IoResult> | null = null;
  /**
   * Descriptors that a thread-pool write the exit path took over from may still write to, with that
   * write's promise: closed before it lands, the number could go to the next file opened here, and the
   * late write put a chunk of records into that file (a torn line in another segment).
   */
  private readonly poolHeld = new Map<number, Promise<IoResult>>();
  /** True while `workHereSync` runs the writer's steps with blocking I/O on this thread. */
  private drivenHere = false;
  private idleWaiters: (() => void)[] = [];
  private tickTimer: TimerHandle | null = null;
  private finalized = false;
  private unregisterExit: (() => void) | null = null;
  /** Rollups builds not yet written: the directory stays locked until none is left. */
  private rollupsBuilding = 0;
  /** Work close() waits for: rolled-over segments' sync and close, rollups.json. */
  private readonly background = new Set<Promise<void>>();

  /**
   * Opens (or creates) the sink directory and recovers what a previous writer left (blocking, once).
   * Throws `InvalidConfigError` for bad options only: a directory that cannot be opened is logged
   * and retried like any disk failure.
   */
  constructor(options: TelemetrySinkOptions) {
    const config = resolveSinkConfig(options);
    this.config = config;
    this.directory = config.rootDir;
    this.maxQueue = config.maxQueueEvents;
    this.flushEvery = config.flushEveryEvents;
    this.segments = new SegmentSet(config);
    this.ledger = new ManifestLedger(this.segments, config.fsync, config.retentionMaxFiles);
    this.counters = new SinkCounters(config.logger, () => this.rootDir, config.maxQueueEvents);
    this.retry = new RetryPolicy({
      firstSeconds: config.failureBackoffSeconds,
      maxSeconds: config.failureBackoffMaxSeconds,
      clock: config.clock,
      logger: config.logger,
      subject: () => this.rootDir,
      lostSoFar: () => this.counters.droppedIo,
    });
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
      this.segments.adopt(state.segments, state.nextSegmentIndex);
      this.ledger.adopt(state.sessions, state.losses);
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
    if (claimed.directory !== this.directory) this.segments.nextIndex = 1;
    this.directory = claimed.directory;
    const owner = claimed.movedAsideFrom;
    if (owner !== null) {
      const writer =
        owner.pid === process.pid && owner.host === hostname()
          ? "another sink of this process"
          : `pid ${owner.pid} on ${owner.host}`;
      this.config.logger.info?.(
        `${this.config.rootDir} is being written by ${writer}: this sink writes beside it, to ` +
          `${claimed.directory} (readers given ${this.config.rootDir} read both)`,
      );
    }
  }

  /** Before a session after the last one closed: take the directory again (it may have had other writers). */
  private reopen(): void {
    if (this.lock !== null || this.finalized || this.needsRecovery) return;
    if (this.recover() === null) this.needsRecovery = true;
  }

  private releaseLock(): void {
    // Kept when its file cannot be removed (a read-only directory): other writers still see it.
    if (this.lock?.release() !== false) this.lock = null;
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
    this.ledger.open(summary);
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
    return this.ledger.current();
  }

  /**
   * Queues a record; never waits for the disk and never throws because of it. Starts a session
   * (adopting the record's `session_id` and identity) if none is open. Throws
   * `SinkSessionMismatchError` for a record of another session than the open one. The record is
   * read later, when it is encoded: do not change it after appending.
   */
  append(record: TelemetryEvent): void {
    if (record.session_id !== this.ledger.activeSessionId) this.adoptSession(record);
    if (this.queuedRecords >= this.maxQueue) {
      this.counters.droppedForQueue();
      this.ledger.noteLoss(this.ledger.activeSessionId, 1, "queue");
      return;
    }
    this.queuedRecords++;
    this.counters.appended++;
    this.queue.push(record);
    if (this.queue.length >= this.flushEvery && !this.kickPending) this.kick();
  }

  /**
   * Counts `count` records that the producer dropped before appending them, too far behind (the
   * tracker's sink worker): as records `append` drops for a full queue, in the diagnostics and, with a
   * session open, in its losses (it closes `incomplete`). Logs once. Anything but a positive integer
   * is ignored.
   */
  countDropped(count: number): void {
    if (!(Number.isSafeInteger(count) && count > 0)) return;
    this.counters.droppedByProducer(count);
    this.ledger.noteLoss(this.ledger.activeSessionId, count, "queue");
  }

  /**
   * Writes everything appended so far, and the manifest. Resolves when it is on disk (or counted as
   * dropped); while the disk is failing, at once (the records wait in the queue for the retry).
   * Never rejects.
   */
  flush(): Promise<void> {
    if (this.finalized) return Promise.resolve();
    if (!this.hasBacklog() && this.ledger.settled) {
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
    const sessionId = this.ledger.detach();
    // A close tries the disk at once, whatever the retry schedule: a short outage that is over must
    // not cost what waits (up to a minute's backoff away), as the exit path does.
    this.retry.attemptNow();
    if (sessionId === null) return this.flush().then(() => this.backgroundSettled());
    const closed = new Promise<void>((resolve) => {
      this.pushBarrier(new Barrier("close", resolve, sessionId, status, this.config.clock.nowNs(), rollups));
      this.kick(true);
    });
    return closed.then(() => this.backgroundSettled());
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
    const sessionId = this.ledger.detach();
    if (sessionId !== null) {
      this.pushBarrier(new Barrier("close", null, sessionId, status, this.config.clock.nowNs()));
    } else {
      this.pushBarrier(new Barrier("flush", null));
    }
    this.cancelTimers();
    try {
      this.workHereSync();
      // One last try at the ledger even if the disk failed above.
      if (this.ledger.stale) this.runToEndSync(this.writeLedgerHard());
    } catch (error) {
      this.config.logger.warn(`closing ${this.rootDir} on exit failed: ${(error as Error).message}`);
    }
    this.releaseLock();
    this.resolveIdle();
  }

  /**
   * `writeQueued` with blocking I/O on this thread, for the exit path of a producer with more records
   * than the queue holds (the tracker's sink worker on `process.exit()`): append up to the queue's
   * bound, write, append more. Never throws.
   */
  writeQueuedSync(): void {
    if (this.finalized) return;
    try {
      this.workHereSync();
    } catch (error) {
      this.config.logger.warn(`writing ${this.rootDir} on exit failed: ${(error as Error).message}`);
    }
    this.resolveIdle();
  }

  /**
   * Takes over from the asynchronous driver (it stops at its next step) and does all the work there
   * is with blocking I/O, trying the disk at once whatever the retry schedule.
   */
  private workHereSync(): void {
    this.pumpToken++;
    const interrupted = this.activeWork;
    const inflight = this.inflightOp;
    this.activeWork = null;
    this.inflightOp = null;
    this.pumpRunning = false;
    const inflightPromise = this.inflightPromise;
    this.inflightPromise = null;
    // A write under way on the thread pool is done again here, but may still read its buffer later:
    // reused, that buffer would put newer lines at the old write's place (a torn line at exit).
    if (inflight !== null || (this.detached !== null && this.detached.result === null))
      this.chunk.abandonWriting();
    // Nor may its descriptor be closed before it lands (`poolHeld`).
    if (inflight?.op === "write" && inflightPromise !== null)
      this.holdUntilLanded(inflight.fd, inflightPromise);
    if (this.detached !== null && this.detached.result === null)
      this.holdUntilLanded(this.detached.op.fd, this.detached.promise);
    this.retry.attemptNow();
    this.drivenHere = true;
    try {
      if (interrupted !== null) {
        // The step in flight is done again (steps are positional), but a close is not repeated.
        const redone = inflight === null || inflight.op === "close" ? IO_OK : this.runSync(inflight);
        this.runToEndSync(interrupted, redone);
      }
      this.runToEndSync(this.work());
    } finally {
      this.drivenHere = false;
    }
  }

  /** The reference's counters plus this package's queue and failure state. */
  getDiagnostics(): SinkDiagnostics {
    return this.counters.diagnostics(
      this.segments,
      this.retry,
      this.pendingEvents,
      this.ledger.activeSessionId,
    );
  }

  /**
   * Records appended but not yet written (queued, or encoded and waiting for their flush). Cheap to
   * read: a producer that must not lose records can wait while it is high (backpressure).
   */
  get pendingEvents(): number {
    return (
      this.queuedRecords +
      this.chunk.unitCount +
      (this.pending?.events ?? 0) +
      (this.detached?.pending.events ?? 0)
    );
  }

  /**
   * Records appended and not yet encoded. Each waits as an object: a producer that appends in bursts
   * (the tracker's sink worker) lets them be encoded (`writeQueued`) every few hundred, as objects
   * that live across many allocations cost the garbage collector most of all.
   */
  get queuedEvents(): number {
    return this.queuedRecords;
  }

  /**
   * Encodes and writes what is queued, without a manifest write of its own (`flush` writes one).
   * Resolves once the writer is idle: what was queued encoded (whole flush units written, the last
   * write possibly under way; a part unit waits for the next write or tick). While the disk is
   * failing, at once (the records wait for the retry). Never rejects.
   */
  writeQueued(): Promise<void> {
    if (this.queue.length > 0) this.kick(true);
    return this.whenIdle();
  }

  /** The sessions ledger as it stands in memory (what the next manifest will hold). */
  getSessions(): SessionSummary[] {
    return [...this.ledger.sessions.values()];
  }

  /** The segments list as it stands in memory. */
  getSegments(): SinkSegment[] {
    return this.segments.list.map((segment) => ({ ...segment }));
  }

  /** `await using sink = new TelemetrySink(...)` closes the session as `completed`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---------------------------------------------------------------- hot path helpers

  private adoptSession(record: TelemetryEvent): void {
    const sessionId = (record as { session_id?: unknown }).session_id;
    const activeSessionId = this.ledger.activeSessionId;
    if (activeSessionId === null) {
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
    throw new SinkSessionMismatchError(activeSessionId, sessionId);
  }

  private pushBarrier(barrier: Barrier): void {
    this.barriersQueued++;
    this.queue.push(barrier);
  }

  /** Records or barriers the writer has not finished with (queued, encoded, or being written). */
  private hasBacklog(): boolean {
    return (
      this.queue.length > 0 || this.chunk.unitCount > 0 || this.pending !== null || this.detached !== null
    );
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
    const hasWork = this.hasWork();
    if (hasWork && !this.retry.inBackoff()) {
      this.pushBarrier(new Barrier("tick", null));
      this.startPump();
    }
    if (this.ledger.activeSessionId !== null || hasWork) this.ensureTick();
  }

  /**
   * What the tick is for: records or a manifest owed to the disk, an open file, a directory to
   * recover; while a session is open, a disk that failed its records (see probeForRecords).
   */
  private hasWork(): boolean {
    return (
      this.hasBacklog() ||
      this.ledger.stale ||
      this.fd !== null ||
      this.needsRecovery ||
      (this.retry.recordsFailing && this.ledger.activeSessionId !== null)
    );
  }

  private cancelTimers(): void {
    if (this.tickTimer !== null) this.config.scheduler.clearTimeout(this.tickTimer);
    this.tickTimer = null;
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
    if (step.op === "close") {
      const held = this.poolHeld.get(step.fd);
      if (held !== undefined) return this.closeOnceLanded(step.fd, step.fsync, held);
    }
    if (step.op !== "settle") return execSync(step);
    return this.detached === null ? IO_OK : execSync(this.detached.op);
  }

  /** Keeps `fd` from being closed here until `write` has landed; forgotten once it has. */
  private holdUntilLanded(fd: number, write: Promise<IoResult>): void {
    this.poolHeld.set(fd, write);
    void write.then(() => {
      if (this.poolHeld.get(fd) === write) this.poolHeld.delete(fd);
    });
  }

  /**
   * The close of a descriptor a taken-over thread-pool write may still use (`poolHeld`): synced now,
   * closed once that write has landed (on `process.exit()` the process closes it).
   */
  private closeOnceLanded(fd: number, fsync: boolean, held: Promise<IoResult>): IoResult {
    this.poolHeld.delete(fd);
    const synced = fsync ? execSync({ op: "fsync", fd }) : IO_OK;
    void held.finally(() => execSync({ op: "close", fd, fsync: false }));
    return synced;
  }

  /** Runs steps to their end on the calling thread; `first` answers a step already run. */
  private runToEndSync<T>(work: Work<T>, first: IoResult = IO_OK): void {
    let result = first;
    for (let step = work.next(result); !step.done; step = work.next(result))
      result = this.runSync(step.value);
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
        if (step.value.op === "manifest" && this.ledger.job !== null) {
          // One manifest write at a time (they share manifest.tmp).
          while (this.ledger.job !== null) await this.ledger.job;
          if (token !== this.pumpToken) return;
        }
        const running = this.runAsync(step.value);
        this.inflightPromise = running;
        result = await running;
        if (token !== this.pumpToken) {
          // The exit path took over while this step ran. A manifest rename already handed to the
          // thread pool can land after closeSync's own: write the current ledger once more.
          if (step.value.op === "manifest") this.rewriteManifestSync();
          return;
        }
        this.inflightOp = null;
        this.inflightPromise = null;
      }
    } catch (error) {
      this.config.logger.warn(
        `${this.rootDir}: internal error in the sink writer: ${(error as Error).stack ?? error}`,
      );
    }
    if (token !== this.pumpToken) return;
    this.activeWork = null;
    this.pumpRunning = false;
    if (this.tickTimer === null && (this.ledger.activeSessionId !== null || this.queue.length > 0))
      this.ensureTick();
    // Work that arrived meanwhile: records beyond a unit, or a barrier.
    const more =
      this.barriersQueued > 0 ||
      this.queue.length >= this.flushEvery ||
      this.pending !== null ||
      (this.detached !== null && this.detached.result !== null) ||
      this.ledger.structurallyStale;
    if (more && !this.retry.inBackoff()) {
      this.startPump();
      return;
    }
    if (this.ledger.activeSessionId === null && !this.hasWork()) {
      // The last session is closed and on disk: nothing keeps the sink (its buffers, its ledger) alive
      // until a tick that would find nothing to do. A process opening a session per job closed many a
      // flush interval, and held them all.
      this.cancelTimers();
      this.chunk.shed();
    }
    this.resolveIdle();
  }

  // ---------------------------------------------------------------- the writer (a generator of I/O steps)

  private *work(): Work {
    if (this.needsRecovery && !this.retry.inBackoff()) {
      this.needsRecovery = false;
      if (this.recover() === null) this.needsRecovery = true;
    }
    // A new session's ledger entry goes to disk before its first record.
    if (this.ledger.structurallyStale && !this.retry.inBackoff() && !this.needsRecovery)
      yield* this.writeManifest();
    // Units kept pending while the disk failed are written at the retry, even with nothing queued.
    while (this.queue.length > 0 || this.pending !== null) {
      if (this.retry.inBackoff() || this.needsRecovery) {
        yield* this.settle();
        const closed = this.passWithoutIo();
        if (closed.length > 0) {
          // close() tries hard: the ledger is written now, off the schedule, with the reserve if need be.
          const current = this.current;
          if (current?.closed) yield* this.closeSegment(current, "nosync");
          if (!this.needsRecovery && (yield* this.writeLedgerHard()) === null) this.releaseIfDone();
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
    if (this.ledger.structurallyStale && !this.retry.inBackoff()) this.writeManifestBehind();
  }

  /** One pass over the queue: encode records into flush units, write them, handle barriers in order. */
  private *pass(): Work {
    const entries = this.queue;
    this.queue = [];
    const flushEvery = this.flushEvery;
    const chunk = this.chunk;
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!;
      if (entry instanceof Barrier) {
        this.flushUnit();
        yield* this.writePending();
        yield* this.settle();
        // The disk just failed: the barrier is handled without I/O (see passWithoutIo).
        if (this.retry.inBackoff()) return this.requeue(entries, i);
        this.barriersQueued--;
        if (entry.kind === "close") yield* this.finishSession(entry);
        else if (entry.kind === "tick") yield* this.tickChecks();
        // A flush resolves once the manifest is on disk, a background write's included.
        else if (!this.ledger.settled) yield* this.writeManifest();
        entry.resolve?.();
        if (this.retry.inBackoff()) return this.requeue(entries, i + 1);
        continue;
      }
      const problem = whyNotWritable(entry);
      if (problem !== undefined) {
        this.queuedRecords--;
        this.counters.refused(problem);
        continue;
      }
      if (chunk.unitCount > 0 && chunk.unitSession !== entry.session_id) this.flushUnit();
      if (this.pending !== null && this.pending.sessionId !== entry.session_id) {
        yield* this.writePending();
        // The earlier session's lines wait for the retry: this record waits behind them.
        if (this.retry.inBackoff()) return this.requeue(entries, i);
      }
      this.queuedRecords--;
      if (chunk.encode(entry) === 0) {
        this.counters.refused(`it cannot be encoded as JSON (${chunk.lastError})`);
        continue;
      }
      if (chunk.unitCount >= flushEvery) {
        this.flushUnit();
        const pending = this.pending;
        if (pending !== null && (pending.endsSegment || pending.bytes >= WRITE_AT_BYTES)) {
          yield* this.writePending();
          if (this.retry.inBackoff()) return this.requeue(entries, i + 1);
        }
      }
    }
    yield* this.writePending();
    // New or closed segments, pruning: the manifest follows at once (counts alone wait for the tick),
    // without holding up the records.
    if (this.ledger.structurallyStale && !this.retry.inBackoff()) this.writeManifestBehind();
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
        const dropped = this.chunk.unitCount + (this.pending?.events ?? 0) + kept.length;
        this.chunk.clear();
        this.pending = null;
        this.queuedRecords -= kept.length;
        kept.length = 0;
        this.lostToDisk(entry.sessionId, dropped);
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

  /** Moves the chunk's open unit into the pending write: one reference "flush" (rollover is checked after it). */
  private flushUnit(): void {
    const chunk = this.chunk;
    if (chunk.unitCount === 0) return;
    const sessionId = chunk.unitSession!;
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
    const baseEvents = (reuse ? current.event_count : 0) + inflightEvents + pending.events + chunk.unitCount;
    const baseBytes = (reuse ? current.size_bytes : 0) + inflightBytes + pending.bytes + chunk.unitBytes;
    pending.events += chunk.unitCount;
    pending.bytes += chunk.unitBytes;
    pending.units.push([chunk.unitCount, chunk.unitBytes]);
    if (this.segments.reachesRollover(baseEvents, baseBytes)) pending.endsSegment = true;
    chunk.closeUnit();
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
    if (this.retry.inBackoff()) return;
    const pending = this.pending;
    this.pending = null;
    let segment = this.current;
    if (segment === null || segment.closed || segment.session_id !== pending.sessionId) {
      if (segment !== null && !segment.closed) yield* this.closeSegment(segment);
      const unmade = yield* this.remakeDirectory();
      if (unmade !== null) {
        this.chunk.consume(pending.bytes);
        return this.failWrite(unmade, pending, "create the sink directory");
      }
      const filename = this.segments.nextFilename();
      const opened = yield { op: "open", path: join(this.rootDir, filename) };
      if (!opened.ok) {
        this.chunk.consume(pending.bytes);
        return this.failWrite(opened.error, pending, `create ${filename}`);
      }
      segment = this.segments.add(pending.sessionId);
      this.current = segment;
      this.fd = opened.value;
      this.ledger.changed();
    }
    yield* this.closeDeferred();
    const fd = this.fd!;
    const data = this.chunk.take(pending.bytes);
    const op: WriteOp = { op: "write", fd, data, position: segment.size_bytes };
    // Driven here (the exit path), a write is done here: left on the thread pool it was done again here
    // at once, and its buffer, released by that, was encoded into while the pool still read it.
    if (this.config.fsync !== "always" && !this.finalized && !this.drivenHere) {
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
    this.chunk.release();
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
    this.counters.written += pending.events;
    this.ledger.countsChanged();
    let rolled = false;
    for (const [events, bytes] of pending.units) {
      if (this.segments.book(segment, events, bytes)) rolled = true;
      yield* this.applyRetention();
    }
    if (rolled) yield* this.closeSegment(segment, "background");
  }

  /** A segment whose first write failed: no empty file per retry (and its space back on a full disk). */
  private *removeEmptySegment(segment: SinkSegment): Work {
    const removed = yield { op: "unlink", path: join(this.rootDir, segment.filename) };
    if (!removed.ok) return;
    this.segments.remove(segment);
    this.ledger.changed();
  }

  private failWrite(error: Error, pending: PendingWrite, action: string): void {
    this.lostToDisk(pending.sessionId, pending.events);
    this.needsMkdir = true;
    this.recordFailure(error, action, true);
  }

  /** Records lost to the disk: counted, and in their session's manifest entry. */
  private lostToDisk(sessionId: string | null, count: number): void {
    this.counters.droppedIo += count;
    this.ledger.noteLoss(sessionId, count, "io");
  }

  /** Deletes segments while over a retention limit (see SegmentSet.retentionVictim). */
  private *applyRetention(): Work {
    const segments = this.segments;
    for (let victim = segments.retentionVictim(); victim !== undefined; victim = segments.retentionVictim()) {
      const removed = yield { op: "unlink", path: join(this.rootDir, victim.filename) };
      if (!removed.ok) {
        this.recordFailure(removed.error, `delete ${victim.filename} (retention)`);
        return;
      }
      segments.pruned(victim);
      this.ledger.changed();
    }
  }

  /**
   * After a failure the directory may be gone: makes it again first (see directoryGone). `sighting`:
   * where the open segment went, when that is what showed it. The error, or null.
   */
  private *remakeDirectory(sighting: Sighting | null = null): Work<Error | null> {
    if (!this.needsMkdir) return null;
    const made = yield { op: "mkdir", path: this.rootDir };
    if (!made.ok) return made.error;
    this.needsMkdir = false;
    if (made.value === MADE) yield* this.directoryGone(sighting);
    return this.relock();
  }

  /**
   * Notices the open segment deleted or moved, or the directory removed or moved away (mv), under the
   * writer: what is no longer in the directory is counted as lost, so the session's status stays true,
   * and writing goes on. The open segment is looked at (two stats); `always` (a session's close) also
   * checks the directory without one.
   */
  private *checkDirectory(always: boolean): Work {
    yield* this.settle();
    const segment = this.current;
    let sighting: Sighting | null = null;
    if (this.fd !== null && segment !== null) {
      sighting = yield* this.locateOpenSegment();
      if (sighting === null) return;
    } else if (!always) {
      return;
    }
    this.needsMkdir = true;
    const unmade = yield* this.remakeDirectory(sighting);
    if (unmade !== null) {
      this.recordFailure(unmade, "create the sink directory");
      return;
    }
    // The directory stayed: only the open segment went.
    if (sighting !== null && this.current === segment && segment !== null) {
      yield* this.dropOpenSegment();
      this.segments.remove(segment);
      const lost = this.loseSegment(segment);
      const how = sighting.deleted
        ? "deleted"
        : `moved ${sighting.where === undefined ? "away" : `to ${sighting.where}`}`;
      this.config.logger.warn(
        `${this.rootDir}: ${segment.filename} was ${how} while open: its ${lost} record(s) are counted as ` +
          "lost (the session will close incomplete); writing goes on in a new segment",
      );
    }
  }

  /** Null while the open segment's path still leads to its file; else where the file went. */
  private *locateOpenSegment(): Work<Sighting | null> {
    const segment = this.current;
    if (this.fd === null || segment === null) return null;
    const located = yield { op: "locate", fd: this.fd, path: join(this.rootDir, segment.filename) };
    if (!located.ok || located.value === FILE_HERE) return null;
    return { deleted: located.value === FILE_DELETED, where: located.path };
  }

  /** Closes the open segment's file without syncing it (it is no longer in the directory). */
  private *dropOpenSegment(): Work {
    const fd = this.fd;
    const segment = this.current;
    this.fd = null;
    this.current = null;
    if (segment !== null) segment.closed = true;
    if (fd !== null) yield { op: "close", fd, fsync: false };
  }

  /** A segment no longer in the directory: an open session's records in it are lost. The count. */
  private loseSegment(segment: SinkSegment): number {
    if (!this.ledger.isOpen(segment.session_id)) return 0;
    this.counters.written -= segment.event_count;
    this.lostToDisk(segment.session_id, segment.event_count);
    this.ledger.changed();
    return segment.event_count;
  }

  /**
   * The directory written so far was gone (removed, or moved away) and was made again: none of its
   * segments is in the new one. The open sessions' records in them are counted as lost (they close
   * `incomplete`); closed sessions stay in the old directory's manifest, not listed here again.
   */
  private *directoryGone(sighting: Sighting | null): Work {
    yield* this.settle();
    if (this.fd !== null) {
      sighting ??= yield* this.locateOpenSegment();
      yield* this.dropOpenSegment();
    }
    let lost = 0;
    for (const segment of this.segments.list) lost += this.loseSegment(segment);
    this.segments.adopt([], this.segments.nextIndex);
    this.ledger.forgetDirectory();
    const how =
      sighting === null
        ? "was removed or moved away"
        : sighting.deleted
          ? "was removed"
          : `was moved ${sighting.where === undefined ? "away" : `to ${dirname(sighting.where)}`}`;
    const loss =
      lost === 0
        ? ""
        : `: ${lost} record(s) of the open session went with it and are counted as lost here (the session will close incomplete)`;
    this.config.logger.warn(
      `${this.rootDir}: the sink directory ${how} while being written${loss}; writing goes on in ${this.rootDir}, made again`,
    );
  }

  /**
   * The directory was removed with its lock and made again: the lock goes back, or, when another
   * writer took the directory meanwhile, this one moves beside it (as at the start). Null when done.
   */
  private relock(): Error | null {
    const lock = this.lock;
    if (lock === null) return null;
    try {
      if (lock.renew()) return null;
      const taken = this.directory;
      this.lock = null;
      this.claimDirectory();
      this.config.logger.warn(
        `${taken} was removed and taken by another writer before this one made it again: ` +
          `this sink goes on in ${this.directory}`,
      );
      this.ledger.changed();
      return null;
    } catch (error) {
      return error as Error;
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
    this.ledger.changed();
  }

  /** Starts the sync and close of a rolled-over segment on the thread pool; close() waits for it. */
  private closeDeferredInBackground(): void {
    const deferred = this.deferredClose;
    if (deferred === null) return;
    this.deferredClose = null;
    const { fd, segment } = deferred;
    this.runBehind(
      execAsync({ op: "close", fd, fsync: true }).then((closed) => {
        if (!closed.ok) this.recordFailure(closed.error, `fsync ${segment.filename}`);
      }),
    );
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
    // Counted as building from here, not from when the build starts: an earlier close's build that
    // ended while this one wrote the ledger freed the directory before this close's rollups.json.
    const rollups = this.config.writeRollups && barrier.rollups;
    if (rollups) this.rollupsBuilding++;
    try {
      // The status must tell what the directory holds: records that left with it are lost to it.
      yield* this.checkDirectory(true);
      const current = this.current;
      if (current !== null && current.session_id === barrier.sessionId) yield* this.closeSegment(current);
      yield* this.closeDeferred();
      this.endSession(barrier);
      // close() tries hard: on a full disk with the reserve's space, or in place.
      const failed = yield* this.writeLedgerHard();
      if (failed !== null) this.manifestFailed(failed);
    } catch (error) {
      // A close that threw keeps the directory, as it did before its build was counted.
      if (rollups) this.rollupsBuilding--;
      throw error;
    }
    if (rollups && !this.finalized) {
      // Coverage as of this close, with this instance's pruning counters (as the reference). The
      // directory stays locked until rollups.json is written: a next writer's rollups must not be
      // overwritten by this older build.
      this.scheduleRollups(
        rollupCoverageFromManifest(
          { segments: this.segments.list },
          { segmentCount: this.segments.prunedCount, bytes: this.segments.prunedBytes },
        ),
      );
      return;
    }
    if (rollups) this.rollupsBuilding--;
    this.releaseIfDone();
  }

  /** The directory is free for the next writer once its last session is on disk, rollups included. */
  private releaseIfDone(): void {
    if (
      this.ledger.activeSessionId === null &&
      !this.ledger.stale &&
      !this.finalized &&
      this.rollupsBuilding === 0
    )
      this.releaseLock();
  }

  /** Records the end of a session in the ledger (lost records turn `completed` into `incomplete`). */
  private endSession(barrier: Barrier): void {
    this.ledger.end(barrier.sessionId!, barrier.status, barrier.endedAtNs);
    if (this.ledger.activeSessionId === null) this.unregister();
  }

  /** Periodic work: notice an open segment (or the directory) gone from under us, refresh the manifest's counts. */
  private *tickChecks(): Work {
    yield* this.checkDirectory(false);
    if (this.ledger.stale && !this.retry.inBackoff()) yield* this.writeManifest();
    else yield* this.probeForRecords();
  }

  /**
   * Records failed and none waits to be written: nothing would ever show that the disk takes them
   * again, and the state would say `retrying` for good. A record write's worth of bytes, written and
   * removed, shows it (a manifest alone proves nothing: it is small). At the retry's time, while a
   * session is open (the tick), and when a manifest goes through (a session's start or close).
   */
  private *probeForRecords(): Work {
    const retry = this.retry;
    if (!retry.recordsFailing || retry.inBackoff() || this.finalized || this.recordsWaiting()) return;
    const probed = yield { op: "probe", path: join(this.rootDir, PROBE_FILENAME), bytes: PROBE_BYTES };
    if (probed.ok) this.succeeded("records");
    else this.recordFailure(probed.error, `write ${PROBE_FILENAME}`, true);
  }

  // ---------------------------------------------------------------- manifest writes

  /** Writes the current manifest with blocking I/O (after closeSync, nothing else writes it). */
  private rewriteManifestSync(): void {
    const text = this.ledger.text();
    try {
      try {
        writeManifestTextSync(this.rootDir, text, false);
      } catch (error) {
        // The exit path may have written it in place (a full disk, a read-only directory): the same way again.
        const denied = isDirectoryDenied(error as Error);
        if (!isOutOfSpace(error as Error) && !denied) throw error;
        rewriteManifestInPlaceSync(this.rootDir, text, false, denied);
      }
    } catch (error) {
      this.config.logger.warn(`${this.rootDir}: rewriting manifest.json failed: ${(error as Error).message}`);
    }
  }

  private *writeManifest(): Work {
    const unmade = yield* this.remakeDirectory();
    if (unmade !== null) {
      this.recordFailure(unmade, "create the sink directory");
      return;
    }
    const { text, fsync } = this.ledger.take();
    const token = this.pumpToken;
    const stillCurrent = (): boolean => token === this.pumpToken;
    const result = yield { op: "manifest", dir: this.rootDir, text, fsync, stillCurrent };
    if (!result.ok) {
      this.manifestFailed(result.error);
      return;
    }
    yield* this.manifestWritten();
  }

  /**
   * The manifest, trying hard (a session's close, and the exit path): at once, whatever the retry
   * schedule; on a full disk, again with the reserve's space given back, and last in place, within
   * the space manifest.json holds (a disk already full when the session started has no reserve); in
   * a directory that refuses new files, in place.
   * Returns the error when all failed: the ledger is then owed to the next retry, and the caller
   * decides whether the schedule moves.
   */
  private *writeLedgerHard(): Work<Error | null> {
    const unmade = yield* this.remakeDirectory();
    if (unmade !== null) return unmade;
    const token = this.pumpToken;
    const stillCurrent = (): boolean => token === this.pumpToken;
    let error: Error | null = null;
    for (const way of ["copy", "reserve", "in place"] as const) {
      // A full disk needs the reserve's space, then the in-place write (not atomic); a directory that
      // refuses new files (read-only) may still let its manifest.json be written in place; an I/O
      // error waits for the retry, with the reserve kept.
      const full = isOutOfSpace(error);
      if (way === "reserve" && !full) continue;
      if (way === "in place" && !full && !isDirectoryDenied(error)) break;
      if (way === "reserve" && !(yield* this.ledger.freeReserve(this.rootDir))) continue;
      const { text, fsync } = this.ledger.take();
      const inPlace = way === "in place";
      const grow = inPlace && !full;
      const result = yield { op: "manifest", dir: this.rootDir, text, fsync, stillCurrent, inPlace, grow };
      if (result.ok) {
        // Written from the reserve or in place, the disk is as full (or the directory as read-only) as it was.
        if (way === "copy") yield* this.manifestWritten();
        else yield* this.ledger.keepReserve(this.rootDir, !this.finalized);
        return null;
      }
      this.ledger.changed();
      error = result.error;
    }
    return error;
  }

  /** A manifest reached the disk: maybe a recovery, and the reserve follows the open session. */
  private *manifestWritten(): Work {
    this.succeeded("ledger");
    // Before the reserve is given back at a close: its space is the writer's own, not room for records.
    yield* this.probeForRecords();
    yield* this.ledger.keepReserve(this.rootDir, !this.finalized);
  }

  /** The whole ledger is written again at the retry (the directory made first: it may be gone). */
  private manifestFailed(error: Error): void {
    this.ledger.reclaim();
    this.needsMkdir = true;
    this.recordFailure(error, "write manifest.json");
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
    const ledger = this.ledger;
    if (ledger.job !== null) {
      ledger.oweBehind();
      return;
    }
    const { text, fsync } = ledger.take();
    // After closeSync (the exit path) took over, this write must not replace its manifest.
    const stillCurrent = (): boolean => !this.finalized;
    ledger.job = execAsync({ op: "manifest", dir: this.rootDir, text, fsync, stillCurrent }).then(
      (result) => {
        ledger.job = null;
        if (this.finalized) return;
        if (!result.ok) {
          this.manifestFailed(result.error);
          return;
        }
        this.succeeded("ledger");
        if (!ledger.owed) return;
        if (this.retry.inBackoff() || this.needsMkdir) {
          ledger.reclaim();
          this.kick();
        } else {
          this.writeManifestBehind();
        }
      },
    );
  }

  // ---------------------------------------------------------------- failures

  /** A disk operation failed; `records`: records were lost to it (see RetryPolicy.succeed). */
  private recordFailure(error: Error, action: string, records = false): void {
    this.retry.fail(error, action, records);
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
    if (what === "ledger" && this.recordsWaiting()) return;
    this.retry.succeed(what);
  }

  /** Records appended and not written yet (queued, or encoded). */
  private recordsWaiting(): boolean {
    return this.queuedRecords > 0 || this.pending !== null || this.chunk.unitCount > 0;
  }

  // ---------------------------------------------------------------- process exit

  private async closeBeforeExit(exitCode: number): Promise<void> {
    if (this.ledger.activeSessionId !== null) await this.close(exitCode === 0 ? "completed" : "interrupted");
  }

  private unregister(): void {
    const unregister = this.unregisterExit;
    this.unregisterExit = null;
    unregister?.();
  }

  // ---------------------------------------------------------------- background work

  /**
   * Rebuilds rollups.json from the directory (after the session's close, which counted it in
   * `rollupsBuilding`), then frees the directory if no session opened meanwhile; a failure is
   * logged, never raised.
   */
  private scheduleRollups(coverage: RollupCoverage): void {
    // Counted by finishSession.
    this.runBehind(
      this.buildRollups(coverage)
        .catch((error: unknown) => {
          this.config.logger.warn(
            `${this.rootDir}: rollups.json was not written: ${(error as Error).message}`,
          );
        })
        .finally(() => {
          this.rollupsBuilding--;
          this.releaseIfDone();
        }),
    );
  }

  private async buildRollups(coverage: RollupCoverage): Promise<void> {
    const rollups = await buildTelemetryRollups(this.rootDir, {
      windowSeconds: this.config.rollupWindowSeconds,
      coverage,
      clock: this.config.clock,
    });
    await writeTelemetryRollups(this.rootDir, rollups);
  }

  /** Keeps `job` (which never rejects) until it ends: close() waits for it. */
  private runBehind(job: Promise<void>): void {
    this.background.add(job);
    void job.finally(() => this.background.delete(job));
  }

  private backgroundSettled(): Promise<void> {
    return Promise.all(this.background).then(() => undefined);
  }
}
