/**
 * @stormlog/wandb/internal: for Stormlog's own tools (the replay script, the CLI); no semver promise.
 */

export {
  type GoldenCaseConfig,
  loadCaseSession,
  readGoldenCaseConfig,
  runGoldenCaseExport,
} from "./golden-case.js";

// The export's parts, which its tests check one by one.

export {
  ATTRIBUTION_FILES,
  attributionPreviewHtml,
  type TensorRow,
  tensorAttributionRows,
} from "./export/attribution.js";
export { trackingDashboardHtml } from "./export/dashboard.js";
export {
  sampleTimelineRows,
  TIMELINE_MAX_POINTS,
  type TimelineRow,
  trackingTimelineRows,
} from "./export/timeline.js";
export { trackingMetrics } from "./export/tracking.js";
export { WANDB_JS_SDK } from "./online.js";
export { recordedValue } from "./recorder.js";
