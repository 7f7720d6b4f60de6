import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseJson } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { finished, runCli, spawnCli, tempDir } from "./helpers.js";

const RANKS = 8;

/** Holds some memory for a moment, then exits 0. */
const SHORT_JOB = `
const keep = [];
const timer = setInterval(() => keep.push(Buffer.alloc(4 * 1024 * 1024, 1)), 30);
setTimeout(() => { clearInterval(timer); process.exit(0); }, 700);
`;

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir("stormlog-shared-sink-");
  writeFileSync(join(dir.path, "job.cjs"), SHORT_JOB);
});
afterEach(() => dir.remove());

/** `stormlog track` as a launcher starts a rank: its own process, the job's working directory, no sink flag. */
function trackRank(rank: number) {
  return finished(
    spawnCli(
      [
        "track",
        "--interval",
        "0.02",
        "--no-gpu",
        "--job-id",
        "job-shared",
        "--",
        process.execPath,
        "job.cjs",
      ],
      {
        cwd: dir.path,
        env: {
          PATH: process.env.PATH,
          RANK: String(rank),
          LOCAL_RANK: String(rank),
          WORLD_SIZE: String(RANKS),
        },
      },
    ),
  );
}

describe("ranks of one job sharing the default sink directory", () => {
  it("keep every record: ranks that find the directory held write beside it, and analyze reads one job", {
    timeout: 120_000,
  }, async () => {
    const runs = await Promise.all(Array.from({ length: RANKS }, (_, rank) => trackRank(rank)));
    for (const run of runs) expect(run.code, run.stderr).toBe(0);

    // What each track says it wrote and dropped.
    let written = 0;
    for (const run of runs) {
      const output = run.stdout + run.stderr;
      const counts = /(\d+) written, (\d+) dropped/.exec(output);
      expect(counts, output).not.toBeNull();
      written += Number(counts![1]);
      expect(Number(counts![2])).toBe(0);
      expect(output).toContain("Next: stormlog analyze ");
    }

    const sink = join(dir.path, "stormlog-sink");
    // Strict loading: a corrupt or interleaved line would throw.
    const sessions = await loadTelemetrySessions(sink);
    expect(sessions).toHaveLength(RANKS);
    expect(sessions.map((session) => session.summary.rank).sort((a, b) => a - b)).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7,
    ]);
    for (const session of sessions) expect(session.summary.status).toBe("completed");
    expect(sessions.reduce((sum, session) => sum + session.events.length, 0)).toBe(written);
    // A rank that found the directory held wrote a reference-shaped directory beside it, one session
    // each; the directory itself holds the rest (a rank that started after the holder finished takes
    // the directory in turn, so how many went beside depends on how the ranks overlapped).
    const beside = readdirSync(sink).filter((name) => name.startsWith("rank-"));
    expect(beside.length).toBeGreaterThan(0);
    for (const name of beside) expect(await loadTelemetrySessions(join(sink, name))).toHaveLength(1);
    const own = parseJson(readFileSync(join(sink, "manifest.json"), "utf8")) as { sessions: unknown[] };
    expect(own.sessions.length).toBeGreaterThan(0);
    expect(own.sessions.length + beside.length).toBe(RANKS);

    const analyze = await runCli(["analyze", "stormlog-sink", "--format", "json"], { cwd: dir.path });
    expect(analyze.code, analyze.stderr).toBe(0);
    const report = parseJson(analyze.stdout) as {
      session: { job_id: string | null; world_size: number; merged_session_ids?: string[] };
    };
    expect(report.session.job_id).toBe("job-shared");
    expect(report.session.world_size).toBe(RANKS);
    expect(report.session.merged_session_ids).toHaveLength(RANKS);

    const listed = await runCli(["sessions", "stormlog-sink"], { cwd: dir.path });
    expect(listed.code, listed.stderr).toBe(0);
    for (const session of sessions) expect(listed.stdout).toContain(session.summary.session_id);
  });
});
