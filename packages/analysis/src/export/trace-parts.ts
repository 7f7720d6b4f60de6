/**
 * The pieces of the Perfetto export (`perfetto.ts`): process and lane bookkeeping, counter
 * tracks, and how an instant record, a phase span or an analysis finding becomes a trace event.
 * Internal to the package.
 */
import { type JsonObject, type JsonValue, stringifyJson } from "@stormlog/core";
import { pythonJsonString, setJsonMember } from "@stormlog/core/internal";
import { type PhaseResolver, type PhaseSpan, summarizePhaseAttribution } from "@stormlog/phases";
import { summarizePhaseAttributionPayload } from "../analyses/diagnostics.js";
import type { FirstCauseSuspect } from "../analyses/first-cause.js";
import type { GapFinding } from "../analyses/gap.js";
import type { InstantEntry } from "../input/aggregate.js";

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

export function compareNs(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function shorten(text: string): string {
  return text.length <= MAX_NAME ? text : `${text.slice(0, MAX_NAME - 1)}…`;
}

/**
 * Metadata worth showing on an instant: everything but the bulky capability and phase blocks. A
 * copy without the float marks of its own keys (an integral float shows as an integer).
 */
function instantMetadata(metadata: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const key of Object.keys(metadata)) {
    if (key === "memory_capabilities" || key === "phase_scope") continue;
    setJsonMember(out, key, metadata[key] as JsonValue);
  }
  return out;
}

/** A counter track and the last value written to it (only changes are emitted). */
export interface CounterTrack {
  readonly name: string;
  last: number | null;
}

export interface DeviceTracks {
  readonly allocated: CounterTrack;
  readonly reserved: CounterTrack;
  readonly used: CounterTrack;
  readonly gap: CounterTrack;
}

export interface RankProcess {
  readonly rank: number;
  readonly pid: number;
  readonly hosts: Set<string>;
  /** Lane per phase thread: key `session|threadId`. */
  readonly lanes: Map<string, { tid: number; name: string }>;
  /** Counter tracks per device id. */
  readonly tracks: Map<number, DeviceTracks>;
  readonly deviceIds: Set<number>;
}

/** Rank R is process R + 1: pid 0 is Linux's idle task, which Perfetto treats specially. */
export function newRankProcess(rank: number): RankProcess {
  return {
    rank,
    pid: rank + 1,
    hosts: new Set(),
    lanes: new Map(),
    tracks: new Map(),
    deviceIds: new Set(),
  };
}

/**
 * The counter tracks of one device of a rank: `device N allocated`, `... reserved`,
 * `... device used`, `... hidden gap`; host memory (device -1) is unprefixed unless the rank also
 * has devices.
 */
