/**
 * Hostile input, read by the analysis's own scan (its byte-level fast path and the general path,
 * with and without its index): deep nesting and impossible time spans are typed errors naming the
 * file and the line, and the file system's refusals are `TelemetryInputAccessError`s.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, JsonlDecodeError, type JsonObject, parseJson } from "@stormlog/core";
import { JsonTooDeepError } from "@stormlog/core/internal";
import { TelemetryInputAccessError } from "@stormlog/sink";
import { removedWhileRead } from "@stormlog/sink/internal";
import { afterAll, describe, expect, it } from "vitest";
import {
  BASE_NS,
  deepJson,
  MS,
  record,
  samples,
  writeSink,
} from "../../../sink/test/support/telemetry-fixtures.js";
import {
  analyzeTelemetry,
  buildPerfettoTrace,
  formatPerfettoTrace,
  streamPerfettoTrace,
  TimeRangeError,
} from "../../src/index.js";
import { CanonicalLineReader } from "../../src/input/fast-line.js";
import { scanSegmentSync } from "../../src/input/scan.js";
import { fingerprint, locateInput } from "../../src/input/snapshot.js";
import { buildPerfettoTraceFromEvents, traceContent } from "../oracles/perfetto-events.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-hostile-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
let made = 0;
const fresh = (): string => join(temp, `case-${++made}`);

/** What `analyzeTelemetry` threw, with and without the index (the same error both ways). */
async function refusal(path: string): Promise<Error> {
  const errors: Error[] = [];
  for (const index of [true, false]) {
    try {
      await analyzeTelemetry(path, { index });
    } catch (error) {
      errors.push(error as Error);
      continue;
    }
    throw new Error(`analyzeTelemetry(index: ${index}) read ${path}`);
  }
  expect(errors[1]!.message).toBe(errors[0]!.message);
  expect(errors[0]!.message).not.toContain("\n");
  return errors[0]!;
}

/** Whether the scan's fast path reads `line`. */
function fastPathReads(line: string): boolean {
  const bytes = Buffer.from(`${line}\n`, "utf8");
  return new CanonicalLineReader().read(bytes, 0, bytes.length - 1);
}

describe("JSON nested 5,000 deep", () => {
  it("is refused naming the file and line, on the fast path's lines and the general path's", async () => {
    const dir = fresh();
    const [segment] = writeSink(dir, samples(6));
    const lines = readFileSync(segment!, "utf8").split("\n");
    const canonical = lines[3]!.replace('"metadata": {}', `"metadata": {"x": ${deepJson(3)}}`);
    // The fast path reads this layout; nested 5,000 deep it declines, and the general path refuses it.
    expect(fastPathReads(canonical)).toBe(true);
    const deepCanonical = canonical.replace(deepJson(3), deepJson(5000));
    expect(fastPathReads(deepCanonical)).toBe(false);
    // Keys out of the canonical order: the general path from the start.
    const general = `{"zzz": ${deepJson(5000)}, ${lines[3]!.slice(1)}`;
    expect(fastPathReads(general)).toBe(false);
    for (const text of [deepCanonical, general]) {
      writeFileSync(segment!, [...lines.slice(0, 3), text, ...lines.slice(4)].join("\n"));
      const error = await refusal(dir);
      expect(JsonlDecodeError.isInstance(error)).toBe(true);
      expect(error.message).toMatch(new RegExp(`nested deeper than 512 levels.*\\(${segment}:4\\)$`));
      // The segment given alone: the same.
      expect((await refusal(segment!)).message).toBe(error.message);
    }
  });
});

