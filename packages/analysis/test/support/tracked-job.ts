import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

/** Not a multiple of 256: above 2^60 a double cannot hold it, so JSON.parse visibly rounds it. */
const JOB_START_NS = 1_760_000_000_123_456_789n;
const SCRIPT = join(import.meta.dirname, "track-job.mjs");
// @stormlog/analysis may not depend on the tracker: the job runs in a process of its own, started in
// the tracker's package, where `@stormlog/tracker` resolves by name (and to its source, through tsx).
const TRACKER_PACKAGE = join(import.meta.dirname, "../../../tracker");
const TSX = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

/** A two-rank job written by the real tracker under one root (one sink directory per rank). */
export function trackedJob(): {
  root: string;
  sessionIds: string[];
  startedAtNs: bigint;
  remove: () => void;
} {
  const root = mkdtempSync(join(tmpdir(), "stormlog-tracked-job-"));
  const remove = () => rmSync(root, { recursive: true, force: true });
  const child = spawnSync(
    process.execPath,
    [
      "--conditions=@stormlog/source",
      "--import",
      TSX,
      "--input-type=module",
      "--eval",
      readFileSync(SCRIPT, "utf8"),
    ],
    {
      cwd: TRACKER_PACKAGE,
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, STORMLOG_JOB_ROOT: root, STORMLOG_JOB_START_NS: String(JOB_START_NS) },
    },
  );
  if (child.status !== 0) {
    remove();
    throw new Error(`the tracked job failed (${child.status}): ${child.stderr}`);
  }
  const { sessionIds } = JSON.parse(child.stdout) as { sessionIds: string[] };
  return { root, sessionIds, startedAtNs: JOB_START_NS, remove };
}
