import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type TelemetryEvent } from "@stormlog/core";
import { iterateTelemetryEvents } from "@stormlog/sink";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BASE_NS,
  GOLDEN,
  goldenCopy,
  MS,
  record,
  writeSink,
} from "../../../sink/test/support/telemetry-fixtures.js";
import {
  buildPerfettoTrace,
  formatPerfettoTrace,
  loadDistributedEvents,
  openSelectedEvents,
  type StreamPerfettoOptions,
  streamPerfettoTrace,
} from "../../src/index.js";
import { buildPerfettoTraceFromEvents, sameEvents, traceContent } from "../oracles/perfetto-events.js";
import { perfettoCase } from "./perfetto-cases.js";
import { checkChromeTrace, type ParsedTrace, sliceDepths } from "./trace-format.js";

const ROOT = join(import.meta.dirname, "../../../..");
const GENERATOR = join(ROOT, "bench/generate-multirank.mjs");
const INTERLEAVED = goldenCopy("cross-rank/case-11-0012/input.jsonl");

let dir = "";
let job = "";

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-export-"));
  job = join(dir, "job");
  // 6 ranks with nested phases (train > forward/backward/optimizer), a cross-rank spike, alerts,
  // collector transitions; a small rollover so that sessions span several segments.
  execFileSync(
    process.execPath,
    [
      "--import",
      "tsx",
      GENERATOR,
      job,
      "--ranks",
      "6",
      "--samples",
      "3300",
      "--rollover-events",
      "1500",
      "--quiet",
    ],
    { cwd: ROOT, stdio: "pipe" },
  );
}, 60_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function streamed(
  path: string,
  sessionId?: string,
  options: StreamPerfettoOptions = {},
): Promise<string> {
  let text = "";
  for await (const chunk of streamPerfettoTrace(path, {
    ...options,
    ...(sessionId === undefined ? {} : { sessionId }),
  }))
    text += chunk;
  return text;
}

/** The event oracle's trace of the selection the sink reader loads. */
async function oracle(path: string, sessionId?: string): Promise<string> {
  const { selection, events } = await loadDistributedEvents(
    path,
    sessionId === undefined ? {} : { sessionId },
  );
  return formatPerfettoTrace(
    buildPerfettoTraceFromEvents(events, { sessionId: selection.summary?.session_id ?? null }),
  );
}

/** Checks a streamed trace against the oracle's: the same events as written, the same `otherData`. */
async function expectLikeOracle(
  path: string,
  sessionId?: string,
  options: StreamPerfettoOptions = {},
): Promise<number> {
  const text = await streamed(path, sessionId, options);
  expect(checkChromeTrace(text).problems).toEqual([]);
  const actual = traceContent(text);
  const expected = traceContent(await oracle(path, sessionId));
  expect(sameEvents(actual.events, expected.events)).toEqual({ missing: [], extra: [] });
  expect(actual.tail).toBe(expected.tail);
  return actual.events.length;
}

/** Lines in a fixed pseudo-random order: storage order is not time order. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const keyed = items.map((item, i) => ({ item, key: Math.sin(i * 12.9898 + seed) * 43758.5453 }));
  return keyed.sort((a, b) => (a.key % 1) - (b.key % 1)).map(({ item }) => item);
}

async function built(path: string, sessionId?: string): Promise<string> {
  const { selection, events } = await loadDistributedEvents(
    path,
    sessionId === undefined ? {} : { sessionId },
  );
  return formatPerfettoTrace(
    buildPerfettoTrace(events, { sessionId: selection.summary?.session_id ?? null }),
  );
}

/** Events as canonical JSON strings, sorted: the trace's content regardless of array order. */
function eventSet(trace: ParsedTrace): string[] {
  return trace.traceEvents.map((event) => JSON.stringify(event)).sort();
}

