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
 */
import {
  type JsonObject,
  type JsonValue,
  pythonJsonString,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import {
  PhaseReplayIndex,
  type PhaseResolver,
  type PhaseSpan,
  summarizePhaseAttribution,
} from "@stormlog/phases";
import { summarizeCrossRankAnalysis } from "./cross-rank.js";
import { summarizePhaseAttributionPayload } from "./diagnostics.js";
import { analyzeGaps } from "./gap.js";

/** One trace event (the Trace Event Format's fields that this export writes). */
export interface TraceEvent {
  name: string;
  /** `M` metadata, `X` complete slice, `C` counter, `i` instant. */
  ph: "M" | "X" | "C" | "i";
  pid: number;
  tid?: number;
  /** Microseconds since the first telemetry event. */
  ts?: number;
  /** Microseconds (`X` only). */
  dur?: number;
  cat?: string;
  /** Instant scope: `p` (process) or `t` (thread). */
  s?: "p" | "t";
  args?: JsonObject;
}

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

function isSample(eventType: string): boolean {
  return eventType === "sample" || eventType.trim().toLowerCase() === "sample";
}

function compareNs(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function shorten(text: string): string {
  return text.length <= MAX_NAME ? text : `${text.slice(0, MAX_NAME - 1)}…`;
}

/** Metadata worth showing on an instant: everything but the bulky capability and phase blocks. */
function instantMetadata(metadata: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const key of Object.keys(metadata)) {
    if (key === "memory_capabilities" || key === "phase_scope") continue;
    out[key] = metadata[key] as JsonValue;
  }
  return out;
}

/** A counter track and the last value written to it (only changes are emitted). */
interface CounterTrack {
  readonly name: string;
  last: number | null;
}

interface DeviceTracks {
  readonly allocated: CounterTrack;
  readonly reserved: CounterTrack;
  readonly used: CounterTrack;
  readonly gap: CounterTrack;
}

interface RankProcess {
  readonly rank: number;
  readonly pid: number;
  readonly hosts: Set<string>;
  /** Lane per phase thread: key `session|threadId`. */
  readonly lanes: Map<string, { tid: number; name: string }>;
  /** Counter tracks per device id. */
  readonly tracks: Map<number, DeviceTracks>;
  readonly deviceIds: Set<number>;
}

/**
 * The counter tracks of one device of a rank: `device N allocated`, `... reserved`,
 * `... device used`, `... hidden gap`; host memory (device -1) is unprefixed unless the rank also
 * has devices.
 */
function tracksOf(process: RankProcess, deviceId: number): DeviceTracks {
  let tracks = process.tracks.get(deviceId);
  if (tracks === undefined) {
    const label = deviceId >= 0 ? `device ${deviceId} ` : process.deviceIds.size > 1 ? "host " : "";
    const track = (name: string): CounterTrack => ({ name: `${label}${name}`, last: null });
    tracks = {
      allocated: track("allocated"),
      reserved: track("reserved"),
      used: track("device used"),
      gap: track("hidden gap"),
    };
    process.tracks.set(deviceId, tracks);
  }
  return tracks;
}

function counter(
  track: CounterTrack,
  value: number | null,
  pid: number,
  ts: number,
  out: TraceEvent[],
): void {
  if (value === null || value === track.last) return;
  track.last = value;
  out.push({ name: track.name, ph: "C", pid, ts, args: { bytes: value } });
}

/**
 * Builds the trace of a run's events (one session, or the per-rank sessions of a job). Events may
 * come in any order. Memory counters are written only when a value changes (counters are step
 * functions, so nothing is lost), which keeps long flat runs small.
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
      process = {
        rank,
        pid: rank + 1,
        hosts: new Set(),
        lanes: new Map(),
        tracks: new Map(),
        deviceIds: new Set(),
      };
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
    if (isSample(event.event_type)) process.deviceIds.add(event.device_id);
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
      const byLane = new Map<number, PhaseSpan[]>();
      for (const span of spans) {
        const key = `${sessionId}|${String(span.threadId)}`;
        let lane = process.lanes.get(key);
        if (lane === undefined) {
          lane = { tid: process.lanes.size + 2, name: span.threadName || `thread ${String(span.threadId)}` };
          process.lanes.set(key, lane);
        }
        let list = byLane.get(lane.tid);
        if (list === undefined) {
          list = [];
          byLane.set(lane.tid, list);
        }
        list.push(span);
      }
      for (const [tid, laneSpans] of byLane) {
        for (const slice of phaseSlices(laneSpans, process.pid, tid, micros)) body.push(slice);
      }
    }
  }

  // Counters and instants from the records.
  for (const event of sorted) {
    const process = processOf(event.rank);
    if (isSample(event.event_type)) {
      const tracks = tracksOf(process, event.device_id);
      const ts = micros(event.timestamp_ns);
      const used = event.device_used_bytes;
      const reserved = event.allocator_reserved_bytes;
      counter(tracks.allocated, event.allocator_allocated_bytes, process.pid, ts, body);
      counter(tracks.reserved, reserved, process.pid, ts, body);
      counter(tracks.used, used, process.pid, ts, body);
      if (used !== null && reserved !== null && event.device_total_bytes) {
        counter(tracks.gap, used - reserved, process.pid, ts, body);
      }
      continue;
    }
    const category = INSTANT_CATEGORIES[event.event_type];
    if (category === undefined) continue;
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
    body.push({
      name: shorten(name),
      ph: "i",
      s: "p",
      pid: process.pid,
      tid: 1,
      ts: micros(event.timestamp_ns),
      cat: category,
      args,
    });
  }

  if (options.analyses !== false)
    for (const instant of analysisInstants(sorted, processes, resolver, micros, processOf))
      body.push(instant);

  // Metadata first: process and lane names, sorted by rank.
  const ranks = [...processes.keys()].sort((a, b) => a - b);
  for (const rank of ranks) {
    const process = processes.get(rank)!;
    const hosts = [...process.hosts];
    const where =
      hosts.length === 0 ? "" : ` @ ${hosts[0]}${hosts.length > 1 ? ` (+${hosts.length - 1})` : ""}`;
    out.push(
      { name: "process_name", ph: "M", pid: process.pid, args: { name: `rank ${rank}${where}` } },
      { name: "process_sort_index", ph: "M", pid: process.pid, args: { sort_index: rank } },
      { name: "process_labels", ph: "M", pid: process.pid, args: { labels: `rank ${rank}` } },
      { name: "thread_name", ph: "M", pid: process.pid, tid: 1, args: { name: "events" } },
      { name: "thread_sort_index", ph: "M", pid: process.pid, tid: 1, args: { sort_index: 0 } },
    );
    for (const lane of process.lanes.values()) {
      out.push(
        {
          name: "thread_name",
          ph: "M",
          pid: process.pid,
          tid: lane.tid,
          args: { name: `phases: ${lane.name}` },
        },
        {
          name: "thread_sort_index",
          ph: "M",
          pid: process.pid,
          tid: lane.tid,
          args: { sort_index: lane.tid },
        },
      );
    }
  }
  for (const event of body) out.push(event);

  const otherData: Record<string, string> = {
    producer: "stormlog",
    first_timestamp_ns: first.toString(),
    ranks: ranks.join(","),
    time_origin: "ts is microseconds since first_timestamp_ns; pid is rank + 1",
  };
  if (options.sessionId) otherData.session_id = options.sessionId;
  const jobId = sorted.find((event) => event.job_id !== null)?.job_id;
  if (jobId) otherData.job_id = jobId;
  return { traceEvents: out, displayTimeUnit: "ms", otherData };
}

/** Complete slices of one lane, nested: a span that outlives its parent is cut at the parent's end. */
function phaseSlices(
  spans: readonly PhaseSpan[],
  pid: number,
  tid: number,
  micros: (ns: bigint) => number,
): TraceEvent[] {
  const ordered = [...spans].sort(
    (a, b) => compareNs(a.startNs, b.startNs) || compareNs(b.endNs, a.endNs) || a.depth - b.depth,
  );
  const stack: bigint[] = [];
  const slices: TraceEvent[] = [];
  for (const span of ordered) {
    while (stack.length > 0 && stack[stack.length - 1]! <= span.startNs) stack.pop();
    const parentEnd = stack[stack.length - 1];
    const end = parentEnd !== undefined && span.endNs > parentEnd ? parentEnd : span.endNs;
    const args: JsonObject = {
      phase_path: span.phasePath,
      depth: span.depth,
      scope_id: span.scopeId,
      start_ns: span.startNs.toString(),
      end_ns: span.endNs.toString(),
      thread_id: String(span.threadId),
    };
    if (span.syntheticEnd) args.unclosed = true;
    if (end !== span.endNs) args.cut_at_parent_end_ns = end.toString();
    slices.push({
      name: span.path[span.path.length - 1] ?? span.phasePath,
      ph: "X",
      pid,
      tid,
      ts: micros(span.startNs),
      dur: Number(end - span.startNs) / 1000,
      cat: "phase",
      args,
    });
    stack.push(end);
  }
  return slices;
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
      const args: JsonObject = {
        timestamp_ns: suspect.first_spike_timestamp_ns.toString(),
        aligned_timestamp_ns: suspect.aligned_first_spike_timestamp_ns.toString(),
        confidence: suspect.confidence,
        peak_delta_bytes: suspect.peak_delta_bytes,
        spike_window_samples: suspect.spike_window_samples,
        lead_over_cluster_onset_ns: suspect.lead_over_cluster_onset_ns.toString(),
      };
      const phase = summarizePhaseAttributionPayload(suspect.phase_attribution);
      if (phase !== null) args.phase = phase;
      instants.push({
        name: `first-cause spike (${suspect.confidence})`,
        ph: "i",
        s: "p",
        pid: processOf(suspect.rank).pid,
        tid: 1,
        ts: micros(suspect.first_spike_timestamp_ns),
        cat: "spike",
        args,
      });
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
      const args: JsonObject = {
        timestamp_ns: finding.evidence_timestamp_ns.toString(),
        severity: finding.severity,
        confidence: finding.confidence,
        description: finding.description,
        evidence: { ...finding.evidence },
      };
      const phase = summarizePhaseAttributionPayload(finding.phase_attribution);
      if (phase !== null) args.phase = phase;
      instants.push({
        name: `hidden memory: ${finding.classification}`,
        ph: "i",
        s: "p",
        pid: processOf(rank).pid,
        tid: 1,
        ts: micros(finding.evidence_timestamp_ns),
        cat: "gap",
        args,
      });
    }
  }
  return instants;
}

