/**
 * Exports of a sink on disk that stream: the selection (one session, or a job's rank group, as
 * `analyzeTelemetry` chooses it) is worked out from the analysis index's segment digests, and then
 * each member session's segments are read on their own, so memory holds one session at a time.
 *
 * `streamPerfettoTrace` writes the same trace events as `buildPerfettoTrace` over the selection's
 * events; only their order in the array differs (which the Trace Event Format leaves free): each
 * session comes as a block (its ranks' metadata, its phase slices, then its counters and
 * instants in time order), and the analyses' instants (taken from `analyzeTelemetry`'s report)
 * close the trace. Samples are read with the analysis scan's byte-level line reader into typed
 * columns; only other records become objects. Phase records whose counters were read at the
 * boundary feed the counter tracks as samples do, in time order with them.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { JsonlDecodeError, type SessionSummary, type TelemetryEvent } from "@stormlog/core";
import { isSampleEventType, readJsonlLines } from "@stormlog/core/internal";
import { type PhaseEventLike, PhaseReplayIndex, type PhaseResolver } from "@stormlog/phases";
import {
  iterateTelemetryEvents,
  summarizeTelemetrySessions,
  TelemetryInputAccessError,
} from "@stormlog/sink";
import {
  decodeTelemetryEventLine,
  type ResolvedTelemetryInput,
  readingInput,
  resolveTelemetryInput,
  type TelemetryInputSegment,
} from "@stormlog/sink/internal";
import { loadDistributedEvents, selectDistributedSession } from "./diagnostics.js";
import { isBoundaryReading } from "./diagnostics-phases.js";
import { buildPerfettoTrace, perfettoTraceChunks } from "./export-perfetto.js";
import {
  counterEvent,
  gapInstant,
  laneMetadata,
  newRankProcess,
  phaseSlices,
  processMetadata,
  processName,
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
import { CanonicalLineReader } from "./fast-line.js";
import { SegmentIndex } from "./index-cache.js";
import { findRankGroups, listSessions, selectSession } from "./merge.js";
import { analyzeTelemetry, segmentWarnings } from "./report.js";

/** Options of the streaming exports. */
export interface StreamExportOptions {
  /** A session's or a rank group's id (default: the view `analyzeTelemetry` picks). */
  readonly sessionId?: string;
  /** Use and maintain the analysis index beside the sink (default true), as `analyzeTelemetry`. */
  readonly index?: boolean;
  /** Where indexes go when the input's location is not writable (see `AnalyzeOptions.cacheDir`). */
  readonly cacheDir?: string;
  /** Told after each member session is written (`done` of `total`). */
  readonly onProgress?: (done: number, total: number) => void;
  /**
   * Told what the reading left out or distrusted, and what the input is when that needs saying: a
   * final line cut short, a segment shorter than its manifest says, an unusable manifest, an OOM dump.
   */
  readonly onWarning?: (message: string) => void;
}

/** Options of `streamPerfettoTrace`. */
export interface StreamPerfettoOptions extends StreamExportOptions {
  /** Add the analyses' findings (first-cause spikes, hidden-memory findings) as instants (default true). */
  readonly analyses?: boolean;
}

/** What an export reads: the selected view and its member sessions. */
export interface ExportSelection {
  /** The selected id (a session's, or a rank group's synthetic id); null for empty input. */
  readonly sessionId: string | null;
  readonly summary: SessionSummary | null;
  /** Sessions whose events are exported, in the selection's order. */
  readonly memberSessionIds: readonly string[];
  /** Events of the member sessions. */
  readonly eventCount: number;
}

/** One member session and the segments that hold its events, in reading order. */
interface MemberPlan {
  readonly sessionId: string;
  readonly segments: readonly TelemetryInputSegment[];
  readonly firstTimestampNs: bigint | null;
}

interface ExportPlan {
  readonly selection: ExportSelection;
  readonly members: readonly MemberPlan[];
}

function indexOptions(options: StreamExportOptions): { index: boolean; cacheDir?: string } {
  return {
    index: options.index !== false,
    ...(options.cacheDir !== undefined ? { cacheDir: options.cacheDir } : {}),
  };
}

