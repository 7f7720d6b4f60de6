/**
 * What the page shows, worked out in Node from the analysis report and the timelines: the summary
 * cards, the tables (phases, leak verdicts, hidden memory, cross-rank suspects, alerts, collector
 * health) as display text, and the charts' data. The page's script only lays it out: every string
 * here that came from the input is set with `textContent` there.
 */
import type {
  AnalysisReport,
  CounterPeakReport,
  LeakEvidence,
  LeakReport,
  NetChange,
} from "@stormlog/analysis";
import { formatDuration, signedBytes } from "@stormlog/analysis/internal";
import { formatBytes } from "@stormlog/core";
import { isoTimestampNs } from "@stormlog/core/internal";
import type { RankTimeline, TimelineMarker, Timelines } from "./timeline.js";

/** One summary card. */
export interface ReportCard {
  readonly label: string;
  readonly value: string;
  /** When and where (rank, time), or what the value counts. */
  readonly detail: string;
  /** What the figure means, shown under it (a CPU-only run's peaks are the process's RSS). */
  readonly note: string | null;
  readonly tone: "plain" | "good" | "warn" | "bad";
}

/** One table of the page. */
export interface ReportTable {
  readonly id: string;
  readonly title: string;
  /** One or two sentences on how to read the table. */
  readonly intro: string;
  readonly columns: readonly string[];
  /** Indexes of the right-aligned (numeric) columns. */
  readonly numeric: readonly number[];
  /** Indexes of the free-text columns (evidence, messages), which wrap; the others stay on one line. */
  readonly wide: readonly number[];
  readonly rows: string[][];
  /** What the page says when there is no row. */
  readonly empty: string;
  /** Rows left out (the report keeps the first 200 alerts and transitions). */
  readonly note: string | null;
}

/**
 * A series' values as embedded: `unit` divides every value, and `d` holds the differences of
 * value / unit from one kept row to the next (null: not read yet), exact integers that are short in
 * JSON. Values that are not all safe integers are embedded as they are (`unit` 0, `d` the values).
 */
export interface EncodedSeries {
  readonly unit: number;
  readonly d: (number | null)[];
}

/** A rank's chart: its timeline (rows and spans encoded compactly) and how the page places it. */
export interface ReportRank extends Omit<RankTimeline, "x" | "y" | "spans"> {
  /** The first kept row's time in microseconds since the origin; `dt` the differences after it. */
  readonly t0: number;
  readonly dt: number[];
  readonly y: EncodedSeries[];
  /** Phase bands, flat: start (µs, difference from the previous band's start), duration (µs), depth, path index. */
  readonly spans: number[];
  /** Seconds to subtract to align the rank with the others (the cross-rank analysis's offset). */
  readonly offsetS: number;
  /** This rank is a first-cause suspect (its place among them, 1 first), else 0. */
  readonly suspect: number;
}

/** Everything the page's script reads (embedded as JSON). */
export interface ReportPageData {
  readonly version: 1;
  readonly title: string;
  readonly subtitle: string;
  readonly generator: string;
  readonly cards: ReportCard[];
  /** What limited the analysis, and read warnings. */
  readonly notes: string[];
  /** True when every reading is the CPU tracker's (device -1): then the peaks are RSS. */
  readonly cpuOnly: boolean;
  readonly timeline: {
    /** The time origin (ns since the epoch, as text: it is exact). */
    readonly originNs: string;
    readonly originIso: string;
    readonly endS: number;
    /** The columns the series were reduced to. */
    readonly columns: number;
    /** True when the cross-rank analysis aligned the ranks (offsets other than 0). */
    readonly aligned: boolean;
    readonly phasePaths: string[];
    readonly ranks: ReportRank[];
  };
  readonly tables: ReportTable[];
}

const NS = 1_000_000_000;

function gcd(a: number, b: number): number {
  let x = Math.abs(a);
  let y = Math.abs(b);
  while (y !== 0) [x, y] = [y, x % y];
  return x;
}

/** A series as `EncodedSeries`: scaled by the values' common divisor, then differences. */
export function encodeSeries(values: readonly (number | null)[]): EncodedSeries {
  let unit = 0;
  for (const value of values) {
    if (value === null) continue;
    if (!Number.isSafeInteger(value)) return { unit: 0, d: [...values] };
    unit = gcd(unit, value);
  }
  if (unit === 0) unit = 1;
  let last = 0;
  const d = values.map((value) => {
    if (value === null) return null;
    const scaled = value / unit;
    const delta = scaled - last;
    last = scaled;
    return delta;
  });
  return { unit, d };
}

