import { cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { expectOneLineError, FIXTURES, runCli, tempDir } from "./helpers.js";

const FIXTURE_SINK = join(FIXTURES, "python-sink/single-completed/sink");
const FIXTURE_PER_RANK = join(FIXTURES, "cross-rank/case-11-0012/input.jsonl");

/** The JSON the page embeds. */
function embedded(html: string): {
  title: string;
  timeline: { ranks: { rank: number }[] };
  tables: { id: string }[];
} {
  const match = /<script type="application\/json" id="stormlog-data">([\s\S]*?)<\/script>/.exec(html);
  expect(match).not.toBeNull();
  return JSON.parse(match![1]!);
}

let dir: ReturnType<typeof tempDir>;
// Copies of the fixtures: the analysis index a report builds goes beside its input, not into the repository.
let SINK = "";
let PER_RANK = "";
beforeEach(() => {
  dir = tempDir("stormlog-report-cli-");
  SINK = join(dir.path, "fixture-sink");
  cpSync(FIXTURE_SINK, SINK, { recursive: true });
  PER_RANK = join(dir.path, "fixture-rank-job", "input.jsonl");
  cpSync(FIXTURE_PER_RANK, PER_RANK);
});
afterEach(() => dir.remove());

describe("stormlog report", () => {
  it("writes one self-contained page and prints its path", async () => {
    const out = join(dir.path, "run.html");
    const run = await runCli(["report", SINK, "-o", out, "--title", "single run"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${out}\n`);
    expect(run.stderr).toMatch(/^Wrote .*run\.html \(\d+\.\d\d MB, 1 rank\)\n$/);
    const html = readFileSync(out, "utf8");
    expect(html.startsWith("<!DOCTYPE html>")).toBe(true);
    expect(html).not.toMatch(/\b(?:src|href)\s*=/i);
    const data = embedded(html);
    expect(data.title).toBe("single run");
    expect(data.tables.map((table) => table.id)).toEqual([
      "phases",
      "leaks",
      "gaps",
      "suspects",
      "alerts",
      "health",
    ]);
  });

  it("merges a job's ranks, or reports the session --session-id picks", async () => {
    const job = join(dir.path, "job.html");
    expect((await runCli(["report", PER_RANK, "-o", job])).code).toBe(0);
    expect(embedded(readFileSync(job, "utf8")).timeline.ranks.length).toBeGreaterThan(1);
    const one = join(dir.path, "one.html");
    const run = await runCli(["report", PER_RANK, "-o", one, "--session-id", "session-11-12-rank2"]);
    expect(run.code).toBe(0);
    expect(embedded(readFileSync(one, "utf8")).timeline.ranks.map((rank) => rank.rank)).toEqual([2]);
  });

  it("writes stormlog-report.html in the working directory by default", async () => {
    const run = await runCli(["report", SINK], { cwd: dir.path });
    expect(run.code).toBe(0);
    expect(existsSync(join(dir.path, "stormlog-report.html"))).toBe(true);
  });

  it("says in one line what is wrong with the input or a flag", async () => {
    expectOneLineError(await runCli(["report", join(dir.path, "missing")]), /no telemetry input here/i);
    expectOneLineError(await runCli(["report", SINK, "--columns", "10"]), /--columns/);
    expectOneLineError(
      await runCli(["report", SINK, "--columns", "50000", "-o", join(dir.path, "x.html")]),
      /^stormlog report: invalid --columns '50000': expected a number <= 20000/,
    );
    expectOneLineError(await runCli(["report"]), /path/i);
  });
});

describe("stormlog track --report", () => {
  it("writes the session's page when tracking stops", async () => {
    writeFileSync(
      join(dir.path, "allocate.cjs"),
      "const keep = []; let n = 0; const t = setInterval(() => { keep.push(Buffer.alloc(4 << 20, 1)); if (++n === 8) { clearInterval(t); } }, 15);\n",
    );
    const sink = join(dir.path, "sink");
    const page = join(dir.path, "tracked.html");
    const run = await runCli(
      [
        "track",
        "--interval",
        "0.02",
        "--no-gpu",
        "--telemetry-sink-dir",
        sink,
        "--report",
        page,
        "--",
        process.execPath,
        "allocate.cjs",
      ],
      { cwd: dir.path, env: { PATH: process.env.PATH } },
    );
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/Report: .*tracked\.html \(\d+\.\d\d MB\)/);
    const data = embedded(readFileSync(page, "utf8"));
    expect(data.timeline.ranks).toHaveLength(1);
  });
});
