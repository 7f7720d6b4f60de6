// EACCES: the sink directory turns read-only while a session is written. Root ignores permissions,
// so under root the writer runs as `nobody`, from a bundle in a temp dir (the clone may be root's only).
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { SinkSessionLoss } from "../../src/directory/manifest.js";
import { loadTelemetrySessions, type SinkDiagnostics } from "../../src/index.js";
import { bundleForAnotherUser } from "../bundle-child.js";

const SCRIPT = join(import.meta.dirname, "../../scripts/read-only-directory.ts");
const NOBODY = 65534;

interface ChildReport {
  dir: string;
  during: SinkDiagnostics;
  after: SinkDiagnostics;
  warnings: string[];
  worksAgainDuring: number;
  worksAgainAfter: number;
  closed: {
    diagnostics: SinkDiagnostics;
    statusWhileReadOnly: string | null;
    status: string | null;
    endedAtNs: string;
    losses: SinkSessionLoss[];
    lockKeptWhileReadOnly: boolean;
    nextSession: { sessions: string[]; lockAfterClose: boolean; entries: string[] };
  };
}

describe("a directory that turns read-only (EACCES)", () => {
  it("keeps the caller running, reports the error once, retries, and loses only what it counts", async () => {
    const parent = mkdtempSync(join(tmpdir(), "stormlog-eacces-parent-"));
    chmodSync(parent, 0o777);
    const bundle = bundleForAnotherUser(SCRIPT, "read-only-directory");
    const asRoot = process.getuid?.() === 0;
    const child = spawnSync(process.execPath, [bundle.file, parent], {
      encoding: "utf8",
      timeout: 60_000,
      cwd: parent,
      env: { ...process.env, HOME: parent },
      ...(asRoot ? { uid: NOBODY, gid: NOBODY } : {}),
    });
    try {
      expect(child.stderr).not.toMatch(/Error/);
      expect(child.status).toBe(0);
      const result = JSON.parse(child.stdout.trim().split("\n").at(-1)!) as ChildReport;
      expect(result.during.state).toBe("retrying");
      expect(result.during.last_error).toMatch(/EACCES/);
      // One message for the failure (with what to do), not one per retry.
      const eacces = result.warnings.filter((warning) => warning.includes("EACCES"));
      expect(eacces).toHaveLength(2);
      expect(eacces[0]).toMatch(/Tracking goes on/);
      // "works again" once, after the directory turned writable and a write succeeded.
      expect(result.worksAgainDuring).toBe(0);
      expect(result.worksAgainAfter).toBe(1);

      const { after } = result;
      expect(after.state).toBe("ok");
      expect(after.appended_events).toBe(70);
      expect(after.written_events + after.dropped_events).toBe(70);
      const sessions = await loadTelemetrySessions(result.dir);
      expect(sessions).toHaveLength(1);
      expect(sessions[0]!.eventCount).toBe(after.written_events);
      expect(sessions[0]!.summary.status).toBe(after.dropped_events > 0 ? "incomplete" : "completed");
      // What was written before the failure is intact and first.
      expect(sessions[0]!.events.slice(0, 20).map((event) => event.timestamp_ns)).toEqual(
        Array.from({ length: 20 }, (_, i) => sessions[0]!.events[0]!.timestamp_ns + BigInt(i) * 100_000_000n),
      );

      // Closed while read-only: incomplete on disk at once (manifest.json written in place), with its
      // losses once writable.
      const { closed } = result;
      expect(closed.statusWhileReadOnly).toBe("incomplete");
      expect(closed.status).toBe("incomplete");
      expect(closed.endedAtNs).not.toBe("null");
      expect(closed.diagnostics.dropped_io_error).toBeGreaterThan(0);
      expect(closed.losses).toEqual([
        {
          session_id: "closed-read-only",
          dropped_events: closed.diagnostics.dropped_events,
          dropped_io_error: closed.diagnostics.dropped_io_error,
          dropped_queue_full: 0,
        },
      ]);
      // The lock its close could not remove stays this sink's: the next session is written in the
      // same directory (no writer-* directory beside "another live writer") and then removes it.
      expect(closed.lockKeptWhileReadOnly).toBe(true);
      expect(closed.nextSession.sessions).toEqual(["closed-read-only", "after-read-only"]);
      expect(closed.nextSession.entries).toEqual(["manifest.json"]);
      expect(closed.nextSession.lockAfterClose).toBe(false);
    } finally {
      rmSync(parent, { recursive: true, force: true });
      rmSync(bundle.dir, { recursive: true, force: true });
    }
  });
});
