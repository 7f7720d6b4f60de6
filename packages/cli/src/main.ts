/**
 * `stormlog`'s entry: the subcommands in `--help` order, the root help, and `main`, which runs one
 * and turns every error into one line with a hint. The package's index exports `main`.
 */
import { StormlogError } from "@stormlog/core";
import { terminalText } from "@stormlog/core/internal";
import { describeFileSystemError, fileSystemErrorCode } from "@stormlog/sink/internal";
import { formatCommandHelp } from "./args.js";
import { analyzeCommand } from "./commands/analyze.js";
import type { Command } from "./commands/command.js";
import { diagnoseCommand } from "./commands/diagnose.js";
import { exportCommand } from "./commands/export.js";
import { queryCommand } from "./commands/query.js";
import { reportCommand } from "./commands/report.js";
import { sessionsCommand } from "./commands/sessions.js";
import { trackCommand } from "./commands/track.js";
import { CliUsageError } from "./errors.js";
import { type CliIo, resolveIo } from "./io.js";
import { VERSION } from "./version.js";

/** The subcommands, in `--help` order. */
export const COMMANDS: readonly Command[] = [
  analyzeCommand,
  sessionsCommand,
  diagnoseCommand,
  trackCommand,
  exportCommand,
  queryCommand,
  reportCommand,
];

function rootHelp(): string {
  const width = Math.max(...COMMANDS.map((command) => command.help.name.length)) + 2;
  return [
    "Usage: stormlog <command> [options]",
    "",
    "Where the memory of Node.js model training and serving goes: record it, then explain it.",
    "Reads and writes the Python Stormlog's telemetry sinks.",
    "",
    "Commands:",
    ...COMMANDS.map((command) => `  ${command.help.name.padEnd(width)}${command.help.summary}`),
    "",
    "Options:",
    "  -h, --help     Show this help (or 'stormlog <command> --help').",
    "  -v, --version  Print the version.",
    "",
    "Examples:",
    "  stormlog track -- node train.js",
    "  stormlog analyze ./stormlog-sink",
    "  stormlog diagnose ./job-sinks",
    "  stormlog export ./stormlog-sink --format perfetto -o trace.json",
    "  stormlog report ./job-sinks -o report.html",
    "",
  ].join("\n");
}

const JSONL_HINT = "the file is not telemetry JSONL, or a line is damaged";

/** A hint per error kind, by the error's `name`. */
const HINTS: Readonly<Record<string, string>> = {
  SessionNotFoundError: "run 'stormlog sessions <path>' to list the session ids",
  TelemetrySourceError:
    "pass a sink directory, a .jsonl segment, a .json file or an OOM dump folder written by Stormlog",
  JsonlDecodeError: JSONL_HINT,
  JsonTooDeepError: JSONL_HINT,
  TelemetryValidationError: "the record does not follow the telemetry schema (v2, v3 or v4)",
  InvalidConfigError: "check the flag's value",
  ReportOptionsError: "check the flag's value",
};

/** Messages quote input (paths, ids, names): one line, escaped by `terminalText`. */
function oneLine(text: string): string {
  return terminalText(text.replace(/\s*\n\s*/g, " ").trim(), { maxLength: 1000 });
}

/** One line for an error, with a hint; no stack trace unless STORMLOG_DEBUG is set. */
function describeError(error: unknown, command: string | undefined, debug: boolean): string {
  const prefix = command === undefined ? "stormlog" : `stormlog ${command}`;
  if (CliUsageError.isInstance(error)) {
    return `${prefix}: ${oneLine(error.message)}${error.hint ? ` (${error.hint})` : ""}\n`;
  }
  if (StormlogError.isInstance(error)) {
    const hint = HINTS[error.name];
    return `${prefix}: ${oneLine(error.message)}${hint ? ` (hint: ${hint})` : ""}\n`;
  }
  const code = fileSystemErrorCode(error);
  if (code !== undefined) {
    const errno = error as NodeJS.ErrnoException;
    const where = errno.path === undefined ? "" : ` ${oneLine(errno.path)}`;
    const { what, todo } = describeFileSystemError(code, oneLine(errno.message));
    return `${prefix}: cannot access${where}: ${what} (${code}) (hint: ${todo})\n`;
  }
  const message = error instanceof Error ? error.message : String(error);
  const stack = debug && error instanceof Error && error.stack ? `\n${error.stack}` : "";
  return `${prefix}: internal error: ${oneLine(message)} (hint: rerun with STORMLOG_DEBUG=1 for the stack trace and report it)${stack}\n`;
}

/**
 * Runs the CLI. `argv` excludes the node binary and script (`process.argv.slice(2)`). Resolves to
 * the exit code: 0 success, 1 error (one line on stderr, with a hint), 2 memory risk found
 * (`diagnose`), or the tracked command's own code (`track`). Never throws.
 */
export async function main(argv: readonly string[], io: Partial<CliIo> = {}): Promise<number> {
  const resolved = resolveIo(io);
  const [first, ...rest] = argv;
  const debug = Boolean(resolved.env.STORMLOG_DEBUG);
  if (first === undefined || first === "-h" || first === "--help" || first === "help") {
    const topic = first === "help" ? COMMANDS.find((command) => command.help.name === rest[0]) : undefined;
    resolved.stdout.write(topic ? formatCommandHelp(topic.help) : rootHelp());
    return first === undefined ? 1 : 0;
  }
  if (first === "-v" || first === "--version") {
    resolved.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const command = COMMANDS.find((candidate) => candidate.help.name === first);
  if (command === undefined) {
    const known = COMMANDS.map((candidate) => candidate.help.name).join(", ");
    resolved.stderr.write(
      `stormlog: unknown command '${oneLine(first)}' (commands: ${known}; run 'stormlog --help')\n`,
    );
    return 1;
  }
  try {
    return await command.run(rest, resolved);
  } catch (error) {
    resolved.stderr.write(describeError(error, command.help.name, debug));
    return 1;
  }
}
