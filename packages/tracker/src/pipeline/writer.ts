import type { SessionStatus, SessionSummary, TelemetryEvent } from "@stormlog/core";
import { TelemetrySink, type TelemetrySinkOptions } from "@stormlog/sink";
import { canWriteOffThread, OffThreadSink } from "./off-thread-sink.js";

/** The sink counters the tracker reports (the reference's five; more are passed through). */
export interface WriterDiagnostics {
  readonly rollover_count?: number;
  readonly pruned_segment_count?: number;
  readonly pruned_bytes?: number;
  readonly final_retained_files?: number;
  readonly final_retained_bytes?: number;
  /** Records lost by the writer: a session with losses ends `incomplete`. */
  readonly dropped_events?: number;
  readonly rejected_events?: number;
  /** Records written to disk (live metrics publish it where the writer counts it). */
  readonly written_events?: number;
  /** Records waiting in memory for the disk (live metrics publish it where the writer counts it). */
  readonly queued_events?: number;
}

/** What the tracker needs from a sink: `TelemetrySink` from `@stormlog/sink`, or your own. */
export interface TelemetryWriter {
  /** Queues one record. Must be cheap and should not throw (a throw disables the writer). */
  append(record: TelemetryEvent): void;
  /** Registers the session the following records belong to; returns the summary it keeps. */
  startSession?(summary: Partial<Omit<SessionSummary, "status" | "ended_at_ns">>): SessionSummary | undefined;
  /** Closes the session with a status. */
  close(status?: SessionStatus): void | Promise<void>;
  /** Closes synchronously, on `process.exit()`. */
  closeSync?(status?: SessionStatus): void;
  getDiagnostics?(): WriterDiagnostics;
}

/** The tracker's `sink` option: a writer, or options to create a `TelemetrySink` at each start. */
export type TrackerSinkOption = TelemetryWriter | TelemetrySinkOptions;

/** True when the option is a writer instance rather than sink options. */
export function isTelemetryWriter(option: TrackerSinkOption): option is TelemetryWriter {
  return typeof (option as { append?: unknown }).append === "function";
}

/** Creates the sink for sink options: on a worker thread (see `OffThreadSink`) or this one. */
export function createSink(
  options: TelemetrySinkOptions,
  thread: "worker" | "main" = "main",
): TelemetryWriter {
  const withSource = { source: "stormlog.tracker", ...options };
  return thread === "worker" && canWriteOffThread(options)
    ? new OffThreadSink(withSource)
    : new TelemetrySink(withSource);
}

/** The reference's five sink counters, zero when unknown. */
export interface SinkCounters {
  rollover_count: number;
  pruned_segment_count: number;
  pruned_bytes: number;
  final_retained_files: number;
  final_retained_bytes: number;
}

/** Zero counters. */
export function emptySinkCounters(): SinkCounters {
  return {
    rollover_count: 0,
    pruned_segment_count: 0,
    pruned_bytes: 0,
    final_retained_files: 0,
    final_retained_bytes: 0,
  };
}

/** The five counters of a diagnostics object. */
export function sinkCounters(diagnostics: WriterDiagnostics | undefined): SinkCounters {
  const counters = emptySinkCounters();
  if (diagnostics === undefined) return counters;
  for (const key of Object.keys(counters) as (keyof SinkCounters)[]) {
    const value = diagnostics[key];
    if (typeof value === "number") counters[key] = value;
  }
  return counters;
}
