/**
 * How long the tracker holds committed records before it copies them into the sink worker's ring
 * (`WorkerPipeline`), and how the worker's sink makes up for it, so that a SIGKILL loses at most the
 * flush interval plus 100 ms of records: held `delay`, read by the worker within 25 ms, written at its
 * next flush (a part unit waits for the flush timer) plus the write.
 */

/**
 * Holds up to this leave the worker's sink on the user's flush interval: held 50 + read 25 ms + the
 * write fit the 100 ms the kill bound allows.
 */
const SHORT_HOLD_MS = 50;
/** The longest hold of a long flush interval. */
const LONG_HOLD_MS = 500;

/**
 * The hold for a sink flushing every `flushIntervalMs`: a quarter of a long interval, at most
 * `LONG_HOLD_MS`; else half, at most `SHORT_HOLD_MS`. Each hand-over starts cold (a training step's
 * data evicted ours): in a tfjs step, one every 50 ms cost 17-21 us per step, one every 250 ms 9-11 us.
 */
export function handOverDelayMs(flushIntervalMs: number): number {
  const quarter = flushIntervalMs / 4;
  return quarter > SHORT_HOLD_MS
    ? Math.min(LONG_HOLD_MS, quarter)
    : Math.min(SHORT_HOLD_MS, flushIntervalMs / 2);
}

/** The flush interval of the worker's sink when records are held `delayMs` first: shorter by what exceeds `SHORT_HOLD_MS`. */
export function workerFlushIntervalMs(flushIntervalMs: number, delayMs: number): number {
  return flushIntervalMs - Math.max(0, delayMs - SHORT_HOLD_MS);
}
