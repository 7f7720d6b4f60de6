/**
 * @stormlog/phases: nested phase scopes (`phase()`, `enterPhase()`, `using`), the no-op and global
 * phase hosts, and the phase replay index with the reference's attribution policy.
 *
 * Named exports only: each one is a promise to users. What only Stormlog's own packages need is in
 * `@stormlog/phases/internal` (no semver promise); `test/public-api.json` lists the runtime names.
 */

// Instrumenting code: phases on the process-wide host, a no-op until a tracker registers itself.

export { enterPhase, phase } from "./global.js";

// Phase hosts: the process-wide slot (shared by every copy of the package) and the no-op host.

export { clearGlobalPhaseHost, getPhaseHost, setGlobalPhaseHost } from "./global.js";
export { noopPhaseHost } from "./noop.js";

// Building your own host: the state machine the tracker uses, and what it hands its listener.

export type { AsyncContextMode } from "./async-context.js";
export {
  type PhaseBoundary,
  PhaseRecorder,
  type PhaseRecorderOptions,
  type PhaseScopePayload,
  type PhaseScopeTemplate,
  type RecordedPhase,
} from "./recorder.js";

// Errors: a blank name, and scopes closed out of order.

export { InvalidPhaseNameError, PhaseProtocolError } from "./errors.js";

// Replay index: which phase was active at an instant, rebuilt from phase records.

export {
  type PhaseEventLike,
  PhaseReplayIndex,
  type PhaseResolver,
  type PhaseSpan,
  type PhaseThreadId,
} from "./replay.js";

// Attribution: the reference's answer for an instant, its JSON form and its helpers.

export {
  mergePhaseAttributions,
  type PhaseAttribution,
  type PhaseAttributionPayload,
  type PhaseAttributionStrategy,
  type PhaseResolution,
  type PhaseSource,
  type PhaseSummary,
  phaseAttributionToPayload,
  summarizePhaseAttribution,
  summarizePhaseResolution,
} from "./policy.js";