/** The selection from the index's digests (built on first use, as `analyzeTelemetry` does). */
async function planExport(input: ResolvedTelemetryInput, options: StreamExportOptions): Promise<ExportPlan> {
  const index = await SegmentIndex.open(input, indexOptions(options));
  let loaded: Awaited<ReturnType<SegmentIndex["loadSegments"]>>;
  try {
    loaded = await index.loadSegments();
  } finally {
    index.dispose();
  }
  const segments = loaded.segments;
  if (options.onWarning !== undefined)
    for (const warning of segmentWarnings(input, segments)) options.onWarning(warning);
  const ledger = new Map<string, SessionSummary>();
  for (const part of input.parts) {
    for (const summary of part.manifest?.sessions ?? [])
      if (!ledger.has(summary.session_id)) ledger.set(summary.session_id, summary);
  }
  const sessions = listSessions(segments, ledger, input.defaultSource, input.absolute);
  const selection = selectSession(sessions, findRankGroups(sessions), options.sessionId, input.path);
  const inputSegments = input.parts.flatMap((part) => part.segments);
  let eventCount = 0;
  const members = selection.memberIds.map((sessionId): MemberPlan => {
    const held: TelemetryInputSegment[] = [];
    segments.forEach((segment, ordinal) => {
      const part = segment.digest.sessions.find((session) => session.sessionId === sessionId);
      if (part !== undefined && part.eventCount > 0) {
        held.push(inputSegments[ordinal]!);
        eventCount += part.eventCount;
      }
    });
    const listing = sessions.find((session) => session.summary.session_id === sessionId);
    return { sessionId, segments: held, firstTimestampNs: listing?.firstTimestampNs ?? null };
  });
  return {
    selection: {
      sessionId: selection.sessionId,
      summary: selection.summary,
      memberSessionIds: [...selection.memberIds],
      eventCount,
    },
    members,
  };
}

/** Chunk size of segment reads: memory is this plus the longest line. */
const CHUNK_BYTES = 1 << 20;

/**
 * Calls `line` for each line of a segment (no newline, a final `\r` dropped) with its 1-based
 * number and whether a newline ended it. `line` returns false to stop.
 */
function forEachLine(
  path: string,
  line: (buf: Buffer, start: number, end: number, lineNumber: number, terminated: boolean) => boolean,
): void {
  const fd = readingInput(path, () => openSync(path, "r"));
  try {
    let buf = Buffer.allocUnsafe(CHUNK_BYTES);
    let filled = 0;
    let position = 0;
    let lineNumber = 0;
    const one = (start: number, end: number, terminated: boolean): boolean => {
      lineNumber++;
      if (end > start && buf[end - 1] === 0x0d) end--;
      return line(buf, start, end, lineNumber, terminated);
    };
    for (;;) {
      if (filled === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, filled);
        buf = bigger;
      }
      const bytesRead = readSync(fd, buf, filled, buf.length - filled, position);
      position += bytesRead;
      const end = filled + bytesRead;
      if (bytesRead === 0) {
        if (end > 0) one(0, end, false);
        return;
      }
      let start = 0;
      for (;;) {
        const newline = buf.indexOf(10, start);
        if (newline === -1 || newline >= end) break;
        if (!one(start, newline, true)) return;
        start = newline + 1;
      }
      buf.copy(buf, 0, start, end);
      filled = end - start;
    }
  } catch (error) {
    throw TelemetryInputAccessError.wrap(path, error);
  } finally {
    closeSync(fd);
  }
}

/** Growable typed columns of one session's samples. */
class SampleColumns {
  count = 0;
  /** ns since the trace's first event (exact integers), and storage order. */
  diff = new Float64Array(1024);
  order = new Float64Array(1024);
  rank = new Float64Array(1024);
  device = new Float64Array(1024);
  /** NaN marks a null counter. */
  allocated = new Float64Array(1024);
  reserved = new Float64Array(1024);
  used = new Float64Array(1024);
  total = new Float64Array(1024);

  push(
    diff: number,
    order: number,
    rank: number,
    device: number,
    allocated: number,
    reserved: number,
    used: number,
    total: number,
  ): void {
    if (this.count === this.diff.length) this.grow();
    const i = this.count++;
    this.diff[i] = diff;
    this.order[i] = order;
    this.rank[i] = rank;
    this.device[i] = device;
    this.allocated[i] = allocated;
    this.reserved[i] = reserved;
    this.used[i] = used;
    this.total[i] = total;
  }

