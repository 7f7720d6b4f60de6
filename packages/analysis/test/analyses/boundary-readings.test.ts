import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolveTelemetryInput } from "@stormlog/sink/internal";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  analyzeTelemetry,
  buildPerfettoTrace,
  diagnoseTelemetry,
  diagnosticsFoundRisk,
  formatPerfettoTrace,
  loadDistributedEvents,
  streamPerfettoTrace,
} from "../../src/index.js";
import { aggregateEvents, scanSegment } from "../../src/input/scan.js";
import { checkChromeTrace, type ParsedTrace } from "../export/trace-format.js";
import { diagnoseFromEvents } from "../oracles/diagnostics-events.js";

const LEAKS = join(import.meta.dirname, "../../../../fixtures/golden/leaks");
// The tracker's stable run: phase records with counters read at the boundaries
// (`phase_counters: "boundary_read"`), flat samples, nothing kept.
const STABLE = join(LEAKS, "stable_clean/input.jsonl");
const MiB = 2 ** 20;
const STEPS = 30;

let dir = "";
let cache = "";
/**
 * The leak_bwd_16MiB run (30 steps of train > forward / backward / optimizer_step, 16 MiB kept a
 * step) with only its first sample left, so that the leak shows only in the boundary readings.
 */
let rare = "";
/** Variants of rare: no sample at all, last-sample counters, the Python Stormlog's (no key). */
const variants = { noSamples: "", lastSample: "", python: "" };

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-boundary-"));
  cache = join(dir, "cache");
  const write = (name: string, out: string[]): string => {
    const path = join(dir, name);
    writeFileSync(path, `${out.join("\n")}\n`);
    return path;
  };
  const source = readFileSync(join(LEAKS, "leak_bwd_16MiB/input.jsonl"), "utf8").trimEnd().split("\n");
  const firstSample = source.findIndex((line) => line.includes('"event_type": "sample"'));
  const lines = source.filter((line, i) => i === firstSample || !line.includes('"event_type": "sample"'));
  expect(lines).toHaveLength(source.length - (STEPS - 1));
  rare = write("rare-samples.jsonl", lines);
  variants.noSamples = write(
    "no-samples.jsonl",
    lines.filter((line) => !line.includes('"event_type": "sample"')),
  );
  variants.lastSample = write(
    "last-sample.jsonl",
    lines.map((line) => line.replace('"phase_counters": "boundary_read"', '"phase_counters": "last_sample"')),
  );
  variants.python = write(
    "python.jsonl",
    lines.map((line) => line.replace('"phase_counters": "boundary_read", ', "")),
  );
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The indexed diagnosis, checked against the event oracle (cold, warm, and without an index). */
async function diagnosed(path: string) {
  for (const options of [
    { cacheDir: cache },
    { cacheDir: cache },
    { index: false, includeTimelines: true },
  ]) {
    const { index: _index, ...indexed } = await diagnoseTelemetry(path, options);
    expect(indexed).toEqual(await diagnoseFromEvents(path, options));
  }
  return diagnoseTelemetry(path, { index: false, includeTimelines: true });
}

describe("diagnose with boundary readings", () => {
  it("reads the leak from the boundaries: the allocated change, and a leak anomaly per leaking phase", async () => {
    const { diagnostics } = await diagnosed(rare);
    const [row] = diagnostics.rows;
    expect(row).toMatchObject({ rank: 0, samples: 1, boundary_readings: 8 * STEPS, has_anomaly: true });
    // From the first train entry (2 GiB) to the last train exit: 30 steps of 16 MiB.
    expect(row!.allocated_delta_bytes).toBe(STEPS * 16 * MiB);
    expect(row!.reserved_delta_bytes).toBe(STEPS * 16 * MiB);
    expect(row!.hidden_gap_latest_bytes).toBe(256 * MiB);

    // The phases the report judges leaking on rank 0, with the report's messages.
    const report = await analyzeTelemetry(rare, { index: false });
    const leaking = report.leaks.filter(
      (leak) => leak.verdict === "leaking" && leak.leaking_ranks.includes(0),
    );
    expect(leaking.length).toBeGreaterThan(0);
    const leaks = diagnostics.anomalies.filter((anomaly) => anomaly.signal.startsWith("leak:"));
    expect(leaks.map((anomaly) => anomaly.signal).sort()).toEqual(
      leaking.map((leak) => `leak:${leak.phase_path}`).sort(),
    );
    for (const anomaly of leaks) {
      const leak = leaking.find((item) => item.phase_path === anomaly.phase_path)!;
      expect(anomaly).toMatchObject({ rank: 0, severity: "warning", details: leak.message });
    }
    expect(diagnosticsFoundRisk(diagnostics)).toBe(true);
    expect(row!.first_anomaly_signal?.startsWith("leak:")).toBe(true);
    expect(diagnostics.indicators[0]).toMatchObject({ kind: "earliest", signal: row!.first_anomaly_signal });

    // The timeline holds every reading in time order.
    const timeline = diagnostics.per_rank_timelines.get(0)!;
    expect(timeline.timestamps_ns).toHaveLength(1 + 8 * STEPS);
    for (let i = 1; i < timeline.timestamps_ns.length; i++)
      expect(timeline.timestamps_ns[i]! >= timeline.timestamps_ns[i - 1]!).toBe(true);
    expect(timeline.allocated!.at(-1)! - timeline.allocated![0]!).toBe(STEPS * 16 * MiB);
  });

  it("reads a run without samples from its boundaries alone", async () => {
    const { diagnostics } = await diagnosed(variants.noSamples);
    expect(diagnostics.rows[0]).toMatchObject({
      samples: 0,
      boundary_readings: 8 * STEPS,
      allocated_delta_bytes: STEPS * 16 * MiB,
    });
    expect(diagnosticsFoundRisk(diagnostics)).toBe(true);
  });

  it("leaves out phase records that repeat the last sample", async () => {
    for (const path of [variants.lastSample, variants.python]) {
      const { diagnostics } = await diagnosed(path);
      expect(diagnostics.rows[0]).toMatchObject({
        samples: 1,
        boundary_readings: 0,
        allocated_delta_bytes: 0,
        hidden_gap_latest_bytes: 256 * MiB,
      });
      expect(diagnostics.per_rank_timelines.get(0)!.timestamps_ns).toHaveLength(1);
    }
  });

  it("finds nothing on a stable run", async () => {
    const { diagnostics } = await diagnosed(STABLE);
    expect(diagnostics.rows[0]).toMatchObject({
      samples: STEPS,
      boundary_readings: 8 * STEPS,
      allocated_delta_bytes: 0,
      has_anomaly: false,
    });
    expect(diagnostics.anomalies).toEqual([]);
    expect(diagnosticsFoundRisk(diagnostics)).toBe(false);
  });
});

