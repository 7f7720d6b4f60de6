import { existsSync, promises as fsPromises } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { csvField } from "@stormlog/analysis/internal";
import { stringifyJson } from "@stormlog/core";
import {
  DATASET_MANIFEST,
  exportParquet,
  type QueryResult,
  type QueryValue,
  queryParquet,
} from "@stormlog/parquet";
import {
  type CommandHelp,
  choice,
  formatCommandHelp,
  INDEX_OPTIONS,
  indexFlags,
  parseCommandArgs,
  rejectEmpty,
  stringFlag,
} from "../args.js";
import { CliUsageError } from "../errors.js";
import { renderTable, terminalWhole } from "../format.js";
import { type CliIo, writeOutput, writesToTerminal } from "../io.js";
import type { Command } from "./command.js";

const FORMATS = ["txt", "csv", "json"] as const;

const help: CommandHelp = {
  name: "query",
  summary: "Run SQL (DuckDB) over a Parquet dataset written by `export --format parquet`.",
  usage:
    'stormlog query "<SQL>" <path> [--format txt|csv|json] [--output FILE] [--session-id ID] [--no-index] [--cache-dir DIR]',
  description:
    "The dataset's tables are views of the same names: samples, phase_occurrences, alerts,\n" +
    "collector_transitions, hidden_memory_findings, leak_verdicts and sessions, with the partition\n" +
    "keys job_id (VARCHAR) and rank (INTEGER) as columns (docs/parquet.md lists every column and\n" +
    "the queries a user needs). Integers are exact (nanosecond timestamps, byte counts).\n" +
    "<path> is a dataset directory; given a telemetry path instead (a sink, a root of per-rank\n" +
    "sinks, a .jsonl file), it is exported to a temporary dataset first, removed afterwards.\n" +
    "DuckDB is an optional dependency: without @duckdb/node-api the command says how to install it.",
  options: {
    format: { type: "string", value: "txt|csv|json", description: "Output format.", default: "txt" },
    output: { type: "string", short: "o", value: "FILE", description: "Write to FILE instead of stdout." },
    "session-id": {
      type: "string",
      value: "ID",
      description: "With a telemetry path: export this session or rank group.",
    },
    ...INDEX_OPTIONS,
  },
  examples: [
    'stormlog query "SELECT rank, phase_path, max(peak_allocated_bytes) FROM phase_occurrences GROUP BY ALL ORDER BY 1, 2" ./dataset',
    'stormlog query "SELECT rank, min(timestamp_ns) FROM samples WHERE device_used_bytes > 8e9 GROUP BY rank ORDER BY 2 LIMIT 1" ./dataset',
    'stormlog query "SELECT * FROM leak_verdicts" ./job-sinks --format json',
  ],
};

const text = (value: QueryValue): string => (value === null ? "NULL" : String(value));

/** Numbers as they are; text quoted and neutralized as the CSV export does (no live formula). */
function csvCell(value: QueryValue): string {
  if (value === null) return "";
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean")
    return String(value);
  return csvField(value);
}

const NUMERIC =
  /^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|FLOAT|DOUBLE|DECIMAL)/;

/** `terminal`: the CSV is shown on a terminal, so its cells are escaped (a file or pipe gets them exactly). */
function render(result: QueryResult, format: (typeof FORMATS)[number], terminal: boolean): string {
  if (format === "json") {
    const rows = result.rows.map((row) =>
      Object.fromEntries(result.columns.map((name, i) => [name, row[i] ?? null])),
    );
    return `${stringifyJson({ columns: [...result.columns], types: [...result.types], rows }, { indent: 2 })}\n`;
  }
  if (format === "csv") {
    const cell = terminal ? (value: QueryValue) => terminalWhole(csvCell(value)) : csvCell;
    return `${[result.columns.map(cell), ...result.rows.map((row) => row.map(cell))]
      .map((cells) => cells.join(","))
      .join("\n")}\n`;
  }
  const right = new Set(result.types.flatMap((type, i) => (NUMERIC.test(type) ? [i] : [])));
  const rows = result.rows.length;
  return `${renderTable(
    result.columns,
    result.rows.map((row) => row.map(text)),
    right,
  )}\n(${rows} row${rows === 1 ? "" : "s"})\n`;
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const args = parseCommandArgs(help, argv);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  const [sql, path, ...rest] = args.positionals;
  if (sql === undefined || path === undefined)
    throw new CliUsageError(
      `missing ${sql === undefined ? "<SQL>" : "<path>"}: give the query, then the dataset (or telemetry) to run it on`,
      "run 'stormlog query --help'",
    );
  rejectEmpty(help, sql, "<SQL>", "give the query, quoted as one argument");
  rejectEmpty(
    help,
    path,
    "<path>",
    "give the dataset (or telemetry) to run it on; '.' for the current directory",
  );
  if (rest.length > 0)
    throw new CliUsageError(
      `unexpected argument '${rest[0]}' (quote the SQL as one argument)`,
      "run 'stormlog query --help'",
    );
  const format = choice(help, args, "format", FORMATS, "txt");
  const target = resolve(io.cwd, path);
  let dataset = target;
  let temporary: string | null = null;
  const isDataset = existsSync(join(target, DATASET_MANIFEST));
  if (isDataset) {
    // These choose what a telemetry path exports; a dataset is queried as it is.
    const given = ["session-id", "no-index", "cache-dir"].filter((name) => args.values[name] !== undefined);
    if (given.length > 0)
      throw new CliUsageError(
        `--${given[0]} applies to telemetry, but ${path} is a Parquet dataset, queried as it was exported`,
        `drop --${given[0]}, or query the telemetry itself (it is exported for the query) or filter with SQL`,
      );
  }
  try {
    if (!isDataset) {
      temporary = await fsPromises.mkdtemp(join(tmpdir(), "stormlog-query-"));
      dataset = join(temporary, "dataset");
      const sessionId = stringFlag(args, "session-id");
      await exportParquet(target, dataset, {
        ...(sessionId === undefined ? {} : { sessionId }),
        ...indexFlags(args, io.cwd),
      });
    }
    const result = await queryParquet(dataset, sql);
    const output = stringFlag(args, "output");
    await writeOutput(io, output, render(result, format, writesToTerminal(io, output)));
    return 0;
  } finally {
    if (temporary !== null) await fsPromises.rm(temporary, { recursive: true, force: true });
  }
}

/** `stormlog query`. */
export const queryCommand: Command = { help, run };
