import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type JsonObject, parseJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { goldenCopy } from "../../sink/test/support/telemetry-fixtures.js";
import { FIXTURES, runCli } from "./helpers.js";

// Copies: `sessions` keeps an index beside its input, as analyze does.
const CASE = goldenCopy("python-sink/three-sessions-pruned");
const CROSS_RANK = goldenCopy("cross-rank/case-11-0012/input.jsonl");

describe("stormlog sessions", () => {
  it("lists sessions in the reference's order, exactly (json)", async () => {
    const run = await runCli(["sessions", join(CASE, "sink"), "--format", "json"]);
    expect(run.code).toBe(0);
    const document = parseJson(run.stdout) as { sessions: JsonObject[] };
    const expected = parseJson(readFileSync(join(CASE, "expected.json"), "utf8")) as {
      sessions: JsonObject[];
    };
    const picked = document.sessions.map((session) => ({
      session_id: session.session_id,
      status: session.status,
      event_count: session.event_count,
      first_timestamp_ns: session.first_timestamp_ns,
      last_timestamp_ns: session.last_timestamp_ns,
    }));
    expect(picked).toEqual(expected.sessions);
    expect(document.sessions[0]).toMatchObject({ host: "trainer-a", world_size: 1, job_id: null });
  });

  it("prints a table with one row per session (txt)", async () => {
    const run = await runCli(["sessions", join(CASE, "sink")]);
    expect(run.code).toBe(0);
    const expected = JSON.parse(readFileSync(join(CASE, "expected.json"), "utf8")) as {
      sessions: { session_id: string }[];
    };
    const rows = run.stdout.split("\n").filter((line) => /^[0-9a-f]{8}-/.test(line));
    expect(rows.map((row) => row.split(/\s+/)[0])).toEqual(expected.sessions.map((s) => s.session_id));
    expect(run.stdout).toContain("3 sessions in");
    expect(rows[2]).toMatch(/ interrupted +31 /);
  });

  it("shows per-rank sessions of one job as a rank group", async () => {
    const run = await runCli(["sessions", CROSS_RANK, "--format", "json"]);
    const document = parseJson(run.stdout) as { sessions: JsonObject[]; rank_groups: JsonObject[] };
    expect(document.sessions).toHaveLength(4);
    expect(document.rank_groups).toHaveLength(1);
    expect(document.rank_groups[0]).toMatchObject({ job_id: "job-11-12", world_size: 4 });
    expect((document.rank_groups[0]!.ranks as number[]).sort()).toEqual([0, 1, 2, 3]);
  });

  it("shows ranks without a job id that ran at the same time as a rank group, as analyze reads them", async () => {
    const text = readFileSync(join(FIXTURES, "cross-rank/case-11-0012/input.jsonl"), "utf8");
    const dir = mkdtempSync(join(tmpdir(), "stormlog-sessions-"));
    const file = join(dir, "input.jsonl");
    writeFileSync(file, text.replaceAll('"job_id": "job-11-12"', '"job_id": null'));
    try {
      const run = await runCli(["sessions", file, "--format", "json"]);
      const document = parseJson(run.stdout) as { rank_groups: JsonObject[] };
      expect(document.rank_groups).toHaveLength(1);
      expect(document.rank_groups[0]).toMatchObject({ job_id: null, world_size: 4 });
      const analyzed = await runCli(["analyze", file, "--format", "json", "--no-index"]);
      const report = parseJson(analyzed.stdout) as { summary: { ranks: number[] } };
      expect(report.summary.ranks).toEqual([0, 1, 2, 3]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
