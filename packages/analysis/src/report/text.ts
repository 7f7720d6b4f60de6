/**
 * The text report: first the Python reference's `analyze` summary lines, unchanged where they
 * exist (so scripts grepping them keep working), then sessions, phases, leaks, hidden memory,
 * alerts and collector health as aligned tables for a terminal.
 */
import { CPU_TRACKER_COLLECTOR, formatBytes, HOST_DEVICE_ID } from "@stormlog/core";
import { isoTimestampNs, terminalText } from "@stormlog/core/internal";
import { type PhaseAttributionPayload, summarizePhaseResolution } from "@stormlog/phases";
import type { AnalysisReport, LeakReport, PhaseStat, RankGapFinding } from "./types.js";

/** Options of `formatReportText`. */
export interface TextOptions {
  /** ANSI colours and bold headings (default false: pass true only when writing to a terminal). */
  color?: boolean;
  /** Phases listed at most (default 40); the rest are counted. */
  maxPhases?: number;
  /** Alerts and health transitions listed at most (default 10 each). */
  maxItems?: number;
}

const ANSI = {
  bold: "\u001b[1m",
  dim: "\u001b[2m",
  red: "\u001b[31m",
  yellow: "\u001b[33m",
  green: "\u001b[32m",
  reset: "\u001b[0m",
};

/** `_phase_summary_from_payload`: `(likely) path` for a heuristic summary, else the resolution's label. */
export function phaseSummaryFromPayload(payload: PhaseAttributionPayload | null | undefined): string | null {
  if (!payload) return null;
  const summary = payload.phase_summary;
  if (summary?.phase_path)
    return summary.source === "heuristic" ? `(likely) ${summary.phase_path}` : summary.phase_path;
  return summarizePhaseResolution(
    payload.phase_resolution,
    payload.phase_path ?? null,
    payload.phase_paths ?? null,
  );
}

/** A byte count with its sign, scaled (`-12.00 KB`, `+1.50 GB` with `plus`). */
export function signedBytes(bytes: number, plus = false): string {
  if (bytes < 0) return `-${formatBytes(-bytes)}`;
  return plus && bytes > 0 ? `+${formatBytes(bytes)}` : formatBytes(bytes);
}

