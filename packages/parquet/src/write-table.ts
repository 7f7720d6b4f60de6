/**
 * Parquet files of a table, encoded by `encoder/` and written to a temporary name renamed into
 * place, so that a reader never sees half a file. Written at once, on this thread: memory holds one
 * file's bytes. (Writing on the thread pool while the next rank is analysed gained nothing measurable
 * on the 64-rank job and held up to 60 MB more.)
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { EncoderValues } from "./encoder/columns.js";
import { encodeParquet } from "./encoder/file.js";
import { ByteSink } from "./encoder/thrift.js";
import type { ParquetTable } from "./schema.js";
import { PACKAGE_VERSION } from "./version.js";

/** Writes a dataset's files, making each partition directory once. */
export class TableWriter {
  private readonly directories = new Set<string>();
  /** The encoder's buffers, reused for every file (each is written before the next is encoded). */
  private readonly sinks = { out: new ByteSink(1 << 20), scratch: new ByteSink(1 << 18) };
  private serial = 0;

  /** Encodes `columns` (every column of `table`, `rows` long) and writes them as `path`. */
  write(path: string, table: ParquetTable, rows: number, columns: ReadonlyMap<string, EncoderValues>): void {
    const bytes = encodeParquet(
      table.columns.map((column) => {
        const values = columns.get(column.name);
        if (values === undefined) throw new Error(`internal: column ${table.name}.${column.name} missing`);
        return { name: column.name, type: column.type, nullable: column.nullable, values };
      }),
      rows,
      {
        createdBy: `stormlog ${PACKAGE_VERSION}`,
        metadata: { "stormlog.table": table.name },
        sinks: this.sinks,
      },
    );
    const parent = dirname(path);
    this.directory(parent);
    // A dot name: engines skip it, should a crash leave it behind.
    const temporary = `${parent}/.${process.pid}-${this.serial++}.tmp`;
    writeFileSync(temporary, bytes);
    renameSync(temporary, path);
  }

  private directory(dir: string): void {
    if (this.directories.has(dir)) return;
    const parent = dirname(dir);
    if (parent !== dir) this.directory(parent);
    try {
      mkdirSync(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    this.directories.add(dir);
  }
}
