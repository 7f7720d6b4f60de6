import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { decodeTelemetryJsonl, type JsonObject, parseJson, type TelemetryEvent } from "@stormlog/core";
import type { PhaseSpan } from "@stormlog/phases";
import { describe, expect, it } from "vitest";
import {
  buildPerfettoTrace,
  formatPerfettoTrace,
  type PerfettoExportOptions,
  type TraceEvent,
} from "../../src/index.js";
import { buildPerfettoTraceFromEvents, sameEvents, traceContent } from "../oracles/perfetto-events.js";
import { perfettoCase } from "./perfetto-cases.js";

const GOLDEN = join(import.meta.dirname, "../../../../fixtures/golden");
const CASE = join(GOLDEN, "cross-rank/case-11-0013");

function fileEvents(path: string): TelemetryEvent[] {
  return decodeTelemetryJsonl(readFileSync(path, "utf8")).map((line) => line.record as TelemetryEvent);
}

function caseEvents(): TelemetryEvent[] {
  return fileEvents(join(CASE, "input.jsonl"));
}

/**
 * Checks `buildPerfettoTrace` against the event oracle: the same trace events (as written, in any
 * order) and the same `otherData`. Returns how many events the trace has.
 */
function expectLikeOracle(events: readonly TelemetryEvent[], options: PerfettoExportOptions = {}): number {
  const actual = traceContent(formatPerfettoTrace(buildPerfettoTrace(events, options)));
  const expected = traceContent(formatPerfettoTrace(buildPerfettoTraceFromEvents(events, options)));
  expect(sameEvents(actual.events, expected.events)).toEqual({ missing: [], extra: [] });
  expect(actual.tail).toBe(expected.tail);
  return actual.events.length;
}

const BASE = 1_700_000_000_000_000_000n;

function sample(t: number, init: Partial<TelemetryEvent> = {}): TelemetryEvent {
  return {
    schema_version: 3,
    session_id: "s",
    timestamp_ns: BASE + BigInt(t) * 1_000_000n,
    event_type: "sample",
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 1,
    pid: 1,
    host: "h",
    job_id: null,
    rank: 0,
    local_rank: 0,
    world_size: 1,
    device_id: 0,
    allocator_allocated_bytes: 100,
    allocator_reserved_bytes: 200,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: 300,
    device_free_bytes: null,
    device_total_bytes: 1000,
    context: null,
    metadata: {},
    ...init,
  } as TelemetryEvent;
}

function phase(action: "enter" | "exit", t: number, path: string[], seq: number): TelemetryEvent {
  return sample(t, {
    event_type: `phase_${action}`,
    metadata: {
      phase_scope: {
        action,
        depth: path.length,
        name: path[path.length - 1]!,
        parent_scope_id: path.length > 1 ? `s:${path.slice(0, -1).join("/")}` : null,
        path,
        scope_id: `s:${path.join("/")}`,
        sequence: seq,
        thread_id: 7,
        thread_name: "MainThread",
      },
    },
  });
}

/** Complete slices of each (pid, tid) lane must nest: no partial overlap. */
function expectNested(events: readonly TraceEvent[]): number {
  const lanes = new Map<string, TraceEvent[]>();
  for (const event of events) {
    if (event.ph !== "X") continue;
    const key = `${event.pid}/${event.tid}`;
    lanes.set(key, [...(lanes.get(key) ?? []), event]);
  }
  let checked = 0;
  for (const slices of lanes.values()) {
    slices.sort((a, b) => a.ts! - b.ts! || b.dur! - a.dur!);
    const stack: number[] = [];
    for (const slice of slices) {
      const end = slice.ts! + slice.dur!;
      while (stack.length > 0 && stack[stack.length - 1]! <= slice.ts! + 1e-9) stack.pop();
      if (stack.length > 0) expect(end).toBeLessThanOrEqual(stack[stack.length - 1]! + 1e-6);
      stack.push(end);
      checked++;
    }
  }
  return checked;
}