  private grow(): void {
    const more = (array: Float64Array): Float64Array<ArrayBuffer> => {
      const bigger = new Float64Array(array.length * 2);
      bigger.set(array);
      return bigger;
    };
    this.diff = more(this.diff);
    this.order = more(this.order);
    this.rank = more(this.rank);
    this.device = more(this.device);
    this.allocated = more(this.allocated);
    this.reserved = more(this.reserved);
    this.used = more(this.used);
    this.total = more(this.total);
  }

  /** Sample positions in (time, storage order) order. */
  sortedPositions(): Uint32Array {
    const positions = new Uint32Array(this.count);
    for (let i = 0; i < this.count; i++) positions[i] = i;
    const { diff, order } = this;
    let sorted = true;
    for (let i = 1; i < this.count && sorted; i++) {
      if (diff[i - 1]! > diff[i]! || (diff[i - 1] === diff[i] && order[i - 1]! > order[i]!)) sorted = false;
    }
    if (!sorted) positions.sort((a, b) => diff[a]! - diff[b]! || order[a]! - order[b]!);
    return positions;
  }
}

const nullable = (value: number): number | null => (Number.isNaN(value) ? null : value);
const nanOf = (value: number | null): number => (value === null ? Number.NaN : value);

/** The earliest record with a `job_id` (ties: first member, then storage order). */
interface JobCandidate {
  diff: number;
  member: number;
  order: number;
  jobId: string;
}

/** One member session read into memory: sample columns, other records, hosts and extents per rank. */
interface SessionData {
  readonly samples: SampleColumns;
  /** Non-sample records in storage order, with their time offset. */
  readonly records: { event: TelemetryEvent; diff: number; order: number }[];
  /** Per rank: hosts (the earliest record's first), device ids of samples, latest sample offset. */
  readonly ranks: Map<
    number,
    {
      hosts: Set<string>;
      firstHost: { diff: number; order: number; host: string } | null;
      devices: Set<number>;
      lastSample: number;
    }
  >;
}

/** Reads one member session's records from its segments. */
function readSession(
  member: MemberPlan,
  memberIndex: number,
  first: bigint,
  job: { best: JobCandidate | null },
): SessionData {
  const samples = new SampleColumns();
  const records: SessionData["records"] = [];
  const ranks: SessionData["ranks"] = new Map();
  const firstHead = Number(first / 1_000_000_000n);
  const firstTail = Number(first % 1_000_000_000n);
  const reader = new CanonicalLineReader();
  const rankOf = (rank: number) => {
    let entry = ranks.get(rank);
    if (entry === undefined) {
      entry = { hosts: new Set(), firstHost: null, devices: new Set(), lastSample: Number.NEGATIVE_INFINITY };
      ranks.set(rank, entry);
    }
    return entry;
  };
  const seen = (rank: number, host: string, diff: number, order: number, jobId: string | null): void => {
    const entry = rankOf(rank);
    entry.hosts.add(host);
    const firstHost = entry.firstHost;
    if (firstHost === null || diff < firstHost.diff || (diff === firstHost.diff && order < firstHost.order))
      entry.firstHost = { diff, order, host };
    if (jobId !== null) {
      const best = job.best;
      if (
        best === null ||
        diff < best.diff ||
        (diff === best.diff &&
          (memberIndex < best.member || (memberIndex === best.member && order < best.order)))
      )
        job.best = { diff, member: memberIndex, order, jobId };
    }
  };
  const addSample = (
    diff: number,
    order: number,
    rank: number,
    device: number,
    allocated: number,
    reserved: number,
    used: number,
    total: number,
  ): void => {
    samples.push(diff, order, rank, device, allocated, reserved, used, total);
    const entry = rankOf(rank);
    entry.devices.add(device);
    if (diff > entry.lastSample) entry.lastSample = diff;
  };
  const sessionId = member.sessionId;
  member.segments.forEach((segment, ordinal) => {
    const orderBase = ordinal * 2 ** 32;
    forEachLine(segment.path, (buf, start, end, lineNumber, terminated) => {
      if (end === start) return true;
      const order = orderBase + lineNumber;
      if (buf[start] === 0x7b && reader.read(buf, start, end)) {
        if (reader.sessionId !== sessionId) return true;
        if (reader.eventType === "sample") {
          const diff = (reader.tsHead - firstHead) * 1e9 + (reader.tsTail - firstTail);
          seen(reader.rank, reader.host, diff, order, reader.jobId);
          addSample(
            diff,
            order,
            reader.rank,
            reader.deviceId,
            reader.allocated,
            reader.reserved,
            reader.used,
            reader.total,
          );
          return true;
        }
      }
      const text = buf.toString("utf8", start, end);
      if (text.trim().length === 0) return true;
      let event: TelemetryEvent;
      try {
        event = decodeTelemetryEventLine(
          text,
          { file: segment.path, line: lineNumber },
          segment.defaultSessionId,
          {
            upgradeTo: 3,
          },
        );
      } catch (error) {
        // A final line cut short by a crash: dropped, as the sink reader does.
        if (!terminated && JsonlDecodeError.isInstance(error)) return false;
        throw error;
      }
      if (event.session_id !== sessionId) return true;
      const diff = Number(event.timestamp_ns - first);
      seen(event.rank, event.host, diff, order, event.job_id);
      if (isSampleEventType(event.event_type)) {
        addSample(
          diff,
          order,
          event.rank,
          event.device_id,
          nanOf(event.allocator_allocated_bytes),
          nanOf(event.allocator_reserved_bytes),
          nanOf(event.device_used_bytes),
          nanOf(event.device_total_bytes),
        );
      } else {
        records.push({ event, diff, order });
        if (isBoundaryReading(event)) rankOf(event.rank).devices.add(event.device_id);
      }
      return true;
    });
  });
  records.sort((a, b) => a.diff - b.diff || a.order - b.order);
  return { samples, records, ranks };
}

