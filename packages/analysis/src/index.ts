/**
 * @stormlog/analysis: what a recorded run means — cross-rank first-cause analysis, hidden-memory
 * gap analysis and the numeric helpers they share with the Python reference.
 */
export * from "./cross-rank.js";
export { summarizeCrossRankAnalysis } from "./cross-rank-columns.js";
export * from "./diagnostics.js";
export { TimeRangeError } from "./errors.js";
export * from "./export-csv.js";
export * from "./export-perfetto.js";
export * from "./export-stream.js";
export * from "./gap.js";
export { CACHE_DIR_ENV, INDEX_DIRNAME, INDEX_FORMAT, INDEX_VERSION } from "./index-cache.js";
export * from "./report.js";
export * from "./stats.js";
export {
  formatDuration,
  formatReportText,
  phaseSummaryFromPayload,
  signedBytes,
  type TextOptions,
} from "./text.js";
export type * from "./types.js";
