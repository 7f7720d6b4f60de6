import { cpSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type JsonObject, parseJson } from "@stormlog/core";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FIXTURES, runCli, tempDir } from "./helpers.js";

const SESSION = "2cfda835-2b8e-4a5e-9a84-9a8adf638072";

/** Nested listing of a directory, to see whether a command wrote into it. */
function listing(path: string): string[] {
  return readdirSync(path, { recursive: true, encoding: "utf8" }).sort();
}

/** Integers in one representation, so that JSON parsed from two sources compares equal. */
function canonical(value: unknown): unknown {
  if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, canonical(item)]));
  }
  return value;
}

let dir: ReturnType<typeof tempDir>;
let sink: string;
beforeEach(() => {
  dir = tempDir("stormlog-analyze-");
  sink = join(dir.path, "sink");
  cpSync(join(FIXTURES, "python-sink/single-completed/sink"), sink, { recursive: true });
});
afterEach(() => dir.remove());

describe("stormlog analyze", () => {
  it("prints a readable report by default", async () => {
    const run = await runCli(["analyze", sink, "--no-index"]);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe("");
    expect(run.stdout).toContain(SESSION);
    expect(run.stdout.endsWith("\n")).toBe(true);
  });

  it("writes the JSON report with the selected session, to stdout or --output", async () => {
    const run = await runCli(["analyze", sink, "--format", "json", "--no-index"]);
    expect(run.code).toBe(0);
    const report = parseJson(run.stdout) as JsonObject;
    expect(report.session).toMatchObject({ selected_session_id: SESSION });
    expect(((report.session as JsonObject).discovered_session_ids as string[]).includes(SESSION)).toBe(true);
    const file = join(dir.path, "report.json");
    const written = await runCli(["analyze", sink, "--format", "json", "--no-index", "--output", file]);
    expect(written.stdout).toBe("");
    expect(parseJson(readFileSync(file, "utf8"))).toEqual(report);
  });

  it("writes the cross-rank analysis exactly as the reference computes it", async () => {
    const input = join(FIXTURES, "cross-rank/case-11-0010");
    const run = await runCli(["analyze", join(input, "input.jsonl"), "--format", "json", "--no-index"]);
    expect(run.code).toBe(0);
    const report = parseJson(run.stdout) as JsonObject;
    const expected = parseJson(readFileSync(join(input, "expected.json"), "utf8"));
    expect(canonical(report.cross_rank_analysis)).toEqual(canonical(expected));
  });

  it("leaves the sink untouched with --no-index", async () => {
    const before = listing(sink);
    await runCli(["analyze", sink, "--no-index"]);
    expect(listing(sink)).toEqual(before);
  });

  it("reports an unknown session in one line", async () => {
    const run = await runCli(["analyze", sink, "--session-id", "nope", "--no-index"]);
    expect(run.code).toBe(1);
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    expect(run.stderr).toMatch(/session_id not found: nope/);
  });
});