describe("Perfetto export", () => {
  it("maps ranks to processes, phases to nested slices, memory to one-key counters", () => {
    const events = caseEvents();
    const trace = buildPerfettoTrace(events, { sessionId: "session-11-13" });
    const first = events.map((e) => e.timestamp_ns).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))[0]!;
    const ranks = [...new Set(events.map((e) => e.rank))].sort((a, b) => a - b);

    const names = trace.traceEvents.filter((e) => e.ph === "M" && e.name === "process_name");
    expect(names.map((e) => e.pid)).toEqual(ranks.map((rank) => rank + 1));
    expect(names[0]!.args).toEqual({ name: `rank ${ranks[0]} @ node-0` });
    const sortIndex = trace.traceEvents.filter((e) => e.name === "process_sort_index");
    expect(sortIndex.map((e) => e.args?.sort_index)).toEqual(ranks);

    const timed = trace.traceEvents.filter((e) => e.ph !== "M");
    expect(timed.every((e) => e.pid >= 1 && e.ts! >= 0)).toBe(true);
    expect(Math.min(...timed.map((e) => e.ts!))).toBe(0);

    expect(expectNested(trace.traceEvents)).toBeGreaterThan(0);
    for (const slice of trace.traceEvents.filter((e) => e.ph === "X")) {
      const args = slice.args as JsonObject;
      // Exact nanoseconds in args agree with the microsecond timestamp.
      expect(Number(BigInt(args.start_ns as string) - first) / 1000).toBeCloseTo(slice.ts!, 6);
      expect(slice.name).toBe((args.phase_path as string).split(" / ").pop());
    }

    const counters = trace.traceEvents.filter((e) => e.ph === "C");
    expect(counters.length).toBeGreaterThan(0);
    for (const counter of counters) {
      expect(Object.keys(counter.args!)).toEqual(["bytes"]);
      expect(typeof counter.args!.bytes).toBe("number");
    }

    const warnings = events.filter((e) => e.event_type === "warning").length;
    expect(trace.traceEvents.filter((e) => e.ph === "i" && e.cat === "alert")).toHaveLength(warnings);

    const expected = parseJson(readFileSync(join(CASE, "expected.json"), "utf8")) as JsonObject;
    const suspects = (expected.first_cause_suspects as JsonObject[]).map((s) => Number(s.rank) + 1);
    const spikes = trace.traceEvents.filter((e) => e.cat === "spike");
    expect(spikes.map((e) => e.pid).sort()).toEqual(suspects.sort());
    expect(trace.otherData).toMatchObject({
      session_id: "session-11-13",
      first_timestamp_ns: first.toString(),
    });
  });

  it("serializes to JSON that parses back to the same events", () => {
    const trace = buildPerfettoTrace(caseEvents());
    const parsed = JSON.parse(formatPerfettoTrace(trace)) as {
      traceEvents: unknown[];
      displayTimeUnit: string;
    };
    expect(parsed.traceEvents).toHaveLength(trace.traceEvents.length);
    expect(parsed.displayTimeUnit).toBe("ms");
    expect(parsed.traceEvents[0]).toEqual(JSON.parse(JSON.stringify(trace.traceEvents[0])));
  });

  it("writes counters only when a value changes, and the hidden gap with a device total", () => {
    const trace = buildPerfettoTrace([
      sample(0),
      sample(1),
      sample(2, { device_used_bytes: 350 }),
      sample(3),
    ]);
    const byName = new Map<string, number[]>();
    for (const counter of trace.traceEvents.filter((e) => e.ph === "C")) {
      byName.set(counter.name, [...(byName.get(counter.name) ?? []), counter.args!.bytes as number]);
    }
    expect(byName.get("device 0 allocated")).toEqual([100]);
    expect(byName.get("device 0 device used")).toEqual([300, 350, 300]);
    expect(byName.get("device 0 hidden gap")).toEqual([100, 150, 100]);
  });

  it("cuts a slice that outlives its parent at the parent's end", () => {
    const span = (path: string[], start: number, end: number): PhaseSpan => ({
      sessionId: "s",
      rank: 0,
      threadId: 7,
      threadName: "MainThread",
      scopeId: `s:${path.join("/")}`,
      path,
      phasePath: path.join(" / "),
      depth: path.length,
      startNs: BASE + BigInt(start) * 1_000_000n,
      endNs: BASE + BigInt(end) * 1_000_000n,
      sequence: start,
      syntheticEnd: false,
    });
    // A replay that breaks nesting (two writers on one thread id): `forward` ends after `train`.
    const spans = [span(["train"], 0, 5), span(["train", "forward"], 2, 8), span(["eval"], 6, 7)];
    const index = { spansFor: () => spans, resolve: () => null, resolveForEvent: () => null };
    const trace = buildPerfettoTrace([sample(0), sample(9)], { phaseIndex: index });
    const slices = trace.traceEvents.filter((e) => e.ph === "X");
    expect(slices.map((e) => e.name)).toEqual(["train", "forward", "eval"]);
    expectNested(trace.traceEvents);
    const forward = slices[1]!;
    expect(forward.dur).toBe(3000);
    expect(forward.args).toMatchObject({ cut_at_parent_end_ns: (BASE + 5_000_000n).toString() });
    expect(slices[2]).toMatchObject({ ts: 6000, dur: 1000 });
  });

  it("replays real phase records into slices on one lane per thread", () => {
    const events = [
      phase("enter", 0, ["train"], 1),
      phase("enter", 2, ["train", "forward"], 2),
      phase("exit", 4, ["train", "forward"], 3),
      phase("exit", 5, ["train"], 4),
    ];
    const trace = buildPerfettoTrace(events);
    const slices = trace.traceEvents.filter((e) => e.ph === "X");
    expect(slices.map((e) => [e.name, e.ts, e.dur, e.tid])).toEqual([
      ["train", 0, 5000, 2],
      ["forward", 2000, 2000, 2],
    ]);
    const lane = trace.traceEvents.find((e) => e.name === "thread_name" && e.tid === 2);
    expect(lane?.args).toEqual({ name: "phases: MainThread" });
  });
});