/** The trace events of one session: new metadata, phase slices, then counters and instants in time order. */
function* sessionTraceEvents(
  sessionId: string,
  data: SessionData,
  first: bigint,
  processOf: (rank: number) => RankProcess,
  announced: Map<number, string>,
): Generator<TraceEvent> {
  const micros = (ns: bigint): number => Number(ns - first) / 1000;
  const ranks = [...data.ranks.keys()].sort((a, b) => a - b);
  for (const rank of ranks) {
    const process = processOf(rank);
    const entry = data.ranks.get(rank)!;
    if (entry.firstHost !== null && process.hosts.size === 0) process.hosts.add(entry.firstHost.host);
    for (const host of entry.hosts) process.hosts.add(host);
    for (const device of entry.devices) process.deviceIds.add(device);
  }

  // The phase replay needs the boundaries and each rank's last timestamp (unclosed scopes end there).
  const extents: PhaseEventLike[] = [];
  for (const [rank, entry] of data.ranks) {
    if (entry.lastSample !== Number.NEGATIVE_INFINITY)
      extents.push({
        session_id: sessionId,
        timestamp_ns: first + BigInt(entry.lastSample),
        rank,
        event_type: "sample",
      });
  }
  const index = PhaseReplayIndex.fromEvents([...data.records.map((record) => record.event), ...extents]);
  const resolver: PhaseResolver = index;
  const slices: TraceEvent[] = [];
  for (const rank of ranks) {
    const spans = index.spansFor(sessionId, rank);
    if (spans.length === 0) continue;
    const process = processOf(rank);
    for (const [tid, laneSpans] of spansByLane(process, sessionId, spans))
      for (const slice of phaseSlices(laneSpans, process.pid, tid, micros)) slices.push(slice);
  }

  // Metadata of ranks (and lanes) not yet named; a rank seen again with more hosts is renamed.
  for (const rank of ranks) {
    const process = processOf(rank);
    const name = processName(process);
    const before = announced.get(rank);
    if (before === undefined) {
      yield* processMetadata(process);
    } else if (before !== name) {
      yield { name: "process_name", ph: "M", pid: process.pid, args: { name } };
    }
    announced.set(rank, name);
    for (const [key, lane] of process.lanes)
      if (key.startsWith(`${sessionId}|`)) yield* laneMetadata(process.pid, lane);
  }
  yield* slices;

  // Samples and other records merged in (time, storage order).
  const { samples, records } = data;
  const positions = samples.sortedPositions();
  const { diff, order, rank, device, allocated, reserved, used, total } = samples;
  let j = 0;
  let lastRank = Number.NaN;
  let process: RankProcess | null = null;
  for (let k = 0; k <= positions.length; k++) {
    const i = k < positions.length ? positions[k]! : -1;
    while (
      j < records.length &&
      (i < 0 ||
        records[j]!.diff < diff[i]! ||
        (records[j]!.diff === diff[i] && records[j]!.order < order[i]!))
    ) {
      const record = records[j++]!;
      const owner = processOf(record.event.rank);
      if (isBoundaryReading(record.event)) {
        yield* readingCounters(owner, record.event, record.diff / 1000);
        continue;
      }
      const instant = recordInstant(record.event, owner.pid, record.diff / 1000, resolver);
      if (instant !== null) yield instant;
    }
    if (i < 0) break;
    if (rank[i] !== lastRank || process === null) {
      lastRank = rank[i]!;
      process = processOf(lastRank);
    }
    const pid = process.pid;
    const tracks = tracksOf(process, device[i]!);
    const ts = diff[i]! / 1000;
    const usedValue = used[i]!;
    const reservedValue = reserved[i]!;
    const totalValue = total[i]!;
    let event = counterEvent(tracks.allocated, nullable(allocated[i]!), pid, ts);
    if (event !== null) yield event;
    event = counterEvent(tracks.reserved, nullable(reservedValue), pid, ts);
    if (event !== null) yield event;
    event = counterEvent(tracks.used, nullable(usedValue), pid, ts);
    if (event !== null) yield event;
    if (
      !Number.isNaN(usedValue) &&
      !Number.isNaN(reservedValue) &&
      !Number.isNaN(totalValue) &&
      totalValue !== 0
    ) {
      event = counterEvent(tracks.gap, usedValue - reservedValue, pid, ts);
      if (event !== null) yield event;
    }
  }
}

