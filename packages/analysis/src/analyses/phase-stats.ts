/**
 * Per nested phase path: occurrences, durations, peak memory inside, net change per occurrence (bytes,
 * and tensors where the tfjs adapter records them) and the worst occurrence. Spans come from
 * `PhaseReplayIndex` (the reference's replay rules); the counters from the boundary records, which
 * carry the readings taken at the boundary, and the samples inside each span.
 */
import type { JsonObject, JsonValue } from "@stormlog/core";
import { type PhaseEventLike, PhaseReplayIndex, type PhaseSpan } from "@stormlog/phases";
import { median, type RetentionOccurrence } from "@stormlog/phases/internal";
import type { BoundaryEntry } from "../input/boundary-log.js";
import type { RankSeries } from "../input/dataset.js";
import type { NetChange, PhaseOccurrence, PhaseStat } from "../report/types.js";
import type { RankAnalysis, RankData } from "./analysis.js";
import { RangeMax } from "./range-max.js";

/** The replay index of one session's rank: its boundaries, its last event as the group's end. */
export function buildPhaseIndex(series: RankSeries): PhaseReplayIndex | null {
  if (series.boundaries.length === 0) return null;
  const events: PhaseEventLike[] = [];
  // Any event extends its group's end; the rank's latest timestamp stands for all of them.
  if (series.maxTs !== null) {
    events.push({
      session_id: series.sessionId,
      timestamp_ns: series.maxTs,
      rank: series.rank,
      event_type: "sample",
    });
  }
  for (const boundary of series.boundaries)
    events.push(
      new BoundaryEvent(
        series.sessionId,
        boundary.timestampNs,
        series.rank,
        boundary.eventType,
        boundary.scope,
      ),
    );
  const index = PhaseReplayIndex.fromEvents(events);
  return index.size > 0 ? index : null;
}

/**
 * A boundary as the phase index reads it. Classes rather than object literals for what lives as
 * long as a rank is analysed: V8 moves the allocation of a literal whose objects often outlive a
 * young-generation collection straight to the old generation, collected rarely, so memory grew
 * with the size of the ranks.
 */
class BoundaryEvent implements PhaseEventLike {
  readonly metadata: { phase_scope: JsonValue };
  constructor(
    readonly session_id: string,
    readonly timestamp_ns: bigint,
    readonly rank: number,
    readonly event_type: string,
    scope: JsonValue,
  ) {
    this.metadata = new ScopeHolder(scope);
  }
}

class ScopeHolder {
  constructor(readonly phase_scope: JsonValue) {}
}

/**
 * One occurrence with the readings it needs for statistics and leak detection: the engine's
 * `RetentionOccurrence` (readings at entry and exit, NaN when absent) plus its rank's series and peaks.
 */
export interface Occurrence extends RetentionOccurrence {
  readonly span: PhaseSpan;
  readonly series: RankSeries;
  readonly peakAllocated: number;
  readonly peakAllocatedNs: bigint;
  readonly peakUsed: number;
  readonly peakUsedNs: bigint;
  /** Its records say their counters were read at the boundary (`phase_counters: "boundary_read"`). */
  readonly boundaryRead: boolean;
}

function scopeIdOf(scope: BoundaryEntry["scope"]): string | null {
  if (typeof scope !== "object" || scope === null || Array.isArray(scope)) return null;
  const id = (scope as JsonObject).scope_id;
  return typeof id === "string" ? id : null;
}

