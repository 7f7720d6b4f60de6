/**
 * The analysis report. Field names are the JSON report's (snake_case), so the object reads like the
 * `--format json` output; `reportToJson` only drops what JSON does not carry (`input`, `index`) and
 * the absent `cross_rank_analysis`. Timestamps and durations in ns are exact `bigint`s.
 */
import type { BirthEvidence, RetentionEvidence, RetentionVerdictKind } from "@stormlog/phases/internal";
import type { CrossRankAnalysis } from "../analyses/first-cause.js";
import type { GapFinding } from "../analyses/gap.js";

/** What was analysed. */
export interface ReportInput {
  /** The path as given, or null for in-memory events. */
  path: string | null;
  /** `sink`, `sink-root`, `jsonl`, `json`, or `events` for in-memory analysis. */
  kind: "sink" | "sink-root" | "jsonl" | "json" | "events";
  /** Bytes of the input (files, or the segments of the sink directories). */
  size_bytes: number;
}

/** The session the report is about. */
export interface ReportSession {
  /** A session's id, or a rank group's synthetic id when per-rank sessions were merged. */
  selected_session_id: string | null;
  /** Every session of the input, in the reference's order (rank groups not included). */
  discovered_session_ids: string[];
  /** Status of the selected session (a rank group: the members' common status, else the least finished). */
  status: string | null;
  started_at_ns: bigint | null;
  ended_at_ns: bigint | null;
  /** Present when a rank group was selected: its member sessions, by rank. */
  merged_session_ids?: string[];
  job_id: string | null;
  world_size: number;
}

/** The highest value of a counter and where it was seen. */
export interface CounterPeakReport {
  value: number;
  timestamp_ns: bigint;
  rank: number;
  device_id: number;
  session_id: string;
  /** The collector of the record that holds the peak (merged collectors joined with `+`). */
  collector: string;
}

/** Collector-health transitions (`collector_degraded`/`collector_recovered`) and the time spent degraded. */
export interface HealthCounts {
  transition_count: number;
  degraded_count: number;
  recovered_count: number;
  /** Summed over ranks; an episode still open at the end lasts until the rank's last event. */
  degraded_time_ns: bigint;
  /** Status after the last transition (`healthy` before any). */
  last_status: string;
}

/** Per-rank figures (the `diagnose` table's raw material). */
export interface RankSummary {
  rank: number;
  session_id: string;
  event_count: number;
  sample_count: number;
  first_timestamp_ns: bigint | null;
  last_timestamp_ns: bigint | null;
  /** Last minus first sample value (null without two readings). */
  allocated_delta_bytes: number | null;
  reserved_delta_bytes: number | null;
  device_used_delta_bytes: number | null;
  peak_allocated_bytes: number | null;
  peak_reserved_bytes: number | null;
  peak_device_used_bytes: number | null;
  /** `device_used - allocator_reserved` of the last sample that has both (null without one). */
  hidden_gap_latest_bytes: number | null;
  /** The largest |gap| over the samples (sign kept). */
  hidden_gap_peak_abs_bytes: number | null;
  alert_count: number;
  degraded_time_ns: bigint;
}

/** The session summary. */
export interface ReportSummary {
  event_count: number;
  sample_count: number;
  first_timestamp_ns: bigint | null;
  last_timestamp_ns: bigint | null;
  duration_ns: bigint | null;
  duration_s: number | null;
  ranks: number[];
  event_type_counts: Record<string, number>;
  peaks: {
    allocator_allocated_bytes: CounterPeakReport | null;
    allocator_reserved_bytes: CounterPeakReport | null;
    device_used_bytes: CounterPeakReport | null;
  };
  /** Alert events (warning, critical, error) by type. */
  alerts_by_type: Record<string, number>;
  collector_health: HealthCounts;
  /** The sink's counters (see `SinkReport`). */
  sink: SinkCounters;
  per_rank: RankSummary[];
}

/** Summary statistics of a per-occurrence change. */
export interface NetChange {
  /** Mean per occurrence. */
  mean: number;
  median: number;
  min: number;
  max: number;
  total: number;
  /** Occurrences that ended higher than they started. */
  positive_count: number;
  /** Occurrences with a reading at both boundaries. */
  count: number;
}

/** One occurrence of a phase. */
export interface PhaseOccurrence {
  session_id: string;
  rank: number;
  scope_id: string;
  start_ns: bigint;
  end_ns: bigint;
  duration_ns: bigint;
  /** Allocator allocated bytes at exit minus at entry (null without both readings). */
  net_allocated_bytes: number | null;
  net_tensors: number | null;
  /** Highest allocator allocated bytes inside the occurrence (boundaries and samples). */
  peak_allocated_bytes: number | null;
  peak_device_used_bytes: number | null;
  /** The phase was never closed; it ends at its rank's last event. */
  synthetic_end: boolean;
}

