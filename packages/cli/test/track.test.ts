import type { ChildProcess } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type JsonObject, parseJson } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { splitTrackArgs } from "../src/commands/track.js";
import { finished, manualSignals, runCli, spawnCli, tempDir } from "./helpers.js";

/** Allocates ~100 MB in steps, then exits with code 3. */
const ALLOCATE_AND_EXIT = `
const keep = [];
let n = 0;
const timer = setInterval(() => {
  keep.push(Buffer.alloc(20 * 1024 * 1024, 1));
  // Held a second before exiting: samples are taken even when a loaded machine starts the tracker late.
  if (++n === 5) { clearInterval(timer); setTimeout(() => process.exit(3), 1000); }
}, 40);
`;

/** Holds 30 MB, writes a ready file, exits 130 on SIGINT (and 143 on SIGTERM by default). */
const WAIT_FOR_SIGNAL = `
const fs = require("node:fs");
const keep = Buffer.alloc(30 * 1024 * 1024, 1);
process.on("SIGINT", () => { fs.writeFileSync(process.argv[3], String(keep.length)); process.exit(130); });
setInterval(() => {}, 1000);
fs.writeFileSync(process.argv[2], "ready");
`;

/** A 200 MB spike 2 s in, freed at once (a full GC): between the first two samples of a 5 s sampler. */
const SPIKE_BETWEEN_SAMPLES = `
setTimeout(() => {
  let spike = Buffer.alloc(200 * 1024 * 1024, 1);
  spike = null;
  global.gc();
  setTimeout(() => process.exit(0), 4000);
}, 2000);
`;

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir("stormlog-track-");
  writeFileSync(join(dir.path, "allocate.cjs"), ALLOCATE_AND_EXIT);
  writeFileSync(join(dir.path, "wait.cjs"), WAIT_FOR_SIGNAL);
  writeFileSync(join(dir.path, "spike.cjs"), SPIKE_BETWEEN_SAMPLES);
});
afterEach(() => dir.remove());

