import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync } from "../../src/directory/manifest.js";
import { loadTelemetrySessions, TelemetrySink } from "../../src/index.js";
import { serializeManifest } from "../../src/internal.js";
import { fileLines, quiet, segmentNames, tempDir } from "../helpers.js";

const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden/python-sink");

function lines(sessionId: string, from: number, count: number): string {
  return Array.from(
    { length: count },
    (_, i) => `${encodeTelemetryRecord(sampleRecord(sessionId, from + i))}\n`,
  ).join("");
}

/** A directory as a writer killed mid-session leaves it: a running session, an open segment. */
function crashedSink(): string {
  const dir = tempDir();
  const body = lines("crashed", 0, 10);
  writeFileSync(join(dir, "segment-000001.jsonl"), body);
  const manifest = serializeManifest(
    [
      {
        session_id: "crashed",
        status: "running",
        started_at_ns: 1n,
        ended_at_ns: null,
        host: "h",
        pid: 1,
        job_id: null,
        rank: 0,
        local_rank: 0,
        world_size: 1,
        source: "stormlog.tracker",
      },
    ],
    // The manifest lags behind the file, as it does between two manifest writes.
    [
      {
        filename: "segment-000001.jsonl",
        event_count: 4,
        size_bytes: 100,
        closed: false,
        session_id: "crashed",
      },
    ],
  );
  writeFileSync(join(dir, "manifest.json"), manifest);
  return dir;
}

