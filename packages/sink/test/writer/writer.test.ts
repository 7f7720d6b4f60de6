import { existsSync, readFileSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord, InvalidConfigError, parseJson, type TelemetryRecordV3 } from "@stormlog/core";
import { describe, expect, it, vi } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { parseManifest, readManifestSync } from "../../src/directory/manifest.js";
import {
  loadTelemetrySessions,
  SinkSessionMismatchError,
  TelemetrySink,
  type TelemetrySinkOptions,
} from "../../src/index.js";
import { SINK_DEFAULTS } from "../../src/writer/config.js";
import { fileLines, memoryLogger, quiet, segmentNames, tempDir } from "../helpers.js";

/** How a warning names where a moved file went: the system tells on Linux (/proc). */
const movedTo = (path: string): string => (existsSync("/proc/self/fd") ? `moved to ${path}` : "moved away");

function manifestOf(dir: string) {
  const manifest = readManifestSync(dir);
  if (manifest === null) throw new Error(`no manifest in ${dir}`);
  return manifest;
}

describe("configuration", () => {
  it("has the reference's defaults", () => {
    const sink = new TelemetrySink({ rootDir: tempDir(), ...quiet });
    expect(sink.config).toMatchObject({
      flushEveryEvents: 50,
      flushEverySeconds: 2,
      rolloverMaxBytes: 64 * 1024 * 1024,
      rolloverMaxEvents: 10_000,
      retentionMaxFiles: 8,
      retentionMaxTotalBytes: 512 * 1024 * 1024,
      rollupWindowSeconds: 60,
      fsync: "segment",
    });
    expect(SINK_DEFAULTS.writeRollups).toBe(true);
  });

  it.each([
    ["flushEveryEvents", { flushEveryEvents: 0 }],
    ["flushEverySeconds", { flushEverySeconds: 0 }],
    ["rolloverMaxBytes", { rolloverMaxBytes: -1 }],
    ["rolloverMaxEvents", { rolloverMaxEvents: 1.5 }],
    ["retentionMaxFiles", { retentionMaxFiles: 0 }],
    ["retentionMaxTotalBytes", { retentionMaxTotalBytes: 0 }],
    ["retentionMaxTotalBytes", { rolloverMaxBytes: 2000, retentionMaxTotalBytes: 1000 }],
    ["rollupWindowSeconds", { rollupWindowSeconds: 0 }],
    ["maxQueueEvents", { maxQueueEvents: 0 }],
    ["fsync", { fsync: "sometimes" as "always" }],
  ])("rejects a bad %s", (option, bad) => {
    const attempt = () => new TelemetrySink({ rootDir: tempDir(), ...quiet, ...bad });
    expect(attempt).toThrow(InvalidConfigError);
    try {
      attempt();
    } catch (error) {
      expect((error as InvalidConfigError).option).toBe(option);
    }
  });
});