/** The counter events of a boundary reading (only changed values), as a sample's. */
function* readingCounters(process: RankProcess, event: TelemetryEvent, ts: number): Generator<TraceEvent> {
  const tracks = tracksOf(process, event.device_id);
  const pid = process.pid;
  const used = event.device_used_bytes;
  const reserved = event.allocator_reserved_bytes;
  for (const counter of [
    counterEvent(tracks.allocated, event.allocator_allocated_bytes, pid, ts),
    counterEvent(tracks.reserved, reserved, pid, ts),
    counterEvent(tracks.used, used, pid, ts),
    used !== null && reserved !== null && event.device_total_bytes
      ? counterEvent(tracks.gap, used - reserved, pid, ts)
      : null,
  ])
    if (counter !== null) yield counter;
}

/** Batches trace event lines into chunks of about 64 KB. */
const CHUNK_CHARS = 1 << 16;

/**
 * The Perfetto trace of a telemetry path (sink, root of per-rank sinks, JSONL segment, JSON file)
 * as JSON text chunks, written one member session at a time: memory holds one session's samples
 * (as typed columns) and other records, not the input. The events are `buildPerfettoTrace`'s over
 * the same selection (see the module comment for their order). The analyses' instants come from
 * `analyzeTelemetry`, which builds or reuses the index. JSON documents are read whole.
 */
