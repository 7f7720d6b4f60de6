/**
 * Exports of a sink on disk that stream: the selection (one session, or a job's rank group, as
 * `analyzeTelemetry` chooses it) is worked out from the analysis index's segment digests.
 *
 * `streamPerfettoTrace` reads the selection's dataset through the index, as `analyzeTelemetry`
 * does, one rank at a time, and writes `buildPerfettoTrace`'s events over the same selection
 * (`datasetTraceEvents`): each rank's block (its metadata, phase slices, then counters and instants
 * in time order), and the analyses' instants after the last rank. `openSelectedEvents` streams the
 * selection's records as they are, for the record exports (CSV, JSONL).
 */
import type { TelemetryEvent } from "@stormlog/core";
import { isCutShortLine, readJsonlLines } from "@stormlog/core/internal";
import { iterateTelemetryEvents, loadTelemetrySessions } from "@stormlog/sink";
import {
  decodeTelemetryEventLine,
  type ResolvedTelemetryInput,
  resolveTelemetryInput,
  type TelemetryInputSegment,
} from "@stormlog/sink/internal";
import { loadDistributedEvents } from "../analyses/diagnostics.js";
import { SegmentIndex, segmentIndexOptions } from "../index/index-cache.js";
import { planDataset } from "../input/dataset.js";
import { chooseView, loadedListings, type SegmentData, type SessionSelection } from "../input/sessions.js";
import { listedSegments } from "../report/sessions.js";
import { buildPerfettoTrace, datasetTraceEvents } from "./perfetto.js";
import { TRACE_HEAD, type TraceEvent, traceEventJson, traceOtherData, traceTail } from "./trace-parts.js";

