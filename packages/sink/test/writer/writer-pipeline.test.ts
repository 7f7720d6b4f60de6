// The writer encodes straight into its buffer and leaves each write running while it encodes the
// next records: what reaches the files must still be core's bytes, in order, with the reference's
// rollover, and flush/close/closeSync must still wait for (or redo) the write in flight.
import { existsSync, readdirSync, readlinkSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject, type TelemetryRecordV3 } from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync } from "../../src/directory/manifest.js";
import { TelemetrySink } from "../../src/index.js";
import { fileLines, memoryLogger, quiet, segmentNames, tempDir } from "../helpers.js";

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A phase boundary as the tracker writes it (phase_scope, the health keys, phase_counters). */
function phaseRecord(sessionId: string, seq: number, enter: boolean): TelemetryRecordV3 {
  const sample = sampleRecord(sessionId, seq, {
    withSeq: false,
    eventType: enter ? "phase_enter" : "phase_exit",
  });
  const scope: JsonObject = {
    action: enter ? "enter" : "exit",
    name: "step",
    path: ["train", "step"],
    depth: 1,
    scope_id: `scope-${seq >> 1}`,
    parent_scope_id: "scope-0",
    thread_id: 0,
    thread_name: "main",
    sequence: seq,
  };
  if (seq % 7 === 0) scope.attributes = { epoch: seq % 3, note: "é" };
  return {
    ...sample,
    context: `${enter ? "Phase entered" : "Phase exited"}: train / step`,
    metadata: { phase_scope: scope, ...sample.metadata, phase_counters: "last_sample" },
  };
}

/** Samples, phase boundaries, float-marked and unusual records, as a tracker's stream mixes them. */
function mixedStream(sessionId: string, count: number): TelemetryRecordV3[] {
  return Array.from({ length: count }, (_, i) => {
    if (i % 5 === 1 || i % 5 === 2) return phaseRecord(sessionId, i, i % 5 === 1);
    const record = sampleRecord(sessionId, i, { withSeq: i % 11 === 0 });
    if (i % 13 === 0) {
      record.metadata.collector_next_retry_epoch_s = 1_765_000_600;
      markFloat(record.metadata, "collector_next_retry_epoch_s");
    }
    if (i % 17 === 0) record.context = "unicode ☃ context 🙂";
    if (i % 19 === 0) record.metadata = { "astral 🙂 key": 1 };
    return record;
  });
}

/** Descriptors this process holds on files of `dir` (Linux: /proc/self/fd). */
function openFilesIn(dir: string): string[] {
  const open: string[] = [];
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(`${dir}/`)) open.push(target);
    } catch {
      // Closed while listing.
    }
  }
  return open;
}

function allLines(dir: string): string[] {
  return segmentNames(dir).flatMap((name) => fileLines(join(dir, name)));
}

