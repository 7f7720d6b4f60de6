// Many writers, one directory: the writer lock (writer.lock), moving beside a live writer, refusing,
// breaking a dead writer's lock; with real processes sharing a directory.
import { spawn, spawnSync } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import type { SessionSummary } from "@stormlog/core";
import { createSessionSummary } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync } from "../../src/directory/manifest.js";
import { settleAbandonedSessions, WRITER_LOCK_FILENAME } from "../../src/directory/writer-lock.js";
import { loadTelemetrySessions, SinkDirectoryLockedError, TelemetrySink } from "../../src/index.js";
import { exited, start, waitFor } from "../children.js";
import { memoryLogger, quiet, tempDir } from "../helpers.js";

function lockOwner(dir: string): { host: string; pid: number } {
  return JSON.parse(readFileSync(join(dir, WRITER_LOCK_FILENAME), "utf8")) as { host: string; pid: number };
}

describe("processes sharing one sink directory", () => {
  it("lose nothing: one writes the directory, the others beside it, and readers load them all", {
    timeout: 90_000,
  }, async () => {
    const dir = tempDir();
    const ranks = [0, 1, 2, 3, 4, 5, 6, 7];
    const args = (rank: number, mode: string): string[] => [
      dir,
      mode,
      ...["--rank", String(rank), "--world-size", "8", "--events", "1500", "--rollover-max-events", "400"],
    ];
    // Rank 0 holds the directory until the others are done (as a long rank would).
    const holder = start(args(0, "wait"));
    await waitFor(holder, /ready/);
    const others = ranks.slice(1).map((rank) => start(args(rank, "complete")));
    const results = await Promise.all(others.map(exited));
    expect(results.map((result) => result.code)).toEqual(others.map(() => 0));
    holder.kill("SIGTERM");
    await exited(holder);

    // The seven that found the directory written by a live process wrote each in their own
    // sub-directory; every lock was given back at the close.
    const beside = readdirSync(dir, { withFileTypes: true }).filter((entry) => entry.isDirectory());
    expect(beside).toHaveLength(7);
    for (const entry of beside) {
      expect(entry.name).toMatch(/^writer-.+-\d+$/);
      expect(readdirSync(join(dir, entry.name))).not.toContain(WRITER_LOCK_FILENAME);
    }
    expect(readdirSync(dir)).not.toContain(WRITER_LOCK_FILENAME);

    const sessions = await loadTelemetrySessions(dir);
    expect(sessions).toHaveLength(8);
    expect(sessions.map((session) => session.events[0]!.rank).sort()).toEqual(ranks);
    for (const session of sessions) {
      // The holder was stopped by SIGTERM: its exit hook closed it as interrupted.
      expect(session.summary.status).toBe(session.events[0]!.rank === 0 ? "interrupted" : "completed");
      expect(session.eventCount).toBe(1500);
      expect(session.events.map((event) => event.rank)).toEqual(Array(1500).fill(session.events[0]!.rank));
    }
  });

  it("refuses a second writer before it writes anything, naming the live one", {
    timeout: 30_000,
  }, async () => {
    const dir = tempDir();
    const holder = start([dir, "wait", "--events", "10"]);
    try {
      await waitFor(holder, /ready/);
      const before = readdirSync(dir).sort();
      const manifest = readFileSync(join(dir, "manifest.json"), "utf8");
      let refused: unknown;
      try {
        new TelemetrySink({ rootDir: dir, ...quiet, onLockedDirectory: "refuse" });
      } catch (error) {
        refused = error;
      }
      expect(SinkDirectoryLockedError.isInstance(refused)).toBe(true);
      const message = (refused as Error).message;
      expect(message).toContain(`pid ${holder.pid} on ${hostname()}`);
      expect(message.split("\n")).toHaveLength(1);
      // Nothing written, nothing recovered: the holder's session is still running, untouched.
      expect(readdirSync(dir).sort()).toEqual(before);
      expect(readFileSync(join(dir, "manifest.json"), "utf8")).toBe(manifest);
    } finally {
      holder.kill("SIGKILL");
      await exited(holder);
    }
  });

  it("takes over the directory of a writer killed with SIGKILL, and marks its session interrupted", {
    timeout: 30_000,
  }, async () => {
    const dir = tempDir();
    const holder = start([dir, "wait", "--events", "25", "--no-exit-hooks"]);
    await waitFor(holder, /ready/);
    expect(lockOwner(dir).pid).toBe(holder.pid);
    holder.kill("SIGKILL");
    await exited(holder);

    const logger = memoryLogger();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger });
    expect(sink.rootDir).toBe(dir);
    expect(lockOwner(dir).pid).toBe(process.pid);
    expect(sink.getSessions().map((session) => session.status)).toEqual(["interrupted"]);
    sink.startSession({ session_id: "after-crash" });
    sink.append(sampleRecord("after-crash", 0));
    await sink.close();
    expect(readManifestSync(dir)?.sessions.map((session) => session.status)).toEqual([
      "interrupted",
      "completed",
    ]);
    expect(readdirSync(dir)).not.toContain(WRITER_LOCK_FILENAME);
  });
});