describe("writing", () => {
  it("writes canonical lines, a running ledger entry, then a completed one", async () => {
    const dir = tempDir();
    const logger = memoryLogger();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger });
    const session = sink.startSession({ source: "stormlog.tracker", job_id: "job-1" });
    await sink.flush();
    expect(manifestOf(dir).sessions).toMatchObject([{ session_id: session.session_id, status: "running" }]);

    const records = Array.from({ length: 120 }, (_, i) => sampleRecord(session.session_id, i));
    for (const record of records) sink.append(record);
    await sink.close();

    const lines = fileLines(join(dir, "segment-000001.jsonl"));
    expect(lines).toEqual(records.map((record) => encodeTelemetryRecord(record)));
    const manifest = manifestOf(dir);
    expect(manifest.schema_version).toBe(2);
    expect(manifest.format).toBe("stormlog.append_only_telemetry_sink");
    expect(manifest.sessions).toHaveLength(1);
    expect(manifest.sessions[0]).toMatchObject({
      status: "completed",
      source: "stormlog.tracker",
      job_id: "job-1",
    });
    expect(manifest.sessions[0]!.ended_at_ns).not.toBeNull();
    expect(manifest.segments).toEqual([
      {
        filename: "segment-000001.jsonl",
        event_count: 120,
        size_bytes: readFileSync(join(dir, "segment-000001.jsonl")).length,
        closed: true,
        session_id: session.session_id,
      },
    ]);
    expect(sink.getDiagnostics()).toMatchObject({
      appended_events: 120,
      written_events: 120,
      dropped_events: 0,
    });
    expect(logger.warnings).toEqual([]);
  });

  it("writes the manifest as Python's json.dumps(indent=2) does", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    const { session_id: id } = sink.startSession({
      session_id: "s-1",
      started_at_ns: 1795315973580213667n,
      host: "h",
      pid: 7,
    });
    sink.append(sampleRecord(id, 0));
    await sink.close();
    const text = readFileSync(join(dir, "manifest.json"), "utf8");
    expect(text).toMatch(
      /^\{\n {2}"schema_version": 2,\n {2}"format": "stormlog.append_only_telemetry_sink",\n {2}"sessions": \[\n {4}\{\n {6}"session_id": "s-1",\n {6}"status": "completed",\n {6}"started_at_ns": 1795315973580213667,/,
    );
    expect(text.endsWith("}\n")).toBe(true);
    expect(text).toContain('"job_id": null,');
    expect(text).toContain('"closed": true,');
  });

  it("starts a session from the first record, adopting its id and identity", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    sink.append(sampleRecord("adopted", 0, { rank: 1, worldSize: 2 }));
    expect(sink.currentSession()).toMatchObject({
      session_id: "adopted",
      rank: 1,
      world_size: 2,
      host: "trainer-a",
    });
    expect(() => sink.append(sampleRecord("other", 1))).toThrow(SinkSessionMismatchError);
    await sink.close();
    expect(manifestOf(dir).sessions.map((s) => [s.session_id, s.status])).toEqual([["adopted", "completed"]]);
  });

  it("never mixes sessions in a segment", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, flushEveryEvents: 7 });
    for (const id of ["a", "b", "c"]) {
      sink.startSession({ session_id: id });
      for (let i = 0; i < 30; i++) sink.append(sampleRecord(id, i));
      // Not awaited: the next session's records queue behind the close.
      void sink.close();
    }
    await sink.flush();
    const manifest = manifestOf(dir);
    expect(manifest.segments.map((s) => [s.filename, s.session_id, s.event_count])).toEqual([
      ["segment-000001.jsonl", "a", 30],
      ["segment-000002.jsonl", "b", 30],
      ["segment-000003.jsonl", "c", 30],
    ]);
    for (const segment of manifest.segments) {
      const ids = new Set(
        fileLines(join(dir, segment.filename)).map(
          (line) => (parseJson(line) as { session_id: string }).session_id,
        ),
      );
      expect([...ids]).toEqual([segment.session_id]);
    }
    expect(manifest.sessions.map((s) => s.status)).toEqual(["completed", "completed", "completed"]);
  });

  it("refuses invalid records without writing them, and says so once", async () => {
    const dir = tempDir();
    const logger = memoryLogger();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger });
    sink.startSession({ session_id: "s" });
    sink.append(sampleRecord("s", 0));
    sink.append({ ...sampleRecord("s", 1), rank: 3 });
    sink.append({ ...sampleRecord("s", 2), host: "  " });
    sink.append(sampleRecord("s", 3));
    await sink.close();
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(2);
    expect(sink.getDiagnostics().rejected_events).toBe(2);
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]).toContain("rank");
  });

  it("drops and counts records beyond the queue bound, logs once and closes the session incomplete", async () => {
    const dir = tempDir();
    const logger = memoryLogger();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger,
      maxQueueEvents: 100,
      flushEveryEvents: 1000,
    });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 250; i++) sink.append(sampleRecord("s", i));
    expect(sink.getDiagnostics()).toMatchObject({
      appended_events: 250,
      dropped_queue_full: 150,
      dropped_events: 150,
    });
    await sink.close();
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(100);
    expect(manifestOf(dir).sessions[0]!.status).toBe("incomplete");
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]).toContain("maxQueueEvents");
  });

  it("counts records its producer dropped as dropped for a full queue, and closes the session incomplete", async () => {
    const dir = tempDir();
    const logger = memoryLogger();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 10; i++) sink.append(sampleRecord("s", i));
    sink.countDropped(40);
    sink.countDropped(2);
    // Not a count: ignored rather than corrupting the counters.
    sink.countDropped(Number.NaN);
    sink.countDropped(-3);
    expect(sink.getDiagnostics()).toMatchObject({
      appended_events: 52,
      dropped_queue_full: 42,
      dropped_events: 42,
    });
    await sink.close();
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(10);
    const manifest = manifestOf(dir) as unknown as {
      sessions: { status: string }[];
      session_losses: { dropped_queue_full: number }[];
    };
    expect(manifest.sessions[0]!.status).toBe("incomplete");
    expect(manifest.session_losses[0]!.dropped_queue_full).toBe(42);
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]).toContain("faster than they can be written");
  });

  it("writes what is queued without a manifest write of its own (writeQueued)", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, flushEveryEvents: 10 });
    sink.startSession({ session_id: "s" });
    // The segment exists, and the manifest names it.
    sink.append(sampleRecord("s", 0));
    await sink.flush();
    const segment = join(dir, "segment-000001.jsonl");
    const manifestBefore = readFileSync(join(dir, "manifest.json"), "utf8");
    for (let i = 1; i <= 25; i++) sink.append(sampleRecord("s", i));
    expect(sink.queuedEvents).toBe(25);
    await sink.writeQueued();
    expect(sink.queuedEvents).toBe(0);
    // Two whole units of 10 go out (the last write may still be under way); the last 5 wait.
    await vi.waitFor(() => expect(fileLines(segment)).toHaveLength(21), { timeout: 5000 });
    expect(readFileSync(join(dir, "manifest.json"), "utf8")).toBe(manifestBefore);
    await sink.close();
    expect(fileLines(segment)).toHaveLength(26);
  });

  it("flushes on its timer when fewer than flushEveryEvents wait", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, flushEverySeconds: 0.02 });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 5; i++) sink.append(sampleRecord("s", i));
    const deadline = Date.now() + 5000;
    while (
      !existsSync(join(dir, "segment-000001.jsonl")) ||
      fileLines(join(dir, "segment-000001.jsonl")).length < 5
    ) {
      if (Date.now() > deadline) throw new Error("timer flush did not happen");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await sink.close();
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(5);
  });

  it("closeSync writes what is queued and closes the session (the process.exit path)", () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 75; i++) sink.append(sampleRecord("s", i));
    sink.closeSync("interrupted");
    expect(fileLines(join(dir, "segment-000001.jsonl"))).toHaveLength(75);
    expect(manifestOf(dir).sessions[0]).toMatchObject({ status: "interrupted" });
    expect(manifestOf(dir).segments[0]).toMatchObject({ event_count: 75, closed: true });
  });

  it("closeSync's manifest is not replaced later by an older one that was in flight", async () => {
    const dir = tempDir();
    // The in-flight write's redo may land after this test removed its directory (on a loaded
    // machine): its warning goes here, not to the test run's output.
    const late: string[] = [];
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger: { warn: (m) => late.push(m) } });
    sink.startSession({ session_id: "s" });
    // One microtask: the writer has started the `running` ledger write (asynchronous, several steps).
    await Promise.resolve();
    sink.closeSync("completed");
    // Let the older write run to its end: it must stop short of its rename.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(manifestOf(dir).sessions.map((s) => s.status)).toEqual(["completed"]);
  });

  it("closeSync redoes a write the asynchronous path had in flight", async () => {
    const dir = tempDir();
    const late: string[] = [];
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      flushEveryEvents: 10,
      logger: { warn: (m) => late.push(m) },
    });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 500; i++) sink.append(sampleRecord("s", i));
    // Let the writer start (open + first write in flight), then take over synchronously.
    await new Promise((resolve) => setTimeout(resolve, 2));
    sink.closeSync("completed");
    const lines = fileLines(join(dir, "segment-000001.jsonl"));
    expect(lines.map((line) => (parseJson(line) as { metadata: { seq: number } }).metadata.seq)).toEqual(
      Array.from({ length: 500 }, (_, i) => i),
    );
    const sessions = await loadTelemetrySessions(dir);
    expect(sessions[0]).toMatchObject({ eventCount: 500, summary: { status: "completed" } });
  });
});

