import { resolve } from "node:path";
import { type Clock, InvalidConfigError, type Scheduler, systemClock, systemScheduler } from "@stormlog/core";
import { guardedLogger } from "@stormlog/core/internal";
import type { LockedDirectoryPolicy } from "../directory/writer-lock.js";

const MIB = 1024 * 1024;

/**
 * When segment data is forced to stable storage. A process crash (even SIGKILL) loses nothing that
 * was written, whatever the policy: the page cache survives the process. fsync matters only for an
 * operating-system crash or a power cut.
 * - `always`: after every flush, as the Python reference does (the costliest; see the README).
 * - `segment` (default): when a segment is closed (rollover, session close) and for the manifest
 *   written then.
 * - `never`: leave it to the operating system.
 */
export type FsyncPolicy = "always" | "segment" | "never";

/** Where the sink reports its own trouble (disk failures, dropped records); never throws at the caller. */
export interface SinkLogger {
  warn(message: string): void;
  info?(message: string): void;
}

/** The default logger: one line on stderr per message, prefixed `[stormlog sink]`. */
export const consoleSinkLogger: SinkLogger = {
  warn: (message) => console.warn(`[stormlog sink] ${message}`),
  info: (message) => console.warn(`[stormlog sink] ${message}`),
};

/**
 * Options of `TelemetrySink`: the Python reference's `TelemetrySinkConfig` in camelCase, with the
 * same defaults and checks, plus this package's own knobs (queue bound, fsync policy, process hooks).
 */
export interface TelemetrySinkOptions {
  /**
   * The sink directory (created if missing). One process writes it at a time (`writer.lock`); see
   * `onLockedDirectory` for what another process given the same directory does.
   */
  rootDir: string;
  /**
   * When another live process writes `rootDir`: `beside` (default) writes this process's records to
   * `<rootDir>/rank-<rank>-<host>-<pid>` (readers given `rootDir` load both); `refuse` makes the
   * constructor throw `SinkDirectoryLockedError` before anything is written.
   */
  onLockedDirectory?: LockedDirectoryPolicy;
  /** This process's rank, naming the directory it writes beside a live writer (default: the launcher's variables). */
  rank?: number;
  /** Flush when this many records wait (default 50). */
  flushEveryEvents?: number;
  /** Flush what waits at least this often, in seconds (default 2). */
  flushEverySeconds?: number;
  /** Close a segment once it holds this many bytes (default 64 MiB). */
  rolloverMaxBytes?: number;
  /** Close a segment once it holds this many records (default 10000). */
  rolloverMaxEvents?: number;
  /** Keep at most this many segments (default 8); the oldest closed ones go first. */
  retentionMaxFiles?: number;
  /** Keep at most this many segment bytes (default 512 MiB); must be >= `rolloverMaxBytes`. */
  retentionMaxTotalBytes?: number;
  /** Write `rollups.json` when a session closes (default true). */
  writeRollups?: boolean;
  /** Width of the rollup windows, in seconds (default 60). */
  rollupWindowSeconds?: number;
  /**
   * Records that may wait in memory for the disk (default 16384, about 50 MB of tracker records). Beyond it `append` drops the record
   * and counts it: memory is bounded by this, never by the run's length or a slow disk.
   */
  maxQueueEvents?: number;
  /** See `FsyncPolicy` (default `segment`). */
  fsync?: FsyncPolicy;
  /** First retry delay after a disk failure, in seconds (default 1); doubles up to `failureBackoffMaxSeconds`. */
  failureBackoffSeconds?: number;
  /** Longest retry delay after repeated disk failures, in seconds (default 60). */
  failureBackoffMaxSeconds?: number;
  /**
   * Close the open session on SIGINT/SIGTERM (`interrupted`, then the signal's default action is
   * re-raised unless another listener handles it) and on process exit (`completed` when the exit
   * code is 0, `interrupted` otherwise). Default true. The Python reference leaves the session
   * `running` until the directory is reopened.
   */
  handleProcessExit?: boolean;
  /** `source` of the session summaries this sink creates (default `stormlog.telemetry_sink`). */
  source?: string;
  logger?: SinkLogger;
  clock?: Clock;
  scheduler?: Scheduler;
}

/** `TelemetrySinkOptions` with every default filled in. */
export interface ResolvedSinkConfig {
  readonly rootDir: string;
  readonly onLockedDirectory: LockedDirectoryPolicy;
  readonly rank: number | undefined;
  readonly flushEveryEvents: number;
  readonly flushEverySeconds: number;
  readonly rolloverMaxBytes: number;
  readonly rolloverMaxEvents: number;
  readonly retentionMaxFiles: number;
  readonly retentionMaxTotalBytes: number;
  readonly writeRollups: boolean;
  readonly rollupWindowSeconds: number;
  readonly maxQueueEvents: number;
  readonly fsync: FsyncPolicy;
  readonly failureBackoffSeconds: number;
  readonly failureBackoffMaxSeconds: number;
  readonly handleProcessExit: boolean;
  readonly source: string;
  readonly logger: SinkLogger;
  readonly clock: Clock;
  readonly scheduler: Scheduler;
}

