/**
 * What the diagnostics take from phase records, besides attribution:
 *
 * - boundary readings: a `phase_enter`/`phase_exit` record whose `metadata.phase_counters` is
 *   `"boundary_read"` carries counters read at the boundary itself, so it is a reading like a sample
 *   and joins the samples (in time order) for the deltas, the hidden gap and the timeline. Records
 *   with `"last_sample"` counters, or none (the Python Stormlog's), only repeat the last sample and
 *   are left out: they would count it twice;
 * - leak anomalies: the analysis report's leak verdicts (`LeakAccumulator`, fed as `analyzeTelemetry`
 *   feeds it), one `leak:<phase path>` warning per leaking rank and phase.
 */
import type { TelemetryEvent } from "@stormlog/core";
import type { PhaseReplayIndex } from "@stormlog/phases";
import { BOUNDARY_READ } from "../input/aggregate.js";
import type { RankSeries } from "../input/dataset.js";
import type { DiagnosticsAnomaly } from "./diagnostics.js";
import { birthSnapshots, LeakAccumulator } from "./leaks.js";
import { buildPhaseIndex, collectOccurrences, type Occurrence } from "./phase-stats.js";

/** Prefix of the signal of a leak anomaly (`leak:<phase path>`). */
export const LEAK_SIGNAL_PREFIX = "leak:";

/**
 * A phase record whose counters were read at the boundary, as the scan keeps it (with a scope): a
 * reading like a sample. Phase records with `"last_sample"` counters, or none (the Python
 * Stormlog's), repeat the last sample and are not readings.
 */
export function isBoundaryReading(event: TelemetryEvent): boolean {
  const type = event.event_type;
  return (
    (type === "phase_enter" || type === "phase_exit") &&
    event.metadata.phase_counters === BOUNDARY_READ &&
    event.metadata.phase_scope !== undefined
  );
}

/**
 * One rank's counter readings in time order (ties in storage order): its samples and its boundary
 * readings. NaN marks a null counter; `t` is nanoseconds after the series' `base`.
 */
export interface ReadingColumns {
  readonly count: number;
  readonly t: Float64Array;
  readonly allocated: Float64Array;
  readonly reserved: Float64Array;
  readonly used: Float64Array;
  readonly total: Float64Array;
  /** Per reading, the index of its boundary in `series.boundaries`, -1 for a sample; null: samples only. */
  readonly boundary: Int32Array | null;
  /** How many readings are boundary readings. */
  readonly boundaryReadings: number;
}

/** A rank's samples in time order and its boundaries: one session's series, or several merged. */
export type ReadingSource = Pick<
  RankSeries,
  | "count"
  | "base"
  | "t"
  | "order"
  | "allocated"
  | "reserved"
  | "used"
  | "total"
  | "boundaries"
  | "boundaryOrder"
>;

/** The samples of `series` with its boundary readings merged in (the samples' columns as they are without any). */
export function readingColumns(series: ReadingSource): ReadingColumns {
  const { boundaries, boundaryOrder, base } = series;
  const picked: number[] = [];
  for (let j = 0; j < boundaries.length; j++) if (boundaries[j]!.boundaryRead) picked.push(j);
  const n = series.count;
  if (picked.length === 0) {
    const { t, allocated, reserved, used, total } = series;
    return { count: n, t, allocated, reserved, used, total, boundary: null, boundaryReadings: 0 };
  }
  // Boundaries are in storage order; readings go by time, then storage order (as the events sort).
  const offsets = new Float64Array(boundaries.length);
  for (const j of picked) offsets[j] = Number(boundaries[j]!.timestampNs - base);
  picked.sort((a, b) => offsets[a]! - offsets[b]! || boundaryOrder[a]! - boundaryOrder[b]!);
  const count = n + picked.length;
  const t = new Float64Array(count);
  const allocated = new Float64Array(count);
  const reserved = new Float64Array(count);
  const used = new Float64Array(count);
  const total = new Float64Array(count);
  const boundary = new Int32Array(count);
  let i = 0;
  let k = 0;
  for (let out = 0; out < count; out++) {
    const j = picked[k];
    const sampleFirst =
      j === undefined ||
      (i < n &&
        (series.t[i]! < offsets[j]! || (series.t[i] === offsets[j] && series.order[i]! < boundaryOrder[j]!)));
    if (sampleFirst) {
      t[out] = series.t[i]!;
      allocated[out] = series.allocated[i]!;
      reserved[out] = series.reserved[i]!;
      used[out] = series.used[i]!;
      total[out] = series.total[i]!;
      boundary[out] = -1;
      i++;
    } else {
      const entry = boundaries[j]!;
      t[out] = offsets[j]!;
      allocated[out] = entry.allocated;
      reserved[out] = entry.reserved;
      used[out] = entry.used;
      total[out] = entry.total;
      boundary[out] = j;
      k++;
    }
  }
  return { count, t, allocated, reserved, used, total, boundary, boundaryReadings: picked.length };
}