export function tracksOf(process: RankProcess, deviceId: number): DeviceTracks {
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

/** A counter event when `value` differs from the track's last one (counters are step functions). */
export function counterEvent(
  track: CounterTrack,
  value: number | null,
  pid: number,
  ts: number,
): TraceEvent | null {
  if (value === null || value === track.last) return null;
  track.last = value;
  return { name: track.name, ph: "C", pid, ts, args: { bytes: value } };
}

/**
 * The instant of an alert, lifecycle or collector record of a session's rank (null for another
 * type); `resolver` attributes it to a phase as the record itself (its metadata's hints included).
 */
export function recordInstant(
  entry: InstantEntry,
  sessionId: string,
  rank: number,
  pid: number,
  ts: number,
  resolver: PhaseResolver | null,
): TraceEvent | null {
  const category = INSTANT_CATEGORIES[entry.eventType];
  if (category === undefined) return null;
  const oomReason = entry.metadata.oom_reason;
  const name =
    entry.eventType === "error" && typeof oomReason === "string"
      ? `OOM: ${oomReason}`
      : category === "alert" && entry.context
        ? `${entry.eventType}: ${entry.context}`
        : entry.eventType;
  const args: JsonObject = {
    timestamp_ns: entry.timestampNs.toString(),
    event_type: entry.eventType,
    context: entry.context,
  };
  const phase =
    resolver === null
      ? null
      : summarizePhaseAttribution(
          resolver.resolveForEvent({
            session_id: sessionId,
            timestamp_ns: entry.timestampNs,
            rank,
            event_type: entry.eventType,
            metadata: entry.metadata,
          }),
        );
  if (phase !== null) args.phase = phase;
  const metadata = instantMetadata(entry.metadata);
  if (Object.keys(metadata).length > 0) args.metadata = metadata;
  return { name: shorten(name), ph: "i", s: "p", pid, tid: 1, ts, cat: category, args };
}

/**
 * Assigns each span of one session's rank to its lane (one per recording thread, created on first
 * use) and returns the spans per lane tid, in lane order.
 */
export function spansByLane(
  process: RankProcess,
  sessionId: string,
  spans: readonly PhaseSpan[],
): Map<number, PhaseSpan[]> {
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
  return byLane;
}

/** Complete slices of one lane, nested: a span that outlives its parent is cut at the parent's end. */
export function phaseSlices(
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

/** `rank R @ host` (`(+N)` when the rank's records name several hosts). */
export function processName(process: RankProcess): string {
  const hosts = [...process.hosts];
  const where =
    hosts.length === 0 ? "" : ` @ ${hosts[0]}${hosts.length > 1 ? ` (+${hosts.length - 1})` : ""}`;
  return `rank ${process.rank}${where}`;
}

/** The process's name, sort index and label, and its event lane's name and sort index. */
export function processMetadata(process: RankProcess): TraceEvent[] {
  const pid = process.pid;
  return [
    { name: "process_name", ph: "M", pid, args: { name: processName(process) } },
    { name: "process_sort_index", ph: "M", pid, args: { sort_index: process.rank } },
    { name: "process_labels", ph: "M", pid, args: { labels: `rank ${process.rank}` } },
    { name: "thread_name", ph: "M", pid, tid: 1, args: { name: "events" } },
    { name: "thread_sort_index", ph: "M", pid, tid: 1, args: { sort_index: 0 } },
  ];
}

/** A phase lane's name and sort index. */
export function laneMetadata(pid: number, lane: { tid: number; name: string }): TraceEvent[] {
  return [
    { name: "thread_name", ph: "M", pid, tid: lane.tid, args: { name: `phases: ${lane.name}` } },
    { name: "thread_sort_index", ph: "M", pid, tid: lane.tid, args: { sort_index: lane.tid } },
  ];
}

/** The instant of a cross-rank first-cause suspect. */
export function spikeInstant(suspect: FirstCauseSuspect, pid: number, ts: number): TraceEvent {
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
  return {
    name: `first-cause spike (${suspect.confidence})`,
    ph: "i",
    s: "p",
    pid,
    tid: 1,
    ts,
    cat: "spike",
    args,
  };
}

/** The instant of a hidden-memory finding (its evidence timestamp must be set). */
export function gapInstant(finding: GapFinding, pid: number, ts: number): TraceEvent {
  const args: JsonObject = {
    timestamp_ns: (finding.evidence_timestamp_ns ?? 0n).toString(),
    severity: finding.severity,
    confidence: finding.confidence,
    description: finding.description,
    evidence: { ...finding.evidence },
  };
  const phase = summarizePhaseAttributionPayload(finding.phase_attribution);
  if (phase !== null) args.phase = phase;
  return {
    name: `hidden memory: ${finding.classification}`,
    ph: "i",
    s: "p",
    pid,
    tid: 1,
    ts,
    cat: "gap",
    args,
  };
}

/** `otherData`: producer, time origin, ranks, and the session and job when known. */
export function traceOtherData(
  first: bigint,
  ranks: readonly number[],
  sessionId: string | null | undefined,
  jobId: string | null | undefined,
): Record<string, string> {
  const otherData: Record<string, string> = {
    producer: "stormlog",
    first_timestamp_ns: first.toString(),
    ranks: ranks.join(","),
    time_origin: "ts is microseconds since first_timestamp_ns; pid is rank + 1",
  };
  if (sessionId) otherData.session_id = sessionId;
  if (jobId) otherData.job_id = jobId;
  return otherData;
}

const quoted = new Map<string, string>();

/** Counters are most of a trace: written by hand, the rest through the lossless JSON writer. */
export function traceEventJson(event: TraceEvent): string {
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

/** The text after the last trace event. */
export function traceTail(otherData: Record<string, string>): string {
  return `], "displayTimeUnit": ${stringifyJson("ms")}, "otherData": ${stringifyJson(otherData)}}\n`;
}

/** The text before the first trace event. */
export const TRACE_HEAD = '{"traceEvents": [\n';
