import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { CliUsageError } from "./errors.js";

/** One flag of a command. */
export interface OptionSpec {
  readonly type: "string" | "boolean";
  readonly short?: string;
  /** Shown in `--help`. */
  readonly description: string;
  /** Placeholder of the value in `--help`, e.g. `FILE`. */
  readonly value?: string;
  /** Shown in `--help` (the default is applied by the command). */
  readonly default?: string;
}

/** What `--help` prints for a command. */
export interface CommandHelp {
  readonly name: string;
  /** One line for `stormlog --help`. */
  readonly summary: string;
  /** e.g. `stormlog analyze <path> [options]`. */
  readonly usage: string;
  /** Paragraphs after the usage line. */
  readonly description: string;
  readonly options: Readonly<Record<string, OptionSpec>>;
  readonly examples: readonly string[];
}

/** Parsed flags: strings, booleans, and the positional arguments. */
export interface ParsedArgs {
  readonly values: Readonly<Record<string, string | boolean | undefined>>;
  readonly positionals: readonly string[];
}

const HELP_OPTION: OptionSpec = { type: "boolean", short: "h", description: "Show this help." };

/** The analysis index's flags, for the commands that read through it (analyze, diagnose, export). */
export const INDEX_OPTIONS: Readonly<Record<"no-index" | "cache-dir", OptionSpec>> = {
  "no-index": { type: "boolean", description: "Neither read nor write the index: scan every segment." },
  "cache-dir": {
    type: "string",
    value: "DIR",
    description: "Where to keep the index when the sink is read-only.",
  },
};

/** `--no-index` and `--cache-dir` (relative to `cwd`) as the analysis options `index` and `cacheDir`. */
export function indexFlags(args: ParsedArgs, cwd: string): { index: boolean; cacheDir?: string } {
  const cacheDir = stringFlag(args, "cache-dir");
  return {
    index: args.values["no-index"] !== true,
    ...(cacheDir === undefined ? {} : { cacheDir: resolve(cwd, cacheDir) }),
  };
}

function helpHint(command: string): string {
  return `run 'stormlog ${command} --help'`;
}

/** What node's `parseArgs` is given for a command: its options and `--help` (also what `--help` lists). */
export function parserOptions(
  help: CommandHelp,
): Readonly<Record<string, { readonly type: "string" | "boolean"; readonly short?: string }>> {
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {};
  for (const [name, spec] of Object.entries({ ...help.options, help: HELP_OPTION })) {
    options[name] = spec.short === undefined ? { type: spec.type } : { type: spec.type, short: spec.short };
  }
  return options;
}

/** Placeholders of the flags whose value is a path (an empty one would mean the current directory). */
const PATH_VALUES: ReadonlySet<string> = new Set(["FILE", "DIR"]);

/**
 * An empty argument where a path (or the SQL) goes is a usage error: `resolve(cwd, "")` is the
 * current directory, which would be read or written without the user having named it.
 */
export function rejectEmpty(help: CommandHelp, value: string, what: string, todo: string): void {
  if (value === "") throw new CliUsageError(`empty ${what}: ${todo}`, helpHint(help.name));
}

/**
 * Parses a command's arguments strictly (unknown flags and missing values are usage errors that
 * name the flag; an empty path flag too). `--help` is always accepted.
 */
export function parseCommandArgs(help: CommandHelp, argv: readonly string[]): ParsedArgs {
  let parsed: ParsedArgs;
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: parserOptions(help),
      allowPositionals: true,
      strict: true,
    });
    parsed = { values: values as Record<string, string | boolean | undefined>, positionals };
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS")) {
      // Node's messages are multi-line; keep the first sentence.
      const message = (error as Error).message.split("\n")[0]!.replace(/\s*To specify .*$/, "");
      throw new CliUsageError(message, helpHint(help.name));
    }
    throw error;
  }
  for (const [name, spec] of Object.entries(help.options))
    if (parsed.values[name] === "" && spec.value !== undefined && PATH_VALUES.has(spec.value))
      rejectEmpty(help, "", `--${name}`, `give a ${spec.value === "FILE" ? "file" : "directory"} name`);
  return parsed;
}

