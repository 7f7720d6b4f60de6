import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { formatPerfettoTrace, loadDistributedEvents } from "@stormlog/analysis";
import { parseJson, TELEMETRY_V3_FIELDS } from "@stormlog/core";
import { afterEach, describe, expect, it } from "vitest";
import {
  buildPerfettoTraceFromEvents,
  sameEvents,
  traceContent,
} from "../../analysis/test/oracles/perfetto-events.js";
import { goldenCopy } from "../../sink/test/support/telemetry-fixtures.js";
import { runCli, tempDir } from "./helpers.js";

const SINK = goldenCopy("python-sink/single-completed/sink");
const PER_RANK = goldenCopy("cross-rank/case-11-0012/input.jsonl");

let cleanup: (() => void) | null = null;
afterEach(() => {
  cleanup?.();
  cleanup = null;
});

describe("stormlog export", () => {
  it("jsonl: canonical lines, byte-identical to the Python sink's", async () => {
    const run = await runCli(["export", SINK, "--format", "jsonl"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(readFileSync(join(SINK, "segment-000001.jsonl"), "utf8"));
  });

  it("jsonl: one session of a multi-session file with --session-id", async () => {
    const run = await runCli([
      "export",
      PER_RANK,
      "--format",
      "jsonl",
      "--session-id",
      "session-11-12-rank2",
    ]);
    const lines = run.stdout.trim().split("\n");
    const source = readFileSync(PER_RANK, "utf8")
      .split("\n")
      .filter((line) => line.includes('"session-11-12-rank2"'));
    expect(lines.sort()).toEqual(source.sort());
  });

  it("csv: the reference's columns plus a JSON metadata column", async () => {
    const run = await runCli(["export", SINK, "--format", "csv"]);
    const lines = run.stdout.trim().split("\n");
    expect(lines[0]).toBe(TELEMETRY_V3_FIELDS.join(","));
    expect(lines).toHaveLength(1 + 42);
    expect(lines[1]).toMatch(/^3,2cfda835-2b8e-4a5e-9a84-9a8adf638072,1765000668835601000,start,/);
  });

  it("perfetto: a trace file with one process per rank", async () => {
    const dir = tempDir();
    cleanup = dir.remove;
    const file = join(dir.path, "trace.json");
    const run = await runCli(["export", PER_RANK, "--format", "perfetto", "--output", file]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe("");
    const trace = JSON.parse(readFileSync(file, "utf8")) as {
      traceEvents: { ph: string; name: string; pid: number; args?: Record<string, unknown> }[];
      otherData: Record<string, string>;
    };
    const processes = trace.traceEvents.filter((event) => event.ph === "M" && event.name === "process_name");
    expect(processes.map((event) => event.args?.name)).toEqual(
      [0, 1, 2, 3].map((rank) => `rank ${rank} @ node-0`),
    );
    expect(trace.traceEvents.some((event) => event.ph === "C")).toBe(true);
    expect(trace.traceEvents.some((event) => event.ph === "X")).toBe(true);
    expect(trace.otherData.session_id).toMatch(/^legacy-/);
    const first = (parseJson(readFileSync(PER_RANK, "utf8").split("\n")[0]!) as { timestamp_ns: bigint })
      .timestamp_ns;
    expect(BigInt(trace.otherData.first_timestamp_ns!) <= first).toBe(true);
    // Event for event the trace of the event oracle over the same selection.
    const { selection, events } = await loadDistributedEvents(PER_RANK);
    const expected = traceContent(
      formatPerfettoTrace(
        buildPerfettoTraceFromEvents(events, { sessionId: selection.summary?.session_id ?? null }),
      ),
    );
    const actual = traceContent(readFileSync(file, "utf8"));
    expect(sameEvents(actual.events, expected.events)).toEqual({ missing: [], extra: [] });
    expect(actual.tail).toBe(expected.tail);
  });

  it("perfetto: an unknown --session-id fails before the output file is created", async () => {
    const dir = tempDir();
    cleanup = dir.remove;
    const file = join(dir.path, "trace.json");
    const run = await runCli([
      "export",
      PER_RANK,
      "--format",
      "perfetto",
      "--output",
      file,
      "--session-id",
      "nope",
    ]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/nope/);
    expect(existsSync(file)).toBe(false);
  });

  it("requires --format", async () => {
    const run = await runCli(["export", SINK]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/missing --format: pass one of perfetto, csv, jsonl/);
  });
});
