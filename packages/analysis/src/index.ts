/**
 * @stormlog/analysis: what a recorded run means. One report per input (peaks, phases and leak
 * verdicts per nested phase path, hidden memory, which rank spiked first), the distributed
 * diagnostics, and exports for Perfetto and spreadsheets; the reference's analyses return what the
 * Python Stormlog returns, key for key.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime
 * names. The dataset, the on-disk index and the NumPy emulation stay inside the package.
 */

// The report: every analysis of a sink, a file or events in memory, as JSON or text.

export { TimeRangeError } from "./errors.js";
/** Where the index of a sink is kept (`.stormlog-index` beside it, or under `STORMLOG_CACHE_DIR`). */
export { CACHE_DIR_ENV, INDEX_DIRNAME } from "./index/stored-results.js";
/** What is analysed, diagnosed or exported: one session, or a rank group (one type for all three). */
export type { RankGroupSession, SessionSelection } from "./input/sessions.js";
export {
  type AnalyzeEventsContext,
  type AnalyzeOptions,
  type AnalyzeProgress,
  analyzeEvents,
  analyzeTelemetry,
  type RenderAnalysisOptions,
  renderTelemetryAnalysis,
  reportToJson,
} from "./report/report.js";
export {
  type ListSessionsOptions,
  listTelemetrySessions,
  type TelemetrySessionList,
} from "./report/sessions.js";
export { formatReportText, type TextOptions } from "./report/text.js";
export type {
  AlertItem,
  AlertsReport,
  AnalysisReport,
  CollectorHealthReport,
  CounterPeakReport,
  HealthCounts,
  HealthTransition,
  IndexUsage,
  LeakEvidence,
  LeakReport,
  LeakVerdictKind,
  NetChange,
  PhaseOccurrence,
  PhaseStat,
  RankGapFinding,
  RankSummary,
  ReportInput,
  ReportSession,
  ReportSummary,
  SinkCounters,
  SinkDirectoryReport,
  SinkReport,
} from "./report/types.js";

// Cross-rank first-cause analysis (the reference's `summarize_cross_rank_analysis`).

export { summarizeCrossRankAnalysis } from "./analyses/cross-rank.js";
export {
  type CrossRankMergeResult,
  mergeCrossRankTimelines,
  type RankTimelinePoint,
} from "./analyses/cross-rank-timelines.js";
export {
  type CrossRankAnalysis,
  type CrossRankOptions,
  type FirstCauseConfidence,
  type FirstCauseSuspect,
  SKEW_NOTE_MULTIPLIER,
  SPIKE_MIN_BYTES,
} from "./analyses/first-cause.js";

// Hidden memory: device used minus allocator reserved (the reference's `analyze_hidden_memory_gaps`).

export {
  analyzeGaps,
  DEFAULT_GAP_THRESHOLDS,
  type FragmentationEvidence,
  GAP_REMEDIATION,
  type GapAnalysisOptions,
  type GapClassification,
  type GapFinding,
  type GapSeverity,
  type GapThresholds,
  type PersistentDriftEvidence,
  type TransientSpikeEvidence,
} from "./analyses/gap.js";

// Distributed diagnostics (`stormlog diagnose`): per-rank rows, anomalies and which rank came first.

export {
  type AnomalyIndicator,
  buildDistributedDiagnostics,
  type CollectiveAttributionLike,
  DIAGNOSTICS_GAP_RATIO_THRESHOLD,
  type DiagnoseTelemetryOptions,
  type DiagnoseTelemetryResult,
  type DiagnosticsAnomaly,
  type DiagnosticsOptions,
  type DiagnosticsSeverity,
  type DistributedDiagnostics,
  diagnoseTelemetry,
  diagnosticsFoundRisk,
  findDistributedRankGroups,
  type LoadDistributedOptions,
  loadDistributedEvents,
  parseRankFilter,
  type RankDiagnosticsRow,
  type RankTimeline,
  type RenderDiagnosisOptions,
  renderTelemetryDiagnosis,
  selectDistributedSession,
} from "./analyses/diagnostics.js";

// Exports: Perfetto traces and CSV, from events in memory or streamed from a sink.

export {
  TELEMETRY_CSV_COLUMNS,
  telemetryCsvHeader,
  telemetryCsvLines,
  telemetryEventToCsvRow,
} from "./export/csv.js";
export {
  buildPerfettoTrace,
  formatPerfettoTrace,
  type PerfettoExportOptions,
  type PerfettoTrace,
  perfettoTraceChunks,
  type TraceEvent,
} from "./export/perfetto.js";
export {
  openSelectedEvents,
  type SelectedEvents,
  type StreamExportOptions,
  type StreamPerfettoOptions,
  streamPerfettoTrace,
  streamTraceEvents,
  type TraceEventsEnd,
} from "./export/stream.js";