/** A rank's timeline in the page's compact form. */
function encodeRank(rank: RankTimeline): Pick<ReportRank, "t0" | "dt" | "y" | "spans"> {
  const us = rank.x.map((x) => Math.round(x * 1e6));
  const dt: number[] = [];
  for (let i = 1; i < us.length; i++) dt.push(us[i]! - us[i - 1]!);
  const spans: number[] = [];
  let last = 0;
  for (const [start, end, depth, path] of rank.spans) {
    const s = Math.round(start * 1e6);
    spans.push(s - last, Math.round(end * 1e6) - s, depth, path);
    last = s;
  }
  return { t0: us[0] ?? 0, dt, y: rank.y.map(encodeSeries), spans };
}

const count = (value: number): string => String(value).replace(/\B(?=(\d{3})+$)/g, ",");

const signed = (bytes: number): string => signedBytes(bytes, true);

function offsetText(ns: bigint | null, origin: bigint): string {
  if (ns === null) return "-";
  return `+${((Number(ns - origin) / NS) as number).toFixed(3)} s`;
}

function peakCard(
  label: string,
  peak: CounterPeakReport | null,
  origin: bigint,
  cpuNote: string,
  meaning: string,
): ReportCard {
  if (peak === null)
    return { label, value: "-", detail: "not recorded by any collector", note: meaning, tone: "plain" };
  const cpu = peak.device_id === -1;
  return {
    label,
    value: formatBytes(peak.value),
    detail: `${count(peak.value)} B, rank ${peak.rank} at ${offsetText(peak.timestamp_ns, origin)}, device ${peak.device_id} (${peak.collector})`,
    note: cpu ? cpuNote : meaning,
    tone: "plain",
  };
}

function netText(change: NetChange | null, bytes: boolean): [string, string, string] {
  if (change === null) return ["-", "-", "-"];
  const f = (v: number): string => (bytes ? signed(v) : v > 0 ? `+${v}` : String(v));
  return [f(change.mean), `${f(change.min)} .. ${f(change.max)}`, `${change.positive_count}/${change.count}`];
}

function evidenceText(evidence: LeakEvidence | null, bytes: boolean): string {
  if (evidence === null) return "";
  const f = (v: number): string => (bytes ? signed(v) : v > 0 ? `+${v}` : String(v));
  const parts = [
    `${evidence.metric}: ${evidence.method.replaceAll("_", " ")} over ${evidence.unit_occurrences}x ${evidence.unit_path}`,
    `keeps ${f(evidence.retained_per_occurrence)}/occurrence`,
    `level slope ${f(Math.round(evidence.level_slope_per_occurrence))}/occurrence, growth ${f(evidence.level_growth)}`,
    `p(rising) ${evidence.p_rising.toFixed(3)}`,
  ];
  if (evidence.share !== null) parts.push(`share ${(evidence.share * 100).toFixed(0)}%`);
  if (evidence.shortfall_sibling !== null) parts.push(`sibling shortfall: ${evidence.shortfall_sibling}`);
  return parts.join("; ");
}

/** The tfjs birth-phase evidence: survivors born in a phase, per occurrence of its unit. */
function birthText(births: LeakReport["births"]): string {
  if (births === null) return "";
  const largest = births.largest
    .slice(0, 2)
    .map(
      (group) => `${group.count}x ${group.dtype} [${group.shape.join(", ")}] (${formatBytes(group.bytes)})`,
    )
    .join(", ");
  return (
    `births in ${births.birth_phase}: ${births.tensors_per_occurrence} tensor(s), ${formatBytes(births.bytes_per_occurrence)} per ${births.unit_path}; ` +
    `${count(births.live_tensors)} alive (${formatBytes(births.live_bytes)}), the oldest for ${births.alive_for_occurrences} occurrences` +
    `${largest === "" ? "" : `; largest: ${largest}`}; p(rising) ${births.p_rising.toFixed(3)}`
  );
}

function phaseOf(payload: { phase_path?: string; phase_paths?: string[] } | null | undefined): string {
  if (payload === null || payload === undefined) return "-";
  return payload.phase_path ?? payload.phase_paths?.join(" | ") ?? "-";
}

