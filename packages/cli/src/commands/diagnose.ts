import { resolve } from "node:path";
import {
  type AnomalyIndicator,
  type DistributedDiagnostics,
  diagnosticsFoundRisk,
  renderTelemetryDiagnosis,
  type SessionSelection,
} from "@stormlog/analysis";
import { type JsonObject, stringifyJson } from "@stormlog/core";
import type { SessionInfo } from "@stormlog/sink";
import {
  type CommandHelp,
  choice,
  formatCommandHelp,
  INDEX_OPTIONS,
  indexFlags,
  parseCommandArgs,
  requirePath,
  stringFlag,
} from "../args.js";
import { bytes, isoNs, offsetNs, renderTable, shown, signedBytes } from "../format.js";
import { type CliIo, createProgress, writeOutput } from "../io.js";
import { VERSION } from "../version.js";
import {
  exportDiagnosis,
  WANDB_BUNDLE_OPTION,
  WANDB_OPTIONS,
  WANDB_USAGE,
  wandbRequested,
  wandbSettings,
} from "../wandb.js";
import type { Command } from "./command.js";

/** Exit code of `diagnose` when a memory risk is found. */
export const EXIT_MEMORY_RISK = 2;

const help: CommandHelp = {
  name: "diagnose",
  summary: "Per-rank diagnostics table: gaps, first anomalies, earliest and most severe rank.",
  usage:
    "stormlog diagnose <path> [--format txt|json] [--session-id ID] [--ranks 0,2,4-7] [--output FILE] [--no-index] [--cache-dir DIR] [--wandb-bundle DIR] " +
    WANDB_USAGE,
  description:
    "The Python reference TUI's Diagnostics tab in the terminal: per rank its availability, samples,\n" +
    "allocated and reserved change, hidden gap (device used - allocator reserved; latest and peak) and\n" +
    "first anomaly (time, signal, phase), then which rank was earliest and which most severe.\n" +
    "Changes and gaps are read from the samples and from phase records whose counters were read at the\n" +
    "boundary (phase_counters: boundary_read; a BOUNDARY READS column counts them when there are any).\n" +
    "Anomalies: alert events, readings whose gap reaches 5% of the device, hidden-memory findings, and\n" +
    "phases that analyze judges leaking (leak:<phase path>). Like analyze, it builds or reuses the\n" +
    "index beside the sink (or in --cache-dir), and lists what the reading left out as warnings.\n" +
    "Exit code: 0 when nothing was found, 2 when a memory risk was found (a warning or critical\n" +
    "anomaly), 1 on error.",
  options: {
    format: { type: "string", value: "txt|json", description: "Output format.", default: "txt" },
    "session-id": { type: "string", value: "ID", description: "Diagnose this session or rank group." },
    ranks: {
      type: "string",
      value: "LIST",
      description: "Only these ranks: 'all', '0,2', '4-7'.",
      default: "all",
    },
    output: { type: "string", short: "o", value: "FILE", description: "Write to FILE instead of stdout." },
    ...INDEX_OPTIONS,
    ...WANDB_OPTIONS,
    ...WANDB_BUNDLE_OPTION,
  },
  examples: [
    "stormlog diagnose ./job-sinks",
    "stormlog diagnose ./job-sinks --ranks 0-7 --format json > diagnostics.json",
    'stormlog diagnose ./stormlog-sink || echo "exit $? (2 = memory risk)"',
  ],
};

function sessionLine(selection: SessionSelection): string {
  const summary = selection.summary;
  if (summary === null) return "Session: none";
  const kind =
    selection.rankGroup !== null
      ? `rank group of ${selection.memberSessionIds.length} sessions, job ${shown(summary.job_id)}`
      : `job ${shown(summary.job_id)}, rank ${summary.rank}`;
  return `Session: ${shown(summary.session_id)} (${kind}, ${shown(summary.status)})`;
}

function indicatorLine(label: string, indicator: AnomalyIndicator, origin: bigint): string {
  return (
    `${label} rank ${indicator.rank} at ${offsetNs(origin, indicator.timestamp_ns)} ` +
    `(${isoNs(indicator.timestamp_ns)}), ${indicator.severity}, ${shown(indicator.signal)}: ${shown(indicator.details)}`
  );
}

/** A byte count for the table: the `bigint` of an exact result past 2^53 as its nearest double (`--format json` keeps it exact). */
function approximate(value: number | bigint | null): number | null {
  return value === null ? null : Number(value);
}

