/**
 * @stormlog/parquet: a Stormlog telemetry sink as a hive-partitioned Parquet dataset
 * (`<table>/job_id=…/rank=…/part-….parquet`) for DuckDB, Spark, Trino or ClickHouse, written from
 * the analysis's own pass over the data, and SQL over it with DuckDB embedded (optional).
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 */

// Export: the dataset, its layout and manifest.

export {
  DATASET_FORMAT_VERSION,
  DATASET_MANIFEST,
  exportParquet,
  NULL_PARTITION,
  type ParquetExportOptions,
  type ParquetExportResult,
  type ParquetTableCount,
  partitionValue,
} from "./export.js";

// SQL over a dataset with DuckDB embedded (`@duckdb/node-api`, an optional peer dependency).

export { type QueryResult, type QueryValue, queryParquet } from "./query.js";

// The tables and their columns (docs/parquet.md documents them).

export {
  PARQUET_TABLES,
  type ParquetColumn,
  type ParquetColumnType,
  type ParquetTable,
  type ParquetTableName,
  parquetTable,
} from "./schema.js";

// Errors.

export { DuckDBUnavailableError, ParquetDatasetError, ParquetQueryError } from "./errors.js";
