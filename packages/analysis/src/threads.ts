/**
 * Whether an analysis starts worker threads beside the one it runs on (a scan worker, a leak judge).
 * A fresh worker pays only where V8's compiler threads have cores of their own: on two cores the
 * workers' start and compilation competed with this thread's, and a cold `stormlog analyze` of the
 * 240 MB 64-rank job took the same wall time on one thread with 0.5-0.6 s less CPU and 15-20 MB
 * less peak RSS. `STORMLOG_SCAN_THREADS=1` keeps an analysis on one thread anywhere; `2` or more
 * starts workers from two cores (tests and benchmarks compare the two).
 */
import { availableParallelism } from "node:os";

/** Cores from which workers start unless `STORMLOG_SCAN_THREADS` says otherwise. */
export const WORKERS_FROM_CORES = 4;

/** Whether workers may start at all: a second core, and not `STORMLOG_SCAN_THREADS=1`. */
export function workersAllowed(): boolean {
  return availableParallelism() >= 2 && process.env.STORMLOG_SCAN_THREADS !== "1";
}

/** Whether to start workers for an analysis that has enough work for them. */
export function workersHelp(): boolean {
  if (!workersAllowed()) return false;
  const setting = process.env.STORMLOG_SCAN_THREADS;
  if (setting !== undefined && Number(setting) >= 2) return true;
  return availableParallelism() >= WORKERS_FROM_CORES;
}
