import { readFileSync } from "node:fs";
import { type JsonObject, parseJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { goldenCopy } from "../../sink/test/support/telemetry-fixtures.js";
import { runCli } from "./helpers.js";

const ONE_SESSION = goldenCopy("cross-rank/case-11-0010/input.jsonl");
const PER_RANK = goldenCopy("cross-rank/case-11-0012/input.jsonl");
const CLEAN = goldenCopy("python-sink/single-completed/sink");

interface Row extends JsonObject {
  rank: number;
  availability: string;
  first_anomaly_signal: string | null;
}

describe("stormlog diagnose", () => {
  it("prints the per-rank table and exits 2 when a memory risk is found", async () => {
    const run = await runCli(["diagnose", ONE_SESSION]);
    expect(run.code).toBe(2);
    const rows = run.stdout.split("\n").filter((line) => /^\s+\d+\s+present/.test(line));
    expect(rows).toHaveLength(4);
    expect(run.stdout).toMatch(
      /^RANK\s+STATUS\s+SAMPLES\s+ALLOCATED Δ\s+RESERVED Δ\s+GAP LATEST\s+GAP PEAK\s+FIRST ANOMALY\s+SIGNAL\s+PHASE/m,
    );
    expect(run.stdout).toMatch(/^Earliest: +rank \d+ at \+\d+\.\d{3}s/m);
    expect(run.stdout).toMatch(/^Most severe: rank \d+/m);
    expect(run.stdout).toContain("Status: MEMORY_RISK (exit code 2)");
  });

  it("writes the model as JSON with exact timestamps, agreeing with the input's alerts", async () => {
    const run = await runCli(["diagnose", ONE_SESSION, "--format", "json"]);
    expect(run.code).toBe(2);
    const document = parseJson(run.stdout) as JsonObject;
    expect(document).toMatchObject({
      expected_ranks: [0, 1, 2, 3],
      missing_ranks: [],
      risk_detected: true,
      exit_code: 2,
    });
    // The earliest indicator is the first alert of the input.
    const alerts = readFileSync(ONE_SESSION, "utf8")
      .trim()
      .split("\n")
      .map((line) => parseJson(line) as JsonObject)
      .filter((event) => event.event_type === "warning")
      .sort((a, b) => ((a.timestamp_ns as bigint) < (b.timestamp_ns as bigint) ? -1 : 1));
    const [earliest] = document.indicators as JsonObject[];
    expect(earliest).toMatchObject({ kind: "earliest", signal: "alert:warning", rank: alerts[0]!.rank });
    expect(earliest!.timestamp_ns).toBe(alerts[0]!.timestamp_ns);
    const rows = document.rows as Row[];
    const alertRanks = new Set(alerts.map((alert) => alert.rank));
    for (const row of rows) expect(row.first_anomaly_signal !== null).toBe(alertRanks.has(row.rank));
  });

  it("merges the per-rank sessions of a job", async () => {
    const run = await runCli(["diagnose", PER_RANK, "--format", "json"]);
    const session = (parseJson(run.stdout) as { session: JsonObject }).session;
    expect(session.merged_rank_group).toBe(true);
    expect((session.merged_session_ids as string[]).sort()).toEqual([
      "session-11-12-rank0",
      "session-11-12-rank1",
      "session-11-12-rank2",
      "session-11-12-rank3",
    ]);
    const single = await runCli([
      "diagnose",
      PER_RANK,
      "--session-id",
      "session-11-12-rank1",
      "--format",
      "json",
    ]);
    expect((parseJson(single.stdout) as { present_ranks: number[] }).present_ranks).toEqual([1]);
  });

  it("exits 0 when nothing is found", async () => {
    const run = await runCli(["diagnose", CLEAN]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("Status: OK (exit code 0)");
  });

  it("filters ranks", async () => {
    const run = await runCli(["diagnose", ONE_SESSION, "--ranks", "1,3", "--format", "json"]);
    expect((parseJson(run.stdout) as { rows: Row[] }).rows.map((row) => row.rank)).toEqual([1, 3]);
    const bad = await runCli(["diagnose", ONE_SESSION, "--ranks", "3-1"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);
  });

  it("shows progress on stderr only when it is a terminal", async () => {
    const quiet = await runCli(["diagnose", ONE_SESSION]);
    expect(quiet.stderr).toBe("");
    const tty = await runCli(["diagnose", ONE_SESSION], { tty: true });
    expect(tty.stderr.startsWith("\r\x1b[2KReading telemetry...")).toBe(true);
    // The line is cleared at the end, so the table is not mixed with it.
    expect(tty.stderr.endsWith("\r\x1b[2K")).toBe(true);
    expect(tty.stdout).toBe(quiet.stdout);
  });
});
