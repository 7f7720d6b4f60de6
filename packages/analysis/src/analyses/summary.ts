/**
 * Session summary, per-rank figures, collector health and alerts, accumulated one rank series at a
 * time and finished once every rank has been seen.
 */
import { ALERT_EVENT_TYPES } from "@stormlog/core";
import { type PhaseResolver, summarizePhaseAttribution } from "@stormlog/phases";
import type { RankSeries } from "../input/dataset.js";
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
} from "../report/types.js";
import type { RankAnalysis, RankData } from "./analysis.js";

/** Items kept in the alerts and health-transition lists. */
export const REPORT_LIST_CAP = 200;

const byTime = <T extends { timestamp_ns: bigint; rank: number }>(a: T, b: T): number =>
  a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : a.rank - b.rank;

/** Keeps the earliest `cap` items of a growing list (sorting only when it doubles). */
function keepEarliest<T extends { timestamp_ns: bigint; rank: number }>(items: T[], cap: number): void {
  if (items.length <= 2 * cap) return;
  items.sort(byTime);
  items.length = cap;
}

function firstLast(values: Float64Array, count: number): [number, number] | null {
  let first = Number.NaN;
  let last = Number.NaN;
  for (let i = 0; i < count; i++) {
    if (!Number.isNaN(values[i]!)) {
      first = values[i]!;
      break;
    }
  }
  for (let i = count - 1; i >= 0; i--) {
    if (!Number.isNaN(values[i]!)) {
      last = values[i]!;
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
export class HealthAccumulator implements RankAnalysis<CollectorHealthReport> {
  private readonly transitions: HealthTransition[] = [];
  private readonly perRank: CollectorHealthReport["per_rank"] = [];
  private degradedTime = 0n;
  private degraded = 0;
  private recovered = 0;
  /** The latest transition seen (for `last_status`), whatever the list keeps. */
  private last: HealthTransition | null = null;
  private result: CollectorHealthReport | null = null;

  /** `eventTypes`: the selection's counts by type (exact where the index kept the first transitions only). */
  constructor(private readonly eventTypes: ReadonlyMap<string, number>) {}

  addRank(data: RankData): void {
    for (const series of data.series) this.add(series);
  }

  private add(series: RankSeries): void {
    const { degradedNs, transitions: count } = rankHealth(series);
    this.degradedTime += degradedNs;
    if (count > 0) {
      this.perRank.push({
        rank: series.rank,
        session_id: series.sessionId,
        degraded_time_ns: degradedNs,
        transition_count: count,
      });
    }
    for (const entry of series.health) {
      if (entry.eventType === "collector_degraded") this.degraded++;
      else this.recovered++;
      const transition: HealthTransition = {
        timestamp_ns: entry.timestampNs,
        rank: series.rank,
        session_id: series.sessionId,
        event_type: entry.eventType,
        status: statusAfter(entry.eventType, entry.status),
        collector: entry.collector,
        error: entry.error,
      };
      this.transitions.push(transition);
      if (this.last === null || byTime(transition, this.last) >= 0) this.last = transition;
    }
    keepEarliest(this.transitions, REPORT_LIST_CAP);
  }

  /** The section (the same object on every call: the summary reads it too). */
  finish(): CollectorHealthReport {
    this.result ??= this.build(this.eventTypes);
    return this.result;
  }

  private build(eventTypes: ReadonlyMap<string, number>): CollectorHealthReport {
    // Exact counts even when a segment kept only the first DETAIL_CAP records.
    const degraded = Math.max(this.degraded, eventTypes.get("collector_degraded") ?? 0);
    const recovered = Math.max(this.recovered, eventTypes.get("collector_recovered") ?? 0);
    this.transitions.sort(byTime);
    return {
      transition_count: degraded + recovered,
      degraded_count: degraded,
      recovered_count: recovered,
      degraded_time_ns: this.degradedTime,
      last_status: this.last === null ? "healthy" : this.last.status,
      transitions: this.transitions.slice(0, REPORT_LIST_CAP),
      per_rank: this.perRank.sort((a, b) => a.rank - b.rank),
    };
  }
}

/** The alerts section: counts by severity and the first alerts in time order, with their phase. */
export class AlertsAccumulator implements RankAnalysis<AlertsReport> {
  private readonly items: AlertItem[] = [];

  /** `eventTypes`: the selection's counts by type (alert counts are exact from them). */
  constructor(private readonly eventTypes: ReadonlyMap<string, number>) {}

  addRank(data: RankData): void {
    for (const series of data.series) this.add(series, data.phaseIndex(series));
  }

  private add(series: RankSeries, resolver: PhaseResolver | null): void {
    for (const entry of series.alerts) {
      this.items.push({
        timestamp_ns: entry.timestampNs,
        rank: series.rank,
        session_id: series.sessionId,
        event_type: entry.eventType,
        context: entry.context,
        oom_reason: entry.oomReason,
        phase: resolver
          ? summarizePhaseAttribution(resolver.resolve(entry.timestampNs, series.sessionId, series.rank))
          : null,
      });
    }
    keepEarliest(this.items, REPORT_LIST_CAP);
  }

  finish(): AlertsReport {
    const eventTypes = this.eventTypes;
    const severityCounts: Record<string, number> = {};
    let total = 0;
    for (const type of ALERT_EVENT_TYPES) {
      const count = eventTypes.get(type) ?? 0;
      if (count > 0) severityCounts[type] = count;
      total += count;
    }
    this.items.sort(byTime);
    const items = this.items.slice(0, REPORT_LIST_CAP);
    return { total_count: total, severity_counts: severityCounts, items, truncated: total > items.length };
  }
}

/**
 * The latest device-used minus reserved gap and the largest in size (NaN: none). A loop of its own,
 * in doubles throughout: inside `rankSummary`, with null for "none", V8 compiled that function four
 * times in a cold analysis.
 */
function hiddenGaps(used: Float64Array, reserved: Float64Array, n: number): { latest: number; peak: number } {
  let latest = Number.NaN;
  let peak = Number.NaN;
  for (let i = 0; i < n; i++) {
    const gap = used[i]! - reserved[i]!;
    if (Number.isNaN(gap)) continue;
    latest = gap;
    if (Number.isNaN(peak) || Math.abs(gap) > Math.abs(peak)) peak = gap;
  }
  return { latest, peak };
}

function rankSummary(series: RankSeries, degradedNs: bigint): RankSummary {
  const n = series.count;
  const delta = (values: Float64Array): number | null => {
    const ends = firstLast(values, n);
    return ends === null ? null : ends[1] - ends[0];
  };
  const gaps = hiddenGaps(series.used, series.reserved, n);
  const latestGap = Number.isNaN(gaps.latest) ? null : gaps.latest;
  const peakGap = Number.isNaN(gaps.peak) ? null : gaps.peak;
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
    degraded_time_ns: degradedNs,
  };
}

/** The summary section. */
export class SummaryAccumulator implements RankAnalysis<ReportSummary> {
  private first: bigint | null = null;
  private last: bigint | null = null;
  private samples = 0;
  private readonly peaks: (CounterPeakReport | null)[] = [null, null, null];
  private readonly ranks = new Set<number>();
  private readonly perRank: RankSummary[] = [];

  /**
   * Counts come from the plan (`eventTypes`, `eventCount`), collector health from its own section,
   * the sink's counters from the input.
   */
  constructor(
    private readonly eventTypes: ReadonlyMap<string, number>,
    private readonly eventCount: number,
    private readonly health: RankAnalysis<HealthCounts>,
    private readonly sink: SinkCounters,
  ) {}

  addRank(data: RankData): void {
    for (const series of data.series) this.add(series);
  }

  private add(series: RankSeries): void {
    this.ranks.add(series.rank);
    this.samples += series.count;
    if (series.minTs !== null && (this.first === null || series.minTs < this.first))
      this.first = series.minTs;
    if (series.maxTs !== null && (this.last === null || series.maxTs > this.last)) this.last = series.maxTs;
    series.peaks.forEach((peak, i) => {
      const current = this.peaks[i] ?? null;
      if (peak === null) return;
      // Highest value; ties go to the earliest.
      if (
        current === null ||
        peak.value > current.value ||
        (peak.value === current.value && peak.timestampNs < current.timestamp_ns)
      ) {
        this.peaks[i] = {
          value: peak.value,
          timestamp_ns: peak.timestampNs,
          rank: series.rank,
          device_id: peak.deviceId,
          session_id: series.sessionId,
          collector: peak.collector,
        };
      }
    });
    this.perRank.push(rankSummary(series, rankHealth(series).degradedNs));
  }

  finish(): ReportSummary {
    const { eventTypes, eventCount, sink } = this;
    const health = this.health.finish();
    const eventTypeCounts: Record<string, number> = {};
    for (const type of [...eventTypes.keys()].sort()) eventTypeCounts[type] = eventTypes.get(type)!;
    const alertsByType: Record<string, number> = {};
    for (const type of ALERT_EVENT_TYPES) {
      const count = eventTypes.get(type) ?? 0;
      if (count > 0) alertsByType[type] = count;
    }
    const duration = this.first !== null && this.last !== null ? this.last - this.first : null;
    return {
      event_count: eventCount,
      sample_count: this.samples,
      first_timestamp_ns: this.first,
      last_timestamp_ns: this.last,
      duration_ns: duration,
      duration_s: duration === null ? null : Number(duration) / 1e9,
      ranks: [...this.ranks].sort((a, b) => a - b),
      event_type_counts: eventTypeCounts,
      peaks: {
        allocator_allocated_bytes: this.peaks[0] ?? null,
        allocator_reserved_bytes: this.peaks[1] ?? null,
        device_used_bytes: this.peaks[2] ?? null,
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
      per_rank: this.perRank.sort((a, b) => a.rank - b.rank || (a.session_id < b.session_id ? -1 : 1)),
    };
  }
}
