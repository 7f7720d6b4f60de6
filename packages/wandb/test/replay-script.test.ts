import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { listOfflineRuns, readOfflineRun } from "../src/index.js";
import { CASES, expectedOf, FIXTURES, plain } from "./helpers.js";

const run = promisify(execFile);
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const SCRIPT = "packages/wandb/scripts/replay-golden-case.mjs";

async function replay(
  caseDir: string,
  outDir: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      ["--conditions=@stormlog/source", "--import", "tsx", SCRIPT, caseDir, outDir],
      { cwd: ROOT },
    );
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe.each(CASES)("replay script on golden %s", (name) => {
  it("writes an offline run that reads back as the reference's calls, or fails as the reference did", async () => {
    const expected = expectedOf(name);
    const out = mkdtempSync(join(tmpdir(), "stormlog-wandb-replay-test-"));
    try {
      const result = await replay(join(FIXTURES, name), out);
      if (expected.raised !== null) {
        expect(result.code).toBe(1);
        expect(result.stderr.trim().split("\n")).toHaveLength(1);
        expect(listOfflineRuns(out)).toEqual([]);
        return;
      }
      expect(result.code, result.stderr).toBe(0);
      const runs = listOfflineRuns(out);
      expect(runs).toHaveLength(1);
      expect(result.stdout.trim()).toBe(runs[0]);
      const contents = readOfflineRun(runs[0] as string);
      const config = JSON.parse(readFileSync(join(FIXTURES, name, "input/config.json"), "utf8")) as {
        active_run: boolean;
      };
      const calls = plain(contents.calls) as Record<string, unknown>[];
      const actual = config.active_run ? calls.slice(1, -1) : calls;
      const wanted = expected.calls.map((call) =>
        call.call === "log_artifact" ? { ...call, adds: [] } : call,
      );
      expect(actual).toEqual(wanted);
      // The case folder itself is left as it was: the export ran on a copy of its input.
      expect(readdirSync(join(FIXTURES, name, "input")).includes("stormlog_tracking_dashboard.html")).toBe(
        false,
      );
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
