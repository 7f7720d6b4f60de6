// A sink written by the tracker, read by `scripts/python-interop/check_sink.py`: the reference loader's
// rules (v3 field set, strict integers, manifest v2, session order) applied by Python itself, so a record
// or manifest the Python Stormlog would refuse fails here. The checker is first held to the golden sinks
// that the Python Stormlog wrote, so that it cannot drift into agreeing with us.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseJson } from "@stormlog/core";
import { summarizeTelemetrySessions, TelemetrySink } from "@stormlog/sink";
import { afterEach, describe, expect, it } from "vitest";
import { full, makeTracker, reading, SequencedCollector } from "./helpers.js";

const REPO = resolve(import.meta.dirname, "../../..");
const CHECKER = join(REPO, "scripts/python-interop/check_sink.py");
const GOLDEN = join(REPO, "fixtures/golden/python-sink");

interface CheckedSession {
  session_id: string;
  status: string;
  event_count: number;
  first_timestamp_ns: bigint | number | null;
  last_timestamp_ns: bigint | number | null;
}

/** The sessions the Python checker sees in `dir`, integers exact. Throws with its message if it refuses. */
function pythonSessions(dir: string): CheckedSession[] {
  const result = spawnSync("python3", [CHECKER, dir], { encoding: "utf8" });
  if (result.error)
    throw new Error(
      `python3 is needed for this test (bash scripts/setup.sh installs it): ${result.error.message}`,
    );
  if (result.status !== 0) throw new Error(`check_sink.py refused ${dir}: ${result.stderr.trim()}`);
  return (parseJson(result.stdout) as unknown as { sessions: CheckedSession[] }).sessions;
}

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("the Python checker", () => {
  it.each(readdirSync(GOLDEN).sort())(
    "sees the reference's sessions in the Python-written sink %s",
    (name) => {
      const expected = parseJson(readFileSync(join(GOLDEN, name, "expected.json"), "utf8")) as unknown as {
        sessions: CheckedSession[];
      };
      expect(pythonSessions(join(GOLDEN, name, "sink"))).toEqual(expected.sessions);
    },
  );

  it("accepts a tracker's sink (rollover, a crashed session recovered, phases) with our loader's sessions", async () => {
    const root = mkdtempSync(join(tmpdir(), "stormlog-python-check-"));
    dirs.push(root);
    const sinkOptions = {
      rootDir: root,
      handleProcessExit: false,
      rolloverMaxBytes: 4096,
      flushEveryEvents: 5,
    };

    // 1: a completed run across several segments, with nested phases and tfjs-like metadata.
    const collector = new SequencedCollector([full(reading({ allocated: 1024, reserved: 4096 }))]);
    const first = makeTracker([collector], { sink: sinkOptions, maxEvents: 10_000 });
    await first.tracker.start();
    for (let step = 0; step < 20; step++) {
      first.clock.advanceMs(7);
      await first.tracker.sampleNow();
      first.tracker.phase("train", () => {
        first.tracker.phase("forward", () => first.clock.advanceMs(1), { metadata: { step } });
        first.tracker.phase("backward", () => first.clock.advanceMs(2));
      });
    }
    await first.tracker.stop();

    // 2: a writer that dies without closing (its session stays `running` on disk).
    const crashed = new TelemetrySink({ ...sinkOptions, writeRollups: false });
    const crashedId = "00000000-0000-4000-8000-00000000dead";
    crashed.startSession({ session_id: crashedId });
    await crashed.flush();
    // Its process is gone: its lock names a pid that no longer runs (this process's own sinks, on
    // any thread, keep theirs).
    const lockPath = join(root, "writer.lock");
    const deadPid = spawnSync(process.execPath, ["-e", ""]).pid;
    const lock = JSON.parse(readFileSync(lockPath, "utf8")) as Record<string, unknown>;
    writeFileSync(lockPath, `${JSON.stringify({ ...lock, pid: deadPid, process_started_at_ms: null })}\n`);

    // 3: the next run opens the directory (recovery: interrupted) and completes.
    const third = makeTracker([collector], { sink: sinkOptions }, 1_700_000_100);
    await third.tracker.start();
    await third.tracker.sampleNow();
    third.tracker.phase("serve", () => third.clock.advanceMs(3));
    await third.tracker.stop();

    const ours = (await summarizeTelemetrySessions(root)).map(
      ({ summary, eventCount, firstTimestampNs, lastTimestampNs }) => ({
        session_id: summary.session_id,
        status: summary.status,
        event_count: eventCount,
        first_timestamp_ns: firstTimestampNs,
        last_timestamp_ns: lastTimestampNs,
      }),
    );
    expect(ours.map((s) => s.status)).toEqual(["completed", "completed", "interrupted"]);
    expect(ours[0]?.event_count).toBeGreaterThan(0);
    expect(readdirSync(root).filter((f) => f.startsWith("segment-")).length).toBeGreaterThan(2);

    const python = pythonSessions(root).map((s) => ({
      ...s,
      first_timestamp_ns: s.first_timestamp_ns === null ? null : BigInt(s.first_timestamp_ns),
      last_timestamp_ns: s.last_timestamp_ns === null ? null : BigInt(s.last_timestamp_ns),
    }));
    expect(python).toEqual(ours);
    expect(python.find((s) => s.session_id === crashedId)?.status).toBe("interrupted");
  });
});