describe("a final line without newline nested 600 deep", () => {
  it("is refused when its brackets close (whole, as the reference parses it), dropped when cut short", async () => {
    const dir = fresh();
    const [segment] = writeSink(dir, samples(6));
    const lines = readFileSync(segment!, "utf8")
      .split("\n")
      .filter((line) => line !== "");
    const whole = `{"zzz": ${deepJson(600)}, ${lines[5]!.slice(1)}`;
    writeFileSync(segment!, [...lines.slice(0, 5), whole].join("\n"));
    const error = await refusal(dir);
    expect(JsonTooDeepError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(new RegExp(`nested deeper than 512 levels.*\\(${segment}:6\\)$`));
    writeFileSync(segment!, [...lines.slice(0, 5), whole.slice(0, 700)].join("\n"));
    for (const index of [false, true]) {
      const report = await analyzeTelemetry(dir, { index });
      expect(report.summary.event_count).toBe(5);
      // The manifest's count says one is missing too.
      expect(report.sink.warnings).toContainEqual(
        expect.stringContaining(`${segment}:6: dropped a final line cut short`),
      );
    }
  });
});

describe("bytes that are not UTF-8", () => {
  it("are refused naming the file and line; a final line cut inside a character is dropped", async () => {
    const dir = fresh();
    const [segment] = writeSink(dir, samples(5));
    const bytes = readFileSync(segment!);
    const lines = bytes.toString("latin1").split("\n");
    lines[2] = lines[2]!.replace('"context": null', '"context": "ab\xff\xfe"');
    writeFileSync(segment!, Buffer.from(lines.join("\n"), "latin1"));
    const error = await refusal(dir);
    expect(JsonlDecodeError.isInstance(error)).toBe(true);
    expect(error.message).toMatch(new RegExp(`^bytes that are not UTF-8.*\\(${segment}:3\\)$`));
    writeFileSync(segment!, Buffer.concat([bytes, Buffer.from('{"context": "caf\xc3', "latin1")]));
    const report = await analyzeTelemetry(dir, { index: false });
    expect(report.summary.event_count).toBe(5);
    expect(report.sink.warnings).toEqual([
      expect.stringContaining(`${segment}:6: dropped a final line cut short`),
    ]);
  });
});

describe("timestamps too far apart for one capture", () => {
  const farther = BASE_NS + 200n * 86_400n * 1_000_000_000n;

  it("name the segment and the line where the span broke", async () => {
    const dir = fresh();
    const [segment] = writeSink(dir, [...samples(3), ...samples(2, { start: farther })]);
    const error = await refusal(dir);
    expect(TimeRangeError.isInstance(error)).toBe(true);
    expect(error.message).toContain(`2^53 ns (about 104 days) or more apart (${segment}:4)`);
  });

  it("are refused from 2^53 ns on, the fast path's seconds and nanoseconds included", async () => {
    const limit = 2n ** 53n;
    // 2^53 + 3 and 2^53 + 4 ns round to the same double: analysed, the two would swap places.
    for (const span of [limit, limit + 3n, limit + 999_999_999n - (limit % 1_000_000_000n)]) {
      const dir = fresh();
      const events = [...samples(2), record("sample", BASE_NS + span)];
      const [segment] = writeSink(dir, events);
      const lines = readFileSync(segment!, "utf8").trimEnd().split("\n");
      expect(fastPathReads(lines[2]!)).toBe(true);
      const error = await refusal(dir);
      expect(TimeRangeError.isInstance(error)).toBe(true);
      expect(error.message).toContain(`(${segment}:3)`);
    }
    // One nanosecond less is analysed, to the nanosecond.
    const dir = fresh();
    writeSink(dir, [...samples(2), record("sample", BASE_NS + limit - 1n)]);
    const report = await analyzeTelemetry(dir, { index: false });
    expect(report.summary.last_timestamp_ns).toBe(BASE_NS + limit - 1n);
  });

  it("quote a session id that would break the message's line", async () => {
    const dir = fresh();
    const id = "run\nFAKE";
    writeSink(
      dir,
      [...samples(2), ...samples(2, { start: farther })].map((event) => ({ ...event, session_id: id })),
    );
    const error = await refusal(dir);
    expect(error.message).toMatch(/^Session "run\\nFAKE" rank 0 has timestamps/);
  });

  it("name both segments when the span lies between them", async () => {
    const dir = fresh();
    const [first, second] = writeSink(dir, [...samples(3), ...samples(3, { start: farther })], {
      segmentSize: 3,
    });
    const error = await refusal(dir);
    expect(TimeRangeError.isInstance(error)).toBe(true);
    expect(error.message).toContain(`apart (${first} and ${second})`);
  });

  it("name the JSON document", async () => {
    const path = join(fresh(), "events.json");
    mkdirSync(join(path, ".."));
    const records = [...samples(3), ...samples(2, { start: farther })].map((event) =>
      encodeTelemetryRecord(event),
    );
    writeFileSync(path, `[\n${records.join(",\n")}\n]\n`);
    let caught: unknown;
    try {
      await analyzeTelemetry(path);
    } catch (error) {
      caught = error;
    }
    expect(TimeRangeError.isInstance(caught)).toBe(true);
    expect((caught as Error).message).toContain(`apart (${path}):`);
  });
});

describe("the file system's refusals are typed", () => {
  /** Checks a `TelemetryInputAccessError` with `code` about `path`. */
  function expectAccess(read: () => unknown, code: string, path: string): void {
    let caught: unknown;
    try {
      read();
    } catch (error) {
      caught = error;
    }
    expect(TelemetryInputAccessError.isInstance(caught)).toBe(true);
    expect(caught).toMatchObject({ code, path });
    expect((caught as Error).message).toContain(`(${code})`);
  }

  it("a link loop given as the input, to the locator, the fingerprints and the analysis", async () => {
    const loop = join(fresh(), "loop");
    mkdirSync(join(loop, ".."));
    symlinkSync(loop, loop);
    expectAccess(() => locateInput(loop), "ELOOP", loop);
    expectAccess(() => fingerprint(loop), "ELOOP", loop);
    const error = await refusal(loop);
    expect(TelemetryInputAccessError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ code: "ELOOP", path: loop });
  });

  it("a segment the scan cannot open or read", () => {
    const dir = fresh();
    mkdirSync(dir);
    const segment = (path: string) => ({ path, hint: null, defaultSessionId: "s" });
    // Listed, then gone: pruned by a live writer's retention, read without it (as the reader does).
    const gone = scanSegmentSync(segment(join(dir, "gone.jsonl")));
    expect(gone.eventCount).toBe(0);
    expect(gone.warnings.map((warning) => warning.message)).toEqual([
      removedWhileRead(join(dir, "gone.jsonl")),
    ]);
    // A directory opens, and its read fails.
    expectAccess(() => scanSegmentSync(segment(dir)), "EISDIR", dir);
  });

  it("a link loop inside the input", async () => {
    const dir = fresh();
    writeSink(join(dir, "rank-0"), samples(3));
    const loop = join(dir, "rank-0", "segment-000009.jsonl");
    symlinkSync(loop, loop);
    const error = await refusal(dir);
    expect(error).toMatchObject({ code: "ELOOP", path: loop });
    expect(error.message).toContain("remove or fix the looping link");
  });
});

