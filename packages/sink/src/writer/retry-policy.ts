import type { Clock } from "@stormlog/core";
import type { SinkLogger } from "./config.js";
import { describeIoError } from "./io.js";

/**
 * The documented schedule: the n-th failure in a row waits `first * 2^(n-1)` seconds before the next
 * attempt (1, 2, 4 … with the defaults), never more than `max`.
 */
export function backoffDelaySeconds(
  failuresInARow: number,
  firstSeconds: number,
  maxSeconds: number,
): number {
  return Math.min(maxSeconds, firstSeconds * 2 ** Math.min(Math.max(failuresInARow, 1) - 1, 30));
}

/** What the policy needs from the sink. */
export interface RetryPolicyOptions {
  readonly firstSeconds: number;
  readonly maxSeconds: number;
  readonly clock: Clock;
  readonly logger: SinkLogger;
  /** Prefix of its messages (the sink directory). */
  readonly subject: () => string;
  /** Records lost to disk errors so far, for the recovery message. */
  readonly lostSoFar: () => number;
}

/**
 * When the writer may touch the disk again after a failure, and what it says about it: one warning
 * when a run of failures starts, one message when a real write succeeds again (as an exporter's
 * retrying transport, the writer itself never sleeps or counts).
 */
export class RetryPolicy {
  /** Disk operations that failed, in all. */
  failures = 0;
  /** Failures since the last success; 0 when healthy. */
  failuresInARow = 0;
  /** The last disk error, e.g. `ENOSPC: no space left on device, write`. */
  lastError: string | null = null;
  /** Epoch ms before which nothing is tried (while failing). */
  private retryAtMs = 0;
  /** A write of records failed in this run: only a write of records ends it. */
  private recordsFailed = false;

  constructor(private readonly options: RetryPolicyOptions) {}

  get failing(): boolean {
    return this.failuresInARow > 0;
  }

  /** Records failed to reach a segment, and none has since. */
  get recordsFailing(): boolean {
    return this.recordsFailed && this.failuresInARow > 0;
  }

  /** True while failing and the next attempt is not due yet. */
  inBackoff(): boolean {
    return this.failuresInARow > 0 && this.nowMs() < this.retryAtMs;
  }

  /** Milliseconds until the next attempt is due (0 when healthy or due). */
  msUntilRetry(): number {
    return this.failuresInARow > 0 ? Math.max(0, this.retryAtMs - this.nowMs()) : 0;
  }

  /**
   * Counts a failed operation and schedules the next attempt; warns on the first of a run. `records`:
   * records were lost to it (a segment write, not the manifest).
   */
  fail(error: Error, action: string, records = false): void {
    this.failures++;
    this.failuresInARow++;
    if (records) this.recordsFailed = true;
    this.lastError = describeIoError(error);
    const { firstSeconds, maxSeconds, logger } = this.options;
    const subject = this.options.subject();
    const delayS = backoffDelaySeconds(this.failuresInARow, firstSeconds, maxSeconds);
    this.retryAtMs = this.nowMs() + delayS * 1000;
    if (this.failuresInARow === 1) {
      logger.warn(
        `${subject}: could not ${action}: ${this.lastError}. Tracking goes on: records that cannot be ` +
          "written are dropped and counted (getDiagnostics()), the session will close as incomplete, and " +
          `writing is retried (first in ${delayS} s)`,
      );
    }
  }

  /**
   * A write reached the disk: the failures are over (said once). A manifest written after records
   * failed proves nothing (it is small, or took the reserve's space): records must reach a segment.
   */
  succeed(what: "records" | "ledger"): void {
    if (this.failuresInARow === 0 || (what === "ledger" && this.recordsFailed)) return;
    this.options.logger.info?.(
      `${this.options.subject()}: writing works again after ${this.failuresInARow} failure(s); ` +
        `${this.options.lostSoFar()} record(s) were lost to disk errors so far`,
    );
    this.failuresInARow = 0;
    this.retryAtMs = 0;
    this.recordsFailed = false;
  }

  /** The exit path tries once more at once, whatever the schedule. */
  attemptNow(): void {
    this.retryAtMs = 0;
  }

  private nowMs(): number {
    return Number(this.options.clock.nowNs() / 1_000_000n);
  }
}