/** The reference's algorithm (§5.4), run synchronously with count-driven flushes, for comparison. */
function referenceModel(
  config: { flushEvery: number; maxEvents: number; maxBytes: number; maxFiles: number; maxTotal: number },
  sessions: { id: string; records: TelemetryRecordV3[] }[],
) {
  type Segment = {
    filename: string;
    event_count: number;
    size_bytes: number;
    closed: boolean;
    session_id: string;
  };
  const segments: Segment[] = [];
  let next = 1;
  let rollovers = 0;
  let pruned = 0;
  let prunedBytes = 0;
  for (const session of sessions) {
    let bufferEvents = 0;
    let bufferBytes = 0;
    const flush = () => {
      if (bufferEvents === 0) return;
      let current = segments.at(-1);
      if (!current || current.closed || current.session_id !== session.id) {
        current = {
          filename: `segment-${String(next++).padStart(6, "0")}.jsonl`,
          event_count: 0,
          size_bytes: 0,
          closed: false,
          session_id: session.id,
        };
        segments.push(current);
      }
      current.event_count += bufferEvents;
      current.size_bytes += bufferBytes;
      bufferEvents = 0;
      bufferBytes = 0;
      if (current.event_count >= config.maxEvents || current.size_bytes >= config.maxBytes) {
        current.closed = true;
        rollovers++;
      }
      for (;;) {
        const total = segments.reduce((sum, s) => sum + s.size_bytes, 0);
        if (segments.length <= config.maxFiles && total <= config.maxTotal) break;
        const victim = segments.find((s) => s.closed);
        if (!victim) break;
        segments.splice(segments.indexOf(victim), 1);
        pruned++;
        prunedBytes += victim.size_bytes;
      }
    };
    for (const record of session.records) {
      bufferEvents++;
      bufferBytes += encodeTelemetryRecord(record).length + 1;
      if (bufferEvents >= config.flushEvery) flush();
    }
    flush();
    const last = segments.at(-1);
    if (last && last.session_id === session.id) last.closed = true;
  }
  return { segments, rollovers, pruned, prunedBytes };
}

