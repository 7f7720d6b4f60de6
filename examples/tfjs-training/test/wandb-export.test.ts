import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { listOfflineRuns, readOfflineRun } from "@stormlog/wandb";
import { afterAll, describe, expect, it } from "vitest";

const EXAMPLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
// A sink the Python reference wrote (one of the W&B golden cases): the export needs no training run.
const SINK = resolve(EXAMPLE_DIR, "../../packages/wandb/test/fixtures/golden/case-31-0004/input/telemetry");
const work = mkdtempSync(join(tmpdir(), "tfjs-training-wandb-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("pnpm --filter tfjs-training wandb", () => {
  it("exports the sink's session as a W&B offline run and prints the wandb sync command", () => {
    cpSync(SINK, join(work, "sink"), { recursive: true });
    const run = spawnSync(
      process.execPath,
      [
        "--conditions=@stormlog/source",
        "--import",
        "tsx",
        "src/wandb-export.ts",
        "--sink",
        join(work, "sink"),
        "--dir",
        work,
        "--offline",
      ],
      { cwd: EXAMPLE_DIR, encoding: "utf8", env: { ...process.env, WANDB_API_KEY: "" } },
    );
    expect(run.status, run.stderr).toBe(0);
    const runs = listOfflineRuns(work);
    expect(runs).toHaveLength(1);
    expect(run.stdout).toContain(`wandb sync "${runs[0]}"`);
    const calls = readOfflineRun(runs[0] as string).calls;
    expect(calls[0]).toMatchObject({
      call: "init",
      kwargs: { project: "stormlog-tfjs-training", mode: "offline", job_type: "tfjs-training" },
    });
    const keys = calls.flatMap((call) => (call.call === "log" ? Object.keys(call.payload) : []));
    expect(keys).toContain("stormlog_memory_timeline_table");
    expect(keys).toContain("stormlog_tracking_dashboard");
    expect(calls.filter((call) => call.call === "log_artifact")).toHaveLength(2);
    expect(calls.at(-1)).toEqual({ call: "finish" });
  });
});
