/**
 * Chrome Trace Event / Perfetto JSON export of a run, for ui.perfetto.dev: each rank is a process,
 * phases are complete (`X`) slices on one lane per recording thread, memory series are counter
 * (`C`) tracks, and alerts, collector transitions, cross-rank first-cause spikes and hidden-memory
 * findings are instant (`i`) events. Timestamps are microseconds since the first event; the exact
 * nanoseconds stay in each slice's and instant's `args`.
 *
 * Perfetto rules this follows: `X` slices must nest per thread (a child that outlives its parent is
 * cut at the parent's end and says so in its args); each `args` key of a counter becomes its own
 * track, so every counter event carries one key; pid 0 is Linux's idle task and gets special
 * handling in Perfetto (google/perfetto#394), so rank R is process `R + 1`, named `rank R @ host`
 * and sorted by rank.
 *
 * Memory counters take the samples' values and, in time order with them, those of phase records
 * whose counters were read at the boundary (`metadata.phase_counters: "boundary_read"`), so a leak
 * that shows only at phase boundaries rises in the counters too; phase records that repeat the last
 * sample (`"last_sample"`, or the Python Stormlog's without the key) add nothing.
 *
 * This module builds a trace from events in memory; `streamPerfettoTrace` (export-stream.ts) writes
 * the same events from a sink one session at a time.
 */
import type { TelemetryEvent } from "@stormlog/core";
import { isSampleEventType } from "@stormlog/core/internal";
import { PhaseReplayIndex, type PhaseResolver } from "@stormlog/phases";
import { summarizeCrossRankAnalysis } from "./cross-rank-columns.js";
import { isBoundaryReading } from "./diagnostics-phases.js";
import {
  compareNs,
  counterEvent,
  gapInstant,
  laneMetadata,
  newRankProcess,
  phaseSlices,
  processMetadata,
  type RankProcess,
  recordInstant,
  spansByLane,
  spikeInstant,
  TRACE_HEAD,
  type TraceEvent,
  traceEventJson,
  traceOtherData,
  traceTail,
  tracksOf,
} from "./export-trace-parts.js";
import { analyzeGaps } from "./gap.js";

export type { TraceEvent } from "./export-trace-parts.js";

/** A Perfetto-ready trace: `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`. */
export interface PerfettoTrace {
  traceEvents: TraceEvent[];
  displayTimeUnit: "ms";
  /** String metadata (session, first timestamp in ns) shown by the viewers. */
  otherData: Record<string, string>;
}

/** Options of `buildPerfettoTrace`. */
export interface PerfettoExportOptions {
  /**
   * Add the analyses' findings as instants: cross-rank first-cause spikes (with two or more ranks)
   * and hidden-memory gap findings per rank (default true).
   */
  readonly analyses?: boolean;
  /** Labels the trace (`otherData.session_id`). */
  readonly sessionId?: string | null;
  /** Phase replay of the same events, if already built (default: a `PhaseReplayIndex` built here). */
  readonly phaseIndex?: PhaseResolver & Pick<PhaseReplayIndex, "spansFor">;
}

/**
 * Builds the trace of a run's events (one session, or the per-rank sessions of a job). Events may
 * come in any order. Memory counters are written only when a value changes (counters are step
 * functions, so nothing is lost), which keeps long flat runs small. Holds every event: for a sink
 * on disk, `streamPerfettoTrace` writes the same trace in bounded memory.
 */