export async function* streamPerfettoTrace(
  path: string,
  options: StreamPerfettoOptions = {},
): AsyncGenerator<string> {
  const input = await resolveTelemetryInput(path, options.onWarning);
  if (input.kind === "json") {
    const { selection, events } = await loadDistributedEvents(
      path,
      options.sessionId === undefined ? {} : { sessionId: options.sessionId },
    );
    const trace = buildPerfettoTrace(events, {
      sessionId: selection.summary?.session_id ?? null,
      ...(options.analyses === false ? { analyses: false } : {}),
    });
    let text = "";
    for (const chunk of perfettoTraceChunks(trace)) {
      text += chunk;
      if (text.length >= CHUNK_CHARS) {
        yield text;
        text = "";
      }
    }
    if (text.length > 0) yield text;
    return;
  }
  const report =
    options.analyses === false
      ? null
      : await analyzeTelemetry(path, {
          ...indexOptions(options),
          ...(options.sessionId !== undefined ? { sessionId: options.sessionId } : {}),
        });
  const { selection, members } = await planExport(input, options);
  let first: bigint | null = null;
  for (const member of members) {
    const ts = member.firstTimestampNs;
    if (ts !== null && (first === null || ts < first)) first = ts;
  }
  const origin = first ?? 0n;

  const processes = new Map<number, RankProcess>();
  const processOf = (rank: number): RankProcess => {
    let process = processes.get(rank);
    if (process === undefined) {
      process = newRankProcess(rank);
      processes.set(rank, process);
    }
    return process;
  };
  const announced = new Map<number, string>();
  const job: { best: JobCandidate | null } = { best: null };
  let text = TRACE_HEAD;
  let count = 0;
  const add = (event: TraceEvent): void => {
    text += count++ === 0 ? traceEventJson(event) : `,\n${traceEventJson(event)}`;
  };

  for (let m = 0; m < members.length; m++) {
    const member = members[m]!;
    const data = readSession(member, m, origin, job);
    for (const event of sessionTraceEvents(member.sessionId, data, origin, processOf, announced)) {
      add(event);
      if (text.length >= CHUNK_CHARS) {
        yield text;
        text = "";
      }
    }
    options.onProgress?.(m + 1, members.length);
  }

  if (report !== null) {
    const micros = (ns: bigint): number => Number(ns - origin) / 1000;
    const crossRank = report.cross_rank_analysis;
    if (crossRank !== null && processes.size > 1) {
      for (const suspect of crossRank.first_cause_suspects)
        add(spikeInstant(suspect, processOf(suspect.rank).pid, micros(suspect.first_spike_timestamp_ns)));
    }
    const findings = [...report.gap_analysis].sort((a, b) => a.rank - b.rank);
    for (const finding of findings) {
      if (finding.evidence_timestamp_ns === null) continue;
      add(gapInstant(finding, processOf(finding.rank).pid, micros(finding.evidence_timestamp_ns)));
    }
  }
  if (count > 0) text += "\n";
  const ranks = [...processes.keys()].sort((a, b) => a - b);
  text += traceTail(traceOtherData(origin, ranks, selection.summary?.session_id ?? null, job.best?.jobId));
  yield text;
}

/** A selection and a stream of its events, in storage order. */
export interface SelectedEvents {
  readonly selection: ExportSelection;
  /** Streams the member sessions' events in storage order (nothing is retained). */
  events(): AsyncGenerator<TelemetryEvent>;
}

/**
 * The view `analyzeTelemetry` picks (or `sessionId`) and its events in storage order, for exports
 * that write records as they are (CSV, JSONL). Only segments holding member sessions are read.
 * JSON documents fall back to the sink reader's selection.
 */
export async function openSelectedEvents(
  path: string,
  options: StreamExportOptions = {},
): Promise<SelectedEvents> {
  const input = await resolveTelemetryInput(path, options.onWarning);
  if (input.kind === "json") {
    const sessions = await summarizeTelemetrySessions(path);
    const chosen = selectDistributedSession(sessions, options.sessionId, path);
    const members = new Set(chosen.memberSessionIds);
    let eventCount = 0;
    for (const session of sessions)
      if (members.has(session.summary.session_id)) eventCount += session.eventCount;
    return {
      selection: {
        sessionId: chosen.summary?.session_id ?? null,
        summary: chosen.summary,
        memberSessionIds: chosen.memberSessionIds,
        eventCount,
      },
      async *events() {
        for await (const event of iterateTelemetryEvents(path, { onWarning: () => undefined }))
          if (members.has(event.session_id)) yield event;
      },
    };
  }
  const { selection, members } = await planExport(input, options);
  const ids = new Set(selection.memberSessionIds);
  const wanted = new Set(members.flatMap((member) => member.segments.map((segment) => segment.path)));
  const segments = input.parts.flatMap((part) => part.segments).filter((segment) => wanted.has(segment.path));
  return {
    selection,
    async *events() {
      for (const segment of segments) {
        for await (const line of readJsonlLines(segment.path)) {
          let event: TelemetryEvent;
          try {
            event = decodeTelemetryEventLine(
              line.text,
              { file: segment.path, line: line.lineNumber },
              segment.defaultSessionId,
              { upgradeTo: 3 },
            );
          } catch (error) {
            if (!line.terminated && JsonlDecodeError.isInstance(error)) break;
            throw error;
          }
          if (ids.has(event.session_id)) yield event;
        }
      }
    },
  };
}
