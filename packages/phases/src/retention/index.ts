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
  describeKeptInside,
  describeTensorGroup,
  formatCount,
  type JudgedInside,
  type KeptParts,
} from "./describe.js";
export { median, normalUpperTail, risingTrend, seededRandom, selectKth, type TrendTest } from "./trend.js";
export type {
  BirthEvidence,
  BirthGroup,
  RetentionEvidence,
  RetentionMetric,
  RetentionVerdictKind,
} from "./types.js";
export {
  BOOTSTRAP_ROUNDS,
  CHILD_BOOTSTRAP_SHARE,
  CHILD_SHARE,
  judgeRetention,
  type MetricVerdict,
  MIN_LEAK_OCCURRENCES,
  type RankVerdicts,
  type RetentionInput,
  type RetentionOccurrence,
  RISING_P_ALL,
  RISING_P_HALF,
  RISING_P_THIRD,
  strongestVerdict,
  VERDICT_ORDER,
} from "./verdicts.js";