function formatText(
  selection: SessionSelection,
  diagnostics: DistributedDiagnostics,
  origin: bigint | null,
  risk: boolean,
): string {
  const lines = [sessionLine(selection)];
  if (origin !== null) lines.push(`Time origin: ${isoNs(origin)} (first event; offsets below are from it)`);
  lines.push(
    `Ranks: ${diagnostics.expected_ranks.length} expected, ${diagnostics.present_ranks.length} present, ` +
      `${diagnostics.missing_ranks.length} missing${
        diagnostics.missing_ranks.length > 0 ? ` (${diagnostics.missing_ranks.join(", ")})` : ""
      }`,
    "",
  );
  // The boundary readings' column only where there are some: the reference's table otherwise.
  const boundaryColumn = diagnostics.rows.some((row) => row.boundary_readings > 0);
  const rows = diagnostics.rows.map((row) => [
    String(row.rank),
    row.availability,
    String(row.samples),
    ...(boundaryColumn ? [String(row.boundary_readings)] : []),
    signedBytes(approximate(row.allocated_delta_bytes)),
    signedBytes(approximate(row.reserved_delta_bytes)),
    row.hidden_gap_latest_bytes === null ? "-" : signedBytes(approximate(row.hidden_gap_latest_bytes)),
    bytes(approximate(row.hidden_gap_peak_abs_bytes)),
    origin === null ? "-" : offsetNs(origin, row.first_anomaly_timestamp_ns),
    row.first_anomaly_signal ?? "-",
    row.first_anomaly_phase_path ?? "-",
  ]);
  if (rows.length > 0) {
    lines.push(
      renderTable(
        [
          "RANK",
          "STATUS",
          "SAMPLES",
          ...(boundaryColumn ? ["BOUNDARY READS"] : []),
          "ALLOCATED Δ",
          "RESERVED Δ",
          "GAP LATEST",
          "GAP PEAK",
          "FIRST ANOMALY",
          "SIGNAL",
          "PHASE",
        ],
        rows,
        new Set(boundaryColumn ? [0, 2, 3, 4, 5, 6, 7, 8] : [0, 2, 3, 4, 5, 6, 7]),
      ),
      "",
    );
  }
  const [earliest, mostSevere] = diagnostics.indicators;
  if (earliest !== undefined && mostSevere !== undefined && origin !== null) {
    lines.push(
      indicatorLine("Earliest:   ", earliest, origin),
      indicatorLine("Most severe:", mostSevere, origin),
    );
  } else {
    lines.push("No anomaly found: no alert, no hidden-memory gap breach, no gap finding, no leaking phase.");
  }
  for (const warning of diagnostics.warnings) lines.push(`Warning: ${shown(warning)}`);
  lines.push(
    risk
      ? `Status: MEMORY_RISK (exit code ${EXIT_MEMORY_RISK}); ${diagnostics.anomalies.length} anomalies on ${
          diagnostics.rows.filter((row) => row.has_anomaly).length
        } rank(s)`
      : "Status: OK (exit code 0)",
  );
  return `${lines.join("\n")}\n`;
}

function formatJson(
  selection: SessionSelection,
  sessions: readonly SessionInfo[],
  diagnostics: DistributedDiagnostics,
  risk: boolean,
): string {
  const document: JsonObject = {
    session: {
      selected_session_id: selection.summary?.session_id ?? null,
      merged_rank_group: selection.rankGroup !== null,
      merged_session_ids: selection.rankGroup !== null ? [...selection.memberSessionIds] : [],
      discovered_session_ids: sessions.map((session) => session.summary.session_id),
    },
    expected_ranks: diagnostics.expected_ranks,
    present_ranks: diagnostics.present_ranks,
    missing_ranks: diagnostics.missing_ranks,
    rows: diagnostics.rows as unknown as JsonObject[],
    indicators: diagnostics.indicators as unknown as JsonObject[],
    anomalies: diagnostics.anomalies as unknown as JsonObject[],
    warnings: diagnostics.warnings,
    risk_detected: risk,
    exit_code: risk ? EXIT_MEMORY_RISK : 0,
  };
  return `${stringifyJson(document, { indent: 2 })}\n`;
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const args = parseCommandArgs(help, argv);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  const path = resolve(io.cwd, requirePath(help, args));
  const format = choice(help, args, "format", ["txt", "json"] as const, "txt");
  const sessionId = stringFlag(args, "session-id");
  const ranks = stringFlag(args, "ranks");
  // A bad W&B flag is an error before the analysis, not after its output.
  if (wandbRequested(args)) await wandbSettings(help, args, io.cwd);
  const progress = createProgress(io, "Reading telemetry");
  let rendered: { text: string; code: number };
  progress.elapsed();
  try {
    // The indexed dataset, as `analyze` reads it: one pass, one rank in memory, and for an unchanged
    // sink the table (and exit code) stored by the previous run.
    rendered = await renderTelemetryDiagnosis(path, {
      ...(sessionId === undefined ? {} : { sessionId }),
      ...(ranks === undefined ? {} : { ranks }),
      ...indexFlags(args, io.cwd),
      renderKey: `stormlog ${VERSION} diagnose ${format}`,
      render: ({ selection, sessions, diagnostics, firstTimestampNs }) => {
        const risk = diagnosticsFoundRisk(diagnostics);
        return {
          text:
            format === "json"
              ? formatJson(selection, sessions, diagnostics, risk)
              : formatText(selection, diagnostics, firstTimestampNs, risk),
          code: risk ? EXIT_MEMORY_RISK : 0,
        };
      },
    });
  } finally {
    progress.finish();
  }
  await writeOutput(io, stringFlag(args, "output"), rendered.text);
  if (wandbRequested(args)) {
    await exportDiagnosis(io, help, args, {
      path,
      sessionId,
      text: rendered.text,
      exitCode: rendered.code,
      risk: rendered.code === EXIT_MEMORY_RISK,
    });
  }
  return rendered.code;
}

/** `stormlog diagnose`. */
export const diagnoseCommand: Command = { help, run };
