import { readdirSync, readFileSync, truncateSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { parseManifest } from "../../src/directory/manifest.js";
import {
  iterateTelemetryEvents,
  readOOMDumpSync,
  summarizeTelemetrySessions,
  TelemetrySink,
  TelemetrySourceError,
} from "../../src/index.js";
import { resolveTelemetryInputSync } from "../../src/reader/input.js";
import { quiet, segmentNames, tempDir } from "../helpers.js";

/** A sink directory written by the sink, one closed session of `count` samples in one segment. */
async function writtenSink(count: number): Promise<{ dir: string; segment: string; sessionId: string }> {
  const dir = join(tempDir(), "sink");
  const sink = new TelemetrySink({ rootDir: dir, ...quiet });
  const { session_id: sessionId } = sink.startSession();
  for (let seq = 0; seq < count; seq++) sink.append(sampleRecord(sessionId, seq));
  await sink.close();
  const [name] = segmentNames(dir);
  return { dir, segment: join(dir, name!), sessionId };
}

describe("parseManifest's onInvalid", () => {
  const told = (text: string): string[] => {
    const problems: string[] = [];
    parseManifest(text, { onInvalid: (problem) => problems.push(problem) });
    return problems;
  };

  it("says why text is no usable sink manifest, once", () => {
    expect(told("{garbage")).toEqual([expect.stringMatching(/^not JSON: /)]);
    expect(told("  \n")).toEqual(["empty"]);
    expect(told("[]")).toEqual(["the JSON is a list, not an object"]);
    expect(told('"manifest"')).toEqual(["the JSON is a string, not an object"]);
    expect(told("{}")).toEqual(['no "segments" list']);
    expect(told('{"segments": {}, "sessions": true}')).toEqual([
      '"segments" is an object, not a list; "sessions" is a boolean, not a list',
    ]);
  });

  it("is silent for the manifests the sink writes, empty or not", async () => {
    const { dir } = await writtenSink(3);
    expect(told(readFileSync(join(dir, "manifest.json"), "utf8"))).toEqual([]);
    expect(told('{"schema_version": 2, "format": "x", "sessions": [], "segments": []}')).toEqual([]);
  });
});

describe("parseManifest's onWarning", () => {
  it("names each entry it skips by its index, says why and what follows, and keeps the others", () => {
    const warnings: string[] = [];
    const session = {
      session_id: "s",
      status: "completed",
      started_at_ns: 1,
      ended_at_ns: 2,
      host: "h",
      pid: 1,
      source: "stormlog.tracker",
    };
    const manifest = parseManifest(
      JSON.stringify({
        schema_version: 2,
        sessions: [session, 7, { ...session, session_id: "" }],
        segments: [{ filename: "segment-000001.jsonl" }, "segment-000002.jsonl", {}, { filename: null }],
        session_losses: [null, { dropped_io_error: 1 }, { session_id: "s", dropped_io_error: 2 }],
      }),
      { onWarning: (message) => warnings.push(message) },
    );
    expect(manifest!.sessions.map((entry) => entry.session_id)).toEqual(["s"]);
    expect(manifest!.segments.map((entry) => entry.filename)).toEqual(["segment-000001.jsonl"]);
    expect(manifest!.session_losses).toHaveLength(1);
    expect(warnings).toEqual([
      "manifest entry sessions[1] skipped (a number, not an object): its session's status comes from its events instead",
      "manifest entry sessions[2] skipped (session_id must be a non-empty string): its session's status comes from its events instead",
      "manifest entry segments[1] skipped (a string, not an object): the segment files are still read, unchecked against it",
      'manifest entry segments[2] skipped (no "filename"): the segment files are still read, unchecked against it',
      'manifest entry segments[3] skipped ("filename" is null): the segment files are still read, unchecked against it',
      "manifest entry session_losses[0] skipped (null, not an object): the records it says were lost are not counted",
      "manifest entry session_losses[1] skipped (session_id must be a non-empty string): the records it says were lost are not counted",
    ]);
  });
});

describe("a damaged sink directory", () => {
  it("a segment cut short: the loaders name both counts, the session's own warnings stay the reference's", async () => {
    const { dir, segment } = await writtenSink(40);
    const lines = readFileSync(segment, "utf8").split("\n");
    truncateSync(segment, Buffer.byteLength(`${lines.slice(0, 15).join("\n")}\n${lines[15]!.slice(0, 7)}`));
    const warnings: string[] = [];
    const [session] = await summarizeTelemetrySessions(dir, {
      onWarning: (message) => warnings.push(message),
    });
    expect(session!.eventCount).toBe(15);
    expect(warnings).toEqual([
      expect.stringContaining(`${segment}:16: dropped a final line cut short`),
      `${segment}: 15 of the 40 events its manifest says were written could be read (25 missing: the file ` +
        "was cut short, e.g. by a crash before its data reached the disk, or by an incomplete copy)",
    ]);
    expect(session!.warnings).toEqual([warnings[0]]);
  });

  it("an intact segment: no warning", async () => {
    const { dir } = await writtenSink(10);
    const warnings: string[] = [];
    await summarizeTelemetrySessions(dir, { onWarning: (message) => warnings.push(message) });
    expect(warnings).toEqual([]);
  });

  it("a garbage manifest: named with what is wrong, and the segments' events still read", async () => {
    const { dir, sessionId } = await writtenSink(12);
    writeFileSync(join(dir, "manifest.json"), "\u0000\u0001 not json");
    const warnings: string[] = [];
    const input = resolveTelemetryInputSync(dir, (message) => warnings.push(message));
    expect(input.parts[0]!.manifestProblem).toMatch(/^not JSON: /);
    expect(input.parts[0]!.segments).toHaveLength(1);
    expect(warnings).toEqual([
      expect.stringMatching(
        new RegExp(
          `^${join(dir, "manifest.json")} is not a usable sink manifest \\(not JSON: .*\\): the segment-`,
        ),
      ),
    ]);
    const sessions = await summarizeTelemetrySessions(dir);
    expect(sessions.map((session) => [session.summary.session_id, session.eventCount])).toEqual([
      [sessionId, 12],
    ]);
  });

  it("a garbage manifest and no segment: a TelemetrySourceError, nothing to read", async () => {
    const { dir } = await writtenSink(2);
    writeFileSync(join(dir, "manifest.json"), "[1, 2]");
    for (const name of segmentNames(dir)) unlinkSync(join(dir, name));
    for (const path of [dir, join(dir, "manifest.json")]) {
      expect(() => resolveTelemetryInputSync(path)).toThrow(TelemetrySourceError);
      expect(() => resolveTelemetryInputSync(path)).toThrow(
        /Nothing to read: .*manifest\.json is not a sink manifest \(the JSON is a list, not an object\)/,
      );
    }
  });

  it("a folder with an events.json is no OOM dump without the recorder's manifest or metadata", async () => {
    const { dir } = await writtenSink(2);
    expect(readOOMDumpSync(dir)).toBeNull();
    const other = tempDir();
    writeFileSync(join(other, "events.json"), "[]");
    writeFileSync(join(other, "metadata.json"), '{"note": "mine"}');
    expect(readOOMDumpSync(other)).toBeNull();
    expect(() => resolveTelemetryInputSync(other)).toThrow(/Not a sink directory/);
    expect(readdirSync(other).sort()).toEqual(["events.json", "metadata.json"]);
  });
});

describe("a segment removed while the input is read", () => {
  it("is read without (retention pruned it between the listing and the read), with a warning", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, rolloverMaxEvents: 10, flushEveryEvents: 10 });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 30; i++) sink.append(sampleRecord("s", i));
    await sink.close();
    const segments = segmentNames(dir);
    expect(segments).toHaveLength(3);
    const warnings: string[] = [];
    const events = iterateTelemetryEvents(dir, { onWarning: (message) => warnings.push(message) });
    // The first segment is open; the second goes before the reader reaches it.
    const first = await events.next();
    expect(first.done).toBe(false);
    unlinkSync(join(dir, segments[1]!));
    let read = 1;
    for await (const _ of events) read++;
    expect(read).toBe(20);
    expect(warnings.join("\n")).toContain(`${segments[1]}: removed while the input was read`);
  });
});
