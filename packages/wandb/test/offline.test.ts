import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { listOfflineRuns, readOfflineRun, WandbOfflineClient, WandbOfflineRunError } from "../src/index.js";
import { readGoldenCaseConfig, runGoldenCaseExport } from "../src/internal.js";
import { CASES, copyCaseInput, expectedOf, plain } from "./helpers.js";

/** The golden calls as an offline run can hold them: artifacts without their `adds`. */
function comparable(calls: Record<string, unknown>[]): Record<string, unknown>[] {
  return calls.map((call) => (call.call === "log_artifact" ? { ...call, adds: [] } : call));
}

describe.each(CASES.filter((name) => expectedOf(name).raised === null))(
  "offline run of golden %s",
  (name) => {
    it("reads back, through our reader, as the reference's calls", async () => {
      const expected = expectedOf(name);
      const { dir, input, cleanup } = copyCaseInput(name);
      try {
        const config = readGoldenCaseConfig(input);
        const client = new WandbOfflineClient({ dir });
        // An active run is one the caller opened (and finishes); the export neither opens nor finishes it.
        const active = config.activeRun ? await client.init({ project: "already-active" }) : null;
        await runGoldenCaseExport(input, client);
        await active?.finish();
        const runs = listOfflineRuns(dir);
        expect(runs).toHaveLength(1);
        const run = readOfflineRun(runs[0] as string);
        const calls = plain(run.calls) as Record<string, unknown>[];
        const actual = config.activeRun ? calls.slice(1, -1) : calls;
        expect(actual.map((call) => call.call)).toEqual(expected.calls.map((call) => call.call));
        const wanted = comparable(expected.calls);
        for (let i = 0; i < wanted.length; i++) expect(actual[i], `call ${i}`).toEqual(wanted[i]);
        expect(run.kinds[0]).toBe("header");
        expect(run.kinds.at(-1)).toBe("exit");
      } finally {
        cleanup();
      }
    });
  },
);

describe("offline run checks", () => {
  async function oneRun(dir: string): Promise<string> {
    const client = new WandbOfflineClient({ dir, now: () => Date.UTC(2026, 0, 2, 3, 4, 5) });
    const run = await client.init({ project: "p", name: "n", id: "abc123", resume: "allow" });
    await run.log({ a: 1 });
    await run.finish();
    return run.runDir;
  }

  it("names the run directory offline-run-<time>-<id> with run-<id>.wandb and files/", async () => {
    const { dir, cleanup } = copyCaseInput(CASES[0] as string);
    try {
      const runDir = await oneRun(dir);
      expect(runDir).toMatch(/wandb\/offline-run-\d{8}_\d{6}-abc123$/);
      expect(readdirSync(runDir).sort()).toEqual(["files", "run-abc123.wandb"]);
    } finally {
      cleanup();
    }
  });

  it("refuses a log whose bytes changed (CRC)", async () => {
    const { dir, cleanup } = copyCaseInput(CASES[0] as string);
    try {
      const runDir = await oneRun(dir);
      const path = join(runDir, "run-abc123.wandb");
      const bytes = readFileSync(path);
      bytes[bytes.length - 3] = (bytes[bytes.length - 3] as number) ^ 0xff;
      writeFileSync(path, bytes);
      expect(() => readOfflineRun(runDir)).toThrow(/bad CRC/);
    } finally {
      cleanup();
    }
  });

  it("refuses a log that is a FIFO at once, naming it (its read would wait for a writer forever)", async () => {
    const { dir, cleanup } = copyCaseInput(CASES[0] as string);
    try {
      const runDir = await oneRun(dir);
      const path = join(runDir, "run-abc123.wandb");
      rmSync(path);
      execFileSync("mkfifo", [path]);
      const error = (() => {
        try {
          readOfflineRun(runDir);
        } catch (caught) {
          return caught;
        }
        return null;
      })();
      expect(WandbOfflineRunError.isInstance(error)).toBe(true);
      expect((error as Error).message).toContain(`${path} is not a regular file`);
    } finally {
      cleanup();
    }
  });

  it("refuses a run without an exit record", async () => {
    const { dir, cleanup } = copyCaseInput(CASES[0] as string);
    try {
      const client = new WandbOfflineClient({ dir });
      const run = await client.init({ project: "p" });
      await run.log({ a: 1 });
      expect(() => readOfflineRun(run.runDir)).toThrow(/no exit record/);
      await run.finish();
      expect(readOfflineRun(run.runDir).calls.map((call) => call.call)).toEqual(["init", "log", "finish"]);
    } finally {
      cleanup();
    }
  });

  it("refuses a media file that no files record names", async () => {
    const { dir, cleanup } = copyCaseInput(CASES[0] as string);
    try {
      const runDir = await oneRun(dir);
      writeFileSync(join(runDir, "files", "media-stray.txt"), "x");
      expect(() => readOfflineRun(runDir)).not.toThrow();
      const { mkdirSync } = await import("node:fs");
      mkdirSync(join(runDir, "files", "media", "html"), { recursive: true });
      writeFileSync(join(runDir, "files", "media", "html", "stray.html"), "x");
      expect(() => readOfflineRun(runDir)).toThrow(/named by no files record/);
    } finally {
      cleanup();
    }
  });
});