function tables(report: AnalysisReport, origin: bigint): ReportTable[] {
  const out: ReportTable[] = [];
  out.push({
    id: "phases",
    title: "Phases",
    intro:
      "Every nested phase path over all its occurrences and ranks. Net change is allocated bytes at exit minus at entry, per occurrence; a phase that keeps growing shows a positive mean with most occurrences positive.",
    columns: [
      "phase path",
      "occurrences",
      "ranks",
      "total time",
      "mean",
      "max",
      "peak allocated",
      "peak device used",
      "net allocated (mean)",
      "net range",
      "grew",
    ],
    numeric: [1, 2, 3, 4, 5, 6, 7, 8, 10],
    wide: [0],
    rows: report.phases.map((phase) => [
      phase.phase_path,
      count(phase.occurrences),
      String(phase.ranks.length),
      formatDuration(phase.duration.total_ns),
      formatDuration(phase.duration.mean_ns),
      formatDuration(phase.duration.max_ns),
      phase.peak_allocated_bytes === null
        ? "-"
        : `${formatBytes(phase.peak_allocated_bytes.value)} (rank ${phase.peak_allocated_bytes.rank})`,
      phase.peak_device_used_bytes === null
        ? "-"
        : `${formatBytes(phase.peak_device_used_bytes.value)} (rank ${phase.peak_device_used_bytes.rank})`,
      ...netText(phase.net_allocated_bytes, true),
    ]),
    empty: "No phase was recorded: wrap the steps in tracker.phase(...) to see where memory goes.",
    note: null,
  });
  out.push({
    id: "leaks",
    title: "Leak verdicts",
    intro:
      "One verdict per phase path, pooled over ranks, with the evidence of the rank with the strongest verdict (see docs/leak-verdicts.md).",
    columns: [
      "phase path",
      "verdict",
      "confidence",
      "per occurrence",
      "leaking ranks",
      "evidence",
      "message",
    ],
    numeric: [2],
    wide: [0, 5, 6],
    rows: report.leaks.map((leak) => {
      const per: string[] = [];
      if (leak.bytes_per_occurrence !== null) per.push(signed(leak.bytes_per_occurrence));
      if (leak.tensors_per_occurrence !== null) per.push(`${leak.tensors_per_occurrence} tensors`);
      const evidence = [
        evidenceText(leak.evidence.bytes, true),
        evidenceText(leak.evidence.tensors, false),
        birthText(leak.births),
        leak.reason ?? "",
      ].filter((part) => part !== "");
      return [
        leak.phase_path,
        leak.verdict.replaceAll("_", " "),
        leak.confidence.toFixed(2),
        per.join(", ") || "-",
        leak.leaking_ranks.length === 0 ? "-" : leak.leaking_ranks.join(", "),
        `${evidence.join(" | ")}${leak.evidence.rank === null ? "" : ` (rank ${leak.evidence.rank})`}`,
        leak.message,
      ];
    }),
    empty: "No leak verdict: no phase repeated often enough to judge.",
    note: null,
  });
  out.push({
    id: "gaps",
    title: "Hidden memory",
    intro:
      "Device used minus allocator reserved: memory the allocator does not account for (workspaces, another context, fragmentation), per rank, with the phase active at the evidence sample.",
    columns: ["rank", "finding", "severity", "confidence", "at", "phase", "what it means", "what to try"],
    numeric: [0, 3],
    wide: [5, 6, 7],
    rows: report.gap_analysis.map((finding) => [
      String(finding.rank),
      finding.classification.replaceAll("_", " "),
      finding.severity,
      finding.confidence.toFixed(2),
      offsetText(finding.evidence_timestamp_ns, origin),
      phaseOf(finding.phase_attribution),
      finding.description,
      finding.remediation.slice(0, 2).join(" "),
    ]),
    empty: "No hidden-memory finding (or no collector read both device used and allocator reserved).",
    note: null,
  });
  const cross = report.cross_rank_analysis;
  out.push({
    id: "suspects",
    title: "Cross-rank first-cause suspects",
    intro:
      "Ranks whose device-used memory grew past the spike threshold at or before the cluster onset, on the aligned clock; the first with high confidence led alone by at least one sampling interval.",
    columns: [
      "rank",
      "confidence",
      "spike at (aligned)",
      "lead over onset",
      "growth",
      "window samples",
      "phase",
    ],
    numeric: [0, 3, 4, 5],
    wide: [6],
    rows: (cross?.first_cause_suspects ?? []).map((suspect) => [
      String(suspect.rank),
      suspect.confidence,
      offsetText(suspect.aligned_first_spike_timestamp_ns, origin),
      formatDuration(suspect.lead_over_cluster_onset_ns),
      signed(Number(suspect.peak_delta_bytes)),
      String(suspect.spike_window_samples),
      phaseOf(suspect.phase_attribution),
    ]),
    empty:
      cross === null
        ? "One rank: the cross-rank analysis needs two or more."
        : "No rank spiked past the threshold (64 MiB of device-used growth).",
    note: cross === null || cross.notes.length === 0 ? null : cross.notes.join(" "),
  });
  out.push({
    id: "alerts",
    title: "Alerts",
    intro: "Warning, critical and error events (OOMs among them) in time order, with the phase active then.",
    columns: ["at", "rank", "type", "context", "phase"],
    numeric: [1],
    wide: [3, 4],
    rows: report.alerts.items.map((alert) => [
      offsetText(alert.timestamp_ns, origin),
      String(alert.rank),
      alert.oom_reason === null ? alert.event_type : `${alert.event_type} (OOM: ${alert.oom_reason})`,
      alert.context ?? "",
      alert.phase ?? "-",
    ]),
    empty: "No alert.",
    note: report.alerts.truncated
      ? `The first ${report.alerts.items.length} of ${report.alerts.total_count} alerts.`
      : null,
  });
  const health = report.collector_health;
  out.push({
    id: "health",
    title: "Collector health",
    intro:
      "When a collector degraded (failed or slow readings) and recovered; a degraded collector's gaps are not memory.",
    columns: ["at", "rank", "event", "status", "collector", "error"],
    numeric: [1],
    wide: [4, 5],
    rows: health.transitions.map((transition) => [
      offsetText(transition.timestamp_ns, origin),
      String(transition.rank),
      transition.event_type,
      transition.status,
      transition.collector,
      transition.error ?? "",
    ]),
    empty: "No transition: every collector stayed healthy.",
    note:
      health.transition_count > health.transitions.length
        ? `The first ${health.transitions.length} of ${health.transition_count} transitions.`
        : null,
  });
  return out;
}

