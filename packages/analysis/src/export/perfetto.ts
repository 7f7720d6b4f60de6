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
 * The trace is made from the dataset (`input/dataset.ts`), one rank at a time: `datasetTraceEvents`
 * writes a rank's metadata, phase slices, then its counters and instants in time order, and the
 * analyses' instants close the trace. `buildPerfettoTrace` makes the dataset of events in memory;
 * `streamPerfettoTrace` (stream.ts) that of a sink, through its index.
 */
import type { TelemetryEvent } from "@stormlog/core";
import type { PhaseAttribution, PhaseEventLike, PhaseReplayIndex, PhaseResolver } from "@stormlog/phases";
import { CrossRankAccumulator } from "../analyses/cross-rank.js";
import { analyzeGapColumns, type GapFinding } from "../analyses/gap.js";
import { gapColumns, sampleRecord } from "../analyses/gap-accumulator.js";
import { buildPhaseIndex } from "../analyses/phase-stats.js";
import type { InstantEntry } from "../input/aggregate.js";
import type { BoundaryEntry } from "../input/boundary-log.js";
import {
  type DatasetPlan,
  exactAt,
  loadRanks,
  mergeRankSeries,
  planDataset,
  type RankSeries,
  type SeriesJob,
  sampleTimeAsNumber,
  seriesForRule,
} from "../input/dataset.js";
import { aggregateEvents } from "../input/scan.js";
import { inMemorySegment } from "../input/sessions.js";
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
} from "./trace-parts.js";

export type { TraceEvent } from "./trace-parts.js";

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
  /** Phase replay of the same events, if already built (default: each session's rank replayed here). */
  readonly phaseIndex?: PhaseResolver & Pick<PhaseReplayIndex, "spansFor">;
}

/**
 * Builds the trace of a run's events (one session, or the per-rank sessions of a job). Events may
 * come in any order (equal timestamps keep theirs). Memory counters are written only when a value
 * changes (counters are step functions, so nothing is lost), which keeps long flat runs small. The
 * events become the dataset the export reads, as `streamPerfettoTrace` reads a sink on disk in
 * bounded memory. Throws `TimeRangeError` for a rank whose records span 2^53 ns (104 days) or more.
 */
export function buildPerfettoTrace(
  events: readonly TelemetryEvent[],
  options: PerfettoExportOptions = {},
): PerfettoTrace {
  // Storage order is time order, ties as given: the order of the events the trace is read in.
  const sorted = [...events].sort((a, b) => compareNs(a.timestamp_ns, b.timestamp_ns));
  const first = sorted[0]?.timestamp_ns ?? 0n;
  const aggregate = aggregateEvents(sorted);
  // Sessions come in the order of their first events, as the aggregate met them.
  const sessionOrder = [...aggregate.sessions.keys()];
  const plan = planDataset([inMemorySegment("<events>", null, aggregate)], sessionOrder);
  const traceEvents: TraceEvent[] = [];
  const trace = datasetTraceEvents(
    { plan, first, sessionOrder },
    {
      analyses: options.analyses !== false,
      ...(options.phaseIndex === undefined ? {} : { phaseIndex: options.phaseIndex }),
    },
  );
  let step = trace.next();
  while (step.done !== true) {
    traceEvents.push(step.value);
    step = trace.next();
  }
  return {
    traceEvents,
    displayTimeUnit: "ms",
    otherData: traceOtherData(first, step.value.ranks, options.sessionId, step.value.jobId),
  };
}

/** What `datasetTraceEvents` reads: the plan of the selection and what orders it. */
export interface DatasetTraceSource {
  readonly plan: DatasetPlan;
  /** The time origin: the selection's earliest timestamp (`ts` 0). */
  readonly first: bigint;
  /** The member sessions in the order of their first events: phase lanes are numbered in it. */
  readonly sessionOrder: readonly string[];
}

