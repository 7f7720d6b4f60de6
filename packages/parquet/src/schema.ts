/**
 * The tables of a Stormlog Parquet dataset and their columns. Names follow the telemetry schema
 * (`timestamp_ns`, `allocator_allocated_bytes`, `device_used_bytes`, ...) and the analysis report
 * (`phase_path`, `peak_allocated_bytes`, `verdict`, ...). Every integer that can pass 2^31 is INT64,
 * written exactly (timestamps are nanoseconds since the epoch, as in the records). docs/parquet.md
 * documents each column.
 */

/** A column's Parquet type: INT32, INT64, DOUBLE, BOOLEAN, STRING (UTF-8) or JSON (UTF-8 JSON text). */
export type ParquetColumnType = "INT32" | "INT64" | "DOUBLE" | "BOOLEAN" | "STRING" | "JSON";

/** One column of a table. */
export interface ParquetColumn {
  readonly name: string;
  readonly type: ParquetColumnType;
  /** Whether the column may hold nulls. */
  readonly nullable: boolean;
  readonly description: string;
}

/** The tables of the dataset. */
export type ParquetTableName =
  | "samples"
  | "phase_occurrences"
  | "alerts"
  | "collector_transitions"
  | "hidden_memory_findings"
  | "leak_verdicts"
  | "sessions";

/** A table: its columns, and the hive partition keys of its directories (`job_id=…/rank=…/`). */
export interface ParquetTable {
  readonly name: ParquetTableName;
  readonly description: string;
  /**
   * Partition keys, outermost first: directory names, not columns inside the files. The bulky tables
   * (samples, phase occurrences) are partitioned by job and rank; the sparse ones by job, with `rank`
   * a column (a file of a few rows per rank is what engines read slowest).
   */
  readonly partitions: readonly ("job_id" | "rank")[];
  readonly columns: readonly ParquetColumn[];
}

const column = (
  name: string,
  type: ParquetColumnType,
  nullable: boolean,
  description: string,
): ParquetColumn => ({
  name,
  type,
  nullable,
  description,
});

const SAMPLES: ParquetTable = {
  name: "samples",
  description:
    "Every sample record of the selection: its counters, who sampled it, and the phase it fell in.",
  partitions: ["job_id", "rank"],
  columns: [
    column("session_id", "STRING", false, "The session the sample belongs to."),
    column("timestamp_ns", "INT64", false, "Nanoseconds since the Unix epoch, exact."),
    column("collector", "STRING", true, "The collector of the rank's samples (that of its peak readings)."),
    column("device_id", "INT32", false, "Device of the sample."),
    column("host", "STRING", false, "Host that recorded the sample."),
    column("pid", "INT64", false, "Process id."),
    column("world_size", "INT32", false, "Ranks in the job."),
    column("sampling_interval_ms", "DOUBLE", false, "The tracker's sampling interval."),
    column(
      "allocator_allocated_bytes",
      "INT64",
      true,
      "Bytes the framework's allocator holds for live tensors.",
    ),
    column("allocator_reserved_bytes", "INT64", true, "Bytes the allocator reserved (its pool)."),
    column("device_used_bytes", "INT64", true, "Device memory in use (NVML), or the collector's equivalent."),
    column("device_total_bytes", "INT64", true, "Device memory in total."),
    column("tfjs_num_tensors", "INT64", true, "Live TensorFlow.js tensors (`metadata.tfjs_num_tensors`)."),
    column(
      "phase_path",
      "STRING",
      true,
      "The nested phase active at the sample (`train / forward`), null outside phases or when ambiguous.",
    ),
    column(
      "phase_resolution",
      "STRING",
      false,
      "How the phase was found: unique, ambiguous or none (the analysis's attribution).",
    ),
  ],
};

const PHASE_OCCURRENCES: ParquetTable = {
  name: "phase_occurrences",
  description:
    "Each occurrence of a phase (one enter and its exit) with the analysis's peaks and net changes.",
  partitions: ["job_id", "rank"],
  columns: [
    column("session_id", "STRING", false, "The session of the occurrence."),
    column("phase_path", "STRING", false, "Nested phase path, `parent / child`."),
    column("phase_name", "STRING", false, "The phase's own name (the last element of its path)."),
    column("depth", "INT32", false, "Nesting depth, 0 for a top-level phase."),
    column("scope_id", "STRING", false, "The scope id of the phase records."),
    column("start_ns", "INT64", false, "Entry, nanoseconds since the Unix epoch."),
    column("end_ns", "INT64", false, "Exit (the rank's last event for a phase never closed)."),
    column("duration_ns", "INT64", false, "`end_ns - start_ns`."),
    column("synthetic_end", "BOOLEAN", false, "True when the phase was never closed."),
    column(
      "peak_allocated_bytes",
      "INT64",
      true,
      "Highest allocator allocated inside (boundary readings and samples, nested phases included).",
    ),
    column("peak_allocated_ns", "INT64", true, "When that peak was read."),
    column("peak_device_used_bytes", "INT64", true, "Highest device used inside."),
    column("peak_device_used_ns", "INT64", true, "When that peak was read."),
    column("net_allocated_bytes", "INT64", true, "Allocated at exit minus at entry."),
    column("net_device_used_bytes", "INT64", true, "Device used at exit minus at entry."),
    column("enter_tensors", "INT64", true, "Live tensors at entry, where known."),
    column("exit_tensors", "INT64", true, "Live tensors at exit, where known."),
    column("net_tensors", "INT64", true, "`exit_tensors - enter_tensors`."),
    column(
      "boundary_read",
      "BOOLEAN",
      false,
      "The phase records carry counters read at the boundary itself.",
    ),
  ],
};

