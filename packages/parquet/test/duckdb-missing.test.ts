import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportParquet } from "../src/index.js";

// Without @duckdb/node-api, queryParquet (and `stormlog query`) says how to install it: a child
// process whose module resolution cannot find the package, as on a machine where it is not installed.
const PACKAGE = join(import.meta.dirname, "..");
let dir = "";
let dataset = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-parquet-noduck-"));
  dataset = join(dir, "dataset");
  // An empty job's dataset is enough: DuckDB is loaded before any view is made.
  mkdirSync(join(dir, "empty-sink"));
  writeFileSync(join(dir, "empty-sink/segment-000001.jsonl"), "");
  await exportParquet(join(dir, "empty-sink"), dataset);
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const HOOK = `export async function resolve(specifier, context, next) {
  if (specifier === "@duckdb/node-api") {
    const error = new Error("Cannot find package '@duckdb/node-api'");
    error.code = "ERR_MODULE_NOT_FOUND";
    throw error;
  }
  return next(specifier, context);
}`;
const REGISTER = `import { register } from "node:module"; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(HOOK)}`)});`;

describe("queryParquet without DuckDB installed", () => {
  it("throws DuckDBUnavailableError, whose message says how to install it", () => {
    const script = join(dir, "query.mts");
    writeFileSync(
      script,
      `import { queryParquet } from ${JSON.stringify(pathToFileURL(join(PACKAGE, "src/index.ts")).href)};
try {
  await queryParquet(${JSON.stringify(dataset)}, "SELECT 1");
  console.log("no error");
} catch (error) {
  console.log(JSON.stringify({ name: error.name, message: error.message }));
}
`,
    );
    const output = execFileSync(
      process.execPath,
      [
        "--conditions=@stormlog/source",
        "--import",
        "tsx",
        "--import",
        `data:text/javascript,${encodeURIComponent(REGISTER)}`,
        script,
      ],
      { cwd: PACKAGE, encoding: "utf8" },
    );
    const { name, message } = JSON.parse(output.trim().split("\n").pop()!) as {
      name: string;
      message: string;
    };
    expect(name).toBe("DuckDBUnavailableError");
    expect(message).toContain("npm install @duckdb/node-api");
  });
});
