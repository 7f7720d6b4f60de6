/**
 * Session summary, per-rank figures, collector health and alerts of the selected data.
 */
import { ALERT_EVENT_TYPES } from "@stormlog/core";
import { type PhaseResolver, summarizePhaseAttribution } from "@stormlog/phases";
import type { Dataset, RankSeries } from "./dataset.js";
import type {
  AlertItem,
  AlertsReport,
  CollectorHealthReport,
  CounterPeakReport,
  HealthCounts,
  HealthTransition,
  RankSummary,
  ReportSummary,
  SinkCounters,
} from "./types.js";

/** Items kept in the alerts and health-transition lists. */
export const REPORT_LIST_CAP = 200;

function firstLast(values: Float64Array, count: number): [number, number] | null {
  let first = Number.NaN;
  let last = Number.NaN;
  for (let i = 0; i < count; i++) {
    const value = values[i]!;
    if (!Number.isNaN(value)) {
      first = value;
      break;
    }
  }
  for (let i = count - 1; i >= 0; i--) {
    const value = values[i]!;
    if (!Number.isNaN(value)) {
      last = value;
      break;
    }
  }
  return Number.isNaN(first) ? null : [first, last];
}

/** Degraded episodes of one rank: time degraded and transitions, from its health records. */
function rankHealth(series: RankSeries): { degradedNs: bigint; transitions: number } {
  const entries = [...series.health].sort((a, b) =>
    a.timestampNs < b.timestampNs ? -1 : a.timestampNs > b.timestampNs ? 1 : 0,
  );
  let degradedSince: bigint | null = null;
  let degradedNs = 0n;
  for (const entry of entries) {
    if (entry.eventType === "collector_degraded") {
      degradedSince ??= entry.timestampNs;
    } else if (degradedSince !== null) {
      degradedNs += entry.timestampNs - degradedSince;
      degradedSince = null;
    }
  }
  if (degradedSince !== null && series.maxTs !== null && series.maxTs > degradedSince)
    degradedNs += series.maxTs - degradedSince;
  return { degradedNs, transitions: entries.length };
}

function statusAfter(eventType: string, status: string | null): string {
  if (status !== null) return status;
  return eventType === "collector_degraded" ? "degraded" : "healthy";
}

/** The collector-health section: counts, time degraded, transitions in time order. */
export function summarizeHealth(dataset: Dataset): CollectorHealthReport {
  const transitions: HealthTransition[] = [];
  const perRank: CollectorHealthReport["per_rank"] = [];
  let degradedTime = 0n;
  let degraded = 0;
  let recovered = 0;
  for (const series of dataset.series) {
    const { degradedNs, transitions: count } = rankHealth(series);
    degradedTime += degradedNs;
    if (count > 0)
      perRank.push({
        rank: series.rank,
        session_id: series.sessionId,
        degraded_time_ns: degradedNs,
        transition_count: count,
      });
    for (const entry of series.health) {
      if (entry.eventType === "collector_degraded") degraded++;
      else recovered++;
      transitions.push({
        timestamp_ns: entry.timestampNs,
        rank: series.rank,
        session_id: series.sessionId,
        event_type: entry.eventType,
        status: statusAfter(entry.eventType, entry.status),
        collector: entry.collector,
        error: entry.error,
      });
    }
  }
  // Exact counts even when a segment kept only the first DETAIL_CAP records.
  degraded = Math.max(degraded, dataset.eventTypes.get("collector_degraded") ?? 0);
  recovered = Math.max(recovered, dataset.eventTypes.get("collector_recovered") ?? 0);
  transitions.sort((a, b) =>
    a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : a.rank - b.rank,
  );
  const last = transitions[transitions.length - 1];
  return {
    transition_count: degraded + recovered,
    degraded_count: degraded,
    recovered_count: recovered,
    degraded_time_ns: degradedTime,
    last_status: last === undefined ? "healthy" : last.status,
    transitions: transitions.slice(0, REPORT_LIST_CAP),
    per_rank: perRank.sort((a, b) => a.rank - b.rank),
  };
}

/** The alerts section: counts by severity and the first alerts in time order, with their phase. */
export function summarizeAlerts(dataset: Dataset, resolver: PhaseResolver | null): AlertsReport {
  const severityCounts: Record<string, number> = {};
  let total = 0;
  for (const type of ALERT_EVENT_TYPES) {
    const count = dataset.eventTypes.get(type) ?? 0;
    if (count > 0) severityCounts[type] = count;
    total += count;
  }
  const all: { series: RankSeries; entry: RankSeries["alerts"][number] }[] = [];
  for (const series of dataset.series) for (const entry of series.alerts) all.push({ series, entry });
  all.sort((a, b) =>
    a.entry.timestampNs < b.entry.timestampNs
      ? -1
      : a.entry.timestampNs > b.entry.timestampNs
        ? 1
        : a.series.rank - b.series.rank,
  );
  const items: AlertItem[] = all.slice(0, REPORT_LIST_CAP).map(({ series, entry }) => ({
    timestamp_ns: entry.timestampNs,
    rank: series.rank,
    session_id: series.sessionId,
    event_type: entry.eventType,
    context: entry.context,
    oom_reason: entry.oomReason,
    phase: resolver
      ? summarizePhaseAttribution(resolver.resolve(entry.timestampNs, series.sessionId, series.rank))
      : null,
  }));
  return { total_count: total, severity_counts: severityCounts, items, truncated: total > items.length };
}

