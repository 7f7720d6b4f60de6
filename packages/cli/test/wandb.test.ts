import { cpSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { listOfflineRuns, readOfflineRun } from "@stormlog/wandb";
import { afterEach, describe, expect, it } from "vitest";
import { expectOneLineError, REPO_ROOT, runCli } from "./helpers.js";

// A sink written by the Python reference's sink writer (a W&B golden case's input).
const SINK = join(REPO_ROOT, "packages/wandb/test/fixtures/golden/case-31-0000/input/sink");

const dirs: string[] = [];
function workDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-cli-wandb-"));
  dirs.push(dir);
  cpSync(SINK, join(dir, "sink"), { recursive: true });
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("stormlog export --format wandb", () => {
  it("writes a W&B offline run of the session and prints the wandb sync command", async () => {
    const dir = workDir();
    const run = await runCli(
      [
        "export",
        "sink",
        "--format",
        "wandb",
        "--wandb-mode",
        "offline",
        "--wandb-log-artifacts",
        "--wandb-dir",
        "out",
      ],
      { cwd: dir, env: {} },
    );
    expect(run.code, run.stderr).toBe(0);
    const runs = listOfflineRuns(join(dir, "out"));
    expect(runs).toHaveLength(1);
    expect(run.stderr).toContain(`wandb sync "${runs[0]}"`);
    const contents = readOfflineRun(runs[0] as string);
    const calls = contents.calls;
    expect(calls[0]).toEqual({
      call: "init",
      kwargs: {
        project: "stormlog",
        mode: "offline",
        name: "stormlog-export-9d9b584c",
        job_type: "stormlog-export",
      },
    });
    expect(calls.filter((call) => call.call === "log")).toHaveLength(17 + 4);
    expect(
      calls
        .filter((call) => call.call === "log_artifact")
        .map((call) => call.call === "log_artifact" && call.type),
    ).toEqual(["stormlog-tracking-dashboard", "stormlog-telemetry-sink"]);
    // Statistics from the recorded events and the sink's segments: the tracker is gone.
    expect(calls[1]).toMatchObject({
      call: "summary.update",
      payload: {
        stormlog_total_events: 17,
        stormlog_sink_retained_files: 1,
        stormlog_sink_retained_bytes: 10843,
      },
    });
    expect(calls.at(-1)).toEqual({ call: "finish" });
    // No output file: the dashboard lands in the sink folder, and so in the sink artifact.
    expect(readdirSync(join(dir, "sink"))).toContain("stormlog_tracking_dashboard.html");
  });

  it("says that online streaming is off, and why, when asked for online without an API key", async () => {
    const dir = workDir();
    const run = await runCli(
      ["export", "sink", "--format", "wandb", "--wandb-mode", "online", "--wandb-dir", "."],
      {
        cwd: dir,
        env: {},
      },
    );
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/W&B online streaming is off: WANDB_API_KEY is not set/);
    expect(listOfflineRuns(dir)).toHaveLength(1);
  });
});

describe("stormlog track --wandb", () => {
  it("exports the session when tracking ends, with the tracker's statistics", async () => {
    const dir = workDir();
    const run = await runCli(
      [
        "track",
        "--interval",
        "0.05",
        "--telemetry-sink-dir",
        "tsink",
        "--wandb",
        "--wandb-mode",
        "offline",
        "--wandb-project",
        " p1 ",
        "--wandb-dir",
        "out",
        "--",
        process.execPath,
        "-e",
        "setTimeout(() => {}, 300)",
      ],
      { cwd: dir, env: { PATH: process.env.PATH } },
    );
    expect(run.code, run.stderr).toBe(0);
    const runs = listOfflineRuns(join(dir, "out"));
    expect(runs).toHaveLength(1);
    const calls = readOfflineRun(runs[0] as string).calls;
    // Flag values are trimmed, as the reference's namespace reader does.
    expect(calls[0]).toMatchObject({ call: "init", kwargs: { project: "p1", job_type: "stormlog-track" } });
    expect(calls[1]).toMatchObject({
      call: "summary.update",
      payload: { stormlog_session_status: "completed", stormlog_backend: expect.any(String) },
    });
    expect(calls.at(-1)).toEqual({ call: "finish" });
  });
});

describe("bad W&B flags", () => {
  it("are a one-line error before anything runs or is printed", async () => {
    const dir = workDir();
    expectOneLineError(
      await runCli(
        [
          "track",
          "--no-gpu",
          "--telemetry-sink-dir",
          "tsink",
          "--wandb",
          "--wandb-mode",
          "bogus",
          "--",
          process.execPath,
          "-e",
          "0",
        ],
        { cwd: dir, env: { PATH: process.env.PATH } },
      ),
      /^stormlog track: invalid --wandb-mode 'bogus'/,
    );
    // The command never started: no sink was made.
    expect(readdirSync(dir)).not.toContain("tsink");
    expectOneLineError(
      await runCli(["diagnose", "sink", "--wandb", "--wandb-mode", "bogus"], { cwd: dir, env: {} }),
      /^stormlog diagnose: invalid --wandb-mode 'bogus'/,
    );
    expectOneLineError(
      await runCli(["export", "sink", "--format", "wandb", "--wandb-run-id", "../x", "--wandb-dir", "out"], {
        cwd: dir,
        env: {},
      }),
      /^stormlog export: Invalid W&B setting 'runId': "\.\.\/x" holds one of/,
    );
    expect(readdirSync(dir)).not.toContain("out");
  });
});

describe("stormlog diagnose --wandb", () => {
  it("exports a bundle of the diagnosis", async () => {
    const dir = workDir();
    const run = await runCli(
      ["diagnose", "sink", "--wandb", "--wandb-mode", "offline", "--wandb-log-artifacts"],
      {
        cwd: dir,
        env: {},
      },
    );
    expect(run.code, run.stderr).toBe(0);
    const calls = readOfflineRun(listOfflineRuns(dir)[0] as string).calls;
    // The bundle holds no suggestions: no suggestions table.
    expect(calls.map((call) => call.call)).toEqual(["init", "summary.update", "log_artifact", "finish"]);
    expect(calls[0]).toMatchObject({
      kwargs: { name: "stormlog-diagnose-9d9b584c", job_type: "stormlog-diagnose" },
    });
  });

  it("refuses a missing bundle folder with one line, as the reference raises, and writes no run", async () => {
    const dir = workDir();
    const run = await runCli(["diagnose", "sink", "--wandb", "--wandb-bundle", "no-such-bundle"], {
      cwd: dir,
      env: {},
    });
    expect(run.code).toBe(1);
    const lines = run.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^stormlog diagnose: Diagnose artifact directory not found: .*no-such-bundle/);
    expect(listOfflineRuns(dir)).toEqual([]);
  });
});