function cards(report: AnalysisReport, origin: bigint, cpuOnly: boolean): ReportCard[] {
  const { summary } = report;
  const rss = "A CPU-only run: the process's resident memory (RSS), as the CPU tracker reads it.";
  const alerts = report.alerts.total_count;
  const oom = report.alerts.items.some((item) => item.oom_reason !== null);
  const health = summary.collector_health;
  const sink = summary.sink;
  const list: ReportCard[] = [
    {
      label: "Duration",
      value: summary.duration_ns === null ? "-" : formatDuration(summary.duration_ns),
      detail:
        summary.first_timestamp_ns === null
          ? "no event"
          : `from ${isoTimestampNs(summary.first_timestamp_ns)}`,
      note: "First to last event of the selection, over all ranks.",
      tone: "plain",
    },
    {
      label: "Samples",
      value: count(summary.sample_count),
      detail: `${count(summary.event_count)} events on ${summary.ranks.length} rank${summary.ranks.length === 1 ? "" : "s"}`,
      note: "Periodic readings of every collector; phase boundaries and alerts are the other events.",
      tone: "plain",
    },
    peakCard(
      "Peak allocated",
      summary.peaks.allocator_allocated_bytes,
      origin,
      "A CPU-only run: what the framework's allocator reports (tfjs tensor bytes), or the process's RSS when no framework collector ran.",
      "Bytes the framework's allocator handed out (tfjs numBytes, onnxruntime arena in use).",
    ),
    peakCard(
      "Peak reserved",
      summary.peaks.allocator_reserved_bytes,
      origin,
      rss,
      "Bytes the allocator holds from the device, in use or cached for reuse.",
    ),
    peakCard(
      "Peak device used",
      summary.peaks.device_used_bytes,
      origin,
      rss,
      "What the device reports as used (NVML): every context and process on it.",
    ),
    {
      label: "Alerts",
      value: count(alerts),
      detail:
        alerts === 0
          ? "none"
          : Object.entries(report.alerts.severity_counts)
              .map(([type, n]) => `${type} ${n}`)
              .join(", "),
      note: oom
        ? "An out-of-memory error was recorded: see the red marker."
        : "Threshold, leak and error events.",
      tone: oom ? "bad" : alerts > 0 ? "warn" : "good",
    },
    {
      label: "Collector health",
      value: health.transition_count === 0 ? "healthy" : health.last_status,
      detail:
        health.transition_count === 0
          ? "no transitions"
          : `${health.degraded_count} degraded, ${health.recovered_count} recovered, ${formatDuration(health.degraded_time_ns)} degraded`,
      note: "Whether the collectors kept reading: a degraded collector leaves gaps that are not memory.",
      tone: health.degraded_count > 0 ? "warn" : "good",
    },
    {
      label: "Sink",
      value: `${count(sink.segment_count)} segment${sink.segment_count === 1 ? "" : "s"}`,
      detail: `${formatBytes(sink.retained_bytes)} and ${count(sink.retained_event_count)} events retained; ${sink.pruned_segment_count} pruned, ${sink.missing_segment_count} missing, ${sink.open_segment_count} open`,
      note: "What the sink directories hold: pruned or missing segments are time the report cannot show.",
      tone: sink.missing_segment_count > 0 ? "warn" : "plain",
    },
  ];
  if (cpuOnly)
    list.push({
      label: "CPU-only run",
      value: "no device",
      detail: "Every reading is the host's (device -1): no GPU collector ran.",
      note: "Reserved and device used are the process's resident memory (RSS); allocated is what the framework's allocator reports (tfjs numBytes), or RSS when no framework collector ran.",
      tone: "plain",
    });
  return list;
}

