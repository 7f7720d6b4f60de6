import { resolve } from "node:path";
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
import { type CliIo, createProgress, type Progress, writeOutput, writesToTerminal } from "../io.js";
import type { Command } from "./command.js";

const help: CommandHelp = {
  name: "analyze",
  summary: "Explain a run: peaks, phases, leaks, hidden memory and the cross-rank first cause.",
  usage:
    "stormlog analyze <path> [--format txt|json] [--output FILE] [--session-id ID] [--no-index] [--cache-dir DIR]",
  description:
    "Analyzes a sink directory (or a root of per-rank sink directories, a .jsonl or .json file, an OOM\n" +
    "flight recorder's dump folder).\n" +
    "Per-rank sessions of one job are merged into one distributed view; --session-id picks one session.\n" +
    "txt prints a readable summary (the Python reference's lines where they exist); json writes the full\n" +
    "report with exact integers. The first analysis of a sink builds an index beside it (or in\n" +
    "--cache-dir when the sink is read-only), so later ones only read segments that changed.\n" +
    "What the reading left out or distrusted (a line cut short, a segment shorter than its manifest\n" +
    "says, an unusable manifest) is listed in the report's notes (json: sink.warnings).\n" +
    "Exit code: 0 when the report was written, notes or not; 1 on an error (no report).",
  options: {
    format: { type: "string", value: "txt|json", description: "Report format.", default: "txt" },
    output: {
      type: "string",
      short: "o",
      value: "FILE",
      description: "Write the report to FILE instead of stdout.",
    },
    "session-id": {
      type: "string",
      value: "ID",
      description: "Analyze this session (see 'stormlog sessions').",
    },
    ...INDEX_OPTIONS,
  },
  examples: [
    "stormlog analyze ./stormlog-sink",
    "stormlog analyze ./job-sinks --format json --output report.json",
    "stormlog analyze run.jsonl --session-id 2cfda835-2b8e-4a5e-9a84-9a8adf638072",
  ],
};

/** `analyzeTelemetry` reports `{ phase: "scan", done, total }` in bytes while it reads segments. */
function progressReporter(
  progress: Progress,
): (report: { phase: string; done: number; total: number }) => void {
  return ({ phase, done, total }) => {
    if (phase === "scan") progress.update(Math.round(done / 1048576), Math.round(total / 1048576), "MB");
  };
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
  const { renderTelemetryAnalysis } = await import("@stormlog/analysis");
  const file = stringFlag(args, "output");
  // Colours only on a terminal, and never with NO_COLOR (https://no-color.org).
  const color = writesToTerminal(io, file) && !io.env.NO_COLOR;
  const progress = createProgress(io, "Analyzing");
  let text: string;
  try {
    text = await renderTelemetryAnalysis(path, {
      format,
      color,
      ...(sessionId === undefined ? {} : { sessionId }),
      ...indexFlags(args, io.cwd),
      onProgress: progressReporter(progress),
    });
  } finally {
    progress.finish();
  }
  await writeOutput(io, file, text);
  return 0;
}

/** `stormlog analyze`. */
export const analyzeCommand: Command = { help, run };
