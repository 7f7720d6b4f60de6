/**
 * @stormlog/phases: nested phase scopes (`phase()`, `enterPhase()`, `using`), the no-op and global
 * phase hosts, and the phase replay index with the reference's attribution policy.
 */
export {
  type AsyncContextMode,
  asyncContextEnabled,
} from "./async-context.js";
export { InvalidPhaseNameError, PhaseProtocolError } from "./errors.js";
export { clearGlobalPhaseHost, enterPhase, getPhaseHost, phase, setGlobalPhaseHost } from "./global.js";
export { NoopPhaseScope, noopPhaseHost, normalizePhaseName } from "./noop.js";
export * from "./policy.js";
export {
  type PhaseBoundary,
  PhaseRecorder,
  type PhaseRecorderOptions,
  type PhaseScopePayload,
  phaseBoundaryContext,
  phaseScopePayload,
  type RecordedPhase,
} from "./recorder.js";
export * from "./replay.js";
// Leak verdicts by retention (shared by the analysis and the tracker's leak alerts).
export * from "./retention/index.js";
