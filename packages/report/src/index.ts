/**
 * @stormlog/report: one self-contained HTML page per run or multi-rank job. Summary cards, memory
 * timelines per rank with their phases, markers for alerts, OOMs, collector transitions and the
 * first-cause spike, and the analysis's tables (phases, leak verdicts, hidden memory, cross-rank
 * suspects). Scripts, styles and data are inlined: the page opens from disk and loads nothing.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 */

// Making a report: from a sink, a root of per-rank sinks, a .jsonl segment or a .json file.

export { type GeneratedReport, generateReport, type ReportOptions, writeReport } from "./report.js";

// The page's parts, for tools that embed or check the page.

/** JSON safe to put inside a `<script>` element (`<`, `>`, `&`, U+2028, U+2029 escaped). */
export { embeddedJson } from "./html.js";
export type { ReportCard, ReportPageData, ReportRank, ReportTable } from "./model.js";
/** The per-pixel-column reduction that keeps every minimum and maximum. */
export { reduceRows, type SeriesRows } from "./reduce.js";
export type { RankTimeline, TimelineMarker, TimelineSeries } from "./timeline.js";

// Errors.

export { ReportAssetError, ReportOptionsError } from "./errors.js";
