// A directory reused by a session per job: what the writer keeps, on disk and in memory, must not
// grow with the sessions that came before.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord, type Scheduler, type SessionSummary, type TimerHandle } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync, serializeManifest, writeManifestTextSync } from "../../src/directory/manifest.js";
import { loadTelemetrySessions, TelemetrySink } from "../../src/index.js";
import { runningSessionSummary } from "../../src/writer/writer.js";
import { memoryLogger, quiet, segmentNames, tempDir } from "../helpers.js";

/** `count` sessions of `records` records each, one after the other, each in its own segment. */
async function runSessions(sink: TelemetrySink, count: number, records = 5): Promise<string[]> {
  const ids: string[] = [];
  for (let n = 0; n < count; n++) {
    const id = `job-${String(n).padStart(2, "0")}`;
    ids.push(id);
    sink.startSession({ session_id: id });
    for (let i = 0; i < records; i++) sink.append(sampleRecord(id, i));
    // A loss: the session's manifest entry says so while the session is listed.
    if (n === 0) sink.countDropped(3);
    await sink.close();
  }
  return ids;
}

/** An ended session that started `n` microseconds into the epoch (older than any written now). */
function endedSession(n: number): SessionSummary {
  const startedAt = BigInt(n) * 1000n;
  return {
    ...runningSessionSummary({ session_id: `old-${n}`, started_at_ns: startedAt }, "stormlog.tracker"),
    status: "completed",
    ended_at_ns: startedAt + 500n,
  };
}

describe("a directory reused by many sessions", () => {
  it("lists the sessions whose records retention keeps, and the newest few it emptied", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger: memoryLogger(), retentionMaxFiles: 2 });
    const ids = await runSessions(sink, 12);

    const manifest = readManifestSync(dir)!;
    expect(segmentNames(dir)).toHaveLength(2);
    expect(manifest.segments.map((segment) => segment.session_id)).toEqual(ids.slice(-2));
    // Two that own the retained segments, and the two newest whose segments retention deleted.
    expect(manifest.sessions.map((session) => session.session_id)).toEqual(ids.slice(-4));
    expect(manifest.sessions.every((session) => session.status === "completed")).toBe(true);
    // The loss went with its session (job-00, long pruned).
    expect(manifest.session_losses).toBeUndefined();
    expect(sink.getSessions().map((session) => session.session_id)).toEqual(ids.slice(-4));

    const loaded = await loadTelemetrySessions(dir);
    expect(loaded.map((session) => [session.summary.session_id, session.eventCount]).sort()).toEqual([
      [ids[8], 0],
      [ids[9], 0],
      [ids[10], 5],
      [ids[11], 5],
    ]);
  });

  it("keeps a session that lost records while it is listed, with its loss", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger: memoryLogger(), retentionMaxFiles: 8 });
    await runSessions(sink, 3);
    const manifest = readManifestSync(dir)!;
    expect(manifest.sessions.map((session) => session.session_id)).toEqual(["job-00", "job-01", "job-02"]);
    expect(manifest.session_losses).toEqual([
      { session_id: "job-00", dropped_events: 3, dropped_io_error: 0, dropped_queue_full: 3 },
    ]);
    expect(manifest.sessions[0]!.status).toBe("incomplete");
  });

  it("trims a manifest that lists every past session (an older writer's) when it opens the directory", async () => {
    const dir = tempDir();
    const old = Array.from({ length: 50 }, (_, n) => endedSession(n));
    writeManifestTextSync(dir, serializeManifest(old, []), false);
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, retentionMaxFiles: 3 });
    expect(sink.getSessions().map((session) => session.session_id)).toEqual(["old-47", "old-48", "old-49"]);

    sink.startSession({ session_id: "new" });
    sink.append(sampleRecord("new", 0));
    await sink.close();
    expect(readManifestSync(dir)!.sessions.map((session) => session.session_id)).toEqual([
      "old-47",
      "old-48",
      "old-49",
      "new",
    ]);
  });

  it("keeps a session whose records are in a segment listed without an owner (the reference's recovery)", async () => {
    const dir = tempDir();
    // The reference lists a segment its manifest missed (a crash) with `session_id: null`.
    const lines = [0, 1, 2].map((i) => `${encodeTelemetryRecord(sampleRecord("crashed", i))}\n`).join("");
    writeFileSync(join(dir, "segment-000001.jsonl"), lines);
    const crashed = { ...endedSession(1), session_id: "crashed", status: "interrupted" as const };
    const sessions = [crashed, endedSession(2), endedSession(3), endedSession(4)];
    const segment = {
      filename: "segment-000001.jsonl",
      event_count: 3,
      size_bytes: lines.length,
      closed: true,
    };
    writeManifestTextSync(dir, serializeManifest(sessions, [{ ...segment, session_id: null }]), false);

    const sink = new TelemetrySink({ rootDir: dir, ...quiet, retentionMaxFiles: 2 });
    sink.startSession({ session_id: "new" });
    sink.append(sampleRecord("new", 0));
    await sink.close();
    const manifest = readManifestSync(dir)!;
    expect(manifest.segments.map((listed) => [listed.filename, listed.session_id])).toEqual([
      ["segment-000001.jsonl", "crashed"],
      ["segment-000002.jsonl", "new"],
    ]);
    // Its records are retained: it stays, with the status only the ledger knows.
    expect(manifest.sessions.map((session) => [session.session_id, session.status])).toEqual([
      ["crashed", "interrupted"],
      ["old-3", "completed"],
      ["old-4", "completed"],
      ["new", "completed"],
    ]);
  });

  it("never forgets a running session, even one without records", async () => {
    const dir = tempDir();
    const old = Array.from({ length: 5 }, (_, n) => endedSession(n));
    writeManifestTextSync(dir, serializeManifest(old, []), false);
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, retentionMaxFiles: 1 });
    sink.startSession({ session_id: "quiet", started_at_ns: 1n });
    await sink.flush();
    expect(readManifestSync(dir)!.sessions.map((session) => [session.session_id, session.status])).toEqual([
      ["quiet", "running"],
      ["old-4", "completed"],
    ]);
    await sink.close();
    // Ended without records and older than old-4: it goes now.
    expect(readManifestSync(dir)!.sessions.map((session) => session.session_id)).toEqual(["old-4"]);
  });

  it("holds no timer once its last session is closed and on disk", async () => {
    const timers = new Set<number>();
    let next = 1;
    const scheduler: Scheduler = {
      setTimeout(): TimerHandle {
        const handle = next++;
        timers.add(handle);
        return handle;
      },
      clearTimeout(handle) {
        timers.delete(handle as number);
      },
    };
    const sink = new TelemetrySink({ rootDir: tempDir(), ...quiet, scheduler });
    for (const id of ["a", "b"]) {
      sink.startSession({ session_id: id });
      for (let i = 0; i < 120; i++) sink.append(sampleRecord(id, i));
      expect(timers.size).toBe(1);
      await sink.close();
      // The writer's last steps after the close: the tick it would have found idle is gone, so
      // nothing keeps a closed sink (its buffers, its ledger) alive for a flush interval.
      await sink.flush();
      expect(timers.size).toBe(0);
    }
  });
});
