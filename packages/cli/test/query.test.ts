import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { analyzeTelemetry } from "@stormlog/analysis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectOneLineError, REPO_ROOT, runCli, tempDir } from "./helpers.js";

let dir: { path: string; remove(): void };
let job = "";
let dataset = "";

beforeAll(async () => {
  dir = tempDir("stormlog-cli-parquet-");
  job = join(dir.path, "job");
  dataset = join(dir.path, "dataset");
  execFileSync(
    process.execPath,
    [
      "--import",
      "tsx",
      join(REPO_ROOT, "bench/generate-multirank.mjs"),
      job,
      "--ranks",
      "3",
      "--samples",
      "600",
      "--quiet",
    ],
    { cwd: REPO_ROOT, stdio: "pipe" },
  );
  // Segments younger than two seconds are not trusted to stay unchanged: let them age (see the re-export).
  await new Promise((done) => setTimeout(done, 2100));
}, 60_000);

afterAll(() => dir?.remove());

describe("stormlog export --format parquet, stormlog query", () => {
  it("writes the dataset into --output and says what it wrote", async () => {
    const run = await runCli(["export", job, "--format", "parquet", "-o", dataset]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe("");
    expect(run.stderr).toMatch(
      /^stormlog export: .*dataset: 3 rank\(s\), 3 samples part\(s\), 3 phase part\(s\); \d+ file\(s\) written, 0 unchanged, 0 removed\n$/,
    );
    expect(existsSync(join(dataset, "samples/job_id=bench-job-64/rank=2"))).toBe(true);
    const again = await runCli(["export", job, "--format", "parquet", "-o", dataset]);
    expect(again.stderr).toMatch(/ \d+ unchanged, 0 removed/);
    expect(again.stderr).not.toMatch(/ 0 unchanged/);
  });

  it("needs --output for parquet", async () => {
    expectOneLineError(
      await runCli(["export", job, "--format", "parquet"]),
      /--format parquet writes a directory: name it with --output DIR/,
    );
  });

  it("answers SQL with the report's figures, as text, CSV or JSON", async () => {
    const report = await analyzeTelemetry(job);
    const sql = "SELECT rank, max(device_used_bytes) AS peak FROM samples GROUP BY rank ORDER BY rank";
    const json = await runCli(["query", sql, dataset, "--format", "json"]);
    expect(json.code).toBe(0);
    const parsed = JSON.parse(json.stdout) as {
      columns: string[];
      types: string[];
      rows: { rank: number; peak: number }[];
    };
    expect(parsed.columns).toEqual(["rank", "peak"]);
    expect(parsed.types).toEqual(["INTEGER", "BIGINT"]);
    expect(parsed.rows).toEqual(
      report.summary.per_rank.map((r) => ({ rank: r.rank, peak: r.peak_device_used_bytes })),
    );
    const text = await runCli(["query", sql, dataset]);
    expect(text.stdout.split("\n")[0]).toMatch(/^rank\s+peak$/);
    expect(text.stdout).toContain("(3 rows)");
    const csv = await runCli(["query", "SELECT 'a,b' AS x, NULL AS y, 2 AS z", dataset, "--format", "csv"]);
    expect(csv.stdout).toBe('x,y,z\n"a,b",,2\n');
    // DECIMAL values come as text: a negative one stays a number, a formula-like text does not.
    const decimal = await runCli([
      "query",
      "SELECT (-1.5)::DECIMAL(10,2) AS d, '-1+2' AS f",
      dataset,
      "--format",
      "csv",
    ]);
    expect(decimal.stdout).toBe('d,f\n-1.50,"\'-1+2"\n');
    // Text a spreadsheet would run is neutralized as the CSV export does; numbers stay numbers.
    const hostile = await runCli([
      "query",
      `SELECT '=HYPERLINK("http://evil","x")' AS a, '@SUM(A1)' AS b, '+1' AS c, -3 AS d`,
      dataset,
      "--format",
      "csv",
    ]);
    expect(hostile.stdout).toBe(`a,b,c,d\n"'=HYPERLINK(""http://evil"",""x"")","'@SUM(A1)","'+1",-3\n`);
  });

  it("exports a telemetry path to a temporary dataset first", async () => {
    const run = await runCli(["query", "SELECT count(*) AS n FROM sessions", job, "--format", "csv"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe("n\n3\n");
  });

  it("says in one line what is wrong with a query or a path", async () => {
    expectOneLineError(
      await runCli(["query", "SELEC 1", dataset]),
      /^stormlog query: DuckDB rejected the query: Parser Error/,
    );
    expectOneLineError(await runCli(["query", "SELECT 1"]), /^stormlog query: missing <path>/);
    expectOneLineError(
      await runCli(["query", "SELECT 1", join(dir.path, "missing")]),
      /^stormlog query: No telemetry input here/,
    );
    // Flags that choose what telemetry exports are refused on a dataset rather than silently ignored.
    expectOneLineError(
      await runCli(["query", "SELECT 1", dataset, "--session-id", "abc"]),
      /^stormlog query: --session-id applies to telemetry, but .* is a Parquet dataset/,
    );
  });
});