/**
 * When the growth of one leaking phase became clear on a rank: the end of the earliest occurrence
 * whose exit level every later occurrence's exit level exceeds (the memory it left behind was never
 * given back), on allocated bytes, else device used bytes, else tensor counts, the first of those
 * that has such an occurrence. Without one (levels that dip back, or a single reading), the phase's
 * first occurrence's start.
 */
export function growthOnset(occurrences: readonly Occurrence[]): bigint | null {
  const closed = occurrences
    .filter((occurrence) => !occurrence.span.syntheticEnd)
    .sort((a, b) => (a.span.startNs < b.span.startNs ? -1 : a.span.startNs > b.span.startNs ? 1 : 0));
  const metrics: ((occurrence: Occurrence) => number)[] = [
    (occurrence) => occurrence.exitAllocated,
    (occurrence) => occurrence.exitUsed,
    (occurrence) => occurrence.exitTensors,
  ];
  for (const exitOf of metrics) {
    const levels = closed.filter((occurrence) => !Number.isNaN(exitOf(occurrence)));
    let lowestAfter = Number.POSITIVE_INFINITY;
    let onset: bigint | null = null;
    for (let k = levels.length - 2; k >= 0; k--) {
      lowestAfter = Math.min(lowestAfter, exitOf(levels[k + 1]!));
      if (lowestAfter > exitOf(levels[k]!)) onset = levels[k]!.span.endNs;
    }
    if (onset !== null) return onset;
  }
  return firstStart(occurrences);
}

/** The earliest start of `occurrences` (null for none). */
function firstStart(occurrences: readonly Occurrence[]): bigint | null {
  let first: bigint | null = null;
  for (const occurrence of occurrences)
    if (first === null || occurrence.span.startNs < first) first = occurrence.span.startNs;
  return first;
}

/**
 * Leak anomalies of a diagnosis: each diagnosed rank's sessions are added (`addSeries`) while they
 * are loaded; `finish` then gives, per rank, a warning per phase the report judges `leaking` there.
 */
export class LeakAnomalies {
  private readonly leaks = new LeakAccumulator();
  /** Per rank, per phase path: the earliest growth onset over the rank's sessions. */
  private readonly onsets = new Map<number, Map<string, bigint>>();
  /** Per rank, its first phase occurrence's start: for a phase judged leaking without occurrences there. */
  private readonly firstStarts = new Map<number, bigint>();

  /** One session's rank (its phase index, when already built), fed to the verdicts as the report feeds it. */
  addSeries(series: RankSeries, index: PhaseReplayIndex | null = buildPhaseIndex(series)): void {
    const occurrences = collectOccurrences(series, index);
    this.leaks.addSession(occurrences, birthSnapshots(series.births));
    if (occurrences.length === 0) return;
    const first = firstStart(occurrences)!;
    const known = this.firstStarts.get(series.rank);
    if (known === undefined || first < known) this.firstStarts.set(series.rank, first);
    const byPath = new Map<string, Occurrence[]>();
    for (const occurrence of occurrences) {
      const list = byPath.get(occurrence.span.phasePath);
      if (list === undefined) byPath.set(occurrence.span.phasePath, [occurrence]);
      else list.push(occurrence);
    }
    let onsets = this.onsets.get(series.rank);
    if (onsets === undefined) {
      onsets = new Map();
      this.onsets.set(series.rank, onsets);
    }
    for (const [phasePath, list] of byPath) {
      const onset = growthOnset(list);
      const known = onsets.get(phasePath);
      if (onset !== null && (known === undefined || onset < known)) onsets.set(phasePath, onset);
    }
  }

  /** Per rank, its leak anomalies (in the report's order of verdicts). */
  finish(): Map<number, DiagnosticsAnomaly[]> {
    const out = new Map<number, DiagnosticsAnomaly[]>();
    for (const report of this.leaks.finish()) {
      if (report.verdict !== "leaking") continue;
      for (const rank of report.leaking_ranks) {
        const onset = this.onsets.get(rank)?.get(report.phase_path) ?? this.firstStarts.get(rank);
        if (onset === undefined) continue;
        let list = out.get(rank);
        if (list === undefined) {
          list = [];
          out.set(rank, list);
        }
        list.push({
          rank,
          severity: "warning",
          timestamp_ns: onset,
          signal: `${LEAK_SIGNAL_PREFIX}${report.phase_path}`,
          details: report.message,
          confidence: report.confidence,
          reason_codes: [],
          phase_path: report.phase_path,
        });
      }
    }
    return out;
  }
}
