import { resolve } from "node:path";
import {
  type CommandHelp,
  formatCommandHelp,
  INDEX_OPTIONS,
  indexFlags,
  numberFlag,
  parseCommandArgs,
  requirePath,
  stringFlag,
} from "../args.js";
import { terminalWhole, warningLine } from "../format.js";
import { type CliIo, writesToTerminal } from "../io.js";
import type { Command } from "./command.js";

const help: CommandHelp = {
  name: "report",
  summary: "Write one self-contained HTML page of a run or a multi-rank job: timelines, phases, leaks.",
  usage:
    "stormlog report <path> [--output FILE] [--session-id ID] [--title TEXT] [--columns N] [--no-index] [--cache-dir DIR]",
  description:
    "Analyzes the path as analyze does (a sink directory, a root of per-rank sink directories, a .jsonl or\n" +
    "a .json file; a job's per-rank sessions merged unless --session-id picks one) and writes one HTML\n" +
    "file with everything inlined: summary cards, memory timelines per rank (allocated, reserved, device\n" +
    "used, process RSS) with the phases under them, zoom, pan and a hover readout with the phase path and\n" +
    "exact values, markers for alerts, OOMs, collector transitions, hidden memory and the first-cause\n" +
    "spike, and the tables of phases, leak verdicts, hidden-memory findings and cross-rank suspects.\n" +
    "The page loads nothing from the network: open it from disk. Series are reduced to --columns pixel\n" +
    "columns per rank keeping each column's minimum and maximum, so every peak stays exact.\n" +
    "The path of the page is printed on stdout. Exit code: 0 when the page was written; 1 on an error.",
  options: {
    output: {
      type: "string",
      short: "o",
      value: "FILE",
      description: "Where to write the page.",
      default: "stormlog-report.html",
    },
    "session-id": { type: "string", value: "ID", description: "Report this session or rank group." },
    title: { type: "string", value: "TEXT", description: "The page's heading." },
    columns: {
      type: "string",
      value: "N",
      description: "Pixel columns each rank's series keep (50 to 20000).",
      default: "1200",
    },
    ...INDEX_OPTIONS,
  },
  examples: [
    "stormlog report ./stormlog-sink -o report.html",
    "stormlog report ./job-sinks -o job.html   # every rank, aligned, the first-cause rank first",
  ],
};

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const args = parseCommandArgs(help, argv);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  const path = resolve(io.cwd, requirePath(help, args));
  const output = resolve(io.cwd, stringFlag(args, "output") ?? "stormlog-report.html");
  const sessionId = stringFlag(args, "session-id");
  const title = stringFlag(args, "title");
  const columns = numberFlag(help, args, "columns", { min: 50, max: 20_000, integer: true });
  const { writeReport } = await import("@stormlog/report");
  const report = await writeReport(path, output, {
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(title === undefined ? {} : { title }),
    ...(columns === undefined ? {} : { columns }),
    ...indexFlags(args, io.cwd),
    onWarning: (message) => io.stderr.write(warningLine(help.name, message)),
  });
  io.stderr.write(
    `Wrote ${terminalWhole(output)} (${(report.bytes / 1048576).toFixed(2)} MB, ${report.data.timeline.ranks.length} rank${report.data.timeline.ranks.length === 1 ? "" : "s"})\n`,
  );
  // A script reading the path from a pipe gets it exactly; a terminal gets it escaped.
  io.stdout.write(`${writesToTerminal(io) ? terminalWhole(output) : output}\n`);
  return 0;
}

/** `stormlog report`. */
export const reportCommand: Command = { help, run };
