import { resolve } from "node:path";
import { openSelectedEvents, streamPerfettoTrace, telemetryCsvLines } from "@stormlog/analysis";
import { encodeTelemetryRecord, type TelemetryEvent } from "@stormlog/core";
import { exportParquet } from "@stormlog/parquet";
import {
  type CommandHelp,
  choice,
  formatCommandHelp,
  INDEX_OPTIONS,
  indexFlags,
  type ParsedArgs,
  parseCommandArgs,
  requirePath,
  stringFlag,
} from "../args.js";
import { CliUsageError } from "../errors.js";
import { terminalWhole, warningLine } from "../format.js";
import {
  type CliIo,
  createProgress,
  type Output,
  openOutput,
  type Progress,
  writesToTerminal,
} from "../io.js";
import { exportRecordedSession, WANDB_OPTIONS, WANDB_USAGE } from "../wandb.js";
import type { Command } from "./command.js";

const FORMATS = ["perfetto", "csv", "jsonl", "parquet", "wandb"] as const;

const help: CommandHelp = {
  name: "export",
  summary:
    "Export a run as a Perfetto/Chrome trace, CSV (metadata kept), canonical JSONL, a Parquet dataset or a W&B offline run.",
  usage:
    "stormlog export <path> --format perfetto|csv|jsonl|parquet|wandb [--output FILE] [--session-id ID] [--no-index] [--cache-dir DIR] " +
    WANDB_USAGE,
  description:
    "perfetto: Chrome Trace Event JSON for ui.perfetto.dev: each rank is a process ('rank R @ host'),\n" +
    "phases are slices on one lane per recording thread, memory series are counter tracks, and alerts,\n" +
    "collector transitions, first-cause spikes and hidden-memory findings are instants. ts is in\n" +
    "microseconds since the first event; exact nanoseconds are in each slice's args.\n" +
    "csv: one row per record in the reference's columns; metadata is a JSON column (nothing lost).\n" +
    "jsonl: canonical sink lines (keys sorted, byte-identical to what the Python sink writes).\n" +
    "The selection is the one analyze and diagnose use: per-rank sessions of one job are merged\n" +
    "unless --session-id picks one. csv and jsonl stream in storage order; perfetto streams one\n" +
    "rank at a time (each rank's events are a block of the trace). Like analyze, export\n" +
    "builds or reuses the analysis index beside the sink (or in --cache-dir when the sink is read-only).\n" +
    "What the reading left out or distrusted (a line cut short, a segment shorter than its manifest\n" +
    "says, an unusable manifest) is said on stderr, one warning a line; the exit code stays 0.\n" +
    "parquet: a hive-partitioned Parquet dataset in the directory --output names (<table>/job_id=J/rank=R/),\n" +
    "tables samples, phase_occurrences, alerts, collector_transitions, hidden_memory_findings,\n" +
    "leak_verdicts and sessions, for DuckDB, Spark, Trino or ClickHouse (docs/parquet.md); written from\n" +
    "the analysis's own pass, one rank at a time; exporting again into it rewrites only what changed.\n" +
    "Query it with 'stormlog query'.\n" +
    "wandb: the session as a Weights & Biases offline run (wandb/offline-run-<time>-<id>/ in --wandb-dir),\n" +
    "the Python Stormlog's export: summary, timeline history, tables, charts, dashboard (docs/wandb.md).",
  options: {
    format: {
      type: "string",
      value: "perfetto|csv|jsonl|parquet|wandb",
      description: "Export format (required).",
    },
    output: { type: "string", short: "o", value: "FILE", description: "Write to FILE instead of stdout." },
    "session-id": { type: "string", value: "ID", description: "Export this session or rank group." },
    ...INDEX_OPTIONS,
    ...WANDB_OPTIONS,
  },
  examples: [
    "stormlog export ./job-sinks --format perfetto --output trace.json   # open in https://ui.perfetto.dev",
    "stormlog export ./stormlog-sink --format csv --output events.csv",
    'stormlog export ./job-sinks --format parquet -o ./dataset   # then: stormlog query "SELECT ..." ./dataset',
    "stormlog export ./stormlog-sink --format jsonl --session-id <id> > session.jsonl",
    "stormlog export ./stormlog-sink --format wandb --wandb-project my-project   # then: wandb sync wandb/offline-run-*",
  ],
};