describe("a __proto__ key in an alert's metadata", () => {
  it("is exported as data on the alert's instant, not as the prototype of its arguments", () => {
    const alert = record("warning", BASE_NS + MS, {
      context: "pressure",
      metadata: parseJson('{"__proto__": {"x": 1}, "ratio": 0.9}') as JsonObject,
    });
    const trace = buildPerfettoTrace([record("sample", BASE_NS), alert]);
    const instant = trace.traceEvents.find((event) => event.ph === "i" && event.cat === "alert");
    const metadata = instant?.args?.metadata as JsonObject;
    expect(Object.getPrototypeOf(metadata)).toBe(Object.prototype);
    expect(Object.keys(metadata)).toEqual(["__proto__", "ratio"]);
    expect(formatPerfettoTrace(trace)).toContain('"__proto__": {"x": 1}');
    expect(traceContent(formatPerfettoTrace(trace))).toEqual(
      traceContent(formatPerfettoTrace(buildPerfettoTraceFromEvents([record("sample", BASE_NS), alert]))),
    );
  });

  it("keeps it as data through the index, in the trace of a sink", async () => {
    const dir = fresh();
    const alert = record("warning", BASE_NS + MS, {
      metadata: parseJson('{"__proto__": {"x": 1}, "ratio": 1.0}') as JsonObject,
    });
    writeSink(dir, [record("sample", BASE_NS), alert]);
    for (let run = 0; run < 2; run++) {
      let text = "";
      for await (const chunk of streamPerfettoTrace(dir)) text += chunk;
      expect(text).toContain('"metadata": {"__proto__": {"x": 1}, "ratio": 1}');
    }
  });
});