describe("the scan keeps phase_counters", () => {
  it("on the fast path as on the general path", async () => {
    const lines = readFileSync(rare, "utf8").trimEnd().split("\n");
    const phase = lines.filter((line) => line.includes('"event_type": "phase_exit"')).slice(0, 5);
    const odd = [
      phase[0]!,
      // An escape: the general path reads it.
      phase[1]!.replace('"boundary_read"', '"boundary\\u005fread"'),
      phase[2]!.replace('"boundary_read"', '["boundary_read"]'),
      phase[3]!.replace('"boundary_read"', '"last_sample"'),
      // The last of duplicate keys wins.
      phase[4]!.replace(
        '"phase_counters": "boundary_read"',
        '"phase_counters": "boundary_read", "phase_counters": null',
      ),
    ];
    const path = join(dir, "odd.jsonl");
    writeFileSync(path, `${odd.join("\n")}\n`);
    const input = await resolveTelemetryInput(path);
    const scanned = await scanSegment(input.parts[0]!.segments[0]!);
    const { events } = await loadDistributedEvents(path);
    const general = aggregateEvents(events);
    const flags = (aggregate: typeof general) =>
      [...aggregate.sessions.values()][0]!.ranks.get(0)!.boundaries.map((boundary) => boundary.boundaryRead);
    expect(flags(scanned)).toEqual([true, true, false, false, false]);
    expect(flags(general)).toEqual(flags(scanned));
  });
});

/** The allocated counter's value at the end of each `train` slice. */
function allocatedAtTrainExits(trace: ParsedTrace): number[] {
  const counters = trace.traceEvents
    .filter((event) => event.ph === "C" && event.name === "device 0 allocated")
    .map((event) => ({ ts: event.ts as number, bytes: (event.args as { bytes: number }).bytes }))
    .sort((a, b) => a.ts - b.ts);
  const exits = trace.traceEvents
    .filter((event) => event.ph === "X" && event.name === "train")
    .map((event) => (event.ts as number) + (event.dur as number))
    .sort((a, b) => a - b);
  return exits.map((end) => counters.filter((counter) => counter.ts <= end + 0.001).at(-1)!.bytes);
}

/** Events as canonical JSON strings, sorted: the trace's content regardless of array order. */
function eventSetOf(trace: ParsedTrace): string[] {
  return trace.traceEvents.map((event) => JSON.stringify(event)).sort();
}

async function streamed(path: string): Promise<string> {
  let text = "";
  for await (const chunk of streamPerfettoTrace(path, { cacheDir: cache })) text += chunk;
  return text;
}

async function built(path: string): Promise<string> {
  const { selection, events } = await loadDistributedEvents(path);
  return formatPerfettoTrace(
    buildPerfettoTrace(events, { sessionId: selection.summary?.session_id ?? null }),
  );
}

describe("Perfetto counters with boundary readings", () => {
  it("rise with the leak step by step, alike in the streamed and the in-memory trace", async () => {
    const stream = checkChromeTrace(await streamed(rare));
    const memory = checkChromeTrace(await built(rare));
    expect(stream.problems).toEqual([]);
    expect(eventSetOf(stream.trace)).toEqual(eventSetOf(memory.trace));
    const levels = allocatedAtTrainExits(stream.trace);
    expect(levels).toHaveLength(STEPS);
    for (let i = 1; i < STEPS; i++) expect(levels[i]! - levels[i - 1]!).toBe(16 * MiB);
    expect(levels.at(-1)! - levels[0]!).toBe((STEPS - 1) * 16 * MiB);
  });

  it("stay flat on a stable run, and take nothing from last-sample phase records", async () => {
    const stable = allocatedAtTrainExits(checkChromeTrace(await streamed(STABLE)).trace);
    expect(stable).toHaveLength(STEPS);
    expect(new Set(stable).size).toBe(1);
    const trace = checkChromeTrace(await streamed(variants.lastSample)).trace;
    const allocated = trace.traceEvents.filter(
      (event) => event.ph === "C" && event.name === "device 0 allocated",
    );
    // The one sample's value: the phase records repeat it.
    expect(allocated).toHaveLength(1);
    expect(eventSetOf(trace)).toEqual(eventSetOf(checkChromeTrace(await built(variants.lastSample)).trace));
  });
});