/** A phase index the trace reads spans from and attributes instants with. */
type TracePhaseIndex = PhaseResolver & Pick<PhaseReplayIndex, "spansFor">;

/** Options of `datasetTraceEvents`. */
export interface DatasetTraceOptions {
  /** Add the analyses' instants (first-cause spikes, hidden-memory findings). */
  readonly analyses: boolean;
  /** One phase index for every session and rank, instead of each one's own replay. */
  readonly phaseIndex?: TracePhaseIndex;
  /** Told after each rank (`done` of `total`). */
  readonly onRank?: (done: number, total: number) => void;
}

/** What `otherData` needs once every rank is written: the ranks, and the earliest event's job. */
export interface DatasetTraceEnd {
  readonly ranks: readonly number[];
  /** `job_id` of the earliest event that has one (null: none has). */
  readonly jobId: string | null;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * The trace events of a selection, one rank at a time: the rank's process and lane metadata, its
 * phase slices, then its counters and instants in time order (ties in storage order); after the
 * last rank, the analyses' instants. Memory holds one rank's series (all its sessions), as the
 * report's analysis does; the loader lets each go before the next.
 */
export function* datasetTraceEvents(
  source: DatasetTraceSource,
  options: DatasetTraceOptions,
): Generator<TraceEvent, DatasetTraceEnd> {
  const { plan, first } = source;
  const micros = (ns: bigint): number => Number(ns - first) / 1000;
  const sessionIndex = new Map(source.sessionOrder.map((id, i) => [id, i]));
  const laneOrder = (a: RankSeries, b: RankSeries): number =>
    (sessionIndex.get(a.sessionId) ?? Number.MAX_VALUE) - (sessionIndex.get(b.sessionId) ?? Number.MAX_VALUE);
  const crossRank = options.analyses && plan.ranks.length > 1 ? new CrossRankAccumulator(plan) : null;
  const gapInstants: TraceEvent[] = [];
  let job: SeriesJob | null = null;
  for (const { rank, series, position } of loadRanks(plan)) {
    const indexes = new Map<RankSeries, TracePhaseIndex | null>();
    for (const one of series) indexes.set(one, options.phaseIndex ?? buildPhaseIndex(one));
    const resolverOf = (one: RankSeries): TracePhaseIndex | null => indexes.get(one) ?? null;
    for (const one of series) {
      const candidate = one.job;
      if (
        candidate !== null &&
        (job === null ||
          candidate.timestampNs < job.timestampNs ||
          (candidate.timestampNs === job.timestampNs && candidate.order < job.order))
      )
        job = candidate;
    }

    const process = rankProcess(rank, series);
    // Phase slices first (they name the lanes), one lane per (session, recording thread).
    const slices: TraceEvent[] = [];
    for (const one of [...series].sort(laneOrder)) {
      const spans = resolverOf(one)?.spansFor(one.sessionId, rank) ?? [];
      if (spans.length === 0) continue;
      for (const [tid, laneSpans] of spansByLane(process, one.sessionId, spans))
        for (const slice of phaseSlices(laneSpans, process.pid, tid, micros)) slices.push(slice);
    }
    yield* processMetadata(process);
    for (const lane of process.lanes.values()) yield* laneMetadata(process.pid, lane);
    yield* slices;
    yield* rankTimeline(process, series, first, resolverOf);

    if (options.analyses) {
      crossRank?.addRank({ rank, series, phaseIndex: resolverOf });
      for (const finding of rankGapFindings(series, resolverOf)) {
        if (finding.evidence_timestamp_ns === null) continue;
        gapInstants.push(gapInstant(finding, process.pid, micros(finding.evidence_timestamp_ns)));
      }
    }
    options.onRank?.(position + 1, plan.ranks.length);
  }

  if (crossRank !== null) {
    for (const suspect of crossRank.finish().first_cause_suspects)
      yield spikeInstant(suspect, suspect.rank + 1, micros(suspect.first_spike_timestamp_ns));
  }
  yield* gapInstants;
  return { ranks: plan.ranks.map(({ rank }) => rank), jobId: job?.jobId ?? null };
}

/** A rank's process: its hosts (the earliest event's first) and the devices of its readings. */
function rankProcess(rank: number, series: readonly RankSeries[]): RankProcess {
  const process = newRankProcess(rank);
  let earliest: RankSeries | null = null;
  for (const one of series) {
    if (one.minTs === null) continue;
    if (
      earliest === null ||
      one.minTs < earliest.minTs! ||
      (one.minTs === earliest.minTs && one.firstOrder < earliest.firstOrder)
    )
      earliest = one;
  }
  if (earliest !== null && earliest.hosts.length > 0) process.hosts.add(earliest.hosts[0]!);
  for (const one of series) {
    for (const host of one.hosts) process.hosts.add(host);
    for (const identity of one.identities) process.deviceIds.add(identity.device_id);
    for (const boundary of one.boundaries)
      if (boundary.boundaryRead) process.deviceIds.add(boundary.deviceId);
  }
  return process;
}

/** A boundary reading or an instant record, placed among the samples by time and storage order. */
interface TimelineMark {
  /** Nanoseconds after the merged samples' base. */
  readonly t: number;
  readonly order: number;
  readonly series: RankSeries;
  readonly boundary: BoundaryEntry | null;
  readonly instant: InstantEntry | null;
}

/**
 * A rank's counters and instants in time order (ties in storage order), over all its sessions:
 * samples and boundary readings feed the counter tracks of their device (a value only when it
 * changes), instant records become instants.
 */
function* rankTimeline(
  process: RankProcess,
  series: readonly RankSeries[],
  first: bigint,
  resolverOf: (series: RankSeries) => PhaseResolver | null,
): Generator<TraceEvent> {
  const merged = mergeRankSeries(series);
  const { base, t, order, allocated, reserved, used, total, samplePart, sampleIndex } = merged;
  const marks: TimelineMark[] = [];
  for (const one of series) {
    one.boundaries.forEach((boundary, j) => {
      if (boundary.boundaryRead)
        marks.push({
          t: Number(boundary.timestampNs - base),
          order: one.boundaryOrder[j]!,
          series: one,
          boundary,
          instant: null,
        });
    });
    one.instants.forEach((instant, j) => {
      marks.push({
        t: Number(instant.timestampNs - base),
        order: one.instantOrder[j]!,
        series: one,
        boundary: null,
        instant,
      });
    });
  }
  marks.sort((a, b) => a.t - b.t || a.order - b.order);

  // `ts` of an offset from `base`: exact doubles while the sum stays below 2^53, else bigints.
  const shift = base - first;
  const shiftNumber = Number(shift);
  const shiftExact = Math.abs(shiftNumber) <= MAX_SAFE;
  const micros = (offset: number): number => {
    const sum = shiftNumber + offset;
    return shiftExact && Math.abs(sum) <= MAX_SAFE ? sum / 1000 : Number(shift + BigInt(offset)) / 1000;
  };
  const pid = process.pid;
  const counters: TraceEvent[] = [];
  const readings = (
    deviceId: number,
    allocatedValue: number,
    reservedValue: number,
    usedValue: number,
    totalValue: number,
    ts: number,
  ): void => {
    const tracks = tracksOf(process, deviceId);
    counters.length = 0;
    let event = counterEvent(tracks.allocated, nullable(allocatedValue), pid, ts);
    if (event !== null) counters.push(event);
    event = counterEvent(tracks.reserved, nullable(reservedValue), pid, ts);
    if (event !== null) counters.push(event);
    event = counterEvent(tracks.used, nullable(usedValue), pid, ts);
    if (event !== null) counters.push(event);
    // The hidden gap needs a device total (null or 0 leave it out).
    if (
      !Number.isNaN(usedValue) &&
      !Number.isNaN(reservedValue) &&
      !Number.isNaN(totalValue) &&
      totalValue !== 0
    ) {
      event = counterEvent(tracks.gap, usedValue - reservedValue, pid, ts);
      if (event !== null) counters.push(event);
    }
  };
  const deviceOf = sampleDevices(series, samplePart, sampleIndex);

  let m = 0;
  for (let i = 0; i <= merged.count; i++) {
    while (
      m < marks.length &&
      (i === merged.count || marks[m]!.t < t[i]! || (marks[m]!.t === t[i] && marks[m]!.order < order[i]!))
    ) {
      const mark = marks[m++]!;
      const ts = micros(mark.t);
      if (mark.boundary !== null) {
        const b = mark.boundary;
        readings(b.deviceId, b.allocated, b.reserved, b.used, b.total, ts);
        yield* counters;
      } else {
        const instant = recordInstant(
          mark.instant!,
          mark.series.sessionId,
          mark.series.rank,
          pid,
          ts,
          resolverOf(mark.series),
        );
        if (instant !== null) yield instant;
      }
    }
    if (i === merged.count) break;
    readings(deviceOf(i), allocated[i]!, reserved[i]!, used[i]!, total[i]!, micros(t[i]!));
    yield* counters;
  }
}

const nullable = (value: number): number | null => (Number.isNaN(value) ? null : value);

/** The device id of each merged sample (from its series' identities). */
function sampleDevices(
  series: readonly RankSeries[],
  samplePart: Uint16Array | null,
  sampleIndex: Int32Array | null,
): (i: number) => number {
  const only = series.length === 1 ? series[0]! : null;
  if (only !== null && only.identity === null) {
    const device = only.identities[0]?.device_id ?? 0;
    return () => device;
  }
  return (i) => {
    const one = samplePart === null ? series[0]! : series[samplePart[i]!]!;
    const j = sampleIndex === null ? i : sampleIndex[i]!;
    return one.identities[one.identity === null ? 0 : one.identity[j]!]!.device_id;
  };
}

/**
 * The hidden-memory findings of a rank over all its sessions' samples (the reference's gap rule
 * for samples), merged in time order as the rank's events sort.
 */
function rankGapFindings(
  series: readonly RankSeries[],
  resolverOf: (series: RankSeries) => PhaseResolver | null,
): GapFinding[] {
  const parts = series.map((one) => seriesForRule(one, "strip-lower"));
  if (parts.length === 1)
    return analyzeGapColumns(gapColumns(parts[0]!), { phaseResolver: resolverOf(series[0]!) });
  const merged = mergeRankSeries(parts);
  const from = (i: number): [RankSeries, number] => [parts[merged.samplePart![i]!]!, merged.sampleIndex![i]!];
  // A sample is attributed by its own session's phases.
  const bySession = new Map<string, PhaseResolver | null>();
  series.forEach((one) => {
    bySession.set(one.sessionId, resolverOf(one));
  });
  const resolver: PhaseResolver = {
    resolve: (timestampNs, sessionId, rank, originThreadId, originPhaseScopeId) =>
      bySession
        .get(sessionId ?? "")
        ?.resolve(timestampNs, sessionId, rank, originThreadId, originPhaseScopeId) ?? null,
    resolveForEvent: (event: PhaseEventLike): PhaseAttribution | null =>
      typeof event.session_id === "string"
        ? (bySession.get(event.session_id)?.resolveForEvent(event) ?? null)
        : null,
  };
  const anyExact = parts.some((one) => one.exact !== null);
  return analyzeGapColumns(
    {
      count: merged.count,
      used: merged.used,
      reserved: merged.reserved,
      allocated: merged.allocated,
      total: merged.total,
      timeOf: sampleTimeAsNumber(merged),
      event: (i) => sampleRecord(...from(i)),
      ...(anyExact ? { exactCounters: (i: number) => exactAt(...from(i)) } : {}),
    },
    { phaseResolver: resolver },
  );
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