describe("opening an existing directory (recovery)", () => {
  it("marks running sessions interrupted, closes their segments and recounts them", () => {
    const dir = crashedSink();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.recovery).toMatchObject({
      interruptedSessionIds: ["crashed"],
      recountedSegments: ["segment-000001.jsonl"],
    });
    const manifest = readManifestSync(dir)!;
    expect(manifest.sessions[0]).toMatchObject({ status: "interrupted" });
    expect(manifest.sessions[0]!.ended_at_ns).not.toBeNull();
    expect(manifest.segments[0]).toEqual({
      filename: "segment-000001.jsonl",
      event_count: 10,
      size_bytes: statSync(join(dir, "segment-000001.jsonl")).size,
      closed: true,
      session_id: "crashed",
    });
  });

  it("removes a final line cut by a crash and reports it; completes a whole record that lacks its newline", () => {
    const dir = crashedSink();
    const full = encodeTelemetryRecord(sampleRecord("crashed", 10));
    appendFileSync(join(dir, "segment-000001.jsonl"), full.slice(0, 200));
    writeFileSync(join(dir, "segment-000002.jsonl"), `${lines("crashed", 11, 2)}${full}`);
    const warnings: string[] = [];
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger: { warn: (m) => warnings.push(m), info: (m) => warnings.push(m) },
    });
    // Each repair is also said where the user sees it, once.
    expect(warnings).toEqual([
      `${dir}: segment-000001.jsonl: removed a final line cut short by a crash (200 bytes)`,
      `${dir}: segment-000002.jsonl: completed a final record that lacked its newline`,
    ]);
    expect(sink.recovery?.repairedTails).toEqual([
      { filename: "segment-000001.jsonl", action: "truncated", droppedBytes: 200 },
      { filename: "segment-000002.jsonl", action: "terminated", droppedBytes: 0 },
    ]);
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(10);
    expect(readFileSync(join(dir, "segment-000002.jsonl"), "utf8").endsWith(`${full}\n`)).toBe(true);
    expect(sink.recovery?.adoptedSegments).toEqual(["segment-000002.jsonl"]);
    const segments = readManifestSync(dir)!.segments;
    expect(segments.map((s) => [s.filename, s.event_count, s.closed, s.session_id])).toEqual([
      ["segment-000001.jsonl", 10, true, "crashed"],
      ["segment-000002.jsonl", 3, true, "crashed"],
    ]);
  });

  it("keeps segments whose lines end in CR (lone or before LF) whole, and counts their lines as the reference reads them", async () => {
    const dir = crashedSink();
    const crOnly = lines("crashed", 10, 3).replaceAll("\n", "\r");
    const mixed = lines("crashed", 13, 3).replace("\n", "\r").replace("\n", "\r\n").replace(/\n$/, "\r");
    writeFileSync(join(dir, "segment-000002.jsonl"), crOnly);
    writeFileSync(join(dir, "segment-000003.jsonl"), mixed);
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    // Nothing cut: a final `\r` ends its line (the reference would cut each back to its last `\n`,
    // emptying the first).
    expect(sink.recovery?.repairedTails).toEqual([]);
    expect(readFileSync(join(dir, "segment-000002.jsonl"), "utf8")).toBe(crOnly);
    expect(readFileSync(join(dir, "segment-000003.jsonl"), "utf8")).toBe(mixed);
    const segments = readManifestSync(dir)!.segments;
    expect(segments.map((s) => [s.filename, s.event_count, s.session_id])).toEqual([
      ["segment-000001.jsonl", 10, "crashed"],
      ["segment-000002.jsonl", 3, "crashed"],
      ["segment-000003.jsonl", 3, "crashed"],
    ]);
    await sink.close();
    const [session] = await loadTelemetrySessions(dir);
    expect(session!.eventCount).toBe(16);
  });

  it("adopts a segment the manifest does not list whose one line ends in a carriage return with its session; counts no Unicode-space lines", () => {
    const dir = tempDir();
    // A CRLF line cut between its two bytes, and a line of Unicode spaces only (blank to Python's strip()).
    const only = `${encodeTelemetryRecord(sampleRecord("cut-crlf", 0))}\r`;
    writeFileSync(join(dir, "segment-000001.jsonl"), only);
    writeFileSync(join(dir, "segment-000002.jsonl"), `${lines("spaces", 0, 2)}\u00a0\u3000\u0085\n`);
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.recovery?.repairedTails).toEqual([]);
    const segments = readManifestSync(dir)!.segments;
    expect(segments.map((s) => [s.filename, s.event_count, s.session_id])).toEqual([
      ["segment-000001.jsonl", 1, "cut-crlf"],
      ["segment-000002.jsonl", 2, "spaces"],
    ]);
    expect(readFileSync(join(dir, "segment-000001.jsonl"), "utf8")).toBe(only);
  });

  it("recovers the same with a logger that throws (its messages are lost, not the sink)", () => {
    const dir = crashedSink();
    appendFileSync(
      join(dir, "segment-000001.jsonl"),
      encodeTelemetryRecord(sampleRecord("crashed", 10)).slice(0, 99),
    );
    const broken = () => {
      throw new Error("the user's logger broke");
    };
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger: { warn: broken, info: broken } });
    expect(sink.recovery?.repairedTails).toEqual([
      { filename: "segment-000001.jsonl", action: "truncated", droppedBytes: 99 },
    ]);
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(10);
  });

  it("rebuilds a malformed manifest from the segments", () => {
    const dir = crashedSink();
    writeFileSync(join(dir, "manifest.json"), '{"schema_version": 2, "sessions": [');
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.recovery).toMatchObject({ manifestFound: false, manifestRebuilt: true });
    const manifest = readManifestSync(dir)!;
    expect(manifest.sessions).toEqual([]);
    expect(manifest.segments).toEqual([
      {
        filename: "segment-000001.jsonl",
        event_count: 10,
        size_bytes: expect.any(Number),
        closed: true,
        session_id: "crashed",
      },
    ]);
  });

  it("rebuilds a missing manifest, and new segments continue the numbering", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "segment-000007.jsonl"), lines("old", 0, 3));
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.recovery?.manifestRebuilt).toBe(true);
    sink.startSession({ session_id: "new" });
    sink.append(sampleRecord("new", 0));
    await sink.close();
    expect(segmentNames(dir)).toEqual(["segment-000007.jsonl", "segment-000008.jsonl"]);
  });

  it("refuses manifest entries that name files outside the directory", () => {
    const outer = tempDir();
    const dir = join(outer, "sink");
    cpSync(crashedSink(), dir, { recursive: true });
    writeFileSync(join(outer, "secret.jsonl"), lines("secret", 0, 1));
    const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
    manifest.segments.push({
      filename: "../secret.jsonl",
      event_count: 1,
      size_bytes: 1,
      closed: true,
      session_id: "x",
    });
    manifest.segments.push({
      filename: "/etc/passwd",
      event_count: 1,
      size_bytes: 1,
      closed: true,
      session_id: "x",
    });
    writeFileSync(join(dir, "manifest.json"), JSON.stringify(manifest));
    const warnings: string[] = [];
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger: { warn: (m) => warnings.push(m), info: (m) => warnings.push(m) },
    });
    expect(sink.recovery?.warnings.filter((w) => w.includes("outside the sink directory"))).toHaveLength(2);
    expect(warnings).toEqual([
      `${dir}: manifest segment entry "../secret.jsonl" refused: it names a file outside the sink directory`,
      `${dir}: manifest segment entry "/etc/passwd" refused: it names a file outside the sink directory`,
    ]);
    expect(readManifestSync(dir)!.segments.map((s) => s.filename)).toEqual(["segment-000001.jsonl"]);
  });

  it("drops listed segments that no longer exist", () => {
    const dir = crashedSink();
    const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
    manifest.segments.unshift({
      filename: "segment-000000.jsonl",
      event_count: 5,
      size_bytes: 500,
      closed: true,
      session_id: "gone",
    });
    writeFileSync(join(dir, "manifest.json"), JSON.stringify(manifest));
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.recovery?.missingSegments).toEqual(["segment-000000.jsonl"]);
    expect(sink.getDiagnostics().final_retained_files).toBe(1);
  });

  it("removes the full-disk probe a killed writer left, and opens even when it cannot", () => {
    const dir = crashedSink();
    writeFileSync(join(dir, "segment.probe"), Buffer.alloc(64 << 10));
    new TelemetrySink({ rootDir: dir, ...quiet });
    expect(existsSync(join(dir, "segment.probe"))).toBe(false);

    // Something that cannot be unlinked by that name (a directory) does not stop the recovery.
    const other = crashedSink();
    mkdirSync(join(other, "segment.probe"));
    const sink = new TelemetrySink({ rootDir: other, ...quiet });
    expect(sink.recovery).toMatchObject({ interruptedSessionIds: ["crashed"] });
    expect(readManifestSync(other)!.sessions[0]).toMatchObject({ status: "interrupted" });
  });

  it("leaves a clean directory untouched", () => {
    const dir = tempDir();
    cpSync(join(FIXTURES, "single-completed/sink"), dir, { recursive: true });
    const before = readFileSync(join(dir, "manifest.json"), "utf8");
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.recovery?.manifestWritten).toBe(false);
    expect(readFileSync(join(dir, "manifest.json"), "utf8")).toBe(before);
  });

  it("reopens a Python sink and appends a new session beside the old ones", async () => {
    const dir = tempDir();
    cpSync(join(FIXTURES, "completed-then-crash/sink"), dir, { recursive: true });
    const clock = { nowNs: () => 1_800_000_000_000_000_000n };
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, retentionMaxFiles: 100, clock });
    sink.startSession({ session_id: "ts-session" });
    for (let i = 0; i < 30; i++) sink.append(sampleRecord("ts-session", i));
    await sink.close();
    const sessions = await loadTelemetrySessions(dir);
    expect(sessions.map((s) => [s.summary.session_id, s.summary.status, s.eventCount])).toEqual([
      ["ts-session", "completed", 30],
      ["efc71cec-cfca-4eb5-9f00-9b7b08837b4a", "completed", 62],
      ["9f73da84-13ee-4cb5-927a-2c31e1bec407", "interrupted", 46],
    ]);
    expect(segmentNames(dir).at(-1)).toBe("segment-000008.jsonl");
  });
});
