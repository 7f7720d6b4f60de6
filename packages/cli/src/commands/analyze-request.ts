/**
 * `stormlog analyze`'s arguments, read apart from the command: the launcher reads them to print a
 * stored rendering before it loads the analysis (`stored-answer.ts`), so this module loads nothing of it.
 */
import { resolve } from "node:path";
import {
  type CommandHelp,
  choice,
  INDEX_OPTIONS,
  indexFlags,
  parseCommandArgs,
  requirePath,
  stringFlag,
} from "../args.js";
import { type CliIo, writesToTerminal } from "../io.js";

export const analyzeHelp: CommandHelp = {
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

/** What `stormlog analyze` was asked: the input, how to render it, where to write it. */
export interface AnalyzeRequest {
  readonly path: string;
  readonly format: "txt" | "json";
  readonly color: boolean;
  readonly sessionId?: string;
  /** `--output`: a file, `-` or absent (stdout). */
  readonly file?: string;
  readonly index: boolean;
  readonly cacheDir?: string;
}

/** The request in `argv`, or "help" for `--help`; usage errors throw `CliUsageError`. */
export function readAnalyzeRequest(argv: readonly string[], io: CliIo): AnalyzeRequest | "help" {
  const args = parseCommandArgs(analyzeHelp, argv);
  if (args.values.help) return "help";
  const path = resolve(io.cwd, requirePath(analyzeHelp, args));
  const format = choice(analyzeHelp, args, "format", ["txt", "json"] as const, "txt");
  const sessionId = stringFlag(args, "session-id");
  const file = stringFlag(args, "output");
  return {
    path,
    format,
    // Colours only on a terminal, and never with NO_COLOR (https://no-color.org).
    color: writesToTerminal(io, file) && !io.env.NO_COLOR,
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(file === undefined ? {} : { file }),
    ...indexFlags(args, io.cwd),
  };
}
