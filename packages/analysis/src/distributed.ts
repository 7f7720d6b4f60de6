/**
 * Feeds the selected data to the cross-rank and gap analyses (`cross-rank.ts`, `gap.ts`), which take
 * events: samples are rebuilt from the columns as light records holding the fields those analyses
 * read, in the order the reference's callers give them (time order; ties in storage order).
 */
import type { TelemetryEvent } from "@stormlog/core";
import type { PhaseResolver } from "@stormlog/phases";
import { type CrossRankAnalysis, summarizeCrossRankAnalysis } from "./cross-rank.js";
import { crossRankFromColumns } from "./cross-rank-columns.js";
import type { Dataset, RankSeries } from "./dataset.js";
import { analyzeGaps } from "./gap.js";
import type { RankGapFinding } from "./types.js";

const orNull = (value: number): number | null => (Number.isNaN(value) ? null : value);

/** Sample `i` of a series as the light record the analyses read. */
function sampleRecord(series: RankSeries, i: number): TelemetryEvent {
  const identity = series.identities[series.identity === null ? 0 : series.identity[i]!]!;
  return {
    schema_version: 3,
    session_id: series.sessionId,
    timestamp_ns: series.base + BigInt(series.t[i]!),
    event_type: "sample",
    collector: "",
    sampling_interval_ms: identity.sampling_interval_ms,
    pid: identity.pid,
    host: identity.host,
    job_id: identity.job_id,
    rank: series.rank,
    local_rank: 0,
    world_size: identity.world_size,
    device_id: identity.device_id,
    allocator_allocated_bytes: orNull(series.allocated[i]!),
    allocator_reserved_bytes: orNull(series.reserved[i]!),
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: orNull(series.used[i]!),
    device_free_bytes: null,
    device_total_bytes: orNull(series.total[i]!),
    context: null,
    metadata: {},
  } as unknown as TelemetryEvent;
}

/** Stand-in for the non-sample events of the selection (the analysis only notes that there were some). */
const NON_SAMPLE = { event_type: "phase_enter" } as unknown as TelemetryEvent;

/** Every sample of the selection in `(timestamp, storage order)` order: a k-way merge of the series. */
function mergedSamples(series: readonly RankSeries[]): TelemetryEvent[] {
  const live = series.filter((s) => s.count > 0);
  const heads = new Int32Array(live.length);
  // Binary heap of series indices by their head sample.
  const heap: number[] = [];
  const less = (a: number, b: number): boolean => {
    const sa = live[a]!;
    const sb = live[b]!;
    const ta = sa.base + BigInt(sa.t[heads[a]!]!);
    const tb = sb.base + BigInt(sb.t[heads[b]!]!);
    if (ta !== tb) return ta < tb;
    return sa.order[heads[a]!]! < sb.order[heads[b]!]!;
  };
  const push = (x: number): void => {
    heap.push(x);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!less(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  };
  const sift = (): void => {
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heap.length && less(heap[l]!, heap[m]!)) m = l;
      if (r < heap.length && less(heap[r]!, heap[m]!)) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m]!, heap[i]!];
      i = m;
    }
  };
  let total = 0;
  for (let k = 0; k < live.length; k++) {
    total += live[k]!.count;
    push(k);
  }
  const out: TelemetryEvent[] = new Array(total);
  let n = 0;
  while (heap.length > 0) {
    const k = heap[0]!;
    const s = live[k]!;
    out[n++] = sampleRecord(s, heads[k]!);
    heads[k]!++;
    if (heads[k]! < s.count) sift();
    else {
      const last = heap.pop()!;
      if (heap.length > 0) {
        heap[0] = last;
        sift();
      }
    }
  }
  return out;
}

/** Distinct ranks of the selection (any event). */
export function rankCount(dataset: Dataset): number {
  return new Set(dataset.series.map((series) => series.rank)).size;
}

/** The reference's cross-rank summary of the selection, with phase attribution. */
export function crossRankOfDataset(dataset: Dataset, resolver: PhaseResolver | null): CrossRankAnalysis {
  const columns = crossRankFromColumns(dataset, resolver);
  if (columns !== null) return columns;
  return crossRankOfEvents(dataset, resolver);
}

/** The same through the event version (cross-rank.ts), for selections too wide for exact doubles. */
export function crossRankOfEvents(dataset: Dataset, resolver: PhaseResolver | null): CrossRankAnalysis {
  const events = mergedSamples(dataset.series);
  let samples = 0;
  for (const series of dataset.series) samples += series.count;
  if (dataset.eventCount > samples) events.push(NON_SAMPLE);
  return summarizeCrossRankAnalysis(events, { phaseResolver: resolver });
}

const SEVERITY_ORDER: Readonly<Record<string, number>> = { critical: 0, warning: 1, info: 2 };

/** Hidden-memory gap findings per rank, ordered by severity then confidence (stable). */
export function gapsOfDataset(dataset: Dataset, resolver: PhaseResolver | null): RankGapFinding[] {
  const findings: RankGapFinding[] = [];
  for (const series of dataset.series) {
    if (series.count < 3) continue;
    const events: TelemetryEvent[] = new Array(series.count);
    for (let i = 0; i < series.count; i++) events[i] = sampleRecord(series, i);
    for (const finding of analyzeGaps(events, { phaseResolver: resolver })) {
      findings.push(Object.assign(finding, { rank: series.rank, session_id: series.sessionId }));
    }
  }
  findings.sort(
    (a, b) =>
      (SEVERITY_ORDER[a.severity] ?? 3) - (SEVERITY_ORDER[b.severity] ?? 3) || b.confidence - a.confidence,
  );
  return findings;
}
