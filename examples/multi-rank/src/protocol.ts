/** Messages between the launcher and its workers (over the `fork` IPC channel). */

/** Worker → launcher: the model is built; the worker waits for the time to start its tracker. */
export interface LoadedMessage {
  readonly type: "loaded";
  readonly rank: number;
}

/** Worker → launcher: the tracker runs; the worker waits for the start time. */
export interface ReadyMessage {
  readonly type: "ready";
  readonly rank: number;
}

/** Worker → launcher: training finished. */
export interface DoneMessage {
  readonly type: "done";
  readonly rank: number;
  readonly steps: number;
  readonly sessionId: string;
  readonly sinkDir: string;
  readonly peakTensorBytes: number;
}

/**
 * Launcher → workers: every rank starts its tracker at `trackAtMs` (epoch ms). The cross-rank
 * analysis aligns ranks by their first samples, taken as trackers start: ranks that start tracking
 * as they finish loading (seconds apart on a busy machine) would be aligned that far off.
 */
export interface TrackMessage {
  readonly type: "track";
  readonly trackAtMs: number;
}

/** Launcher → workers: every rank starts step 0 at `startAtMs` (epoch ms). */
export interface StartMessage {
  readonly type: "start";
  readonly startAtMs: number;
}

export type WorkerMessage = LoadedMessage | ReadyMessage | DoneMessage;

/** The schedule every rank follows, passed to workers in the environment as JSON. */
export interface JobPlan {
  readonly steps: number;
  /** Each step ends at `startAtMs + (step + 1) * stepMs`, as a collective would synchronise ranks. */
  readonly stepMs: number;
  readonly samplingIntervalMs: number;
  /** Step at which every rank allocates its gradient buffer, or null for none (`--no-spike`). */
  readonly bufferStep: number | null;
  /** Rank that allocates its buffer early, and at which step. */
  readonly earlyRank: number | null;
  readonly earlyStep: number | null;
  readonly bufferBytes: number;
}

export const PLAN_ENV = "STORMLOG_EXAMPLE_PLAN";
export const SINK_ROOT_ENV = "STORMLOG_EXAMPLE_SINK_ROOT";
