import { StormlogError } from "@stormlog/core";

const DUCKDB_MARKER = Symbol.for("stormlog.error.duckdb_unavailable");

/**
 * `@duckdb/node-api`, which runs SQL over the dataset, is not installed (it is an optional peer
 * dependency: the export itself does not need it). The message says how to install it.
 */
export class DuckDBUnavailableError extends StormlogError {
  readonly [DUCKDB_MARKER] = true;
  override readonly name = "DuckDBUnavailableError";

  constructor(options: { cause?: unknown } = {}) {
    super(
      "SQL over a Stormlog Parquet dataset needs DuckDB, an optional dependency that is not installed: " +
        "run `npm install @duckdb/node-api` (or `pnpm add @duckdb/node-api`) where @stormlog/parquet or " +
        "@stormlog/cli is installed. Any other engine reads the files too: see docs/parquet.md",
      options,
    );
  }

  static override isInstance(error: unknown): error is DuckDBUnavailableError {
    return StormlogError.hasMarker(error, DUCKDB_MARKER);
  }
}

const DATASET_MARKER = Symbol.for("stormlog.error.parquet_dataset");

/**
 * A path given as a Stormlog Parquet dataset is not one (no `_stormlog_dataset.json`), or an export
 * was asked to write into a directory that holds something else.
 */
export class ParquetDatasetError extends StormlogError {
  readonly [DATASET_MARKER] = true;
  override readonly name = "ParquetDatasetError";
  readonly path: string;

  constructor(message: string, path: string) {
    super(message);
    this.path = path;
  }

  static override isInstance(error: unknown): error is ParquetDatasetError {
    return StormlogError.hasMarker(error, DATASET_MARKER);
  }
}

const QUERY_MARKER = Symbol.for("stormlog.error.parquet_query");

/** DuckDB rejected a query (a syntax error, an unknown table or column): its message, and the tables there are. */
export class ParquetQueryError extends StormlogError {
  readonly [QUERY_MARKER] = true;
  override readonly name = "ParquetQueryError";

  constructor(message: string, options: { cause?: unknown } = {}) {
    super(
      `DuckDB rejected the query: ${message} (the tables are samples, phase_occurrences, alerts, ` +
        "collector_transitions, hidden_memory_findings, leak_verdicts and sessions; docs/parquet.md lists their columns)",
      options,
    );
  }

  static override isInstance(error: unknown): error is ParquetQueryError {
    return StormlogError.hasMarker(error, QUERY_MARKER);
  }
}