const TELEMETRY_PATHS = "a sink directory, a .jsonl or .json file, an OOM dump folder";

/** The one positional a command needs (a path), or a usage error. */
export function requirePath(help: CommandHelp, args: ParsedArgs, what = "<path>"): string {
  const [path, ...rest] = args.positionals;
  if (path === undefined) {
    throw new CliUsageError(
      `missing ${what}: the telemetry to read (${TELEMETRY_PATHS})`,
      helpHint(help.name),
    );
  }
  rejectEmpty(
    help,
    path,
    what,
    `give the telemetry to read (${TELEMETRY_PATHS}); '.' for the current directory`,
  );
  if (rest.length > 0) {
    throw new CliUsageError(
      `unexpected argument '${rest[0]}' (only one ${what} is read)`,
      helpHint(help.name),
    );
  }
  return path;
}

/** A string flag restricted to `choices` (default `fallback`). */
export function choice<T extends string>(
  help: CommandHelp,
  args: ParsedArgs,
  name: string,
  choices: readonly T[],
  fallback?: T,
): T {
  const value = args.values[name];
  if (value === undefined) {
    if (fallback !== undefined) return fallback;
    throw new CliUsageError(`missing --${name}: pass one of ${choices.join(", ")}`, helpHint(help.name));
  }
  if (typeof value !== "string" || !(choices as readonly string[]).includes(value)) {
    throw new CliUsageError(
      `invalid --${name} '${String(value)}': use one of ${choices.join(", ")}`,
      helpHint(help.name),
    );
  }
  return value as T;
}

/** A string flag, or undefined. */
export function stringFlag(args: ParsedArgs, name: string): string | undefined {
  const value = args.values[name];
  return typeof value === "string" ? value : undefined;
}

/** A numeric flag checked against bounds (and integrality), or undefined when absent. */
export function numberFlag(
  help: CommandHelp,
  args: ParsedArgs,
  name: string,
  bounds: { min?: number; max?: number; exclusiveMin?: number; integer?: boolean } = {},
): number | undefined {
  const raw = stringFlag(args, name);
  if (raw === undefined) return undefined;
  const value = raw.trim() === "" ? Number.NaN : Number(raw);
  const bad = (why: string) => new CliUsageError(`invalid --${name} '${raw}': ${why}`, helpHint(help.name));
  if (!Number.isFinite(value)) throw bad("expected a number");
  if (bounds.integer && !Number.isSafeInteger(value)) throw bad("expected an integer");
  if (bounds.min !== undefined && value < bounds.min) throw bad(`expected a number >= ${bounds.min}`);
  if (bounds.max !== undefined && value > bounds.max) throw bad(`expected a number <= ${bounds.max}`);
  if (bounds.exclusiveMin !== undefined && value <= bounds.exclusiveMin) {
    throw bad(`expected a number > ${bounds.exclusiveMin}`);
  }
  return value;
}

/** `--help` text of a command. */
export function formatCommandHelp(help: CommandHelp): string {
  const lines = [`Usage: ${help.usage}`, "", help.description, "", "Options:"];
  const entries = Object.entries({ ...help.options, help: HELP_OPTION });
  const labels = entries.map(([name, spec]) => {
    const short = spec.short ? `-${spec.short}, ` : "    ";
    return `${short}--${name}${spec.type === "string" ? ` ${spec.value ?? "VALUE"}` : ""}`;
  });
  const width = Math.max(...labels.map((label) => label.length)) + 2;
  entries.forEach(([, spec], index) => {
    const fallback = spec.default === undefined ? "" : ` (default: ${spec.default})`;
    lines.push(`  ${labels[index]!.padEnd(width)}${spec.description}${fallback}`);
  });
  lines.push("", "Examples:", ...help.examples.map((example) => `  ${example}`), "");
  return lines.join("\n");
}
