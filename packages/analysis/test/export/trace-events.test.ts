import { join } from "node:path";
import { parseJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { streamPerfettoTrace, streamTraceEvents, type TraceEvent } from "../../src/index.js";

const GOLDEN = join(import.meta.dirname, "../../../../fixtures/golden");
const INTERLEAVED = join(GOLDEN, "cross-rank/case-11-0012/input.jsonl");
const SINK = join(GOLDEN, "python-sink/single-completed/sink");

async function collect(path: string): Promise<{ events: TraceEvent[]; otherData: Record<string, string> }> {
  const events: TraceEvent[] = [];
  const stream = streamTraceEvents(path, { index: false });
  let step = await stream.next();
  while (step.done !== true) {
    events.push(step.value);
    step = await stream.next();
  }
  return { events, otherData: step.value.otherData };
}

async function text(path: string): Promise<string> {
  let out = "";
  for await (const chunk of streamPerfettoTrace(path, { index: false })) out += chunk;
  return out;
}

describe("streamTraceEvents", () => {
  it.each([
    ["a job's ranks in one file", INTERLEAVED],
    ["one sink", SINK],
  ])("yields the events streamPerfettoTrace writes, then its otherData (%s)", async (_, path) => {
    const { events, otherData } = await collect(path);
    const trace = parseJson(await text(path)) as unknown as {
      traceEvents: unknown[];
      otherData: Record<string, string>;
    };
    expect(events.length).toBeGreaterThan(10);
    expect(parseJson(JSON.stringify(events))).toEqual(trace.traceEvents);
    expect(otherData).toEqual(trace.otherData);
    expect(events.some((event) => event.ph === "C")).toBe(true);
  });
});
