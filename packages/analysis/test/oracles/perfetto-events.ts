/**
 * TEST ORACLE: the Perfetto trace built event by event, as `buildPerfettoTrace` built it before the
 * export read the dataset. The package builds the trace from the dataset only (`src/export-perfetto.ts`,
 * for events and for sinks on disk); this version checks it, event for event, on golden, generated
 * and hostile inputs.
 *
 * The neutral pieces (process and lane bookkeeping, counter tracks, phase slices, the analyses'
 * instants) come from `src/export-trace-parts.ts`; what reads records is here: which records become
 * counters and instants, an instant's name and arguments, the hosts and devices of a rank, the job.
 */
import type { JsonObject, JsonValue, TelemetryEvent } from "@stormlog/core";
import { isSampleEventType, setJsonMember } from "@stormlog/core/internal";
import { PhaseReplayIndex, type PhaseResolver, summarizePhaseAttribution } from "@stormlog/phases";
import { summarizeCrossRankAnalysis } from "../../src/analyses/cross-rank.js";
import { isBoundaryReading } from "../../src/analyses/diagnostics-phases.js";
import { analyzeGaps } from "../../src/analyses/gap.js";
import type { PerfettoExportOptions, PerfettoTrace } from "../../src/export/perfetto.js";
import {
  compareNs,
  counterEvent,
  gapInstant,
  laneMetadata,
  newRankProcess,
  phaseSlices,
  processMetadata,
  type RankProcess,
  spansByLane,
  spikeInstant,
  type TraceEvent,
  traceOtherData,
  tracksOf,
} from "../../src/export/trace-parts.js";

const INSTANT_CATEGORIES: Readonly<Record<string, string>> = {
  warning: "alert",
  critical: "alert",
  error: "alert",
  start: "lifecycle",
  stop: "lifecycle",
  collector_degraded: "collector",
  collector_recovered: "collector",
  cleanup: "lifecycle",
};

const MAX_NAME = 80;

function shorten(text: string): string {
  return text.length <= MAX_NAME ? text : `${text.slice(0, MAX_NAME - 1)}…`;
}

/** Metadata worth showing on an instant: everything but the bulky capability and phase blocks. */
function instantMetadata(metadata: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const key of Object.keys(metadata)) {
    if (key === "memory_capabilities" || key === "phase_scope") continue;
    setJsonMember(out, key, metadata[key] as JsonValue);
  }
  return out;
}

/** The instant of an alert, lifecycle or collector record; null for other records. */
function recordInstant(
  event: TelemetryEvent,
  pid: number,
  ts: number,
  resolver: PhaseResolver,
): TraceEvent | null {
  const category = INSTANT_CATEGORIES[event.event_type];
  if (category === undefined) return null;
  const oomReason = event.metadata.oom_reason;
  const name =
    event.event_type === "error" && typeof oomReason === "string"
      ? `OOM: ${oomReason}`
      : category === "alert" && event.context
        ? `${event.event_type}: ${event.context}`
        : event.event_type;
  const args: JsonObject = {
    timestamp_ns: event.timestamp_ns.toString(),
    event_type: event.event_type,
    context: event.context,
  };
  const phase = summarizePhaseAttribution(resolver.resolveForEvent(event));
  if (phase !== null) args.phase = phase;
  const metadata = instantMetadata(event.metadata);
  if (Object.keys(metadata).length > 0) args.metadata = metadata;
  return { name: shorten(name), ph: "i", s: "p", pid, tid: 1, ts, cat: category, args };
}

/** The trace of a run's events (one session, or the per-rank sessions of a job), event by event. */
export function buildPerfettoTraceFromEvents(
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
 * A trace's JSON text (as `formatPerfettoTrace` or `streamPerfettoTrace` write it: one event a
 * line) as its events' lines, sorted, and its tail: its content whatever the order of the array.
 * The raw lines are compared, so that what JSON would hide (`1.0` against `1`) still shows.
 */
export function traceContent(text: string): { events: string[]; tail: string } {
  const lines = text.split("\n");
  if (lines[0] !== '{"traceEvents": [') throw new Error(`not a trace: ${lines[0]?.slice(0, 80)}`);
  const tailAt = lines.findIndex((line) => line.startsWith("], "));
  if (tailAt < 0) throw new Error("a trace without its tail");
  const events = lines
    .slice(1, tailAt)
    .filter((line) => line !== "")
    .map((line) => (line.endsWith(",") ? line.slice(0, -1) : line))
    .sort();
  return { events, tail: lines.slice(tailAt).join("\n") };
}

/** The first lines one sorted list lacks or has beyond the other (a readable failure). */
export function sameEvents(
  actual: readonly string[],
  expected: readonly string[],
): { missing: string[]; extra: string[] } {
  const missing: string[] = [];
  const extra: string[] = [];
  let i = 0;
  let j = 0;
  while ((i < actual.length || j < expected.length) && missing.length + extra.length < 6) {
    if (j >= expected.length || (i < actual.length && actual[i]! < expected[j]!)) extra.push(actual[i++]!);
    else if (i >= actual.length || expected[j]! < actual[i]!) missing.push(expected[j++]!);
    else {
      i++;
      j++;
    }
  }
  return { missing, extra };
}