/** Options of the streaming exports. */
export interface StreamExportOptions {
  /** A session's or a rank group's id (default: the view `analyzeTelemetry` picks). */
  readonly sessionId?: string;
  /** Use and maintain the analysis index beside the sink (default true), as `analyzeTelemetry`. */
  readonly index?: boolean;
  /** Where indexes go when the input's location is not writable (see `AnalyzeOptions.cacheDir`). */
  readonly cacheDir?: string;
  /** Told after each rank of the trace is written (`done` of `total`). */
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

/** One member session and the segments that hold its events, in reading order. */
interface MemberPlan {
  readonly sessionId: string;
  readonly segments: readonly TelemetryInputSegment[];
  readonly firstTimestampNs: bigint | null;
}

interface ExportPlan {
  readonly selection: SessionSelection;
  /** Events of the member sessions. */
  readonly eventCount: number;
  readonly members: readonly MemberPlan[];
  /** Every segment of the input, in reading order (their aggregates in memory or in the index). */
  readonly segments: readonly SegmentData[];
}

/** The index's options from an export's (its `onProgress` is the trace's, not the scan's). */
const indexOptions = (options: StreamExportOptions) =>
  segmentIndexOptions({ index: options.index, cacheDir: options.cacheDir });

/** The selection from the index's digests (built on first use, as `analyzeTelemetry` does). */
async function planExport(input: ResolvedTelemetryInput, options: StreamExportOptions): Promise<ExportPlan> {
  const index = await SegmentIndex.open(input, indexOptions(options));
  try {
    return await planIndexed(input, index, options);
  } finally {
    index.dispose();
  }
}

/** `planExport` with an open index: its aggregates stay readable until the index is disposed. */
async function planIndexed(
  input: ResolvedTelemetryInput,
  index: SegmentIndex,
  options: StreamExportOptions,
): Promise<ExportPlan> {
  const { segments, sessions } = await listedSegments(input, index, options.onWarning);
  const selection = chooseView(sessions, options.sessionId, input.path);
  const inputSegments = input.parts.flatMap((part) => part.segments);
  let eventCount = 0;
  const members = selection.memberSessionIds.map((sessionId): MemberPlan => {
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
  return { selection, eventCount, members, segments };
}

/** Batches trace event lines into chunks of about 64 KB. */
const CHUNK_CHARS = 1 << 16;

/** What `streamTraceEvents` returns after its last event: the trace's `otherData`. */
export interface TraceEventsEnd {
  /** Producer, `first_timestamp_ns` (the time origin of every `ts`), ranks, session and job. */
  readonly otherData: Record<string, string>;
}

/**
 * The Perfetto trace of a telemetry path as trace event objects, one rank at a time (the events of
 * `streamPerfettoTrace`, in its order, before they become text), for readers that draw the run
 * themselves (`@stormlog/report`). Returns the trace's `otherData` after the last event. Memory holds
 * one rank's data, as `streamPerfettoTrace`; JSON documents are read whole.
 */
export async function* streamTraceEvents(
  path: string,
  options: StreamPerfettoOptions = {},
): AsyncGenerator<TraceEvent, TraceEventsEnd> {
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
    yield* trace.traceEvents;
    return { otherData: trace.otherData };
  }
  const index = await SegmentIndex.open(input, indexOptions(options));
  try {
    const { selection, members, segments } = await planIndexed(input, index, options);
    let first: bigint | null = null;
    for (const member of members) {
      const ts = member.firstTimestampNs;
      if (ts !== null && (first === null || ts < first)) first = ts;
    }
    const origin = first ?? 0n;
    // Phase lanes are numbered in the order the sessions' first events come, as in buildPerfettoTrace.
    const sessionOrder = members
      .filter((member) => member.firstTimestampNs !== null)
      .sort((a, b) =>
        a.firstTimestampNs! < b.firstTimestampNs! ? -1 : a.firstTimestampNs! > b.firstTimestampNs! ? 1 : 0,
      )
      .map((member) => member.sessionId);
    const trace = datasetTraceEvents(
      { plan: planDataset(segments, selection.memberSessionIds), first: origin, sessionOrder },
      {
        analyses: options.analyses !== false,
        ...(options.onProgress === undefined ? {} : { onRank: options.onProgress }),
      },
    );
    let step = trace.next();
    while (step.done !== true) {
      yield step.value;
      step = trace.next();
    }
    const { ranks, jobId } = step.value;
    return { otherData: traceOtherData(origin, ranks, selection.summary?.session_id ?? null, jobId) };
  } finally {
    index.dispose();
  }
}

/**
 * The Perfetto trace of a telemetry path (sink, root of per-rank sinks, JSONL segment, JSON file)
 * as JSON text chunks, written one rank at a time from the dataset, which is read through the
 * analysis index as `analyzeTelemetry` reads it (built or reused): memory holds one rank's data
 * (all its sessions), not the input. The events are `buildPerfettoTrace`'s over the same selection
 * (see the module comment for their order). JSON documents are read whole.
 */
export async function* streamPerfettoTrace(
  path: string,
  options: StreamPerfettoOptions = {},
): AsyncGenerator<string> {
  const events = streamTraceEvents(path, options);
  try {
    let text = TRACE_HEAD;
    let count = 0;
    let step = await events.next();
    while (step.done !== true) {
      text += count++ === 0 ? traceEventJson(step.value) : `,\n${traceEventJson(step.value)}`;
      if (text.length >= CHUNK_CHARS) {
        yield text;
        text = "";
      }
      step = await events.next();
    }
    if (count > 0) text += "\n";
    text += traceTail(step.value.otherData);
    yield text;
  } finally {
    // A reader that stops early (a closed pipe) ends the events too, so the index releases its spill.
    await events.return({ otherData: {} });
  }
}

/** A selection and a stream of its events, in storage order. */
export interface SelectedEvents {
  readonly selection: SessionSelection;
  /** Events of the member sessions. */
  readonly eventCount: number;
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
    const sessions = loadedListings(await loadTelemetrySessions(path));
    const chosen = chooseView(sessions, options.sessionId, path);
    const members = new Set(chosen.memberSessionIds);
    let eventCount = 0;
    for (const session of sessions)
      if (members.has(session.summary.session_id)) eventCount += session.eventCount;
    return {
      selection: chosen,
      eventCount,
      async *events() {
        for await (const event of iterateTelemetryEvents(path, { onWarning: () => undefined }))
          if (members.has(event.session_id)) yield event;
      },
    };
  }
  const { selection, eventCount, members } = await planExport(input, options);
  const ids = new Set(selection.memberSessionIds);
  const wanted = new Set(members.flatMap((member) => member.segments.map((segment) => segment.path)));
  const segments = input.parts.flatMap((part) => part.segments).filter((segment) => wanted.has(segment.path));
  return {
    selection,
    eventCount,
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
            if (isCutShortLine(line, error)) break;
            throw error;
          }
          if (ids.has(event.session_id)) yield event;
        }
      }
    },
  };
}