describe("rollover and retention, as the reference", () => {
  const cases = [
    {
      name: "by events",
      flushEvery: 10,
      maxEvents: 25,
      maxBytes: 1 << 30,
      maxFiles: 3,
      maxTotal: 1 << 30,
      sizes: [95, 40],
    },
    {
      name: "by bytes",
      flushEvery: 4,
      maxEvents: 10_000,
      maxBytes: 6000,
      maxFiles: 100,
      maxTotal: 15_000,
      sizes: [60, 33, 7],
    },
    {
      name: "one file kept",
      flushEvery: 3,
      maxEvents: 5,
      maxBytes: 1 << 30,
      maxFiles: 1,
      maxTotal: 1 << 30,
      sizes: [20],
    },
    {
      name: "defaults-like",
      flushEvery: 50,
      maxEvents: 200,
      maxBytes: 1 << 30,
      maxFiles: 8,
      maxTotal: 1 << 30,
      sizes: [2000, 130],
    },
  ];
  it.each(cases)("$name", async ({ flushEvery, maxEvents, maxBytes, maxFiles, maxTotal, sizes }) => {
    const dir = tempDir();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      flushEveryEvents: flushEvery,
      flushEverySeconds: 3600,
      rolloverMaxEvents: maxEvents,
      rolloverMaxBytes: maxBytes,
      retentionMaxFiles: maxFiles,
      retentionMaxTotalBytes: maxTotal,
    });
    const sessions = sizes.map((size, index) => ({
      id: `session-${index}`,
      records: Array.from({ length: size }, (_, i) => sampleRecord(`session-${index}`, i)),
    }));
    for (const session of sessions) {
      sink.startSession({ session_id: session.id });
      for (const record of session.records) sink.append(record);
      await sink.close();
    }
    const expected = referenceModel({ flushEvery, maxEvents, maxBytes, maxFiles, maxTotal }, sessions);
    expect(sink.getSegments()).toEqual(expected.segments);
    expect(manifestOf(dir).segments).toEqual(expected.segments);
    expect(segmentNames(dir)).toEqual(expected.segments.map((s) => s.filename));
    const diagnostics = sink.getDiagnostics();
    expect(diagnostics).toMatchObject({
      rollover_count: expected.rollovers,
      pruned_segment_count: expected.pruned,
      pruned_bytes: expected.prunedBytes,
      final_retained_files: expected.segments.length,
      final_retained_bytes: expected.segments.reduce((sum, s) => sum + s.size_bytes, 0),
    });
    for (const segment of expected.segments) {
      expect(readFileSync(join(dir, segment.filename)).length).toBe(segment.size_bytes);
    }
  });

  it("never prunes the open segment", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      flushEveryEvents: 1,
      flushEverySeconds: 3600,
      rolloverMaxEvents: 3,
      retentionMaxFiles: 1,
    });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 7; i++) sink.append(sampleRecord("s", i));
    await sink.flush();
    // Over the one-file limit while a segment is open: the closed ones go, the open one stays.
    expect(sink.getSegments()).toEqual([
      expect.objectContaining({ filename: "segment-000003.jsonl", event_count: 1, closed: false }),
    ]);
    expect(segmentNames(dir)).toEqual(["segment-000003.jsonl"]);
    expect(sink.getDiagnostics()).toMatchObject({ rollover_count: 2, pruned_segment_count: 2 });
    await sink.close();
  });
});