/** Statistics of one nested phase path over every occurrence (all ranks). */
export interface PhaseStat {
  phase_path: string;
  path: string[];
  depth: number;
  occurrences: number;
  ranks: number[];
  synthetic_end_count: number;
  /** Durations in ns; the mean rounded to the nearest ns. */
  duration: { total_ns: bigint; mean_ns: bigint; max_ns: bigint };
  peak_allocated_bytes: { value: number; timestamp_ns: bigint; rank: number } | null;
  peak_device_used_bytes: { value: number; timestamp_ns: bigint; rank: number } | null;
  net_allocated_bytes: NetChange | null;
  net_tensors: NetChange | null;
  /** The occurrence with the highest allocated peak (the longest one without memory readings). */
  worst_occurrence: PhaseOccurrence | null;
}

/** A leak verdict for one phase path. */
export type LeakVerdictKind = RetentionVerdictKind;

/** Evidence behind a leak verdict, for one metric (bytes or tensors). See docs/leak-verdicts.md. */
export type LeakEvidence = RetentionEvidence;

export type { BirthEvidence, BirthGroup } from "@stormlog/phases/internal";

/** A leak verdict with its evidence (pooled over ranks; `leaking_ranks` are those that leak). */
export interface LeakReport {
  phase_path: string;
  verdict: LeakVerdictKind;
  /** 0 to 1, two decimals. */
  confidence: number;
  /** "`train / forward` keeps 3 tensors, 12.00 KB per occurrence (ranks 0, 8)". */
  message: string;
  bytes_per_occurrence: number | null;
  tensors_per_occurrence: number | null;
  occurrences: number;
  ranks_analyzed: number;
  leaking_ranks: number[];
  /** Evidence of the rank with the strongest verdict, per metric. */
  evidence: { bytes: LeakEvidence | null; tensors: LeakEvidence | null; rank: number | null };
  /** Live tensors born in this phase that keep accumulating (tfjs birth-phase attribution); null without. */
  births: BirthEvidence | null;
  /** Why the verdict is `insufficient_data` (too few occurrences, last-sample counters); null otherwise. */
  reason: string | null;
}

/** A gap finding of one rank (`rank` added to the reference's finding). */
export type RankGapFinding = GapFinding & { rank: number; session_id: string };

/** One collector-health transition. */
export interface HealthTransition {
  timestamp_ns: bigint;
  rank: number;
  session_id: string;
  event_type: string;
  status: string;
  collector: string;
  error: string | null;
}

/** The collector-health section. */
export interface CollectorHealthReport extends HealthCounts {
  /** Transitions in time order (first 200). */
  transitions: HealthTransition[];
  per_rank: { rank: number; session_id: string; degraded_time_ns: bigint; transition_count: number }[];
}

/** One alert event. */
export interface AlertItem {
  timestamp_ns: bigint;
  rank: number;
  session_id: string;
  event_type: string;
  context: string | null;
  oom_reason: string | null;
  /** The phase active then (`summarizePhaseAttribution`), when any. */
  phase: string | null;
}

/** The alerts section. */
export interface AlertsReport {
  total_count: number;
  /** warning / critical / error. */
  severity_counts: Record<string, number>;
  /** Alerts in time order (first 200). */
  items: AlertItem[];
  truncated: boolean;
}

/** What the sink directories say about retention, from their manifests and `rollups.json`. */
export interface SinkCounters {
  directory_count: number;
  segment_count: number;
  retained_bytes: number;
  retained_event_count: number;
  /** Segments the manifests list but that are gone (pruned by retention). */
  missing_segment_count: number;
  /** From `rollups.json` coverage where written (the reference's pruning counters). */
  pruned_segment_count: number;
  pruned_bytes: number;
  /** Segments still open (a session running or interrupted). */
  open_segment_count: number;
}

/** One sink directory. */
export interface SinkDirectoryReport extends Omit<SinkCounters, "directory_count"> {
  path: string;
  has_manifest: boolean;
  has_rollups: boolean;
  session_count: number;
}

/** The sink section. */
export interface SinkReport extends SinkCounters {
  kind: ReportInput["kind"];
  path: string | null;
  directories: SinkDirectoryReport[];
  /** Read warnings (a final line cut short...). */
  warnings: string[];
}

/** How the index was used (not part of the JSON report). */
export interface IndexUsage {
  /** `built` (first analysis), `updated` (some segments re-scanned), `reused`, `disabled`, `unavailable`. */
  status: "built" | "updated" | "reused" | "disabled" | "unavailable";
  /** Index directory, when there is one. */
  location: string | null;
  segments_reused: number;
  segments_scanned: number;
  segments_dropped: number;
  /** The whole report came from the index (nothing changed since it was computed). */
  report_reused: boolean;
  /** Why there is no index, or why it was rebuilt. */
  reason: string | null;
}

/** The whole report. */
export interface AnalysisReport {
  input: ReportInput;
  session: ReportSession;
  summary: ReportSummary;
  phases: PhaseStat[];
  leaks: LeakReport[];
  gap_analysis: RankGapFinding[];
  /** Present when the selection has more than one rank. */
  cross_rank_analysis: CrossRankAnalysis | null;
  collector_health: CollectorHealthReport;
  alerts: AlertsReport;
  sink: SinkReport;
  /** What limited the analysis (session merging, dropped lines...). */
  notes: string[];
  index: IndexUsage | null;
}