describe("writer pipeline", () => {
  it("writes core's bytes for a mixed stream appended in batches across event-loop turns", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, rolloverMaxEvents: 700 });
    const records = mixedStream("mixed", 5000);
    for (let i = 0; i < records.length; i += 333) {
      for (const record of records.slice(i, i + 333)) sink.append(record);
      await turn();
    }
    await sink.close();
    expect(allLines(dir)).toEqual(records.map((record) => encodeTelemetryRecord(record)));
    expect(sink.getDiagnostics()).toMatchObject({
      written_events: 5000,
      dropped_events: 0,
      queued_events: 0,
    });
  });

  it("refuses invalid records in the middle of the stream and keeps the others in order", async () => {
    const dir = tempDir();
    const logger = memoryLogger();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger });
    const records = mixedStream("s", 400);
    const bad = new Set([3, 150, 399]);
    for (let i = 0; i < records.length; i++) {
      if (bad.has(i)) sink.append({ ...records[i]!, device_used_bytes: -1 });
      else sink.append(records[i]!);
      if (i % 97 === 0) await turn();
    }
    await sink.close();
    const kept = records.filter((_, i) => !bad.has(i));
    expect(allLines(dir)).toEqual(kept.map((record) => encodeTelemetryRecord(record)));
    expect(sink.getDiagnostics().rejected_events).toBe(3);
  });

  it("rolls over exactly as the reference while writes overlap encoding", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      flushEveryEvents: 10,
      flushEverySeconds: 3600,
      rolloverMaxEvents: 25,
      retentionMaxFiles: 1000,
    });
    sink.startSession({ session_id: "r" });
    const total = 1003;
    for (let i = 0; i < total; i += 41) {
      for (let j = i; j < Math.min(total, i + 41); j++) sink.append(sampleRecord("r", j));
      await turn();
    }
    await sink.close();
    const segments = sink.getSegments();
    // Rollover is checked after each flush of 10: a segment closes at the first flush reaching 25.
    for (const segment of segments.slice(0, -1)) expect(segment.event_count).toBe(30);
    expect(segments.reduce((sum, s) => sum + s.event_count, 0)).toBe(total);
    for (const segment of segments) {
      const lines = fileLines(join(dir, segment.filename));
      expect(lines).toHaveLength(segment.event_count);
      expect(Buffer.byteLength(`${lines.join("\n")}\n`)).toBe(segment.size_bytes);
    }
    expect(readManifestSync(dir)?.segments).toEqual(segments);
  });

  it("flush resolves once every record is on disk and counted", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    sink.startSession({ session_id: "f" });
    for (let batch = 0; batch < 5; batch++) {
      for (let i = 0; i < 900; i++) sink.append(sampleRecord("f", batch * 900 + i));
      await turn();
    }
    await sink.flush();
    expect(sink.pendingEvents).toBe(0);
    expect(sink.getDiagnostics()).toMatchObject({ appended_events: 4500, written_events: 4500 });
    expect(allLines(dir)).toHaveLength(4500);
    const manifest = readManifestSync(dir);
    expect(manifest?.segments.reduce((sum, s) => sum + s.event_count, 0)).toBe(4500);
    await sink.close();
  });

  it("closeSync redoes a write left running and loses nothing", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger: memoryLogger() });
    sink.startSession({ session_id: "x" });
    for (let i = 0; i < 3000; i++) sink.append(sampleRecord("x", i));
    // Catch a pass's write on the disk but not booked yet, then take over as process exit does. The
    // event loop is held while its bytes land, so its completion cannot be booked before closeSync.
    const first = join(dir, "segment-000001.jsonl");
    const bytesOnDisk = (): number => (existsSync(first) ? statSync(first).size : 0);
    let caught = false;
    const deadline = Date.now() + 10_000;
    while (!caught && Date.now() < deadline) {
      await turn();
      if (!existsSync(first)) continue;
      const held = Date.now() + 200;
      while (bytesOnDisk() === 0 && Date.now() < held) {}
      caught = bytesOnDisk() > 0 && sink.getDiagnostics().written_events === 0;
    }
    expect(caught).toBe(true);
    expect(sink.pendingEvents).toBe(3000);
    for (let i = 3000; i < 3100; i++) sink.append(sampleRecord("x", i));
    sink.closeSync();
    const lines = allLines(dir);
    expect(lines).toEqual(
      Array.from({ length: 3100 }, (_, i) => encodeTelemetryRecord(sampleRecord("x", i))),
    );
    expect(readManifestSync(dir)?.sessions[0]?.status).toBe("completed");
    expect(sink.getDiagnostics()).toMatchObject({ written_events: 3100, dropped_events: 0 });
  });

  it("counts a failed write left running once, and writes the later records in order", async () => {
    const dir = tempDir();
    // The first segment is /dev/full: its writes fail with ENOSPC, found when the write is waited for.
    symlinkSync("/dev/full", join(dir, "segment-000001.jsonl"));
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger: memoryLogger(),
      flushEveryEvents: 10,
      failureBackoffSeconds: 0.01,
      failureBackoffMaxSeconds: 0.02,
    });
    sink.startSession({ session_id: "e" });
    const records = Array.from({ length: 600 }, (_, i) => sampleRecord("e", i));
    for (let i = 0; i < records.length; i += 50) {
      for (const record of records.slice(i, i + 50)) sink.append(record);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    await sink.close();
    const { written_events: written, dropped_io_error: dropped } = sink.getDiagnostics();
    expect(dropped).toBeGreaterThan(0);
    expect(written + dropped).toBe(600);
    // What was written is the tail of the stream after the lost writes, in order, each once.
    const lines = segmentNames(dir)
      .filter((name) => name !== "segment-000001.jsonl")
      .flatMap((name) => fileLines(join(dir, name)));
    expect(lines).toEqual(records.slice(600 - written).map((record) => encodeTelemetryRecord(record)));
    expect(readManifestSync(dir)?.sessions[0]?.status).toBe("incomplete");
  });

  it.each([
    ["close", false],
    ["closeSync", true],
  ])("leaves no segment open after %s, rolled-over ones included", async (_, sync) => {
    const dir = tempDir();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      flushEveryEvents: 10,
      flushEverySeconds: 3600,
      rolloverMaxEvents: 20,
    });
    sink.startSession({ session_id: "c" });
    // 40 records: the second segment is rolled over by the last write, and nothing opens a third.
    for (let i = 0; i < 40; i++) {
      sink.append(sampleRecord("c", i));
      if (i % 10 === 9) await turn();
    }
    await sink.flush();
    if (sync) {
      sink.closeSync();
      // A sync started in the background before the exit path took over ends on its own.
      const deadline = Date.now() + 5000;
      while (openFilesIn(dir).length > 0 && Date.now() < deadline) await turn();
    } else {
      await sink.close();
    }
    expect(openFilesIn(dir)).toEqual([]);
    expect(sink.getSegments().map((s) => [s.event_count, s.closed])).toEqual([
      [20, true],
      [20, true],
    ]);
    expect(allLines(dir)).toHaveLength(40);
  });
});
