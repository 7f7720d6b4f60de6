/**
 * Per nested phase path: occurrences, durations, peak memory inside, net change per occurrence (bytes,
 * and tensors where the tfjs adapter records them) and the worst occurrence. Spans come from
 * `PhaseReplayIndex` (the reference's replay rules); the counters from the boundary records, which
 * carry the readings taken at the boundary, and the samples inside each span.
 */
import type { JsonObject } from "@stormlog/core";
import { type PhaseEventLike, PhaseReplayIndex, type PhaseSpan } from "@stormlog/phases";
import type { BoundaryEntry } from "./aggregate.js";
import type { Dataset, RankSeries } from "./dataset.js";
import type { NetChange, PhaseOccurrence, PhaseStat } from "./types.js";

/** Builds the replay index of the selected data: its boundaries, each rank's last event as group end. */
export function buildPhaseIndex(dataset: Dataset): PhaseReplayIndex {
  const events: PhaseEventLike[] = [];
  for (const series of dataset.series) {
    if (series.boundaries.length === 0) continue;
    // Any event extends its group's end; the rank's latest timestamp stands for all of them.
    if (series.maxTs !== null) {
      events.push({
        session_id: series.sessionId,
        timestamp_ns: series.maxTs,
        rank: series.rank,
        event_type: "sample",
      });
    }
    for (const boundary of series.boundaries) {
      events.push({
        session_id: series.sessionId,
        timestamp_ns: boundary.timestampNs,
        rank: series.rank,
        event_type: boundary.eventType,
        metadata: { phase_scope: boundary.scope },
      });
    }
  }
  return PhaseReplayIndex.fromEvents(events);
}