/** First index with `ts[i] >= t`. */
function lowerBound(ts: Float64Array, count: number, t: number): number {
  let lo = 0;
  let hi = count;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ts[mid]! < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** First index with `ts[i] > t`. */
function upperBound(ts: Float64Array, count: number, t: number): number {
  let lo = 0;
  let hi = count;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ts[mid]! <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The tensor count of the last sample at or before `t` that has one (NaN without). */
function sampledTensors(series: RankSeries, ts: bigint): number {
  const t = Number(ts - series.base);
  let i = upperBound(series.t, series.count, t) - 1;
  for (; i >= 0; i--) {
    const value = series.tensors[i]!;
    if (!Number.isNaN(value)) return value;
  }
  return Number.NaN;
}

/** `Occurrence` made by a constructor (see `BoundaryEvent`). */
class RankOccurrence implements Occurrence {
  constructor(
    readonly series: RankSeries,
    readonly span: PhaseSpan,
    readonly enterAllocated: number,
    readonly exitAllocated: number,
    readonly enterUsed: number,
    readonly exitUsed: number,
    readonly enterTensors: number,
    readonly exitTensors: number,
    // Raised to the peaks of the phases nested in it (`includeNestedPeaks`).
    public peakAllocated: number,
    public peakAllocatedNs: bigint,
    public peakUsed: number,
    public peakUsedNs: bigint,
    readonly boundaryRead: boolean,
  ) {}
}

/**
 * A phase's peak includes its children's: their boundary readings fall inside its span but are not
 * its own records (`train` must not show less than `train / forward`). Children are found by time on
 * the same thread, one level deeper, and raise their parent's peaks deepest first.
 */
function includeNestedPeaks(occurrences: readonly RankOccurrence[]): void {
  // Pairing and raising are functions apart: V8 compiled this one whole around all its loops.
  const withParent = parentsOf(occurrences);
  withParent.sort((a, b) => b[0].span.depth - a[0].span.depth);
  for (const [child, parent] of withParent) {
    if (
      child.peakAllocated > parent.peakAllocated ||
      (Number.isNaN(parent.peakAllocated) && !Number.isNaN(child.peakAllocated))
    ) {
      parent.peakAllocated = child.peakAllocated;
      parent.peakAllocatedNs = child.peakAllocatedNs;
    }
    if (
      child.peakUsed > parent.peakUsed ||
      (Number.isNaN(parent.peakUsed) && !Number.isNaN(child.peakUsed))
    ) {
      parent.peakUsed = child.peakUsed;
      parent.peakUsedNs = child.peakUsedNs;
    }
  }
}

/** Each occurrence with the innermost one enclosing it one level up (same thread, by time). */
function parentsOf(
  occurrences: readonly RankOccurrence[],
): [child: RankOccurrence, parent: RankOccurrence][] {
  const byThread = new Map<PhaseSpan["threadId"], RankOccurrence[]>();
  for (const occurrence of occurrences) {
    const list = byThread.get(occurrence.span.threadId);
    if (list === undefined) byThread.set(occurrence.span.threadId, [occurrence]);
    else list.push(occurrence);
  }
  const withParent: [child: RankOccurrence, parent: RankOccurrence][] = [];
  for (const list of byThread.values()) {
    list.sort((a, b) =>
      a.span.startNs < b.span.startNs
        ? -1
        : a.span.startNs > b.span.startNs
          ? 1
          : a.span.depth - b.span.depth,
    );
    const open: RankOccurrence[] = [];
    for (const occurrence of list) {
      const { span } = occurrence;
      while (open.length > 0 && (open[open.length - 1] as RankOccurrence).span.endNs < span.startNs)
        open.pop();
      // The innermost open span that encloses this one, one level up.
      for (let k = open.length - 1; k >= 0; k--) {
        const candidate = (open[k] as RankOccurrence).span;
        if (candidate.depth >= span.depth || candidate.endNs < span.endNs) continue;
        if (candidate.depth === span.depth - 1) withParent.push([occurrence, open[k] as RankOccurrence]);
        break;
      }
      open.push(occurrence);
    }
  }
  return withParent;
}

/** The occurrences of every span of one session's rank. */
export function collectOccurrences(series: RankSeries, index: PhaseReplayIndex | null): Occurrence[] {
  const out: RankOccurrence[] = [];
  if (index === null) return out;
  const { enters, exits } = boundariesByScope(series.boundaries);
  const readings = new SpanReadings(series);
  for (const span of index.spansFor(series.sessionId, series.rank)) {
    const enter = enters.get(span.scopeId);
    const exit = span.syntheticEnd
      ? undefined
      : exits.get(span.scopeId)?.find((b) => b.timestampNs === span.endNs);
    out.push(readings.occurrence(span, enter, exit));
  }
  includeNestedPeaks(out);
  return out;
}

/** A rank's boundaries by scope id: the first entry of each, and every exit. */
function boundariesByScope(boundaries: readonly BoundaryEntry[]): {
  enters: Map<string, BoundaryEntry>;
  exits: Map<string, BoundaryEntry[]>;
} {
  const enters = new Map<string, BoundaryEntry>();
  const exits = new Map<string, BoundaryEntry[]>();
  for (const boundary of boundaries) {
    const id = scopeIdOf(boundary.scope);
    if (id === null) continue;
    if (boundary.eventType === "phase_enter") {
      if (!enters.has(id)) enters.set(id, boundary);
    } else {
      const list = exits.get(id);
      if (list === undefined) exits.set(id, [boundary]);
      else list.push(boundary);
    }
  }
  return { enters, exits };
}

/**
 * What a rank's samples and boundaries say of each of its spans. Apart from `collectOccurrences`'s
 * loop: V8 compiled that function whole around its loops, up to twice (~70 ms of a cold analysis's
 * compiling); this one it compiles once.
 */
class SpanReadings {
  private readonly hasSampledTensors: boolean;
  private readonly allocatedMax: RangeMax;
  private readonly usedMax: RangeMax;

  constructor(private readonly series: RankSeries) {
    this.hasSampledTensors = series.tensors.some((value) => !Number.isNaN(value));
    this.allocatedMax = new RangeMax(series.allocated, series.count);
    this.usedMax = new RangeMax(series.used, series.count);
  }

  private tensorsAt(boundary: BoundaryEntry | undefined, t: bigint): number {
    if (boundary !== undefined && !Number.isNaN(boundary.tensors)) return boundary.tensors;
    return this.hasSampledTensors ? sampledTensors(this.series, t) : Number.NaN;
  }

  occurrence(
    span: PhaseSpan,
    enter: BoundaryEntry | undefined,
    exit: BoundaryEntry | undefined,
  ): RankOccurrence {
    const series = this.series;
    // Peaks inside the span (ends included): the entry reading, the samples, the exit reading.
    let peakAllocated = Number.NaN;
    let peakAllocatedNs = span.startNs;
    let peakUsed = Number.NaN;
    let peakUsedNs = span.startNs;
    if (enter !== undefined) {
      peakAllocated = enter.allocated;
      peakUsed = enter.used;
      peakAllocatedNs = peakUsedNs = enter.timestampNs;
    }
    const ts = series.t;
    const startT = Number(span.startNs - series.base);
    const endT = Number(span.endNs - series.base);
    const lo = lowerBound(ts, series.count, startT);
    const hi = Math.max(lo, upperBound(ts, series.count, endT));
    // The samples' first maximum beats the entry reading as the scan from it would decide.
    let bestAllocated = this.allocatedMax.argmax(lo, hi);
    if (bestAllocated >= 0) {
      const allocated = series.allocated[bestAllocated]!;
      if (allocated > peakAllocated || Number.isNaN(peakAllocated)) peakAllocated = allocated;
      else bestAllocated = -1;
    }
    let bestUsed = this.usedMax.argmax(lo, hi);
    if (bestUsed >= 0) {
      const used = series.used[bestUsed]!;
      if (used > peakUsed || Number.isNaN(peakUsed)) peakUsed = used;
      else bestUsed = -1;
    }
    if (bestAllocated >= 0) peakAllocatedNs = series.base + BigInt(ts[bestAllocated]!);
    if (bestUsed >= 0) peakUsedNs = series.base + BigInt(ts[bestUsed]!);
    if (exit !== undefined) {
      if (exit.allocated > peakAllocated || (Number.isNaN(peakAllocated) && !Number.isNaN(exit.allocated))) {
        peakAllocated = exit.allocated;
        peakAllocatedNs = exit.timestampNs;
      }
      if (exit.used > peakUsed || (Number.isNaN(peakUsed) && !Number.isNaN(exit.used))) {
        peakUsed = exit.used;
        peakUsedNs = exit.timestampNs;
      }
    }
    return new RankOccurrence(
      series,
      span,
      enter?.allocated ?? Number.NaN,
      exit?.allocated ?? Number.NaN,
      enter?.used ?? Number.NaN,
      exit?.used ?? Number.NaN,
      this.tensorsAt(enter, span.startNs),
      span.syntheticEnd ? Number.NaN : this.tensorsAt(exit, span.endNs),
      peakAllocated,
      peakAllocatedNs,
      peakUsed,
      peakUsedNs,
      (enter?.boundaryRead ?? false) || (exit?.boundaryRead ?? false),
    );
  }
}

function netChange(values: readonly number[]): NetChange | null {
  if (values.length === 0) return null;
  let total = 0;
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  let positive = 0;
  for (const value of values) {
    total += value;
    if (value < min) min = value;
    if (value > max) max = value;
    if (value > 0) positive++;
  }
  return {
    mean: total / values.length,
    median: median(values),
    min,
    max,
    total,
    positive_count: positive,
    count: values.length,
  };
}

function occurrenceReport(occurrence: Occurrence): PhaseOccurrence {
  const { span } = occurrence;
  const net = (enter: number, exit: number): number | null =>
    Number.isNaN(enter) || Number.isNaN(exit) ? null : exit - enter;
  return {
    session_id: span.sessionId,
    rank: span.rank,
    scope_id: span.scopeId,
    start_ns: span.startNs,
    end_ns: span.endNs,
    duration_ns: span.endNs - span.startNs,
    net_allocated_bytes: net(occurrence.enterAllocated, occurrence.exitAllocated),
    net_tensors: net(occurrence.enterTensors, occurrence.exitTensors),
    peak_allocated_bytes: Number.isNaN(occurrence.peakAllocated) ? null : occurrence.peakAllocated,
    peak_device_used_bytes: Number.isNaN(occurrence.peakUsed) ? null : occurrence.peakUsed,
    synthetic_end: span.syntheticEnd,
  };
}

interface PathStats {
  path: readonly string[];
  occurrences: number;
  ranks: Set<number>;
  total: bigint;
  max: bigint;
  synthetic: number;
  peakAllocated: PathPeak;
  peakUsed: PathPeak;
  netBytes: number[];
  netTensors: number[];
  worst: Occurrence | null;
  worstReport: PhaseOccurrence | null;
}

type PathPeak = PhaseStat["peak_allocated_bytes"];

/** `current`, or the reading `value` (NaN: none) at `timestampNs` on `rank` where it is higher. */
function higherPeak(current: PathPeak, value: number, timestampNs: bigint, rank: number): PathPeak {
  if (Number.isNaN(value) || (current !== null && value <= current.value)) return current;
  return { value, timestamp_ns: timestampNs, rank };
}

/**
 * Adds one occurrence to its path's statistics; true when it is the path's worst so far. Apart from
 * `PhaseAccumulator`'s loop, which V8 compiled whole around this body in a cold analysis.
 */
function addOccurrence(stats: PathStats, occurrence: Occurrence): boolean {
  const { span } = occurrence;
  stats.occurrences++;
  stats.ranks.add(span.rank);
  const duration = span.endNs - span.startNs;
  stats.total += duration;
  if (duration > stats.max) stats.max = duration;
  if (span.syntheticEnd) stats.synthetic++;
  else {
    if (!Number.isNaN(occurrence.enterAllocated) && !Number.isNaN(occurrence.exitAllocated)) {
      stats.netBytes.push(occurrence.exitAllocated - occurrence.enterAllocated);
    }
    if (!Number.isNaN(occurrence.enterTensors) && !Number.isNaN(occurrence.exitTensors)) {
      stats.netTensors.push(occurrence.exitTensors - occurrence.enterTensors);
    }
  }
  stats.peakAllocated = higherPeak(
    stats.peakAllocated,
    occurrence.peakAllocated,
    occurrence.peakAllocatedNs,
    span.rank,
  );
  stats.peakUsed = higherPeak(stats.peakUsed, occurrence.peakUsed, occurrence.peakUsedNs, span.rank);
  if (stats.worst === null || worse(occurrence, stats.worst)) {
    stats.worst = occurrence;
    return true;
  }
  return false;
}

/** Phase statistics accumulated one session's rank at a time (occurrences are let go after each). */
export class PhaseAccumulator implements RankAnalysis<PhaseStat[]> {
  private readonly paths = new Map<string, PathStats>();

  addRank(data: RankData): void {
    for (const series of data.series) this.add(data.occurrences(series));
  }

  private add(occurrences: readonly Occurrence[]): void {
    const byPath = new Map<string, Occurrence[]>();
    for (const occurrence of occurrences) {
      const list = byPath.get(occurrence.span.phasePath);
      if (list === undefined) byPath.set(occurrence.span.phasePath, [occurrence]);
      else list.push(occurrence);
    }
    for (const [phasePath, list] of byPath) {
      let stats = this.paths.get(phasePath);
      if (stats === undefined) {
        stats = {
          path: list[0]!.span.path,
          occurrences: 0,
          ranks: new Set(),
          total: 0n,
          max: 0n,
          synthetic: 0,
          peakAllocated: null,
          peakUsed: null,
          netBytes: [],
          netTensors: [],
          worst: null,
          worstReport: null,
        };
        this.paths.set(phasePath, stats);
      }
      let worstChanged = false;
      for (const occurrence of list) if (addOccurrence(stats, occurrence)) worstChanged = true;
      // Keep the worst occurrence's report, and the occurrence without its series (which holds the rank's samples).
      if (worstChanged && stats.worst !== null) {
        stats.worstReport = occurrenceReport(stats.worst);
        stats.worst = detach(stats.worst);
      }
    }
  }

  /** The phases section, sorted by path (parents precede their children). */
  finish(): PhaseStat[] {
    return [...this.paths.entries()]
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
      .map(([phasePath, stats]) => ({
        phase_path: phasePath,
        path: [...stats.path],
        depth: stats.path.length,
        occurrences: stats.occurrences,
        ranks: [...stats.ranks].sort((a, b) => a - b),
        synthetic_end_count: stats.synthetic,
        duration: {
          total_ns: stats.total,
          mean_ns: roundedMean(stats.total, stats.occurrences),
          max_ns: stats.max,
        },
        peak_allocated_bytes: stats.peakAllocated,
        peak_device_used_bytes: stats.peakUsed,
        net_allocated_bytes: netChange(stats.netBytes),
        net_tensors: netChange(stats.netTensors),
        worst_occurrence: stats.worstReport,
      }));
  }
}

/** An occurrence without its series (what `worse` compares stays). */
function detach(occurrence: Occurrence): Occurrence {
  return { ...occurrence, series: DETACHED };
}

const DETACHED = { sessionId: "", rank: -1 } as unknown as RankSeries;

/** `total / count` rounded half up to an integer. */
function roundedMean(total: bigint, count: number): bigint {
  const n = BigInt(count);
  return (2n * total + n) / (2n * n);
}

/** Higher allocated peak; without memory readings, the longer one. */
function worse(a: Occurrence, b: Occurrence): boolean {
  const pa = a.peakAllocated;
  const pb = b.peakAllocated;
  if (!Number.isNaN(pa) || !Number.isNaN(pb)) {
    if (Number.isNaN(pb)) return true;
    if (Number.isNaN(pa)) return false;
    if (pa !== pb) return pa > pb;
  }
  return a.span.endNs - a.span.startNs > b.span.endNs - b.span.startNs;
}