describe("the writer lock in one process", () => {
  it("puts a second sink on the same directory beside the first, and the directory is free after the close", async () => {
    const dir = tempDir();
    const first = new TelemetrySink({ rootDir: dir, ...quiet });
    first.startSession({ session_id: "first" });
    const logger = memoryLogger();
    const second = new TelemetrySink({ rootDir: dir, ...quiet, rank: 3, logger });
    expect(second.rootDir).toBe(
      join(dir, `rank-3-${hostname().replace(/[^A-Za-z0-9_.-]/g, "_")}-${process.pid}`),
    );
    expect(logger.infos.join("\n")).toMatch(
      /is being written by another sink of this process: this sink writes beside it/,
    );
    second.startSession({ session_id: "second" });
    first.append(sampleRecord("first", 0));
    second.append(sampleRecord("second", 0));
    await Promise.all([first.close(), second.close()]);

    // Closed: the next writer (a tracker's next start, say) takes the directory itself again.
    const third = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(third.rootDir).toBe(dir);
    expect(third.getSessions().map((session) => session.session_id)).toEqual(["first"]);
    await third.close();
    const sessions = await loadTelemetrySessions(dir);
    expect(sessions.map((session) => session.summary.session_id).sort()).toEqual(["first", "second"]);
  });

  it("takes the directory again for a later session, reading what another writer added meanwhile", async () => {
    const dir = tempDir();
    const reused = new TelemetrySink({ rootDir: dir, ...quiet });
    reused.startSession({ session_id: "one" });
    reused.append(sampleRecord("one", 0));
    await reused.close();
    const other = new TelemetrySink({ rootDir: dir, ...quiet });
    other.startSession({ session_id: "other" });
    other.append(sampleRecord("other", 0));
    await other.close();
    reused.startSession({ session_id: "two" });
    reused.append(sampleRecord("two", 0));
    await reused.close();
    expect(
      readManifestSync(dir)
        ?.sessions.map((session) => session.session_id)
        .sort(),
    ).toEqual(["one", "other", "two"]);
  });

  it("writes beside a lock held on another host (its pid cannot be checked here)", async () => {
    const dir = tempDir();
    const foreign = {
      host: `not-${hostname()}`,
      pid: 1,
      process_started_at_ms: null,
      acquired_at_ns: "0",
      token: "t",
    };
    writeFileSync(join(dir, WRITER_LOCK_FILENAME), JSON.stringify(foreign));
    const warnings: string[] = [];
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger: { warn: (m) => warnings.push(m), info: (m) => warnings.push(m) },
    });
    expect(sink.rootDir).toMatch(/writer-.+-\d+$/);
    await sink.close();
    expect(lockOwner(dir).host).toBe(foreign.host);
    // The user is told where the records go instead, and that readers given the directory read both.
    expect(warnings).toEqual([
      `${dir} is being written by pid 1 on ${foreign.host}: this sink writes beside it, to ${sink.rootDir} (readers given ${dir} read both)`,
    ]);
  });

  it("breaks a lock whose pid was reused by a process that started later", async () => {
    const dir = tempDir();
    // pid 1 runs, but it started long before this lock says its writer did.
    const reused = {
      host: hostname(),
      pid: 1,
      process_started_at_ms: Date.now(),
      acquired_at_ns: "0",
      token: "t",
    };
    writeFileSync(join(dir, WRITER_LOCK_FILENAME), JSON.stringify(reused));
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    expect(sink.rootDir).toBe(dir);
    expect(lockOwner(dir).pid).toBe(process.pid);
    await sink.close();
  });
});

describe("readers judging a running session's writer", () => {
  /** A session summary `running` since now, written by `pid` on this host. */
  const running = (sessionId: string, pid: number): SessionSummary =>
    createSessionSummary({
      sessionId,
      source: "test",
      host: hostname(),
      pid,
      startedAtNs: BigInt(Date.now()) * 1_000_000n,
    });

  it("take the lock holder for the writer when there is a lock, else the session's pid", async () => {
    const alive = spawn("sleep", ["30"]);
    const dead = spawnSync("true").pid;
    try {
      const now = BigInt(Date.now()) * 1_000_000n;
      const lock = (dir: string, pid: number, acquiredAtNs = now) =>
        writeFileSync(
          join(dir, WRITER_LOCK_FILENAME),
          JSON.stringify({
            host: hostname(),
            pid,
            process_started_at_ms: null,
            acquired_at_ns: String(acquiredAtNs),
            token: "t",
          }),
        );
      // `stormlog track`: the session names the tracked child, alive; its writer was killed.
      const killedWriter = tempDir();
      lock(killedWriter, dead);
      expect(settleAbandonedSessions([running("s", alive.pid!)], killedWriter)[0]!.status).toBe(
        "interrupted",
      );
      // The writer is alive, the child it tracked has ended: still running.
      const liveWriter = tempDir();
      lock(liveWriter, alive.pid!);
      expect(settleAbandonedSessions([running("s", dead)], liveWriter)[0]!.status).toBe("running");
      // A lock left by a writer killed before the session began (a later Python writer takes none):
      // the session's pid decides.
      const leftBehind = tempDir();
      lock(leftBehind, dead, now - 3_600_000_000_000n);
      const later = { ...running("p", alive.pid!) };
      expect(settleAbandonedSessions([later], leftBehind)[0]!.status).toBe("running");
      // This process's own lock (its sink on a worker thread): alive.
      const own = tempDir();
      lock(own, process.pid);
      expect(settleAbandonedSessions([running("o", dead)], own)[0]!.status).toBe("running");
      // A FIFO where the lock should be is no lock (never waited on).
      const fifo = tempDir();
      spawnSync("mkfifo", [join(fifo, WRITER_LOCK_FILENAME)]);
      expect(settleAbandonedSessions([running("f", dead)], fifo)[0]!.status).toBe("interrupted");
      // No lock (the Python reference's writers): the session's pid decides.
      const noLock = tempDir();
      const settled = settleAbandonedSessions([running("a", alive.pid!), running("b", dead)], noLock);
      expect(settled.map((summary) => summary.status)).toEqual(["running", "interrupted"]);
    } finally {
      alive.kill();
    }
  });
});
