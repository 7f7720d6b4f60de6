import type { SinkLogger } from "./config.js";
import type { RetryPolicy } from "./retry-policy.js";
import type { SegmentSet } from "./segments.js";

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

/** The record counters, and the one message each kind of loss gets. */
export class SinkCounters {
  appended = 0;
  written = 0;
  droppedQueueFull = 0;
  droppedIo = 0;
  rejected = 0;
  private warnedQueueFull = false;
  private warnedProducerDrops = false;
  private warnedRejected = false;

  constructor(
    private readonly logger: SinkLogger,
    private readonly subject: () => string,
    private readonly maxQueueEvents: number,
  ) {}

  /** A record `append` dropped because the queue is full (said once). */
  droppedForQueue(): void {
    this.droppedQueueFull++;
    this.appended++;
    if (this.warnedQueueFull) return;
    this.warnedQueueFull = true;
    this.logger.warn(
      `${this.subject()}: ${this.maxQueueEvents} records are already waiting for the disk; further records ` +
        "are dropped and counted (getDiagnostics().dropped_queue_full) and the session will close as incomplete. " +
        "The disk is slower than the producer: raise maxQueueEvents or sample less often",
    );
  }

  /**
   * `count` records the producer dropped before appending them, too far behind (said once); counted
   * with the queue's drops.
   */
  droppedByProducer(count: number): void {
    this.droppedQueueFull += count;
    this.appended += count;
    if (this.warnedProducerDrops) return;
    this.warnedProducerDrops = true;
    this.logger.warn(
      `${this.subject()}: records came faster than they can be written and were dropped before reaching ` +
        "the sink; dropped records are counted (getDiagnostics().dropped_queue_full) and the session will close " +
        "as incomplete. Record fewer events a second (phases around larger steps), or raise maxQueueEvents " +
        "to absorb longer bursts",
    );
  }

  /** A record refused as invalid telemetry (said once). */
  refused(reason: string): void {
    this.rejected++;
    if (this.warnedRejected) return;
    this.warnedRejected = true;
    this.logger.warn(
      `${this.subject()}: a record was refused because ${reason}; refused records are counted ` +
        "(getDiagnostics().rejected_events) and not written, so that readers never meet an invalid line",
    );
  }

  /** The diagnostics, from these counters and the other parts' state. */
  diagnostics(
    segments: SegmentSet,
    retry: RetryPolicy,
    queued: number,
    sessionId: string | null,
  ): SinkDiagnostics {
    return {
      rollover_count: segments.rolloverCount,
      pruned_segment_count: segments.prunedCount,
      pruned_bytes: segments.prunedBytes,
      final_retained_files: segments.list.length,
      final_retained_bytes: segments.retainedBytes(),
      appended_events: this.appended,
      written_events: this.written,
      dropped_events: this.droppedQueueFull + this.droppedIo,
      dropped_queue_full: this.droppedQueueFull,
      dropped_io_error: this.droppedIo,
      rejected_events: this.rejected,
      queued_events: queued,
      max_queue_events: this.maxQueueEvents,
      io_failures: retry.failures,
      consecutive_io_failures: retry.failuresInARow,
      last_error: retry.lastError,
      state: retry.failing ? "retrying" : "ok",
      session_id: sessionId,
    };
  }
}
