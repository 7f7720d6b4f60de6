import type { JsonObject } from "../codec/json.js";

/** Options of a phase: `metadata` becomes the phase's `attributes` in its telemetry records. */
export interface PhaseOptions {
  readonly metadata?: JsonObject;
  /**
   * Read memory at this phase's enter and exit even from collectors too costly to read at every
   * boundary (their `readOnDemand()`, e.g. the process collector's RSS, a few microseconds), so its
   * records carry what it measured (`phase_counters: "boundary_read"`) rather than the last sample.
   * For phases that run long enough to be worth it (an inference call, a model load); default false.
   * Collectors with a cheap `readSync()` are read at every boundary regardless.
   */
  readonly readings?: boolean;
}

/** An open phase. `close()` is idempotent; `using` closes it at the end of the block. */
export interface PhaseScope extends Disposable {
  /** `<session_id>:<sequence>`, unique within a session. */
  readonly scopeId: string;
  /** The phase's own name (leaf). */
  readonly name: string;
  /** Names from the outermost phase to this one. */
  readonly path: readonly string[];
  /** `path` joined with `" / "`, e.g. `train / forward`. */
  readonly phasePath: string;
  readonly closed: boolean;
  close(): void;
}

/**
 * Anything that opens phases: the tracker, or the no-op host used when no tracker runs.
 * Adapters (the tfjs `model.fit` callback, onnxruntime `instrumentSession`) take this structural
 * interface, so they depend on `@stormlog/core` only.
 */
export interface PhaseHost {
  /** Runs `fn` inside the phase and returns what it returns; closes the phase when it throws or rejects. */
  phase<T>(name: string, fn: () => T, options?: PhaseOptions): T;
  /** Opens a phase for `using scope = host.phase("forward")`. */
  phase(name: string, options?: PhaseOptions): PhaseScope;
  /** Opens a phase that the caller closes with `close()`. */
  enterPhase(name: string, options?: PhaseOptions): PhaseScope;
}