/**
 * Writes the chunks, batched into ~64 KB writes. The output is opened at the first chunk, so that
 * an input error (missing path, unknown session) leaves no empty file behind.
 */
async function writeAll(
  open: () => Promise<Output>,
  chunks: Iterable<string> | AsyncIterable<string>,
): Promise<void> {
  let output: Output | null = null;
  let pending = "";
  for await (const chunk of chunks) {
    pending += chunk;
    if (pending.length >= 65536) {
      output ??= await open();
      await output.write(pending);
      pending = "";
    }
  }
  output ??= await open();
  if (pending.length > 0) await output.write(pending);
  await output.close();
}

async function* counted(
  events: AsyncIterable<TelemetryEvent>,
  total: number,
  progress: Progress,
): AsyncGenerator<TelemetryEvent> {
  let read = 0;
  for await (const event of events) {
    read++;
    if (read % 4096 === 0) progress.update(read, total);
    yield event;
  }
}

/** CSV lines shown on a terminal: each escaped (its `\n` kept), as query's CSV cells are. */
async function* terminalLines(lines: AsyncIterable<string>): AsyncGenerator<string> {
  for await (const line of lines) yield `${terminalWhole(line.slice(0, -1))}\n`;
}

async function* jsonlLines(events: AsyncIterable<TelemetryEvent>): AsyncGenerator<string> {
  for await (const event of events) yield `${encodeTelemetryRecord(event)}\n`;
}

/** `--format parquet`: the dataset in the directory `--output` names, and one line saying what was written. */
async function exportParquetDataset(
  io: CliIo,
  args: ParsedArgs,
  path: string,
  sessionId: string | undefined,
): Promise<number> {
  const output = stringFlag(args, "output");
  if (output === undefined)
    throw new CliUsageError(
      "--format parquet writes a directory: name it with --output DIR",
      "run 'stormlog export --help'",
    );
  const progress = createProgress(io, "Exporting");
  try {
    const result = await exportParquet(path, resolve(io.cwd, output), {
      ...(sessionId === undefined ? {} : { sessionId }),
      ...indexFlags(args, io.cwd),
      onProgress: (done, total) => progress.update(done, total, "ranks"),
    });
    progress.finish();
    const { samples, phase_occurrences: phases } = result.tables;
    io.stderr.write(
      `stormlog export: ${terminalWhole(result.outputDir)}: ${result.ranks} rank(s), ${samples.files} samples part(s), ` +
        `${phases.files} phase part(s); ${result.filesWritten} file(s) written, ${result.filesKept} unchanged, ` +
        `${result.filesRemoved} removed\n`,
    );
    return 0;
  } finally {
    progress.finish();
  }
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const args = parseCommandArgs(help, argv);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  const path = resolve(io.cwd, requirePath(help, args));
  const format = choice(help, args, "format", FORMATS);
  // wandb: a W&B offline run directory (--wandb-dir), not a stream; the session as `track --wandb` exports it.
  if (format === "wandb") return exportRecordedSession(io, help, args, path, stringFlag(args, "session-id"));
  const sessionId = stringFlag(args, "session-id");
  if (format === "parquet") return exportParquetDataset(io, args, path, sessionId);
  const output = stringFlag(args, "output");
  const open = () => openOutput(io, output);
  const progress = createProgress(io, "Exporting");
  try {
    const selectionOptions = {
      ...(sessionId === undefined ? {} : { sessionId }),
      ...indexFlags(args, io.cwd),
      onWarning: (message: string) => io.stderr.write(warningLine(help.name, message)),
    };
    if (format === "perfetto") {
      const chunks = streamPerfettoTrace(path, {
        ...selectionOptions,
        onProgress: (done, total) => progress.update(done, total, "ranks"),
      });
      await writeAll(open, chunks);
      return 0;
    }
    const selected = await openSelectedEvents(path, selectionOptions);
    const events = counted(selected.events(), selected.eventCount, progress);
    const lines = format === "csv" ? telemetryCsvLines(events) : jsonlLines(events);
    // JSONL lines are ASCII with escapes already; CSV cells hold the input's text as it is.
    await writeAll(open, format === "csv" && writesToTerminal(io, output) ? terminalLines(lines) : lines);
    return 0;
  } finally {
    progress.finish();
  }
}

/** `stormlog export`. */
export const exportCommand: Command = { help, run };
