import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATASET_MANIFEST, exportParquet, ParquetDatasetError } from "../src/index.js";
import { generateJob } from "./support.js";

// One export at a time per dataset: a second one (here, of this process) is refused with a one-line
// error naming the holder; a lock left by an export that died is broken.

let dir = "";
let job = "";

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-parquet-lock-"));
  job = join(dir, "job");
  generateJob(job, 2, 300);
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("exportParquet's lock on the dataset", () => {
  it("refuses a second export into a dataset being written, and leaves no lock once done", async () => {
    const out = join(dir, "concurrent");
    const first = exportParquet(job, out);
    const second = exportParquet(job, out);
    await expect(second).rejects.toThrow(ParquetDatasetError);
    await expect(second).rejects.toThrow(
      new RegExp(`being written by another export \\(pid ${process.pid} on ${hostname()}\\)`),
    );
    const done = await first;
    expect(done.ranks).toBe(2);
    expect(readdirSync(out)).not.toContain("writer.lock");
    // The next export of the same dataset takes the lock again and keeps what is unchanged.
    const again = await exportParquet(job, out);
    expect(again.ranks).toBe(2);
    expect(existsSync(join(out, DATASET_MANIFEST))).toBe(true);
  }, 60_000);

  it("breaks the lock of an export that died", async () => {
    const out = join(dir, "stale");
    mkdirSync(out);
    const dead = spawnSync(process.execPath, ["-e", "process.exit(0)"]);
    expect(dead.status).toBe(0);
    writeFileSync(
      join(out, "writer.lock"),
      `${JSON.stringify({ host: hostname(), pid: dead.pid, process_started_at_ms: null, acquired_at_ns: "0", token: "dead" })}\n`,
    );
    const result = await exportParquet(job, out);
    expect(result.ranks).toBe(2);
    expect(readdirSync(out)).not.toContain("writer.lock");
  }, 60_000);
});