describe("disk failures", () => {
  it("keeps going when a segment cannot be written (ENOSPC), counts the loss and closes incomplete", async () => {
    const dir = tempDir();
    const logger = memoryLogger();
    // The first segment the writer opens is /dev/full: every write there fails with ENOSPC.
    symlinkSync("/dev/full", join(dir, "segment-000001.jsonl"));
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger,
      flushEveryEvents: 10,
      flushEverySeconds: 0.01,
      failureBackoffSeconds: 0.01,
      failureBackoffMaxSeconds: 0.02,
    });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 10; i++) sink.append(sampleRecord("s", i));
    await sink.flush();
    expect(sink.getDiagnostics()).toMatchObject({ dropped_io_error: 10, state: "retrying" });
    expect(sink.getDiagnostics().last_error).toContain("ENOSPC");
    await new Promise((resolve) => setTimeout(resolve, 30));
    for (let i = 10; i < 30; i++) sink.append(sampleRecord("s", i));
    await sink.close();
    const diagnostics = sink.getDiagnostics();
    expect(diagnostics).toMatchObject({ dropped_io_error: 10, written_events: 20, state: "ok" });
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]).toMatch(/ENOSPC.*Tracking goes on/);
    const manifest = manifestOf(dir);
    expect(manifest.sessions[0]!.status).toBe("incomplete");
    const sessions = await loadTelemetrySessions(dir);
    expect(sessions[0]).toMatchObject({ eventCount: 20, summary: { status: "incomplete" } });
  });

  /** A sink on `dir` (fast retries) that wrote `count` records of `sessionId`. */
  async function sinkWithRecords(
    dir: string,
    sessionId: string,
    count: number,
    options: Partial<TelemetrySinkOptions>,
  ) {
    const logger = memoryLogger();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger,
      flushEveryEvents: 5,
      failureBackoffSeconds: 0.01,
      failureBackoffMaxSeconds: 0.02,
      ...options,
    });
    sink.startSession({ session_id: sessionId });
    for (let i = 0; i < count; i++) sink.append(sampleRecord(sessionId, i));
    await sink.flush();
    return { logger, sink };
  }

  /**
   * A sink (fast ticks and retries) that wrote `count` records of `sessionId`, whose directory was
   * then removed, once it noticed (its next periodic check finds the open segment gone).
   */
  async function sinkWithRemovedDirectory(sessionId: string, count: number) {
    const dir = join(tempDir(), "sink");
    const { logger, sink } = await sinkWithRecords(dir, sessionId, count, { flushEverySeconds: 0.01 });
    rmSync(dir, { recursive: true, force: true });
    await vi.waitFor(() => expect(sink.getDiagnostics().dropped_io_error).toBeGreaterThan(0), {
      timeout: 5000,
    });
    return { dir, logger, sink };
  }

  it("survives its directory being removed: counts what was lost, recreates it and goes on", async () => {
    const { dir, logger, sink } = await sinkWithRemovedDirectory("s", 20);
    await new Promise((resolve) => setTimeout(resolve, 30));
    for (let i = 20; i < 30; i++) sink.append(sampleRecord("s", i));
    await sink.close();
    expect(sink.getDiagnostics()).toMatchObject({ dropped_io_error: 20, written_events: 10 });
    expect(logger.warnings.join("\n")).toContain("the sink directory was removed while being written");
    const manifest = parseManifest(readFileSync(join(dir, "manifest.json"), "utf8"));
    expect(manifest?.sessions[0]?.status).toBe("incomplete");
    expect((await loadTelemetrySessions(dir))[0]!.eventCount).toBe(10);
  });

  /** A sink (fast retries; ticks every `flushEverySeconds`) that wrote 20 records of `sessionId`, whose directory was then moved (mv). */
  async function sinkWithMovedDirectory(sessionId: string, flushEverySeconds: number) {
    const parent = tempDir();
    const dir = join(parent, "sink");
    const moved = join(parent, "moved");
    const { logger, sink } = await sinkWithRecords(dir, sessionId, 20, { flushEverySeconds });
    renameSync(dir, moved);
    return { dir, moved, logger, sink };
  }

  /** The records the segment files in `dir` hold. */
  const linesIn = (dir: string): number =>
    segmentNames(dir).reduce((sum, name) => sum + fileLines(join(dir, name)).length, 0);

  it("closes a session whose directory was moved away (mv) as incomplete, counting what went with it", async () => {
    // No periodic check before the close: the close itself must notice.
    const { dir, moved, logger, sink } = await sinkWithMovedDirectory("moved", 600);
    for (let i = 20; i < 40; i++) sink.append(sampleRecord("moved", i));
    await sink.close();

    // The 40 records went through the open segment's descriptor, into the moved directory.
    expect(linesIn(moved)).toBe(40);
    const manifest = manifestOf(dir);
    expect(manifest.sessions).toMatchObject([{ session_id: "moved", status: "incomplete" }]);
    expect(manifest.sessions[0]!.ended_at_ns).not.toBeNull();
    expect(manifest.segments).toEqual([]);
    expect(manifest.session_losses).toEqual([
      { session_id: "moved", dropped_events: 40, dropped_io_error: 40, dropped_queue_full: 0 },
    ]);
    expect(sink.getDiagnostics()).toMatchObject({
      written_events: 0,
      dropped_io_error: 40,
      appended_events: 40,
    });
    expect(logger.warnings).toEqual([
      `${dir}: the sink directory was ${movedTo(moved)} while being written: 40 record(s) of the open session ` +
        `went with it and are counted as lost here (the session will close incomplete); writing goes on in ${dir}, made again`,
    ]);
  });

  it("notices its directory moved away at the periodic check and goes on in a new one, each record counted once", async () => {
    const { dir, moved, logger, sink } = await sinkWithMovedDirectory("moved-tick", 0.01);
    let seq = 20;
    await vi.waitFor(
      () => {
        sink.append(sampleRecord("moved-tick", seq++));
        expect(logger.warnings.join("\n")).toContain(`was ${movedTo(moved)}`);
      },
      { timeout: 5000, interval: 5 },
    );
    for (let i = 0; i < 20; i++) sink.append(sampleRecord("moved-tick", seq++));
    await sink.close();

    const sessions = await loadTelemetrySessions(dir);
    expect(sessions).toMatchObject([{ summary: { status: "incomplete" } }]);
    const losses = manifestOf(dir).session_losses;
    // What is in the new directory was written there; what went with the old one is counted as lost.
    expect(sessions[0]!.eventCount).toBe(sink.getDiagnostics().written_events);
    expect(losses?.[0]?.dropped_events).toBe(linesIn(moved));
    expect(linesIn(moved) + linesIn(dir)).toBe(seq);
    expect(sessions[0]!.eventCount).toBeGreaterThanOrEqual(20);
  });

  it("counts the records of a segment moved out of its directory while open, and goes on in a new segment", async () => {
    const dir = tempDir();
    const { logger, sink } = await sinkWithRecords(dir, "s", 10, { flushEverySeconds: 600 });
    const aside = join(tempDir(), "aside.jsonl");
    renameSync(join(dir, "segment-000001.jsonl"), aside);
    await sink.close();
    expect(fileLines(aside)).toHaveLength(10);
    expect(manifestOf(dir)).toMatchObject({
      sessions: [{ status: "incomplete" }],
      segments: [],
      session_losses: [{ dropped_io_error: 10 }],
    });
    expect(logger.warnings).toEqual([
      `${dir}: segment-000001.jsonl was ${movedTo(aside)} while open: its 10 record(s) are counted as lost ` +
        "(the session will close incomplete); writing goes on in a new segment",
    ]);
  });

  it("takes its lock again with the directory it makes again: a second writer goes beside", async () => {
    const { dir, sink } = await sinkWithRemovedDirectory("first", 10);
    for (let i = 10; i < 20; i++) sink.append(sampleRecord("first", i));
    await vi.waitFor(() => expect(existsSync(join(dir, "manifest.json"))).toBe(true), { timeout: 5000 });
    await sink.flush();
    expect(existsSync(join(dir, "writer.lock"))).toBe(true);

    const second = new TelemetrySink({ rootDir: dir, ...quiet, logger: memoryLogger() });
    expect(second.rootDir).not.toBe(dir);
    second.startSession({ session_id: "second" });
    for (let i = 0; i < 10; i++) second.append(sampleRecord("second", i));
    await second.close();
    await sink.close();
    const sessions = await loadTelemetrySessions(dir);
    expect(sessions.map((session) => [session.summary.session_id, session.eventCount]).sort()).toEqual([
      ["first", 10],
      ["second", 10],
    ]);
  });

  it("never throws from append or close when the directory cannot be created", async () => {
    const parent = tempDir();
    const blocker = join(parent, "file");
    rmSync(blocker, { force: true });
    await import("node:fs").then((fs) => fs.writeFileSync(blocker, "x"));
    const logger = memoryLogger();
    const sink = new TelemetrySink({ rootDir: join(blocker, "sink"), ...quiet, logger });
    sink.startSession({ session_id: "s" });
    for (let i = 0; i < 200; i++) sink.append(sampleRecord("s", i));
    await sink.close();
    const diagnostics = sink.getDiagnostics();
    expect(diagnostics.state).toBe("retrying");
    expect(diagnostics.last_error).toMatch(/ENOTDIR|EEXIST/);
    expect(diagnostics.appended_events).toBe(200);
    expect(diagnostics.dropped_events + diagnostics.queued_events).toBe(200);
    expect(logger.warnings).toHaveLength(1);
  });
});