async function until(condition: () => boolean, timeoutMs = 15_000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function onlySession(sink: string) {
  const sessions = await loadTelemetrySessions(sink);
  expect(sessions).toHaveLength(1);
  return sessions[0]!;
}

describe("stormlog track", () => {
  it("runs the command, records its memory into a sink and passes its exit code through", async () => {
    const sink = join(dir.path, "sink");
    const run = await runCli(
      [
        "track",
        "--interval",
        "0.02",
        "--no-gpu",
        "--telemetry-sink-dir",
        sink,
        "--job-id",
        "job-t",
        "--",
        process.execPath,
        "allocate.cjs",
      ],
      { cwd: dir.path, env: { PATH: process.env.PATH } },
    );
    expect(run.code).toBe(3);
    expect(existsSync(join(sink, "manifest.json"))).toBe(true);
    const session = await onlySession(sink);
    expect(session.summary).toMatchObject({ status: "completed", job_id: "job-t" });
    const samples = session.events.filter((event) => event.event_type === "sample");
    expect(samples.length).toBeGreaterThan(2);
    expect(session.events[0]!.event_type).toBe("start");
    // The recording is complete; its stop record says the workload failed.
    expect(session.events.at(-1)).toMatchObject({
      event_type: "stop",
      metadata: { stop_reason: "exited with code 3", workload_exit_code: 3, workload_signal: null },
    });
    const last = samples.at(-1)!;
    expect(last.collector).toBe("stormlog.cpu_tracker");
    expect(last.device_id).toBe(-1);
    expect(last.pid).toBe(last.metadata.tracked_pid);
    // The child held about 100 MB by the end; our own process is not what was measured.
    const peak = Math.max(...samples.map((event) => event.allocator_allocated_bytes ?? 0));
    expect(peak).toBeGreaterThan(60 * 1024 * 1024);
    expect(run.stderr).toContain("Stormlog tracking summary");
    expect(run.stderr).toMatch(/Command: +.*allocate\.cjs \(pid \d+, exited with code 3\)/);
    expect(run.stderr).toMatch(/Peak host memory: +\d+\.\d\d MB resident/);
    expect(run.stderr).toMatch(new RegExp(`Events: +${session.eventCount} written, 0 dropped`));
    expect(run.stderr).toMatch(/Collector health: healthy/);
    expect(run.stderr).toMatch(/Sink: +.*1 segment/);
  });

  it("records a spike between two samples from the kernel's peak (VmHWM), in the sink and the summary", async () => {
    const sink = join(dir.path, "sink");
    const run = await runCli(
      [
        "track",
        "--interval",
        "5",
        "--no-gpu",
        "--telemetry-sink-dir",
        sink,
        "--",
        process.execPath,
        "--expose-gc",
        "spike.cjs",
      ],
      { cwd: dir.path, env: { PATH: process.env.PATH } },
    );
    expect(run.code, run.stderr).toBe(0);
    const session = await onlySession(sink);
    const MB = 1024 * 1024;
    const marks = session.events.filter((event) => event.metadata.high_water_mark === true);
    const read = session.events.filter(
      (event) => event.event_type === "sample" && event.metadata.high_water_mark !== true,
    );
    // The samples miss the spike (a loaded machine could put one on it); the mark holds it, as a
    // sample. Either way the sink and the summary have the spike.
    const sampled = Math.max(...read.map((event) => event.allocator_allocated_bytes ?? 0));
    const marked = Math.max(0, ...marks.map((event) => event.allocator_allocated_bytes ?? 0));
    expect(Math.max(sampled, marked)).toBeGreaterThan(200 * MB);
    if (sampled <= 200 * MB) expect(marks.map((event) => event.event_type)).toEqual(["sample"]);
    const peak = /Peak host memory: +(\d+\.\d\d) MB resident/.exec(run.stderr);
    expect(Number(peak?.[1])).toBeGreaterThan(200);
  }, 30_000);

  it("passes Ctrl+C to the command, then closes the session and prints the summary", async () => {
    const sink = join(dir.path, "sink");
    const ready = join(dir.path, "ready");
    const got = join(dir.path, "got-sigint");
    const signals = manualSignals();
    const running = runCli(
      [
        "track",
        "--interval",
        "0.05",
        "--no-gpu",
        "--telemetry-sink-dir",
        sink,
        "--",
        process.execPath,
        "wait.cjs",
        ready,
        got,
      ],
      { cwd: dir.path, onSignal: signals.onSignal },
    );
    await until(() => existsSync(ready) && signals.subscribed() > 0);
    signals.fire("SIGINT");
    const run = await running;
    expect(run.code).toBe(130);
    expect(existsSync(got)).toBe(true);
    expect(signals.subscribed()).toBe(0);
    expect(run.stderr).toContain("SIGINT: passing it to pid");
    expect(run.stderr).toMatch(/exited with code 130/);
    const session = await onlySession(sink);
    expect(session.summary.status).toBe("completed");
    expect(session.events.at(-1)!.metadata).toMatchObject({
      stop_reason: "exited with code 130",
      workload_exit_code: 130,
      workload_signal: null,
    });
  });

  it("stops the command after --duration", async () => {
    const sink = join(dir.path, "sink");
    const run = await runCli(
      [
        "track",
        "--duration",
        "0.5",
        "--no-gpu",
        "--telemetry-sink-dir",
        sink,
        "--",
        process.execPath,
        "wait.cjs",
        join(dir.path, "r"),
        join(dir.path, "g"),
      ],
      { cwd: dir.path },
    );
    expect(run.code).toBe(128 + 15);
    expect(run.stderr).toMatch(/--duration reached: stopping pid \d+ \(SIGTERM/);
    expect(run.stderr).toMatch(/ended by SIGTERM/);
  });

  it("says in one line when the command cannot run", async () => {
    const run = await runCli(
      ["track", "--no-gpu", "--telemetry-sink-dir", join(dir.path, "sink"), "--", "no-such-command-xyz"],
      {
        cwd: dir.path,
      },
    );
    expect(run.code).toBe(127);
    expect(run.stderr.trim().split("\n")).toEqual([
      "stormlog track: cannot run 'no-such-command-xyz': command not found",
    ]);
  });

  it("finds the command with or without --", () => {
    expect(splitTrackArgs(["--interval", "1", "--", "node", "-e", "1"])).toEqual({
      flags: ["--interval", "1"],
      command: ["node", "-e", "1"],
    });
    expect(splitTrackArgs(["--interval=1", "--no-gpu", "--rank", "2", "node", "--inspect", "x.js"])).toEqual({
      flags: ["--interval=1", "--no-gpu", "--rank", "2"],
      command: ["node", "--inspect", "x.js"],
    });
  });
});

describe("stormlog bin (child process)", () => {
  let cli: ChildProcess | null = null;
  afterEach(() => {
    if (cli !== null && cli.exitCode === null) cli.kill("SIGKILL");
  });

  it("prints help and reports a user error in one line without a stack trace", async () => {
    const help = await finished(spawnCli(["--help"]));
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("Usage: stormlog <command>");
    const error = await finished(spawnCli(["analyze", join(dir.path, "missing")]));
    expect(error.code).toBe(1);
    expect(error.stderr.trim().split("\n")).toHaveLength(1);
    expect(error.stderr).not.toMatch(/\n\s+at /);
  });

  it("on SIGINT forwards it, closes the session and exits with the command's code", async () => {
    const sink = join(dir.path, "sink");
    const ready = join(dir.path, "ready");
    const got = join(dir.path, "got");
    cli = spawnCli([
      "track",
      "--interval",
      "0.05",
      "--no-gpu",
      "--telemetry-sink-dir",
      sink,
      "--",
      process.execPath,
      join(dir.path, "wait.cjs"),
      ready,
      got,
    ]);
    const done = finished(cli);
    await until(() => existsSync(ready));
    // The tracker is started right after the child: wait for its first records.
    await until(() => existsSync(join(sink, "manifest.json")));
    cli.kill("SIGINT");
    const result = await done;
    expect(result.code).toBe(130);
    expect(readFileSync(got, "utf8")).toBe(String(30 * 1024 * 1024));
    expect(result.stderr).toContain("Stormlog tracking summary");
    const manifest = parseJson(readFileSync(join(sink, "manifest.json"), "utf8")) as {
      sessions: JsonObject[];
    };
    expect(manifest.sessions.map((session) => session.status)).toEqual(["completed"]);
  });
});
