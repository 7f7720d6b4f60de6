import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const repo = resolve(import.meta.dirname, "../..");
const fixtures = join(repo, "scripts/test/fixtures/bench-repo");
const work = mkdtempSync(join(tmpdir(), "stormlog-bench-test-"));

function bench(...args: string[]) {
  return spawnSync(process.execPath, [join(repo, "scripts/bench.mjs"), "--root", fixtures, ...args], {
    cwd: repo,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" },
  });
}

afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("pnpm bench harness", () => {
  it("runs the selected bench files and writes one summary row per benchmark", () => {
    const out = join(work, "latest.json");
    const res = bench("--out", out, "demo", "root");
    expect(res.status, res.stderr).toBe(0);
    // The bench file's own output passes through untouched; mitata's own report does not.
    expect(res.stdout).toMatch(/ratio concat\/join: \d+\.\d+x/);
    expect(res.stdout).toMatch(/median/);

    const rows = JSON.parse(readFileSync(out, "utf8")) as Array<Record<string, unknown>>;
    expect(rows.map((r) => `${r.package} ${r.name}`).sort()).toEqual([
      "@fixture/demo concat/loop",
      "@fixture/demo join/array",
      "fixture-root noop/root",
    ]);
    for (const row of rows) {
      expect(row.unit).toBe("ns");
      for (const key of ["median", "p75", "p99", "avg", "min", "max"]) {
        expect(typeof row[key], key).toBe("number");
        expect(Number.isFinite(row[key]), key).toBe(true);
      }
      expect(row.median as number).toBeGreaterThan(0);
      expect(row.min as number).toBeLessThanOrEqual(row.median as number);
      expect(row.median as number).toBeLessThanOrEqual(row.p99 as number);
      expect(Number.isInteger(row.samples) && (row.samples as number) > 0).toBe(true);
      expect(typeof row.file).toBe("string");
    }
    expect(rows.find((r) => r.name === "join/array")?.group).toBe("fixture");
  }, 180_000);

  it("keeps other files' rows on a filtered run and reports a failing bench file", () => {
    const out = join(work, "merged.json");
    const kept = {
      package: "@fixture/other",
      name: "kept",
      unit: "ns",
      median: 1,
      file: "elsewhere.bench.ts",
    };
    const stale = {
      package: "@fixture/broken",
      name: "stale",
      unit: "ns",
      median: 1,
      file: "packages/broken/bench/throws.bench.ts",
    };
    writeFileSync(out, JSON.stringify([kept, stale]));

    const res = bench("--out", out, "broken");
    expect(res.status).toBe(1);
    expect(res.stderr).toContain("packages/broken/bench/throws.bench.ts: exited with 1");
    expect(JSON.parse(readFileSync(out, "utf8"))).toEqual([kept]);
  }, 60_000);

  it("lists the discovered files with their packages", () => {
    const res = bench("--list");
    expect(res.status).toBe(0);
    expect(res.stdout.trim().split("\n").sort()).toEqual([
      "@fixture/broken\tpackages/broken/bench/throws.bench.ts",
      "@fixture/demo\tpackages/demo/bench/trivial.bench.ts",
      "fixture-root\tbench/root.bench.ts",
    ]);
  });
});
