/**
 * SQL over a Stormlog Parquet dataset with DuckDB embedded (`@duckdb/node-api`, an optional peer
 * dependency, loaded on first use). Each table of the dataset is a view of the same name over its
 * files, with the hive partition keys typed (`job_id` VARCHAR, `rank` INTEGER); a table without
 * files is an empty view with its columns, so that every documented query runs on any dataset.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { readRegularFileSync } from "@stormlog/sink/internal";
import { DuckDBUnavailableError, ParquetDatasetError, ParquetQueryError } from "./errors.js";
import { DATASET_MANIFEST, isCutPartitionValue } from "./export.js";
import { PARQUET_TABLES, type ParquetColumnType, type ParquetTable } from "./schema.js";

type DuckDB = typeof import("@duckdb/node-api");

/** A value of a query's result: DuckDB's integers as `bigint` (exact), other values as JSON would hold them. */
export type QueryValue = string | number | bigint | boolean | null;

/** A query's result: its columns (names and DuckDB types) and rows. */
export interface QueryResult {
  readonly columns: readonly string[];
  /** DuckDB's type of each column (`BIGINT`, `VARCHAR`, `DOUBLE`...). */
  readonly types: readonly string[];
  readonly rows: readonly (readonly QueryValue[])[];
}

let duckdb: Promise<DuckDB> | null = null;

/** `@duckdb/node-api`, or `DuckDBUnavailableError` when it is not installed. */
export function loadDuckDB(): Promise<DuckDB> {
  duckdb ??= import("@duckdb/node-api").catch((error: unknown) => {
    duckdb = null;
    const code = (error as { code?: unknown } | null)?.code;
    if (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND")
      throw new DuckDBUnavailableError({ cause: error });
    throw error;
  });
  return duckdb;
}

const SQL_TYPES: Record<ParquetColumnType, string> = {
  INT32: "INTEGER",
  INT64: "BIGINT",
  DOUBLE: "DOUBLE",
  BOOLEAN: "BOOLEAN",
  STRING: "VARCHAR",
  JSON: "VARCHAR",
};

const quoteText = (text: string): string => `'${text.replaceAll("'", "''")}'`;

/**
 * The `CREATE VIEW` statement of `table` over the dataset at `dir` (files present or not).
 * `cutJobIds`: the whole job id of each directory value `partitionValue` had to cut.
 */
export function tableViewSql(
  dir: string,
  table: ParquetTable,
  hasFiles: boolean,
  cutJobIds: ReadonlyMap<string, string> = new Map(),
): string {
  if (!hasFiles) {
    const columns = [
      ...table.columns.map((column) => `CAST(NULL AS ${SQL_TYPES[column.type]}) AS ${column.name}`),
      "CAST(NULL AS VARCHAR) AS job_id",
      ...(table.partitions.includes("rank") ? ["CAST(NULL AS INTEGER) AS rank"] : []),
    ];
    return `CREATE OR REPLACE VIEW ${table.name} AS SELECT ${columns.join(", ")} WHERE false`;
  }
  const types = table.partitions.includes("rank")
    ? "{'job_id': VARCHAR, 'rank': INTEGER}"
    : "{'job_id': VARCHAR}";
  const glob = join(dir, table.name, "**", "*.parquet");
  const whens = [...cutJobIds].map(([cut, whole]) => ` WHEN ${quoteText(cut)} THEN ${quoteText(whole)}`);
  const columns =
    whens.length === 0 ? "*" : `* REPLACE (CASE job_id${whens.join("")} ELSE job_id END AS job_id)`;
  return (
    `CREATE OR REPLACE VIEW ${table.name} AS SELECT ${columns} FROM read_parquet(${quoteText(glob)}, ` +
    `hive_partitioning = true, hive_types = ${types}, union_by_name = true)`
  );
}

/** What a query needs of the dataset's manifest. */
interface DatasetContents {
  /** Every part's path, relative to the dataset. */
  readonly parts: readonly string[];
  /** The job id each cut directory value stands for, by the value engines read (see `partitionValue`). */
  readonly cutJobIds: ReadonlyMap<string, string>;
}

/** The dataset's parts and cut job ids (from its manifest), or `ParquetDatasetError` when `dir` holds no dataset. */
function datasetContents(dir: string): DatasetContents {
  const path = join(dir, DATASET_MANIFEST);
  if (!existsSync(path))
    throw new ParquetDatasetError(
      `${dir} is not a Stormlog Parquet dataset (no ${DATASET_MANIFEST}): write one first with ` +
        "`stormlog export <sink> --format parquet -o DIR` (or exportParquet), then query DIR",
      dir,
    );
  try {
    const manifest = JSON.parse(readRegularFileSync(path, "utf8-lenient")) as {
      jobs?: Record<string, { job_id?: unknown; parts?: Record<string, string> }>;
    };
    const jobs = Object.entries(manifest.jobs ?? {});
    const cutJobIds = new Map<string, string>();
    for (const [partition, job] of jobs)
      if (typeof job.job_id === "string" && isCutPartitionValue(job.job_id))
        // Engines decode the directory's %XX as DuckDB does; the cut never splits a character.
        cutJobIds.set(decodeURIComponent(partition), job.job_id);
    return { parts: jobs.flatMap(([, job]) => Object.keys(job.parts ?? {})), cutJobIds };
  } catch (error) {
    throw new ParquetDatasetError(
      `${path} is unreadable (${(error as Error).message}): export the dataset again`,
      dir,
    );
  }
}

function plain(value: unknown): QueryValue {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case "string":
    case "number":
    case "bigint":
    case "boolean":
      return value;
    default:
      return String(value);
  }
}

/**
 * Runs `sql` over the dataset at `dataset` (written by `exportParquet`): its tables are views named
 * `samples`, `phase_occurrences`, `alerts`, `collector_transitions`, `hidden_memory_findings`,
 * `leak_verdicts` and `sessions` (docs/parquet.md). Several statements may be given; the last one's
 * result is returned. Throws `DuckDBUnavailableError` without `@duckdb/node-api`,
 * `ParquetDatasetError` when `dataset` is not a dataset, and `ParquetQueryError` when DuckDB rejects
 * the query.
 */
export async function queryParquet(dataset: string, sql: string): Promise<QueryResult> {
  const dir = resolve(dataset);
  const { parts, cutJobIds } = datasetContents(dir);
  const { DuckDBInstance } = await loadDuckDB();
  const instance = await DuckDBInstance.create(":memory:");
  const connection = await instance.connect();
  try {
    for (const table of PARQUET_TABLES) {
      const hasFiles = parts.some((part) => part.startsWith(`${table.name}/`));
      await connection.run(tableViewSql(dir, table, hasFiles, cutJobIds));
    }
    let reader: Awaited<ReturnType<typeof connection.runAndReadAll>>;
    try {
      reader = await connection.runAndReadAll(sql);
    } catch (error) {
      throw new ParquetQueryError(error instanceof Error ? error.message : String(error), { cause: error });
    }
    return {
      columns: reader.columnNames(),
      types: reader.columnTypes().map((type) => type.toString()),
      rows: reader.getRows().map((row) => row.map(plain)),
    };
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}
