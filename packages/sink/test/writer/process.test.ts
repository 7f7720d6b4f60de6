// Process-level behaviour, with real child processes (scripts/write-events.ts): crash safety under
// SIGKILL, closing on signals and exit, and several processes writing under one root.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { parseManifest, readManifestSync } from "../../src/directory/manifest.js";
import { loadTelemetrySessions, summarizeTelemetrySessions, TelemetrySink } from "../../src/index.js";
import { exited, start, waitFor } from "../children.js";
import { quiet, tempDir } from "../helpers.js";

/** Crash runs in CI; set STORMLOG_CRASH_RUNS for more when run by hand. */
const CRASH_RUNS = Number(process.env.STORMLOG_CRASH_RUNS ?? 20);

describe("crash safety under SIGKILL", () => {
  it(`reloads after each of ${CRASH_RUNS} kills, losing at most what was not flushed`, {
    timeout: 30_000 + CRASH_RUNS * 5_000,
  }, async () => {
    const dir = tempDir();
    const killedSessions: { id: string; written: number }[] = [];
    let cutLines = 0;
    for (let run = 0; run < CRASH_RUNS; run++) {
      // Each run writes up to 20k records in 3000-record segments; retention keeps the last 12 segments,
      // so the directory (and each reload) stays small however many runs there are.
      const child = start([
        dir,
        "crash",
        ...[
          "--events",
          "20000",
          "--batch",
          "100",
          "--rollover-max-events",
          "3000",
          "--retention-max-files",
          "12",
        ],
      ]);
      await waitFor(child, /written [1-9]/);
      // Kill at a random moment while the child keeps appending and writing.
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 150));
      const reports = [...child.output().matchAll(/written (\d+)/g)];
      const acknowledged = Number(reports.at(-1)![1]);
      const id = /session (\S+)/.exec(child.output())![1]!;
      child.kill("SIGKILL");
      await exited(child);
      killedSessions.push({ id, written: acknowledged });

      // manifest.json parses (it is only ever replaced whole).
      const manifestText = readFileSync(join(dir, "manifest.json"), "utf8");
      expect(parseManifest(manifestText)).not.toBeNull();
      expect(() => parseJson(manifestText)).not.toThrow();

      // The directory reloads, strictly: only a final line may be damaged, and it is dropped.
      const warnings: string[] = [];
      const sessions = await loadTelemetrySessions(dir, { onWarning: (m) => warnings.push(m) });
      const killed = sessions.find((s) => s.summary.session_id === id)!;
      // Its writer is gone: readers say interrupted (the manifest still says running, for the next writer).
      expect(killed.summary.status).toBe("interrupted");
      const seqs = killed.events.map((event) => (event.metadata as { seq: number }).seq);
      // Nothing lost that was reported written; nothing out of order, duplicated or skipped.
      expect(seqs.length).toBeGreaterThanOrEqual(acknowledged);
      const firstGap = seqs.findIndex((seq, i) => seq !== i);
      expect(
        firstGap,
        `first out-of-order record at ${firstGap}: ${JSON.stringify(seqs.slice(Math.max(0, firstGap - 3), firstGap + 3))}`,
      ).toBe(-1);
      for (const warning of warnings) expect(warning).toContain("cut short");
      if (warnings.length > 0) cutLines++;
    }
    console.info(`${CRASH_RUNS} SIGKILLs, ${cutLines} of them cut a line mid-write`);
    // The next writer recovers: the last killed session becomes interrupted (each child's own recovery
    // marked the one before it), with nothing lost; older ones may have been pruned by retention, and
    // left the ledger past the newest few of those.
    const sink = new TelemetrySink({ rootDir: dir, ...quiet });
    const last = killedSessions.at(-1)!;
    expect(sink.recovery!.interruptedSessionIds).toEqual([last.id]);
    const manifest = readManifestSync(dir)!;
    expect(manifest.segments.every((segment) => segment.closed)).toBe(true);
    const sessions = await summarizeTelemetrySessions(dir, { strict: true });
    expect(sessions.map((s) => s.summary.status)).toEqual(sessions.map(() => "interrupted"));
    const listed = new Set(sessions.map((s) => s.summary.session_id));
    expect(listed).toEqual(new Set(killedSessions.slice(-listed.size).map((killed) => killed.id)));
    expect(sessions.find((s) => s.summary.session_id === last.id)!.eventCount).toBeGreaterThanOrEqual(
      last.written,
    );
  });
});

describe("closing with the process", () => {
  it("closes as completed when the process ends without closing", async () => {
    const dir = tempDir();
    const child = start([dir, "natural-exit", "--events", "321"]);
    expect(await exited(child)).toEqual({ code: 0, signal: null });
    const [session] = await loadTelemetrySessions(dir);
    expect(session).toMatchObject({ eventCount: 321, summary: { status: "completed" } });
  });

  it("closes as interrupted on process.exit() with a failure code, writing what was queued", async () => {
    const dir = tempDir();
    const child = start([dir, "process-exit", "--events", "5000"]);
    expect(await exited(child)).toEqual({ code: 3, signal: null });
    const [session] = await loadTelemetrySessions(dir);
    expect(session).toMatchObject({ eventCount: 5000, summary: { status: "interrupted" } });
  });

  it.each(["SIGTERM", "SIGINT"] as const)(
    "closes as interrupted on %s, then dies of the signal",
    async (signal) => {
      const dir = tempDir();
      const child = start([dir, "wait", "--events", "700"]);
      await waitFor(child, /ready/);
      child.kill(signal);
      expect(await exited(child)).toEqual({ code: null, signal });
      const [session] = await loadTelemetrySessions(dir);
      expect(session).toMatchObject({ eventCount: 700, summary: { status: "interrupted" } });
      expect(session!.summary.ended_at_ns).not.toBeNull();
    },
  );

  it("leaves the session running on disk, as the reference, when the hooks are off; readers see it interrupted once the writer is gone", async () => {
    const dir = tempDir();
    const child = start([dir, "wait", "--events", "100", "--no-exit-hooks"]);
    await waitFor(child, /ready/);
    // While the writer lives, its session is running.
    const [live] = await summarizeTelemetrySessions(dir);
    expect(live).toMatchObject({ eventCount: 100, summary: { status: "running" } });
    child.kill("SIGTERM");
    expect((await exited(child)).signal).toBe("SIGTERM");
    expect(readManifestSync(dir)?.sessions[0]?.status).toBe("running");
    const [session] = await summarizeTelemetrySessions(dir);
    expect(session).toMatchObject({ eventCount: 100, summary: { status: "interrupted" } });
  });
});

describe("several processes under one root", () => {
  it("write at the same time without conflict, and read back together", { timeout: 60_000 }, async () => {
    const root = tempDir();
    const ranks = [0, 1, 2, 3];
    const children = ranks.map((rank) =>
      start([
        root,
        "complete",
        "--per-process",
        "--rank",
        String(rank),
        "--world-size",
        "4",
        "--events",
        "4000",
        "--rollover-max-events",
        "700",
      ]),
    );
    const results = await Promise.all(children.map(exited));
    expect(results.every((r) => r.code === 0)).toBe(true);
    const sessions = await loadTelemetrySessions(root);
    expect(sessions).toHaveLength(4);
    expect(sessions.map((s) => s.events[0]!.rank).sort()).toEqual(ranks);
    for (const session of sessions) {
      expect(session.summary.status).toBe("completed");
      expect(session.eventCount).toBe(4000);
      expect(new Set(session.events.map((e) => e.rank)).size).toBe(1);
    }
  });
});