export function buildPerfettoTrace(
  events: readonly TelemetryEvent[],
  options: PerfettoExportOptions = {},
): PerfettoTrace {
  const sorted = [...events].sort((a, b) => compareNs(a.timestamp_ns, b.timestamp_ns));
  const first = sorted[0]?.timestamp_ns ?? 0n;
  const micros = (ns: bigint): number => Number(ns - first) / 1000;
  const out: TraceEvent[] = [];
  const processes = new Map<number, RankProcess>();
  const processOf = (rank: number): RankProcess => {
    let process = processes.get(rank);
    if (process === undefined) {
      process = newRankProcess(rank);
      processes.set(rank, process);
    }
    return process;
  };
  const groups = new Map<string, Set<number>>();
  for (const event of sorted) {
    const process = processOf(event.rank);
    process.hosts.add(event.host);
    let ranks = groups.get(event.session_id);
    if (ranks === undefined) {
      ranks = new Set();
      groups.set(event.session_id, ranks);
    }
    ranks.add(event.rank);
    if (isSampleEventType(event.event_type) || isBoundaryReading(event))
      process.deviceIds.add(event.device_id);
  }

  const index = options.phaseIndex ?? PhaseReplayIndex.fromEvents(sorted);
  const resolver: PhaseResolver = index;
  const body: TraceEvent[] = [];

  // Phases: one lane per (session, recording thread), slices nested per lane.
  for (const [sessionId, ranks] of groups) {
    for (const rank of ranks) {
      const spans = index.spansFor(sessionId, rank);
      if (spans.length === 0) continue;
      const process = processOf(rank);
      for (const [tid, laneSpans] of spansByLane(process, sessionId, spans)) {
        for (const slice of phaseSlices(laneSpans, process.pid, tid, micros)) body.push(slice);
      }
    }
  }

  // Counters and instants from the records.
  const push = (event: TraceEvent | null): void => {
    if (event !== null) body.push(event);
  };
  for (const event of sorted) {
    const process = processOf(event.rank);
    const ts = micros(event.timestamp_ns);
    // A boundary reading is a reading like a sample (and no instant).
    if (isSampleEventType(event.event_type) || isBoundaryReading(event)) {
      const tracks = tracksOf(process, event.device_id);
      const used = event.device_used_bytes;
      const reserved = event.allocator_reserved_bytes;
      push(counterEvent(tracks.allocated, event.allocator_allocated_bytes, process.pid, ts));
      push(counterEvent(tracks.reserved, reserved, process.pid, ts));
      push(counterEvent(tracks.used, used, process.pid, ts));
      if (used !== null && reserved !== null && event.device_total_bytes) {
        push(counterEvent(tracks.gap, used - reserved, process.pid, ts));
      }
      continue;
    }
    push(recordInstant(event, process.pid, ts, resolver));
  }

  if (options.analyses !== false)
    for (const instant of analysisInstants(sorted, processes, resolver, micros, processOf))
      body.push(instant);

  // Metadata first: process and lane names, sorted by rank.
  const ranks = [...processes.keys()].sort((a, b) => a - b);
  for (const rank of ranks) {
    const process = processes.get(rank)!;
    for (const event of processMetadata(process)) out.push(event);
    for (const lane of process.lanes.values())
      for (const event of laneMetadata(process.pid, lane)) out.push(event);
  }
  for (const event of body) out.push(event);

  const jobId = sorted.find((event) => event.job_id !== null)?.job_id;
  return {
    traceEvents: out,
    displayTimeUnit: "ms",
    otherData: traceOtherData(first, ranks, options.sessionId, jobId),
  };
}

function analysisInstants(
  sorted: readonly TelemetryEvent[],
  processes: ReadonlyMap<number, RankProcess>,
  resolver: PhaseResolver,
  micros: (ns: bigint) => number,
  processOf: (rank: number) => RankProcess,
): TraceEvent[] {
  const instants: TraceEvent[] = [];
  if (processes.size > 1) {
    const crossRank = summarizeCrossRankAnalysis(sorted, { phaseResolver: resolver });
    for (const suspect of crossRank.first_cause_suspects) {
      instants.push(
        spikeInstant(suspect, processOf(suspect.rank).pid, micros(suspect.first_spike_timestamp_ns)),
      );
    }
  }
  const byRank = new Map<number, TelemetryEvent[]>();
  for (const event of sorted) {
    let list = byRank.get(event.rank);
    if (list === undefined) {
      list = [];
      byRank.set(event.rank, list);
    }
    list.push(event);
  }
  for (const [rank, rankEvents] of byRank) {
    for (const finding of analyzeGaps(rankEvents, { phaseResolver: resolver })) {
      if (finding.evidence_timestamp_ns === null) continue;
      instants.push(gapInstant(finding, processOf(rank).pid, micros(finding.evidence_timestamp_ns)));
    }
  }
  return instants;
}

/**
 * The trace as JSON text in chunks (one trace event per line), so a large trace is written
 * without building one huge string. Integers in `args` are exact.
 */
export function* perfettoTraceChunks(trace: PerfettoTrace): Generator<string> {
  yield TRACE_HEAD;
  const events = trace.traceEvents;
  for (let index = 0; index < events.length; index++) {
    yield `${traceEventJson(events[index]!)}${index + 1 < events.length ? ",\n" : "\n"}`;
  }
  yield traceTail(trace.otherData);
}

/** The whole trace as one JSON string. */
export function formatPerfettoTrace(trace: PerfettoTrace): string {
  let text = "";
  for (const chunk of perfettoTraceChunks(trace)) text += chunk;
  return text;
}
