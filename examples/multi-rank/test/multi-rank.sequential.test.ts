import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseJson } from "@stormlog/core";
import { summarizeTelemetrySessions } from "@stormlog/sink";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const EXAMPLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
// The CLI as this project depends on it (a devDependency), run from source.
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

function output(result: SpawnSyncReturns<string>): string {
  return `exit ${result.status}\n${result.stdout}\n${result.stderr}`;
}

interface Suspect {
  rank: number;
  confidence: string;
  phase_attribution: { phase_path?: string } | null;
}

let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "stormlog-multi-rank-"));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("examples/multi-rank", () => {
  it("rank 2 spikes first in train / backward: diagnose and analyze name it", {
    timeout: 90_000,
  }, async () => {
    const root = join(work, "spike");
    const launched = node("src/launcher.ts", ["--out", root]);
    expect(launched.status, output(launched)).toBe(0);
    expect(launched.stdout).toMatch(/1\. rank 2 {2}confidence high {2}phase train \/ backward/);

    // Four per-rank sink directories under one root, one completed session each, one job.
    const sessions = await summarizeTelemetrySessions(root);
    expect(sessions.map((s) => s.summary.rank).sort()).toEqual([0, 1, 2, 3]);
    expect(new Set(sessions.map((s) => s.summary.job_id)).size).toBe(1);
    for (const { summary, eventCount } of sessions) {
      expect(summary.status).toBe("completed");
      expect(summary.world_size).toBe(4);
      expect(eventCount).toBeGreaterThan(50);
    }

    const analyzed = node(CLI, ["analyze", root, "--format", "json", "--no-index"]);
    expect(analyzed.status, output(analyzed)).toBe(0);
    const report = parseJson(analyzed.stdout) as unknown as {
      cross_rank_analysis: { participating_ranks: number[]; first_cause_suspects: Suspect[] };
    };
    const crossRank = report.cross_rank_analysis;
    expect(crossRank.participating_ranks).toEqual([0, 1, 2, 3]);
    const first = crossRank.first_cause_suspects[0]!;
    expect(first.rank).toBe(2);
    expect(first.confidence).toBe("high");
    expect(first.phase_attribution?.phase_path).toBe("train / backward");

    const text = node(CLI, ["analyze", root, "--no-index"]);
    expect(text.status, output(text)).toBe(0);
    expect(text.stdout).toContain("Top first-cause suspect: rank 2 (high)");
    expect(text.stdout).toContain("Suspect phase: train / backward");

    const diagnosed = node(CLI, ["diagnose", root, "--format", "json"]);
    expect(diagnosed.status, output(diagnosed)).toBe(2); // a memory risk was found
    const diagnostics = parseJson(diagnosed.stdout) as unknown as {
      indicators: { rank: number }[];
      rows: { rank: number; first_anomaly_phase_path: string | null }[];
    };
    expect(diagnostics.indicators[0]?.rank).toBe(2); // the earliest anomaly
    expect(diagnostics.rows.find((row) => row.rank === 2)?.first_anomaly_phase_path).toBe("train / backward");
  });

  it("--no-spike: no suspect, no risk", { timeout: 90_000 }, () => {
    const root = join(work, "no-spike");
    const launched = node("src/launcher.ts", ["--out", root, "--no-spike"]);
    expect(launched.status, output(launched)).toBe(0);
    expect(launched.stdout).toContain("no first-cause suspect");

    const analyzed = node(CLI, ["analyze", root, "--format", "json", "--no-index"]);
    expect(analyzed.status, output(analyzed)).toBe(0);
    const report = parseJson(analyzed.stdout) as unknown as {
      cross_rank_analysis: { participating_ranks: number[]; first_cause_suspects: Suspect[] };
    };
    expect(report.cross_rank_analysis.participating_ranks).toEqual([0, 1, 2, 3]);
    expect(report.cross_rank_analysis.first_cause_suspects).toEqual([]);

    const diagnosed = node(CLI, ["diagnose", root]);
    expect(diagnosed.status, output(diagnosed)).toBe(0);
    expect(diagnosed.stdout).toContain("Status: OK");
  });
});