/** One occurrence with the readings it needs for statistics and leak detection. */
export interface Occurrence {
  readonly series: RankSeries;
  readonly span: PhaseSpan;
  /** Readings at entry and exit (NaN when absent; exit absent for a synthetic end). */
  readonly enterAllocated: number;
  readonly exitAllocated: number;
  readonly enterUsed: number;
  readonly exitUsed: number;
  readonly enterTensors: number;
  readonly exitTensors: number;
  readonly peakAllocated: number;
  readonly peakAllocatedNs: bigint;
  readonly peakUsed: number;
  readonly peakUsedNs: bigint;
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

/** The occurrences of every span of the selected data, in each rank's time order. */
export function collectOccurrences(dataset: Dataset, index: PhaseReplayIndex): Occurrence[] {
  const out: Occurrence[] = [];
  for (const series of dataset.series) {
    if (series.boundaries.length === 0) continue;
    const spans = index.spansFor(series.sessionId, series.rank);
    if (spans.length === 0) continue;
    const enters = new Map<string, BoundaryEntry>();
    const exits = new Map<string, BoundaryEntry[]>();
    for (const boundary of series.boundaries) {
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
    const hasSampledTensors = series.tensors.some((value) => !Number.isNaN(value));
    const tensorsAt = (boundary: BoundaryEntry | undefined, t: bigint): number => {
      if (boundary !== undefined && !Number.isNaN(boundary.tensors)) return boundary.tensors;
      return hasSampledTensors ? sampledTensors(series, t) : Number.NaN;
    };
    for (const span of spans) {
      const enter = enters.get(span.scopeId);
      const exit = span.syntheticEnd
        ? undefined
        : exits.get(span.scopeId)?.find((b) => b.timestampNs === span.endNs);
      let peakAllocated = Number.NaN;
      let peakAllocatedNs = span.startNs;
      let peakUsed = Number.NaN;
      let peakUsedNs = span.startNs;
      const consider = (allocated: number, used: number, t: bigint): void => {
        if (allocated > peakAllocated || (Number.isNaN(peakAllocated) && !Number.isNaN(allocated))) {
          peakAllocated = allocated;
          peakAllocatedNs = t;
        }
        if (used > peakUsed || (Number.isNaN(peakUsed) && !Number.isNaN(used))) {
          peakUsed = used;
          peakUsedNs = t;
        }
      };
      if (enter !== undefined) consider(enter.allocated, enter.used, enter.timestampNs);
      const ts = series.t;
      const startT = Number(span.startNs - series.base);
      const endT = Number(span.endNs - series.base);
      for (let i = lowerBound(ts, series.count, startT); i < series.count && ts[i]! <= endT; i++) {
        const allocated = series.allocated[i]!;
        const used = series.used[i]!;
        if (
          allocated > peakAllocated ||
          used > peakUsed ||
          Number.isNaN(peakAllocated) ||
          Number.isNaN(peakUsed)
        ) {
          consider(allocated, used, series.base + BigInt(ts[i]!));
        }
      }
      if (exit !== undefined) consider(exit.allocated, exit.used, exit.timestampNs);
      out.push({
        series,
        span,
        enterAllocated: enter?.allocated ?? Number.NaN,
        exitAllocated: exit?.allocated ?? Number.NaN,
        enterUsed: enter?.used ?? Number.NaN,
        exitUsed: exit?.used ?? Number.NaN,
        enterTensors: tensorsAt(enter, span.startNs),
        exitTensors: span.syntheticEnd ? Number.NaN : tensorsAt(exit, span.endNs),
        peakAllocated,
        peakAllocatedNs,
        peakUsed,
        peakUsedNs,
      });
    }
  }
  return out;
}

/** Median of a sorted copy. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
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

/** Groups occurrences by phase path (sorted by path, so parents precede their children). */
export function groupByPath(occurrences: readonly Occurrence[]): Map<string, Occurrence[]> {
  const groups = new Map<string, Occurrence[]>();
  for (const occurrence of occurrences) {
    const key = occurrence.span.phasePath;
    const list = groups.get(key);
    if (list === undefined) groups.set(key, [occurrence]);
    else list.push(occurrence);
  }
  return new Map([...groups.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)));
}

/** The phases section. */
export function phaseStatistics(groups: ReadonlyMap<string, readonly Occurrence[]>): PhaseStat[] {
  const stats: PhaseStat[] = [];
  for (const [phasePath, list] of groups) {
    const ranks = new Set<number>();
    let total = 0n;
    let max = 0n;
    let synthetic = 0;
    let peakAllocated: PhaseStat["peak_allocated_bytes"] = null;
    let peakUsed: PhaseStat["peak_device_used_bytes"] = null;
    const netBytes: number[] = [];
    const netTensors: number[] = [];
    let worst: Occurrence | null = null;
    for (const occurrence of list) {
      const { span } = occurrence;
      ranks.add(span.rank);
      const duration = span.endNs - span.startNs;
      total += duration;
      if (duration > max) max = duration;
      if (span.syntheticEnd) synthetic++;
      else {
        if (!Number.isNaN(occurrence.enterAllocated) && !Number.isNaN(occurrence.exitAllocated)) {
          netBytes.push(occurrence.exitAllocated - occurrence.enterAllocated);
        }
        if (!Number.isNaN(occurrence.enterTensors) && !Number.isNaN(occurrence.exitTensors)) {
          netTensors.push(occurrence.exitTensors - occurrence.enterTensors);
        }
      }
      if (
        !Number.isNaN(occurrence.peakAllocated) &&
        (peakAllocated === null || occurrence.peakAllocated > peakAllocated.value)
      ) {
        peakAllocated = {
          value: occurrence.peakAllocated,
          timestamp_ns: occurrence.peakAllocatedNs,
          rank: span.rank,
        };
      }
      if (!Number.isNaN(occurrence.peakUsed) && (peakUsed === null || occurrence.peakUsed > peakUsed.value)) {
        peakUsed = { value: occurrence.peakUsed, timestamp_ns: occurrence.peakUsedNs, rank: span.rank };
      }
      if (worst === null || worse(occurrence, worst)) worst = occurrence;
    }
    const first = list[0]!.span;
    stats.push({
      phase_path: phasePath,
      path: [...first.path],
      depth: first.depth,
      occurrences: list.length,
      ranks: [...ranks].sort((a, b) => a - b),
      synthetic_end_count: synthetic,
      duration: { total_ns: total, mean_ns: roundedMean(total, list.length), max_ns: max },
      peak_allocated_bytes: peakAllocated,
      peak_device_used_bytes: peakUsed,
      net_allocated_bytes: netChange(netBytes),
      net_tensors: netChange(netTensors),
      worst_occurrence: worst === null ? null : occurrenceReport(worst),
    });
  }
  return stats;
}

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
