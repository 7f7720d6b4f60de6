import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseJson } from "@stormlog/core";
import { summarizeTelemetrySessions } from "@stormlog/sink";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const EXAMPLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const CLI = join(
  dirname(createRequire(join(EXAMPLE_DIR, "package.json")).resolve("@stormlog/cli/package.json")),
  "src/bin.ts",
);
const NODE_FLAGS = ["--conditions=@stormlog/source", "--import", "tsx"];

function node(script: string, args: string[]): SpawnSyncReturns<string> {
  const result = spawnSync(process.execPath, [...NODE_FLAGS, script, ...args], {
    cwd: EXAMPLE_DIR,
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, INIT_CWD: EXAMPLE_DIR },
  });
  if (result.error) throw result.error;
  return result;
}

const output = (result: SpawnSyncReturns<string>) =>
  `exit ${result.status}\n${result.stdout}\n${result.stderr}`;

/** `key=value` counters of the last line of a run starting with `prefix`. */
function counters(stdout: string, run: string, prefix: string): Record<string, string> {
  const lines = stdout.split("\n").filter((line) => line.startsWith(`  [${run}] ${prefix}`));
  const last = lines[lines.length - 1] ?? "";
  return Object.fromEntries([...last.matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1]!, m[2]!]));
}

function sessionIdOf(stdout: string, run: string): string {
  const id = new RegExp(`\\[${run}\\] session (\\S+) started`).exec(stdout)?.[1];
  expect(id, `${run} printed its session id`).toBeDefined();
  return id!;
}

let work: string;
let sink: string;
let result: SpawnSyncReturns<string>;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "stormlog-always-on-"));
  sink = join(work, "sink");
  result = node("src/main.ts", ["--out", sink, "--json", join(work, "report.json")]);
}, 90_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("examples/always-on", () => {
  it("runs three times: completed, killed, completed", () => {
    expect(result.status, output(result)).toBe(0);
    expect(result.stdout).toContain("[run 2] → kill -KILL");
    // Every run rolls segments over; by the third, retention has pruned old ones.
    expect(Number(counters(result.stdout, "run 1", "final").rollover_count)).toBeGreaterThan(0);
    const third = counters(result.stdout, "run 3", "final");
    expect(Number(third.rollover_count)).toBeGreaterThan(0);
    expect(Number(third.pruned_segment_count)).toBeGreaterThan(0);
    expect(Number(third.pruned_bytes)).toBeGreaterThan(0);
    expect(Number(third.final_retained_files)).toBeLessThanOrEqual(12);
    expect(Number(third.final_retained_bytes)).toBeLessThanOrEqual(1536 * 1024 + 256 * 1024);
    expect(Number(third.history_retained_events)).toBe(200);
    expect(Number(third.history_dropped_events)).toBeGreaterThan(0);
    expect(third.collector_health_status).toBe("healthy");
  });

  it("the sink holds completed, interrupted and completed sessions", async () => {
    const [run1, run2, run3] = ["run 1", "run 2", "run 3"].map((run) => sessionIdOf(result.stdout, run));
    const sessions = await summarizeTelemetrySessions(sink);
    const status = new Map(sessions.map((s) => [s.summary.session_id, s.summary.status]));
    expect(status.get(run1!)).toBe("completed");
    expect(status.get(run2!)).toBe("interrupted");
    expect(status.get(run3!)).toBe("completed");
    expect(sessions).toHaveLength(3);

    const listed = node(CLI, ["sessions", sink, "--format", "json"]);
    expect(listed.status, output(listed)).toBe(0);
    const cli = parseJson(listed.stdout) as unknown as { sessions: { session_id: string; status: string }[] };
    // The reference's order: completed (newest first), then interrupted.
    expect(cli.sessions.map((s) => [s.session_id, s.status])).toEqual([
      [run3, "completed"],
      [run1, "completed"],
      [run2, "interrupted"],
    ]);
  });

  it("analyze picks the newest completed session", () => {
    const run3 = sessionIdOf(result.stdout, "run 3");
    const fromExample = parseJson(readFileSync(join(work, "report.json"), "utf8")) as unknown as {
      session: { selected_session_id: string; status: string };
    };
    expect(fromExample.session.selected_session_id).toBe(run3);
    expect(fromExample.session.status).toBe("completed");

    const analyzed = node(CLI, ["analyze", sink, "--format", "json", "--no-index"]);
    expect(analyzed.status, output(analyzed)).toBe(0);
    const report = parseJson(analyzed.stdout) as unknown as { session: { selected_session_id: string } };
    expect(report.session.selected_session_id).toBe(run3);
  });
});