/** A duration in ns for people: `850 ns`, `12.3 us`, `4.56 ms`, `12.34 s`, `3 min 05 s`. */
export function formatDuration(ns: bigint | number): string {
  const value = Number(ns);
  const abs = Math.abs(value);
  if (abs < 1_000) return `${Math.round(value)} ns`;
  if (abs < 1_000_000) return `${(value / 1_000).toFixed(1)} us`;
  if (abs < 1_000_000_000) return `${(value / 1_000_000).toFixed(2)} ms`;
  if (abs < 120_000_000_000) return `${(value / 1_000_000_000).toFixed(2)} s`;
  const seconds = Math.round(abs / 1_000_000_000);
  const text =
    seconds >= 7200
      ? `${Math.floor(seconds / 3600)} h ${String(Math.floor((seconds % 3600) / 60)).padStart(2, "0")} min`
      : `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
  return value < 0 ? `-${text}` : text;
}

/**
 * `value.toLocaleString("en-US")`; integers grouped by hand, because the first `toLocaleString`
 * loads the locale data (about 10 ms of a warm `stormlog analyze`).
 */
const count = (value: number): string =>
  Number.isSafeInteger(value) && !Object.is(value, -0)
    ? `${value < 0 ? "-" : ""}${String(Math.abs(value)).replace(/\B(?=(\d{3})+$)/g, ",")}`
    : value.toLocaleString("en-US");

/** Input-derived text in a table cell (phase names, contexts, collectors): escaped, one line, cut past 100. */
const cell = (value: string): string => terminalText(value, { maxLength: 100 });
/** Input-derived text on a line of its own (ids, paths, messages quoting phase paths): escaped, one line. */
const shownText = (value: string): string => terminalText(value, { maxLength: 500 });

/** Lays out rows as columns; `align` has "l" or "r" per column. */
function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  align: string,
  indent = "  ",
): string[] {
  const widths = header.map((cell, i) => Math.max(cell.length, ...rows.map((row) => (row[i] ?? "").length)));
  const line = (cells: readonly string[]): string =>
    (
      indent +
      cells
        .map((cell, i) => {
          const last = i === cells.length - 1;
          if (align[i] === "r") return cell.padStart(widths[i]!);
          return last ? cell : cell.padEnd(widths[i]!);
        })
        .join("  ")
    ).trimEnd();
  return [line(header), ...rows.map(line)];
}

/** Offset from the start of the run: `+12.345 s`. */
function relative(ns: bigint | null, origin: bigint | null): string {
  if (ns === null) return "-";
  if (origin === null) return String(ns);
  const seconds = Number(ns - origin) / 1e9;
  return `${seconds >= 0 ? "+" : ""}${seconds.toFixed(3)} s`;
}

function rankList(ranks: readonly number[]): string {
  if (ranks.length === 0) return "none";
  // Runs as ranges: 0-63, or 0-3, 5, 7-9.
  const parts: string[] = [];
  let start = ranks[0]!;
  let previous = start;
  for (let i = 1; i <= ranks.length; i++) {
    const rank = ranks[i];
    if (rank === previous + 1) {
      previous = rank;
      continue;
    }
    parts.push(start === previous ? String(start) : `${start}-${previous}`);
    if (rank !== undefined) {
      start = rank;
      previous = rank;
    }
  }
  return parts.join(", ");
}

function referenceLines(report: AnalysisReport): string[] {
  const input = shownText(report.input.path ?? "<events>");
  // A sink is a directory: its size is the sum of its files' (as the reference's "File size" of one).
  const directory = report.input.kind === "sink" || report.input.kind === "sink-root";
  const lines = [
    `Analyzing profiling results from: ${input}`,
    "",
    "Basic Analysis:",
    directory ? `Input directory: ${input}` : `Input file: ${input}`,
    directory
      ? `Directory size: ${report.input.size_bytes} bytes (${formatBytes(report.input.size_bytes)})`
      : `File size: ${report.input.size_bytes} bytes (${formatBytes(report.input.size_bytes)})`,
  ];
  lines.push(`Gap findings: ${report.gap_analysis.length}`);
  const topGapPhase = report.gap_analysis
    .map((finding) => phaseSummaryFromPayload(finding.phase_attribution))
    .find((label) => label);
  if (topGapPhase) lines.push(`Top gap phase: ${shownText(topGapPhase)}`);
  const crossRank = report.cross_rank_analysis;
  if (crossRank !== null) {
    lines.push(
      "",
      "Distributed Analysis:",
      `Participating ranks: ${crossRank.participating_ranks.join(", ") || "none"}`,
      `Missing ranks: ${crossRank.missing_ranks.join(", ") || "none"}`,
    );
    if (crossRank.cluster_onset_timestamp_ns !== null)
      lines.push(
        `Cluster onset (aligned ns): ${crossRank.cluster_onset_timestamp_ns} (${isoTimestampNs(crossRank.cluster_onset_timestamp_ns)})`,
      );
    const top = crossRank.first_cause_suspects[0];
    if (top !== undefined) {
      lines.push(
        `Top first-cause suspect: rank ${top.rank} (${top.confidence})`,
        // The reference's fields, each time also as people read it.
        `Evidence: timestamp_ns=${top.first_spike_timestamp_ns} (${isoTimestampNs(top.first_spike_timestamp_ns)}), ` +
          `aligned_timestamp_ns=${top.aligned_first_spike_timestamp_ns}, ` +
          `lead_ns=${top.lead_over_cluster_onset_ns} (${formatDuration(top.lead_over_cluster_onset_ns)}), delta=${formatBytes(top.peak_delta_bytes)}`,
      );
      const phase = phaseSummaryFromPayload(top.phase_attribution);
      if (phase) lines.push(`Suspect phase: ${shownText(phase)}`);
    } else {
      lines.push("No qualifying first-cause suspect identified.");
    }
    if (crossRank.notes.length > 0) lines.push(`Notes: ${shownText(crossRank.notes.join(" "))}`);
  }
  const session = report.session;
  if (session.selected_session_id !== null) {
    lines.push(
      `Telemetry session selected: ${shownText(session.selected_session_id)} (${shownText(String(session.status))}, ` +
        (session.started_at_ns === null
          ? "started_at_ns=null)."
          : `started ${isoTimestampNs(session.started_at_ns)}, started_at_ns=${session.started_at_ns}).`),
    );
  }
  return lines;
}

function leakLabel(leak: LeakReport, paint: (code: keyof typeof ANSI, text: string) => string): string {
  switch (leak.verdict) {
    case "leaking":
      return paint("red", "LEAKING");
    case "plateau":
      return paint("yellow", "plateau");
    case "stable":
      return paint("green", "stable");
    default:
      return paint("dim", "too few");
  }
}

function gapEvidence(finding: RankGapFinding): string {
  const evidence = finding.evidence as unknown as Record<string, number>;
  switch (finding.classification) {
    case "transient_spike":
      return `${evidence.spike_count} spike(s), max ${signedBytes(evidence.max_gap_bytes!)} (z=${evidence.max_zscore})`;
    case "persistent_drift":
      return `${signedBytes(Math.round(evidence.slope_bytes_per_sec!), true)}/s, R²=${evidence.r_squared}`;
    default:
      return `${Math.round(evidence.avg_fragmentation_ratio! * 100)}% of reserved unused`;
  }
}

function phaseRows(phases: readonly PhaseStat[], limit: number): string[][] {
  return phases.slice(0, limit).map((phase) => {
    const name = `${"  ".repeat(Math.max(0, phase.depth - 1))}${cell(phase.path[phase.path.length - 1] ?? phase.phase_path)}`;
    const net = phase.net_allocated_bytes;
    const tensors = phase.net_tensors;
    return [
      name,
      count(phase.occurrences),
      String(phase.ranks.length),
      formatDuration(phase.duration.mean_ns),
      formatDuration(phase.duration.max_ns),
      phase.peak_allocated_bytes === null ? "-" : formatBytes(phase.peak_allocated_bytes.value),
      net === null ? "-" : signedBytes(Math.round(net.median), true),
      tensors === null
        ? "-"
        : `${tensors.median > 0 ? "+" : ""}${Number.isInteger(tensors.median) ? tensors.median : tensors.median.toFixed(1)}`,
    ];
  });
}

function isCpuTrackerPeak(peak: { device_id: number; collector: string }): boolean {
  return peak.device_id === HOST_DEVICE_ID && peak.collector.split("+").includes(CPU_TRACKER_COLLECTOR);
}

/** The text report (see the module comment). */
export function formatReportText(report: AnalysisReport, options: TextOptions = {}): string {
  const color = options.color === true;
  const paint = (code: keyof typeof ANSI, text: string): string =>
    color ? `${ANSI[code]}${text}${ANSI.reset}` : text;
  const heading = (text: string): string => paint("bold", text);
  const maxItems = options.maxItems ?? 10;
  const lines = referenceLines(report);
  const { summary, session } = report;
  const origin = summary.first_timestamp_ns;

  // Session.
  lines.push("", heading("Session:"));
  const rows: [string, string][] = [];
  const selected = shownText(session.selected_session_id ?? "none");
  const status = shownText(session.status ?? "");
  if (session.merged_session_ids !== undefined) {
    rows.push([
      "Selected",
      `${selected} (${status}): ${session.merged_session_ids.length} rank sessions of job ${shownText(String(session.job_id))}, world size ${session.world_size}`,
    ]);
  } else {
    rows.push(["Selected", `${selected}${status ? ` (${status})` : ""}`]);
  }
  if (session.discovered_session_ids.length > 1)
    rows.push(["Sessions in input", count(session.discovered_session_ids.length)]);
  rows.push(["Duration", summary.duration_ns === null ? "-" : formatDuration(summary.duration_ns)]);
  rows.push([
    "Events",
    `${count(summary.event_count)} (${count(summary.sample_count)} samples) on ${summary.ranks.length} rank${summary.ranks.length === 1 ? "" : "s"}` +
      (summary.ranks.length > 1 ? ` (${rankList(summary.ranks)})` : ""),
  ]);
  // Figures the CPU tracker wrote (the reference's and ours: device -1, the process's RSS as reserved
  // and device used) are said to be so, or they read as a GPU's next to a tiny allocated one.
  const peak = (
    label: string,
    value: AnalysisReport["summary"]["peaks"]["device_used_bytes"],
    fromCpuTracker?: string,
  ): void => {
    if (value !== null)
      rows.push([
        label,
        `${formatBytes(value.value)}  rank ${value.rank}, ${relative(value.timestamp_ns, origin)}` +
          (fromCpuTracker !== undefined && isCpuTrackerPeak(value) ? `  (${fromCpuTracker})` : ""),
      ]);
  };
  peak("Peak allocated", summary.peaks.allocator_allocated_bytes);
  peak(
    "Peak reserved",
    summary.peaks.allocator_reserved_bytes,
    "the process's resident memory (RSS): a CPU run",
  );
  peak("Peak device used", summary.peaks.device_used_bytes, "the process's resident memory (RSS): a CPU run");
  const alertTypes = Object.entries(summary.alerts_by_type);
  rows.push([
    "Alerts",
    alertTypes.length === 0 ? "none" : alertTypes.map(([type, n]) => `${cell(type)} ${count(n)}`).join(", "),
  ]);
  const health = summary.collector_health;
  rows.push([
    "Collector health",
    health.transition_count === 0
      ? "no transitions"
      : `${health.degraded_count} degraded, ${health.recovered_count} recovered; ${formatDuration(health.degraded_time_ns)} degraded; last ${cell(String(health.last_status))}`,
  ]);
  const sink = summary.sink;
  if (sink.directory_count > 0) {
    rows.push([
      "Sink",
      `${count(sink.directory_count)} director${sink.directory_count === 1 ? "y" : "ies"}, ${count(sink.segment_count)} segment${sink.segment_count === 1 ? "" : "s"}, ${formatBytes(sink.retained_bytes)}` +
        (sink.missing_segment_count + sink.pruned_segment_count > 0
          ? `; pruned ${count(Math.max(sink.missing_segment_count, sink.pruned_segment_count))} segment(s)${sink.pruned_bytes > 0 ? `, ${formatBytes(sink.pruned_bytes)}` : ""}`
          : "") +
        (sink.open_segment_count > 0 ? `; ${sink.open_segment_count} open` : ""),
    ]);
  }
  const labelWidth = Math.max(...rows.map(([label]) => label.length));
  for (const [label, value] of rows) lines.push(`  ${label.padEnd(labelWidth)}  ${value}`);

  // Phases.
  if (report.phases.length > 0) {
    const limit = options.maxPhases ?? 40;
    lines.push("", heading("Phases:"));
    lines.push(
      ...table(
        ["PHASE", "OCCURRENCES", "RANKS", "MEAN", "MAX", "PEAK ALLOCATED", "NET/OCC", "TENSORS/OCC"],
        phaseRows(report.phases, limit),
        "lrrrrrrr",
      ),
    );
    if (report.phases.length > limit)
      lines.push(`  ... and ${report.phases.length - limit} more (see --format json)`);
  }

  // Leaks.
  if (report.leaks.length > 0) {
    lines.push("", heading("Leaks:"));
    const shown = report.leaks.filter((leak) => leak.verdict === "leaking" || leak.verdict === "plateau");
    for (const leak of shown)
      lines.push(`  ${leakLabel(leak, paint)}  ${leak.confidence.toFixed(2)}  ${shownText(leak.message)}`);
    const stable = report.leaks
      .filter((leak) => leak.verdict === "stable")
      .map((leak) => cell(leak.phase_path));
    const unknown = new Map<string, string[]>();
    for (const leak of report.leaks) {
      if (leak.verdict !== "insufficient_data") continue;
      const reason = leak.reason ?? "no readings";
      unknown.set(reason, [...(unknown.get(reason) ?? []), cell(leak.phase_path)]);
    }
    if (shown.length === 0) lines.push("  No phase keeps memory across its occurrences.");
    if (stable.length > 0) lines.push(`  Stable: ${stable.join(", ")}`);
    for (const [reason, paths] of unknown)
      lines.push(`  Not judged: ${paths.join(", ")} (${shownText(reason)})`);
  }

  // Hidden memory.
  lines.push("", heading("Hidden memory (device used minus allocator reserved):"));
  if (report.gap_analysis.length === 0) {
    lines.push("  No hidden-memory finding.");
  } else {
    const gapRows = report.gap_analysis
      .slice(0, 20)
      .map((finding) => [
        finding.severity === "critical" ? paint("red", finding.severity) : finding.severity,
        finding.classification,
        String(finding.rank),
        finding.confidence.toFixed(3),
        gapEvidence(finding),
        cell(phaseSummaryFromPayload(finding.phase_attribution) ?? "-"),
      ]);
    lines.push(...table(["SEVERITY", "CLASS", "RANK", "CONF", "EVIDENCE", "PHASE"], gapRows, "llrrll"));
    if (report.gap_analysis.length > 20) lines.push(`  ... and ${report.gap_analysis.length - 20} more`);
    const top = report.gap_analysis[0]!;
    lines.push(`  ${shownText(top.description)}`);
    for (const step of top.remediation.slice(0, 3)) lines.push(`  - ${shownText(step)}`);
  }

  // Alerts and health transitions.
  if (report.alerts.items.length > 0) {
    lines.push("", heading(`Alerts (${count(report.alerts.total_count)}):`));
    const alertRows = report.alerts.items
      .slice(0, maxItems)
      .map((alert) => [
        relative(alert.timestamp_ns, origin),
        String(alert.rank),
        cell(alert.event_type),
        cell(alert.phase ?? "-"),
        cell(alert.context ?? ""),
      ]);
    lines.push(...table(["TIME", "RANK", "TYPE", "PHASE", "CONTEXT"], alertRows, "rrlll"));
    if (report.alerts.total_count > maxItems)
      lines.push(`  ... and ${count(report.alerts.total_count - maxItems)} more`);
  }
  if (report.collector_health.transitions.length > 0) {
    lines.push("", heading("Collector health transitions:"));
    const healthRows = report.collector_health.transitions
      .slice(0, maxItems)
      .map((transition) => [
        relative(transition.timestamp_ns, origin),
        String(transition.rank),
        cell(transition.status),
        cell(transition.collector),
        cell(transition.error ?? ""),
      ]);
    lines.push(...table(["TIME", "RANK", "STATUS", "COLLECTOR", "ERROR"], healthRows, "rrlll"));
  }

  const notes = [...report.notes, ...report.sink.warnings];
  if (notes.length > 0) {
    lines.push("", heading("Notes:"));
    for (const note of notes) lines.push(`  - ${shownText(note)}`);
  }
  return `${lines.join("\n")}\n`;
}
