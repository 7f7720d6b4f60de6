// Curated: what the analysis and the tracker use; the engine's thresholds and helpers stay inside.
export {
  type BirthCount,
  type BirthSnapshot,
  type BirthUnit,
  type BirthVerdict,
  judgeBirths,
  LIVE_BY_PHASE_KEY,
  parseBirthCounts,
} from "./births.js";
export {
  describeBirths,
  describeGrowthInside,
  describeKept,
  type JudgedInside,
  type KeptParts,
} from "./describe.js";
export {
  type PackedPath,
  type PackedRetention,
  packRetention,
  unpackRetention,
} from "./packed.js";
export { median, risingTrend, seededRandom, selectKth, type TrendTest } from "./trend.js";
export type {
  BirthEvidence,
  BirthGroup,
  RetentionEvidence,
  RetentionMetric,
  RetentionVerdictKind,
} from "./types.js";
export {
  judgeRetention,
  type MetricVerdict,
  MIN_LEAK_OCCURRENCES,
  type RankVerdicts,
  type RetentionInput,
  type RetentionOccurrence,
  type RetentionSpan,
  strongestVerdict,
  VERDICT_ORDER,
} from "./verdicts.js";