describe("streamPerfettoTrace", () => {
  it("writes the event oracle's trace of the loaded selection, as buildPerfettoTrace does", async () => {
    expect(await expectLikeOracle(job)).toBeGreaterThan(1000);
    const stream = checkChromeTrace(await streamed(job));
    const memory = checkChromeTrace(await built(job));
    expect(stream.trace.traceEvents.length).toBeGreaterThan(1000);
    expect(eventSet(stream.trace)).toEqual(eventSet(memory.trace));
    expect(stream.trace.otherData).toEqual(memory.trace.otherData);
    expect(stream.trace.otherData).toMatchObject({ ranks: "0,1,2,3,4,5", job_id: "bench-job-64" });
    const categories = new Set(stream.trace.traceEvents.map((event) => event.cat));
    for (const category of ["phase", "spike", "alert", "collector", "lifecycle"])
      expect(categories.has(category)).toBe(true);
  });

  it("passes the Trace Event Format checks, with nested phase slices", async () => {
    const { trace, problems } = checkChromeTrace(await streamed(job));
    expect(problems).toEqual([]);
    const depths = sliceDepths(trace);
    expect(depths.get(1)).toBeGreaterThan(0);
    expect(depths.get(2)).toBeGreaterThan(10);
    // Every process with timed events is named, and every slice lane is a named thread.
    const processes = new Set(trace.traceEvents.filter((e) => e.name === "process_name").map((e) => e.pid));
    const threads = new Set(
      trace.traceEvents
        .filter((e) => e.name === "thread_name")
        .map((e) => `${String(e.pid)}/${String(e.tid)}`),
    );
    for (const event of trace.traceEvents) {
      if (event.ph === "M") continue;
      expect(processes.has(event.pid)).toBe(true);
      if (event.ph === "X") expect(threads.has(`${String(event.pid)}/${String(event.tid)}`)).toBe(true);
    }
    // Metadata of a rank comes before its events (viewers that read in one pass name tracks right).
    const named = new Set<unknown>();
    for (const event of trace.traceEvents) {
      if (event.name === "process_name") named.add(event.pid);
      else if (event.ph !== "M" && event.cat !== "spike" && event.cat !== "gap")
        expect(named.has(event.pid)).toBe(true);
    }
  });

  it("writes the oracle's trace of generated per-rank sinks, built, reused and without an index", async () => {
    for (const [seed, ranks] of [
      [11, 3],
      [12, 5],
    ] as const) {
      const root = join(dir, `generated-${seed}`);
      const events = perfettoCase({ seed, ranks, layout: "group" });
      for (let rank = 0; rank < ranks; rank++) {
        const own = events.filter((event) => event.rank === rank);
        // Small segments, lines out of time order.
        writeSink(join(root, `rank-${rank}`), shuffled(own, seed + rank), { segmentSize: 37 });
      }
      const cacheDir = join(dir, `cache-${seed}`);
      const count = await expectLikeOracle(root, undefined, { cacheDir });
      expect(count).toBeGreaterThan(50 * ranks);
      expect(readdirSync(cacheDir).length).toBeGreaterThan(0);
      expect(await expectLikeOracle(root, undefined, { cacheDir })).toBe(count);
      expect(await expectLikeOracle(root, undefined, { index: false })).toBe(count);
      expect(await expectLikeOracle(root, `run-rank${ranks - 1}`, { cacheDir })).toBeGreaterThan(50);
    }
  });

  it("writes the oracle's trace of sessions sharing ranks in one file, each picked by id", async () => {
    const file = join(dir, "shared.jsonl");
    const events = perfettoCase({ seed: 21, ranks: 3, layout: "shared", sessions: 3 });
    writeFileSync(
      file,
      shuffled(events, 21)
        .map((event) => `${encodeTelemetryRecord(event)}\n`)
        .join(""),
    );
    const cacheDir = join(dir, "cache-shared");
    for (const sessionId of [undefined, "run-z", "run-y", "run-x"])
      expect(await expectLikeOracle(file, sessionId, { cacheDir })).toBeGreaterThan(100);
  });

  it("writes the oracle's trace of a segment with more instants than the index keeps", async () => {
    const sink = join(dir, "alerts");
    const events: TelemetryEvent[] = [record("start", BASE_NS, { metadata: { memory_capabilities: {} } })];
    for (let i = 1; i <= 2500; i++)
      events.push(
        record(
          i % 2 === 0 ? "sample" : i % 5 === 0 ? "collector_degraded" : "warning",
          BASE_NS + BigInt(i) * MS,
          {
            context: `alert ${i}`,
            allocator_allocated_bytes: i * 1024,
            metadata: { i },
          },
        ),
      );
    mkdirSync(sink);
    writeSink(sink, events, { segmentSize: 5000 });
    const cacheDir = join(dir, "cache-alerts");
    const count = await expectLikeOracle(sink, undefined, { cacheDir });
    expect(count).toBeGreaterThan(2500);
    expect(await expectLikeOracle(sink, undefined, { cacheDir })).toBe(count);
  });

  it("writes the oracle's trace of the golden sinks and files", async () => {
    const cacheDir = join(dir, "cache-golden");
    for (const name of readdirSync(join(GOLDEN, "python-sink")))
      await expectLikeOracle(goldenCopy(`python-sink/${name}/sink`), undefined, { cacheDir });
    for (const name of ["case-11-0003", "case-11-0012", "case-11-0019"])
      expect(
        await expectLikeOracle(goldenCopy(`cross-rank/${name}/input.jsonl`), undefined, { cacheDir }),
      ).toBeGreaterThan(0);
  });

  it("handles several sessions interleaved in one JSONL file, and --session-id", async () => {
    const stream = checkChromeTrace(await streamed(INTERLEAVED));
    expect(stream.problems).toEqual([]);
    expect(eventSet(stream.trace)).toEqual(eventSet(checkChromeTrace(await built(INTERLEAVED)).trace));
    const one = checkChromeTrace(await streamed(INTERLEAVED, "session-11-12-rank2"));
    expect(eventSet(one.trace)).toEqual(
      eventSet(checkChromeTrace(await built(INTERLEAVED, "session-11-12-rank2")).trace),
    );
    expect(new Set(one.trace.traceEvents.map((event) => event.pid))).toEqual(new Set([3]));
  });

  it("releases what it holds when the reader stops early (the spill directory of a run without an index)", async () => {
    const spillRoot = mkdtempSync(join(tmpdir(), "stormlog-spill-root-"));
    const saved = {
      TMPDIR: process.env.TMPDIR,
      STORMLOG_SPILL_MIN_BYTES: process.env.STORMLOG_SPILL_MIN_BYTES,
    };
    process.env.TMPDIR = spillRoot;
    process.env.STORMLOG_SPILL_MIN_BYTES = "1";
    try {
      let spilled: string[] = [];
      for await (const chunk of streamPerfettoTrace(job, { index: false })) {
        expect(chunk.length).toBeGreaterThan(0);
        spilled = readdirSync(spillRoot);
        break;
      }
      expect(spilled).toHaveLength(1);
      expect(readdirSync(spillRoot)).toEqual([]);
    } finally {
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
      rmSync(spillRoot, { recursive: true, force: true });
    }
  });

  it("the format checker flags what Perfetto would drop or reject", () => {
    const bad = {
      traceEvents: [
        { name: "process_name", ph: "M", pid: 0, args: { name: "idle" } },
        { name: "outer", ph: "X", pid: 1, tid: 2, ts: 0, dur: 10 },
        { name: "inner", ph: "X", pid: 1, tid: 2, ts: 5, dur: 10 },
        { name: "mem", ph: "C", pid: 1, ts: 1, args: { bytes: "12" } },
        { name: "alert", ph: "i", s: "x", pid: 1, tid: 1, ts: 2 },
        { name: "begin", ph: "B", pid: 1, tid: 3, ts: 1 },
        { name: "neg", ph: "X", pid: 1, tid: 4, ts: -1, dur: -2 },
      ],
      displayTimeUnit: "s",
    };
    const { problems } = checkChromeTrace(JSON.stringify(bad));
    expect(problems).toHaveLength(8);
    expect(problems.join("\n")).toMatch(/pid 0/);
    expect(problems.join("\n")).toMatch(/overlaps its parent/);
    expect(() => checkChromeTrace('{"traceEvents": [{"ts": NaN}]}')).toThrow();
  });
});

describe("openSelectedEvents", () => {
  it("streams the selected sessions' events in storage order, as the sink reader reads them", async () => {
    const selected = await openSelectedEvents(job);
    expect(selected.selection.memberSessionIds).toHaveLength(6);
    const members = new Set(selected.selection.memberSessionIds);
    const expected: string[] = [];
    for await (const event of iterateTelemetryEvents(job))
      if (members.has(event.session_id)) expected.push(encodeTelemetryRecord(event));
    const got: string[] = [];
    for await (const event of selected.events()) got.push(encodeTelemetryRecord(event));
    expect(got).toEqual(expected);
    expect(selected.eventCount).toBe(expected.length);

    const one = await openSelectedEvents(job, { sessionId: "bench-session-002" });
    let count = 0;
    for await (const event of one.events()) {
      expect(event.session_id).toBe("bench-session-002");
      count++;
    }
    expect(count).toBe(one.eventCount);
    expect(count).toBeGreaterThan(3300);
  });
});
