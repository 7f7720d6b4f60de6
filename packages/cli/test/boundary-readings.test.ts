import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { formatPerfettoTrace, loadDistributedEvents } from "@stormlog/analysis";
import { type JsonObject, parseJson } from "@stormlog/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  buildPerfettoTraceFromEvents,
  sameEvents,
  traceContent,
} from "../../analysis/test/oracles/perfetto-events.js";
import { EXIT_MEMORY_RISK } from "../src/commands/diagnose.js";
import { REPO_ROOT, runCli, tempDir } from "./helpers.js";

// Runs whose phase records carry counters read at the boundary (`phase_counters: "boundary_read"`):
// a 16 MiB-a-step leak, its samples but the first dropped (it shows only at the boundaries), and a
// stable run.
const LEAKS = join(REPO_ROOT, "fixtures/golden/leaks");
const MiB = 2 ** 20;

let dir: ReturnType<typeof tempDir>;
let leak = "";
let stable = "";

beforeAll(() => {
  // Copies, so that the index written beside them stays out of the repository.
  dir = tempDir();
  leak = join(dir.path, "leak.jsonl");
  stable = join(dir.path, "stable.jsonl");
  const lines = readFileSync(join(LEAKS, "leak_bwd_16MiB/input.jsonl"), "utf8").trimEnd().split("\n");
  const firstSample = lines.findIndex((line) => line.includes('"event_type": "sample"'));
  const rare = lines.filter((line, i) => i === firstSample || !line.includes('"event_type": "sample"'));
  writeFileSync(leak, `${rare.join("\n")}\n`);
  copyFileSync(join(LEAKS, "stable_clean/input.jsonl"), stable);
});

afterAll(() => dir.remove());

describe("stormlog diagnose on boundary readings", () => {
  it("shows the leak's allocated change and its leak anomaly, and exits 2", async () => {
    const run = await runCli(["diagnose", leak]);
    expect(run.code).toBe(EXIT_MEMORY_RISK);
    expect(run.stdout).toMatch(/^RANK\s+STATUS\s+SAMPLES\s+BOUNDARY READS\s+ALLOCATED Δ/m);
    expect(run.stdout).toMatch(/^\s+0\s+present\s+1\s+240\s+\+480\.00 MB\s+\+480\.00 MB/m);
    expect(run.stdout).toMatch(/^Earliest: +rank 0 at \+\d+\.\d{3}s .*, warning, leak:train/m);
    expect(run.stdout).toContain("Status: MEMORY_RISK (exit code 2)");
    // Stored with the index: the second run reads the same table and exit code back.
    expect(await runCli(["diagnose", leak])).toEqual(run);

    const json = await runCli(["diagnose", leak, "--format", "json"]);
    const document = parseJson(json.stdout) as JsonObject;
    const [row] = document.rows as JsonObject[];
    expect(row).toMatchObject({ samples: 1, boundary_readings: 240, allocated_delta_bytes: 480 * MiB });
    const leaks = (document.anomalies as JsonObject[]).filter((anomaly) =>
      (anomaly.signal as string).startsWith("leak:"),
    );
    expect(leaks.length).toBeGreaterThan(0);
    for (const anomaly of leaks) {
      expect(anomaly.severity).toBe("warning");
      expect(anomaly.signal).toBe(`leak:${anomaly.phase_path as string}`);
    }
  });

  it("exits 0 on the stable run", async () => {
    const run = await runCli(["diagnose", stable]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^\s+0\s+present\s+30\s+240\s+0 B\s+0 B/m);
    expect(run.stdout).toContain("Status: OK (exit code 0)");
  });
});

describe("stormlog export --format perfetto on boundary readings", () => {
  it("writes memory counters that rise with the leak", async () => {
    const file = join(dir.path, "trace.json");
    const run = await runCli(["export", leak, "--format", "perfetto", "--output", file]);
    expect(run.code).toBe(0);
    const trace = JSON.parse(readFileSync(file, "utf8")) as {
      traceEvents: { ph: string; name: string; ts: number; args?: { bytes?: number } }[];
    };
    const allocated = trace.traceEvents
      .filter((event) => event.ph === "C" && event.name === "device 0 allocated")
      .sort((a, b) => a.ts - b.ts)
      .map((event) => event.args!.bytes!);
    // Entry level, then per step the forward peak and the level left (16 MiB higher each step).
    expect(allocated.length).toBe(1 + 2 * 30);
    const left = allocated.filter((_, i) => i > 0 && i % 2 === 0);
    for (let i = 1; i < left.length; i++) expect(left[i]! - left[i - 1]!).toBe(16 * MiB);
    expect(allocated.at(-1)! - allocated[0]!).toBe(480 * MiB);
    const { selection, events } = await loadDistributedEvents(leak);
    const expected = traceContent(
      formatPerfettoTrace(
        buildPerfettoTraceFromEvents(events, { sessionId: selection.summary?.session_id ?? null }),
      ),
    );
    const actual = traceContent(readFileSync(file, "utf8"));
    expect(sameEvents(actual.events, expected.events)).toEqual({ missing: [], extra: [] });
    expect(actual.tail).toBe(expected.tail);
  });
});