describe("Perfetto export against the event oracle", () => {
  it("writes the oracle's trace for every golden input", () => {
    let cases = 0;
    for (const kind of ["cross-rank", "gap", "leaks"]) {
      for (const name of readdirSync(join(GOLDEN, kind))) {
        const events = fileEvents(join(GOLDEN, kind, name, "input.jsonl"));
        expect(expectLikeOracle(events, { sessionId: name })).toBeGreaterThan(0);
        cases++;
      }
    }
    expect(cases).toBeGreaterThan(50);
  });

  it("writes the oracle's trace for generated runs: ranks, sessions, alerts, health, boundary readings", () => {
    for (const [seed, ranks, layout] of [
      [1, 1, "group"],
      [2, 3, "group"],
      [3, 5, "group"],
      [4, 1, "shared"],
      [5, 3, "shared"],
      [6, 4, "shared"],
    ] as const) {
      const events = perfettoCase({ seed, ranks, layout, sessions: 3 });
      const kinds = new Set(events.map((event) => event.event_type));
      for (const kind of ["Sample", " Sample ", "\u017fample", "collector_degraded", "cleanup", "start"])
        expect(kinds.has(kind)).toBe(true);
      const count = expectLikeOracle(events);
      expect(count).toBeGreaterThan(50 * ranks);
      expectLikeOracle(events, { analyses: false, sessionId: `seed ${seed}` });
      // In any order: ties keep the order given.
      const rand = Math.sin(seed);
      const shuffled = [...events].sort((a, b) =>
        a.rank === b.rank ? 0 : Math.sign(Math.sin(a.rank * 7 + rand) - Math.sin(b.rank * 7 + rand)),
      );
      expectLikeOracle(shuffled.reverse());
    }
  });

  it("names the job of the earliest record that has one, ties in storage order", () => {
    const at = (ms: number, jobId: string | null, rank = 0): TelemetryEvent =>
      sample(ms, { job_id: jobId, rank, event_type: rank === 0 ? "sample" : "warning" });
    const tied = [at(1, "b", 1), at(1, "a"), at(0, null), at(1, "c", 1), at(2, "d")];
    expectLikeOracle(tied);
    expect(buildPerfettoTrace(tied).otherData.job_id).toBe("b");
    // An empty job id is the earliest one, and names no job.
    const empty = [at(0, ""), at(1, "x")];
    expectLikeOracle(empty);
    expect(buildPerfettoTrace(empty).otherData.job_id).toBeUndefined();
  });

  it("shows the records the oracle shows: instants with metadata, boundary counters, the analyses", () => {
    const events = perfettoCase({ seed: 3, ranks: 5, layout: "group" });
    const trace = buildPerfettoTrace(events);
    const categories = new Map<string, number>();
    for (const event of trace.traceEvents)
      if (event.cat !== undefined) categories.set(event.cat, (categories.get(event.cat) ?? 0) + 1);
    for (const category of ["phase", "alert", "collector", "lifecycle", "gap", "spike"])
      expect(categories.get(category) ?? 0).toBeGreaterThan(0);
    const start = trace.traceEvents.find((event) => event.name === "start")!;
    expect(start.args?.metadata).toEqual({ sampling: "10ms" });
    // Device 1 shows only through boundary readings and some samples of ranks 1 and 4; the host's
    // memory (device -1) of rank 2 is unprefixed.
    const names = new Set(trace.traceEvents.filter((event) => event.ph === "C").map((event) => event.name));
    expect(names.has("device 1 allocated")).toBe(true);
    expect(names.has("allocated")).toBe(true);
    expect(trace.otherData.job_id).toBe("job-7");
    expect(formatPerfettoTrace(trace)).toContain('"ratio": 1,');
  });
});
