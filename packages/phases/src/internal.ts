/**
 * @stormlog/phases/internal: for Stormlog's own packages; no semver promise. What the tracker needs to
 * write phase records, and the leak-verdict engine that the analysis and the tracker's leak alerts
 * share. Users import `@stormlog/phases`.
 */

// Phase records: the `metadata.phase_scope` payload and `context` the tracker writes at a boundary.

export {
  type PhaseScopeFacts,
  phaseBoundaryContext,
  phaseScopePayload,
  scopeFromTemplate,
  scopeIdOf,
} from "./recorder.js";

// Python's string order, for sorting phase paths and ids as the reference does.

export { comparePythonStrings } from "./policy.js";

// Leak verdicts by retention, and the robust trend statistics and seeded random they rest on.

export {
  type BirthCount,
  type BirthEvidence,
  type BirthGroup,
  type BirthSnapshot,
  type BirthUnit,
  type BirthVerdict,
  describeBirths,
  describeGrowthInside,
  describeKept,
  type JudgedInside,
  judgeBirths,
  judgeRetention,
  type KeptParts,
  LIVE_BY_PHASE_KEY,
  type MetricVerdict,
  MIN_LEAK_OCCURRENCES,
  median,
  type PackedPath,
  type PackedRetention,
  packRetention,
  parseBirthCounts,
  type RankVerdicts,
  type RetentionEvidence,
  type RetentionInput,
  type RetentionMetric,
  type RetentionOccurrence,
  type RetentionSpan,
  type RetentionVerdictKind,
  risingTrend,
  seededRandom,
  selectKth,
  strongestVerdict,
  type TrendTest,
  unpackRetention,
  VERDICT_ORDER,
} from "./retention/index.js";