const quoted = new Map<string, string>();

/** Counters are most of a trace: written by hand, the rest through the lossless JSON writer. */
function traceEventJson(event: TraceEvent): string {
  if (event.ph === "C" && event.args !== undefined && typeof event.args.bytes === "number") {
    let name = quoted.get(event.name);
    if (name === undefined) {
      name = pythonJsonString(event.name);
      if (quoted.size < 4096) quoted.set(event.name, name);
    }
    return `{"name": ${name}, "ph": "C", "pid": ${event.pid}, "ts": ${event.ts}, "args": {"bytes": ${event.args.bytes}}}`;
  }
  return stringifyJson(event as unknown as JsonObject);
}

/**
 * The trace as JSON text in chunks (one trace event per line), so a large trace is written
 * without building one huge string. Integers in `args` are exact.
 */
export function* perfettoTraceChunks(trace: PerfettoTrace): Generator<string> {
  yield '{"traceEvents": [\n';
  const events = trace.traceEvents;
  for (let index = 0; index < events.length; index++) {
    yield `${traceEventJson(events[index]!)}${index + 1 < events.length ? ",\n" : "\n"}`;
  }
  yield `], "displayTimeUnit": ${stringifyJson(trace.displayTimeUnit)}, "otherData": ${stringifyJson(trace.otherData)}}\n`;
}

/** The whole trace as one JSON string. */
export function formatPerfettoTrace(trace: PerfettoTrace): string {
  let text = "";
  for (const chunk of perfettoTraceChunks(trace)) text += chunk;
  return text;
}
