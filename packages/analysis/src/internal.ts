/**
 * `@stormlog/analysis/internal`: what Stormlog's own exporters (`@stormlog/parquet`) need of the
 * analysis, no promise to users. The dataset as the analyses read it, one rank at a time, shown to
 * an exporter during the report's own pass (`analyzeTelemetryRanks`), and the helpers that read a
 * rank's columns exactly; the text report's duration and byte-change formats, which the HTML
 * report (`@stormlog/report`) shows too; and the CSV field rule (quoting, formulas neutralized),
 * which `stormlog query` writes its CSV with.
 */

export type { RankData } from "./analyses/analysis.js";
export { csvField } from "./export/csv.js";
export {
  type RenderingChoice,
  readStoredRendering,
  type StoredRenderingOptions,
} from "./index/stored-results.js";
export type { AlertEntry, HealthEntry, SampleIdentity } from "./input/aggregate.js";
export type { BoundaryEntry } from "./input/boundary-log.js";
export { exactAt, ORDER_SEGMENT_SCALE, originAt, type RankSeries } from "./input/dataset.js";
export type { SegmentData } from "./input/sessions.js";
export { analyzeTelemetryRanks, type RankVisitor } from "./report/report.js";
export { formatDuration, signedBytes } from "./report/text.js";