function extraMarkers(report: AnalysisReport, origin: bigint): Map<number, TimelineMarker[]> {
  const byRank = new Map<number, TimelineMarker[]>();
  const add = (rank: number, marker: TimelineMarker): void => {
    const list = byRank.get(rank) ?? [];
    list.push(marker);
    byRank.set(rank, list);
  };
  for (const suspect of report.cross_rank_analysis?.first_cause_suspects ?? [])
    add(suspect.rank, {
      t: Number(suspect.first_spike_timestamp_ns - origin) / NS,
      kind: "spike",
      label: `first-cause spike (${suspect.confidence}): ${signed(Number(suspect.peak_delta_bytes))}`,
      phase: phaseOf(suspect.phase_attribution) === "-" ? null : phaseOf(suspect.phase_attribution),
    });
  for (const finding of report.gap_analysis)
    if (finding.evidence_timestamp_ns !== null)
      add(finding.rank, {
        t: Number(finding.evidence_timestamp_ns - origin) / NS,
        kind: "gap",
        label: `hidden memory: ${finding.classification.replaceAll("_", " ")} (${finding.severity})`,
        phase: phaseOf(finding.phase_attribution) === "-" ? null : phaseOf(finding.phase_attribution),
      });
  return byRank;
}

/** Builds the page's data from a report and the timelines of the same selection. */
export function buildPageData(
  report: AnalysisReport,
  timelines: Timelines,
  options: { title?: string; columns: number; generator: string },
): ReportPageData {
  const origin = timelines.originNs;
  const cpuOnly =
    timelines.ranks.length > 0 &&
    timelines.ranks.every((rank) => rank.series.every((series) => !/^device -?\d+ /.test(series.track)));
  const cross = report.cross_rank_analysis;
  const suspects = cross?.first_cause_suspects ?? [];
  const place = new Map(suspects.map((suspect, i) => [suspect.rank, i + 1]));
  const extra = extraMarkers(report, origin);
  const offsets = cross?.alignment_offsets_ns ?? {};
  const ranks: ReportRank[] = timelines.ranks.map(({ x: _x, y: _y, spans: _spans, ...rank }) => ({
    ...rank,
    ...encodeRank({ ...rank, x: _x, y: _y, spans: _spans }),
    markers: [...rank.markers, ...(extra.get(rank.rank) ?? [])].sort((a, b) => a.t - b.t),
    offsetS: Number(offsets[String(rank.rank)] ?? 0n) / NS,
    suspect: place.get(rank.rank) ?? 0,
  }));
  // The suspects first, in their order, then every other rank.
  ranks.sort((a, b) => (a.suspect || Infinity) - (b.suspect || Infinity) || a.rank - b.rank);
  const session = report.session;
  const what =
    session.merged_session_ids !== undefined
      ? `job ${session.job_id ?? "?"}: ${session.merged_session_ids.length} ranks, world size ${session.world_size}`
      : `session ${session.selected_session_id ?? "?"}`;
  return {
    version: 1,
    title: options.title ?? `Stormlog report: ${what}`,
    subtitle: `${report.input.path ?? "events"} (${report.input.kind}, ${formatBytes(report.input.size_bytes)}), ${session.status ?? "unknown status"}`,
    generator: options.generator,
    cards: cards(report, origin, cpuOnly),
    notes: [...report.notes, ...report.sink.warnings],
    cpuOnly,
    timeline: {
      originNs: origin.toString(),
      originIso: isoTimestampNs(origin),
      // Markers (a last alert, an OOM) may come after the last reading: the charts show them too.
      endS: ranks.reduce(
        (end, rank) => rank.markers.reduce((e, marker) => Math.max(e, marker.t), end),
        timelines.endS,
      ),
      columns: options.columns,
      aligned: Object.values(offsets).some((offset) => offset !== 0n),
      phasePaths: timelines.phasePaths,
      ranks,
    },
    tables: tables(report, origin),
  };
}
