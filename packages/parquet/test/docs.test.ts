import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportParquet, PARQUET_TABLES, queryParquet } from "../src/index.js";
import { generateJob } from "./support.js";

// docs/parquet.md: every query it gives runs on DuckDB over an exported job, and every column of
// every table is documented in that table's section.
const ROOT = join(import.meta.dirname, "../../..");
const DOC = readFileSync(join(ROOT, "docs/parquet.md"), "utf8");
const QUERIES = [...DOC.matchAll(/<!-- query -->\n```sql\n([\s\S]*?)```/g)].map((match) => match[1]!);

let dir = "";
let dataset = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-parquet-docs-"));
  const job = join(dir, "job");
  generateJob(job, 4, 3200);
  dataset = join(dir, "dataset");
  await exportParquet(job, dataset);
}, 120_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("docs/parquet.md", () => {
  it("gives queries", () => {
    expect(QUERIES.length).toBeGreaterThanOrEqual(5);
  });

  it.each(QUERIES.map((sql, i) => [i + 1, sql] as const))(
    "query %i runs on DuckDB and answers",
    async (_, sql) => {
      const result = await queryParquet(dataset, sql);
      expect(result.rows.length).toBeGreaterThan(0);
    },
  );

  it.each(PARQUET_TABLES.map((table) => [table.name, table] as const))(
    "documents every column of %s",
    (name, table) => {
      const start = DOC.indexOf(`### \`${name}\``);
      expect(start).toBeGreaterThan(0);
      const next = DOC.indexOf("\n### ", start + 1);
      const section = DOC.slice(start, next < 0 ? undefined : next);
      for (const column of table.columns)
        expect(section).toContain(
          `| \`${column.name}\` | ${column.type}`.replace(/ (STRING|JSON)$/, " BYTE_ARRAY"),
        );
      for (const key of table.partitions) expect(section).toContain(`| \`${key}\` | directory |`);
    },
  );
});