function rankSummary(series: RankSeries, health: { degradedNs: bigint }): RankSummary {
  const n = series.count;
  const delta = (values: Float64Array): number | null => {
    const ends = firstLast(values, n);
    return ends === null ? null : ends[1] - ends[0];
  };
  let latestGap: number | null = null;
  let peakGap: number | null = null;
  for (let i = 0; i < n; i++) {
    const gap = series.used[i]! - series.reserved[i]!;
    if (Number.isNaN(gap)) continue;
    latestGap = gap;
    if (peakGap === null || Math.abs(gap) > Math.abs(peakGap)) peakGap = gap;
  }
  return {
    rank: series.rank,
    session_id: series.sessionId,
    event_count: series.eventCount,
    sample_count: n,
    first_timestamp_ns: series.minTs,
    last_timestamp_ns: series.maxTs,
    allocated_delta_bytes: delta(series.allocated),
    reserved_delta_bytes: delta(series.reserved),
    device_used_delta_bytes: delta(series.used),
    peak_allocated_bytes: series.peaks[0]?.value ?? null,
    peak_reserved_bytes: series.peaks[1]?.value ?? null,
    peak_device_used_bytes: series.peaks[2]?.value ?? null,
    hidden_gap_latest_bytes: latestGap,
    hidden_gap_peak_abs_bytes: peakGap,
    alert_count: series.alerts.length,
    degraded_time_ns: health.degradedNs,
  };
}

/** The summary section. `health` and `sink` come from their own sections. */
export function summarizeDataset(dataset: Dataset, health: HealthCounts, sink: SinkCounters): ReportSummary {
  let first: bigint | null = null;
  let last: bigint | null = null;
  let samples = 0;
  const peaks: (CounterPeakReport | null)[] = [null, null, null];
  const ranks = new Set<number>();
  const perRank: RankSummary[] = [];
  for (const series of dataset.series) {
    ranks.add(series.rank);
    samples += series.count;
    if (series.minTs !== null && (first === null || series.minTs < first)) first = series.minTs;
    if (series.maxTs !== null && (last === null || series.maxTs > last)) last = series.maxTs;
    series.peaks.forEach((peak, i) => {
      const current = peaks[i] ?? null;
      if (peak === null) return;
      // Highest value; ties go to the earliest.
      if (
        current === null ||
        peak.value > current.value ||
        (peak.value === current.value && peak.timestampNs < current.timestamp_ns)
      ) {
        peaks[i] = {
          value: peak.value,
          timestamp_ns: peak.timestampNs,
          rank: series.rank,
          device_id: peak.deviceId,
          session_id: series.sessionId,
        };
      }
    });
    perRank.push(rankSummary(series, rankHealth(series)));
  }
  const eventTypeCounts: Record<string, number> = {};
  for (const type of [...dataset.eventTypes.keys()].sort())
    eventTypeCounts[type] = dataset.eventTypes.get(type)!;
  const alertsByType: Record<string, number> = {};
  for (const type of ALERT_EVENT_TYPES) {
    const count = dataset.eventTypes.get(type) ?? 0;
    if (count > 0) alertsByType[type] = count;
  }
  const duration = first !== null && last !== null ? last - first : null;
  // Per-rank sample counts count exact "sample" events; other spellings are in event_type_counts.
  return {
    event_count: dataset.eventCount,
    sample_count: samples,
    first_timestamp_ns: first,
    last_timestamp_ns: last,
    duration_ns: duration,
    duration_s: duration === null ? null : Number(duration) / 1e9,
    ranks: [...ranks].sort((a, b) => a - b),
    event_type_counts: eventTypeCounts,
    peaks: {
      allocator_allocated_bytes: peaks[0] ?? null,
      allocator_reserved_bytes: peaks[1] ?? null,
      device_used_bytes: peaks[2] ?? null,
    },
    alerts_by_type: alertsByType,
    collector_health: {
      transition_count: health.transition_count,
      degraded_count: health.degraded_count,
      recovered_count: health.recovered_count,
      degraded_time_ns: health.degraded_time_ns,
      last_status: health.last_status,
    },
    sink,
    per_rank: perRank.sort((a, b) => a.rank - b.rank || (a.session_id < b.session_id ? -1 : 1)),
  };
}