/** The reference's defaults (`TelemetrySinkConfig`). */
export const SINK_DEFAULTS = {
  flushEveryEvents: 50,
  flushEverySeconds: 2,
  rolloverMaxBytes: 64 * MIB,
  rolloverMaxEvents: 10_000,
  retentionMaxFiles: 8,
  retentionMaxTotalBytes: 512 * MIB,
  writeRollups: true,
  rollupWindowSeconds: 60,
  maxQueueEvents: 16_384,
  fsync: "segment",
  failureBackoffSeconds: 1,
  failureBackoffMaxSeconds: 60,
  handleProcessExit: true,
  source: "stormlog.telemetry_sink",
} as const;

function positiveInteger(option: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidConfigError(option, `must be an integer >= 1, got ${String(value)}`);
  }
  return value;
}

function positiveNumber(option: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new InvalidConfigError(option, `must be a number > 0, got ${String(value)}`);
  }
  return value;
}

/** Fills defaults and checks every option as the reference's `__post_init__` does. */
export function resolveSinkConfig(options: TelemetrySinkOptions): ResolvedSinkConfig {
  if (typeof options !== "object" || options === null) {
    throw new InvalidConfigError("options", "pass an object with at least { rootDir }");
  }
  if (typeof options.rootDir !== "string" || options.rootDir.trim() === "") {
    throw new InvalidConfigError("rootDir", "must be a non-empty path to the sink directory");
  }
  const d = SINK_DEFAULTS;
  const rolloverMaxBytes = positiveInteger(
    "rolloverMaxBytes",
    options.rolloverMaxBytes ?? d.rolloverMaxBytes,
  );
  const retentionMaxTotalBytes = positiveInteger(
    "retentionMaxTotalBytes",
    options.retentionMaxTotalBytes ?? d.retentionMaxTotalBytes,
  );
  if (retentionMaxTotalBytes < rolloverMaxBytes) {
    throw new InvalidConfigError(
      "retentionMaxTotalBytes",
      `must be >= rolloverMaxBytes (${rolloverMaxBytes}), got ${retentionMaxTotalBytes}`,
    );
  }
  const failureBackoffSeconds = positiveNumber(
    "failureBackoffSeconds",
    options.failureBackoffSeconds ?? d.failureBackoffSeconds,
  );
  const failureBackoffMaxSeconds = positiveNumber(
    "failureBackoffMaxSeconds",
    options.failureBackoffMaxSeconds ?? d.failureBackoffMaxSeconds,
  );
  if (failureBackoffMaxSeconds < failureBackoffSeconds) {
    throw new InvalidConfigError(
      "failureBackoffMaxSeconds",
      `must be >= failureBackoffSeconds (${failureBackoffSeconds}), got ${failureBackoffMaxSeconds}`,
    );
  }
  const fsync = options.fsync ?? d.fsync;
  if (fsync !== "always" && fsync !== "segment" && fsync !== "never") {
    throw new InvalidConfigError("fsync", `must be "always", "segment" or "never", got ${String(fsync)}`);
  }
  const source = options.source ?? d.source;
  if (typeof source !== "string" || source.trim() === "") {
    throw new InvalidConfigError("source", "must be a non-empty string");
  }
  const onLockedDirectory = options.onLockedDirectory ?? "beside";
  if (onLockedDirectory !== "beside" && onLockedDirectory !== "refuse") {
    throw new InvalidConfigError(
      "onLockedDirectory",
      `must be "beside" or "refuse", got ${String(onLockedDirectory)}`,
    );
  }
  const rank = options.rank;
  if (rank !== undefined && (!Number.isSafeInteger(rank) || rank < 0)) {
    throw new InvalidConfigError("rank", `must be an integer >= 0, got ${String(rank)}`);
  }
  return {
    // Absolute once: a later process.chdir must not move where the sink writes (nor look moved).
    rootDir: resolve(options.rootDir),
    onLockedDirectory,
    rank,
    flushEveryEvents: positiveInteger("flushEveryEvents", options.flushEveryEvents ?? d.flushEveryEvents),
    flushEverySeconds: positiveNumber("flushEverySeconds", options.flushEverySeconds ?? d.flushEverySeconds),
    rolloverMaxBytes,
    rolloverMaxEvents: positiveInteger("rolloverMaxEvents", options.rolloverMaxEvents ?? d.rolloverMaxEvents),
    retentionMaxFiles: positiveInteger("retentionMaxFiles", options.retentionMaxFiles ?? d.retentionMaxFiles),
    retentionMaxTotalBytes,
    writeRollups: options.writeRollups ?? d.writeRollups,
    rollupWindowSeconds: positiveInteger(
      "rollupWindowSeconds",
      options.rollupWindowSeconds ?? d.rollupWindowSeconds,
    ),
    maxQueueEvents: positiveInteger("maxQueueEvents", options.maxQueueEvents ?? d.maxQueueEvents),
    fsync,
    failureBackoffSeconds,
    failureBackoffMaxSeconds,
    handleProcessExit: options.handleProcessExit ?? d.handleProcessExit,
    source,
    logger: guardedLogger(options.logger ?? consoleSinkLogger),
    clock: options.clock ?? systemClock,
    scheduler: options.scheduler ?? systemScheduler,
  };
}