const ALERTS: ParquetTable = {
  name: "alerts",
  description: "Alert records (warning, critical, error), OOM reports included.",
  partitions: ["job_id"],
  columns: [
    column("rank", "INT32", false, "The rank."),
    column("session_id", "STRING", false, "The session of the alert."),
    column("timestamp_ns", "INT64", false, "Nanoseconds since the Unix epoch."),
    column("event_type", "STRING", false, "warning, critical or error."),
    column("context", "STRING", true, "The alert's message."),
    column("oom_reason", "STRING", true, "`metadata.oom_reason`, for an OOM report."),
    column("allocator_allocated_bytes", "INT64", true, "Allocated when the alert was raised."),
    column("device_used_bytes", "INT64", true, "Device used when the alert was raised."),
    column("phase_path", "STRING", true, "The phase active then, null outside phases or when ambiguous."),
  ],
};

const COLLECTOR_TRANSITIONS: ParquetTable = {
  name: "collector_transitions",
  description: "Collector-health transitions (`collector_degraded`, `collector_recovered`).",
  partitions: ["job_id"],
  columns: [
    column("rank", "INT32", false, "The rank."),
    column("session_id", "STRING", false, "The session of the transition."),
    column("timestamp_ns", "INT64", false, "Nanoseconds since the Unix epoch."),
    column("event_type", "STRING", false, "collector_degraded or collector_recovered."),
    column("collector", "STRING", false, "The collector."),
    column("status", "STRING", true, "`metadata.collector_health_status`."),
    column("error", "STRING", true, "`metadata.collector_last_error`."),
    column("context", "STRING", true, "The record's context."),
  ],
};

const HIDDEN_MEMORY_FINDINGS: ParquetTable = {
  name: "hidden_memory_findings",
  description: "Hidden-memory (device used minus allocator reserved) findings of the analysis, per rank.",
  partitions: ["job_id"],
  columns: [
    column("rank", "INT32", false, "The rank."),
    column("session_id", "STRING", false, "The session the finding is about."),
    column("classification", "STRING", false, "transient_spike, persistent_drift or fragmentation_like."),
    column("severity", "STRING", false, "info, warning or critical."),
    column("confidence", "DOUBLE", false, "0 to 1."),
    column("description", "STRING", false, "What was found."),
    column("evidence_timestamp_ns", "INT64", true, "The sample the finding points at."),
    column("phase_path", "STRING", true, "The phase active at that sample, when unique."),
    column("evidence", "JSON", false, "The classifier's evidence (the report's keys)."),
    column("remediation", "JSON", false, "What to try, as a JSON array of strings."),
  ],
};

const LEAK_VERDICTS: ParquetTable = {
  name: "leak_verdicts",
  description: "The analysis's leak verdict per phase path, over every rank.",
  partitions: ["job_id"],
  columns: [
    column("phase_path", "STRING", false, "Nested phase path."),
    column("verdict", "STRING", false, "leaking, plateau, stable or insufficient_data."),
    column("confidence", "DOUBLE", false, "0 to 1."),
    column("message", "STRING", false, "The verdict in words."),
    column("bytes_per_occurrence", "DOUBLE", true, "Bytes kept per occurrence."),
    column("tensors_per_occurrence", "DOUBLE", true, "Tensors kept per occurrence."),
    column("occurrences", "INT64", false, "Occurrences judged."),
    column("ranks_analyzed", "INT32", false, "Ranks judged."),
    column("leaking_ranks", "JSON", false, "Ranks found leaking, a JSON array."),
    column("reason", "STRING", true, "Why the verdict is insufficient_data."),
  ],
};

const SESSIONS: ParquetTable = {
  name: "sessions",
  description: "One row per session and rank of the selection.",
  partitions: ["job_id"],
  columns: [
    column("session_id", "STRING", false, "The session."),
    column("rank", "INT32", false, "Its rank."),
    column("selected_session_id", "STRING", true, "The view exported: the session, or the rank group's id."),
    column("host", "STRING", true, "Host of its earliest event."),
    column("pid", "INT64", true, "Process id of its samples."),
    column("world_size", "INT32", true, "Ranks in the job."),
    column("first_timestamp_ns", "INT64", true, "Its earliest event."),
    column("last_timestamp_ns", "INT64", true, "Its latest event."),
    column("event_count", "INT64", false, "Its records."),
    column("sample_count", "INT64", false, "Its samples."),
    column("status", "STRING", true, "The selection's status (running, completed, incomplete...)."),
  ],
};

/** Every table of the dataset, in the order the documentation lists them. */
export const PARQUET_TABLES: readonly ParquetTable[] = [
  SAMPLES,
  PHASE_OCCURRENCES,
  ALERTS,
  COLLECTOR_TRANSITIONS,
  HIDDEN_MEMORY_FINDINGS,
  LEAK_VERDICTS,
  SESSIONS,
];

/** The table called `name`. */
export function parquetTable(name: ParquetTableName): ParquetTable {
  return PARQUET_TABLES.find((table) => table.name === name)!;
}
