import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { systemClock } from "@stormlog/core";
import { seededRandom } from "@stormlog/phases/internal";
import { loadTelemetrySessions } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import { temporaryDirectories } from "./helpers.js";

const child = fileURLToPath(new URL("./fixtures/kill-child.ts", import.meta.url));
const tempDir = temporaryDirectories("stormlog-kill-");
const next = seededRandom(18);

/** How long the child may take to start (tsx compiles it; slower where every core is busy). */
const START_LIMIT_MS = 30_000;

/** Starts the child loop; resolves with it and its session id once its `start()` resolved. */
function startChild(
  root: string,
  flush: string,
  progressFile: string,
  paceMs?: number,
): Promise<{ process: ChildProcess; sessionId: string; startedAtNs: bigint }> {
  const pace = paceMs === undefined ? [] : [String(paceMs)];
  const proc = spawn(
    process.execPath,
    ["--conditions=@stormlog/source", "--import", "tsx", child, root, flush, progressFile, ...pace],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  return new Promise((resolve, reject) => {
    let out = "";
    // A child that never starts is killed (and so rejects below): it does not outlive the test.
    const limit = setTimeout(() => proc.kill("SIGKILL"), START_LIMIT_MS);
    proc.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const match = /^started (\S+)\n/.exec(out);
      if (match === null) return;
      clearTimeout(limit);
      resolve({ process: proc, sessionId: match[1] as string, startedAtNs: systemClock.nowNs() });
    });
    proc.on("exit", (code, signal) => {
      clearTimeout(limit);
      reject(new Error(`the child exited (${code ?? signal}) before starting: ${out}`));
    });
  });
}

function killNow(proc: ChildProcess): { exited: Promise<void> } {
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  proc.kill("SIGKILL");
  return { exited };
}

/**
 * The end of the child's last finished step, or `fallback` before its first, and the longest the
 * child was kept from running between two steps (ms; see the fixture).
 */
function childProgress(progressFile: string, fallback: bigint): { lastStepEnd: bigint; stalledMs: number } {
  const bytes = readFileSync(progressFile);
  if (bytes.length < 16) return { lastStepEnd: fallback, stalledMs: 0 };
  return { lastStepEnd: bytes.readBigInt64LE(0), stalledMs: Number(bytes.readBigInt64LE(8)) / 1e6 };
}

/** Records lost by one kill, and how long this machine kept a ready thread from running meanwhile. */
interface Loss {
  /** Milliseconds of records lost: from the last record on disk to the end of the last step finished. */
  readonly ms: number;
  /**
   * The longest this machine kept a thread from running while the child recorded (ms): this test's
   * event loop past its due time, or the child's loop between two steps in its last half second
   * (see the fixture), whichever is longer. A
   * machine that busy delays the child's sink thread too, and its flush with it.
   */
  readonly stalledMs: number;
}

/**
 * Kills the loop `runs` times at a random moment `fromMs`..`toMs` after its start resolved; returns
 * the records lost each time: from the last record on disk to the end of the last step the loop
 * finished (the kill's own time would also count moments the loop was descheduled and recorded
 * nothing, on a loaded machine).
 */
async function lossesAfterKills(
  flush: string,
  runs: number,
  fromMs: number,
  toMs: number,
  paceMs?: number,
): Promise<Loss[]> {
  const losses: Loss[] = [];
  for (let run = 0; run < runs; run++) {
    const dir = tempDir();
    const root = join(dir, "sink");
    const progressFile = join(dir, "progress");
    const { process: proc, sessionId, startedAtNs } = await startChild(root, flush, progressFile, paceMs);
    // Measured while the child records, and only then: this process's own work before and after
    // (the spawn, reading the sink) cannot have delayed the child's flush.
    const stalls = monitorEventLoopDelay({ resolution: 5 });
    stalls.enable();
    await new Promise((resolve) => setTimeout(resolve, fromMs + next() * (toMs - fromMs)));
    await killNow(proc).exited;
    stalls.disable();
    // The child's clock, as its records' timestamps are (each process derives its epoch offset).
    const { lastStepEnd: recordedUntil, stalledMs: childStalledMs } = childProgress(
      progressFile,
      startedAtNs,
    );
    const session = (await sessionsIn(root)).find((s) => s.summary.session_id === sessionId);
    // Nothing on disk: everything since start() resolved is lost.
    let last = startedAtNs;
    for (const event of session?.events ?? []) if (event.timestamp_ns > last) last = event.timestamp_ns;
    // The histogram's delays include its own resolution.
    losses.push({
      ms: Number(recordedUntil - last) / 1e6,
      stalledMs: Math.max(0, stalls.max / 1e6 - 5, childStalledMs),
    });
  }
  return losses;
}

/**
 * Every loss within `boundMs` (the sink's promise: its flush interval + 100 ms), give or take the
 * time the machine stalled this process meanwhile: the promise is the sink's, not a loaded host's.
 */
function expectWithin(losses: readonly Loss[], boundMs: number): void {
  for (const loss of losses) expect(loss.ms).toBeLessThanOrEqual(boundMs + loss.stalledMs);
}

/** Cores this process may use: its CPU affinity, bounded by a cgroup v2 quota where one is set (at most 8). */
function usableCores(): number {
  let cores = availableParallelism();
  try {
    const [quota, period] = readFileSync("/sys/fs/cgroup/cpu.max", "utf8").trim().split(" ");
    if (quota !== "max") cores = Math.min(cores, Math.ceil(Number(quota) / Number(period)));
  } catch {
    // No cgroup v2 quota to read.
  }
  return Math.max(1, Math.min(cores, 8));
}

/** Spins until its parent (this test's process) is gone, or for 3 minutes at most. */
const SPINNER =
  "const parent = process.ppid, end = Date.now() + 180e3; for (let i = 0; ; i++) if ((i & 0xfffff) === 0 && (process.ppid !== parent || Date.now() > end)) break;";

/**
 * Runs `body` while a spinning process keeps each core busy, as a training process's kernels keep
 * them (tfjs-node uses every core): the sink's thread has to get its share of a busy machine.
 */
async function withEveryCoreBusy<T>(body: () => Promise<T>): Promise<T> {
  const spinners: ChildProcess[] = [];
  try {
    for (let core = 0; core < usableCores(); core++)
      spinners.push(spawn(process.execPath, ["-e", SPINNER], { stdio: "ignore" }));
    return await body();
  } finally {
    for (const spinner of spinners) spinner.kill("SIGKILL");
  }
}

/** The sessions in `root`, none when the kill left no sink there. */
async function sessionsIn(root: string) {
  try {
    return await loadTelemetrySessions(root);
  } catch {
    return [];
  }
}

function describeLosses(losses: readonly Loss[]): string {
  const sorted = losses.map((loss) => loss.ms).sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)] as number;
  const stalled = Math.max(...losses.map((loss) => loss.stalledMs));
  return `median ${median.toFixed(0)} ms, max ${(sorted.at(-1) as number).toFixed(0)} ms (${sorted.map((l) => l.toFixed(0)).join(", ")}); longest stall ${stalled.toFixed(0)} ms`;
}

describe("a SIGKILL in the middle of training", { timeout: 60_000 }, () => {
  it("loses at most the flush interval + 100 ms of records with the default settings", async () => {
    const losses = await lossesAfterKills("default", 10, 200, 3200);
    console.info(`kill, default sink (2 s flush): loss ${describeLosses(losses)}`);
    expectWithin(losses, 2100);
  });

  it("loses at most the flush interval + 100 ms with the default settings in a slow loop (the hand-over's timer)", async () => {
    // A step every 20 ms: the records reach the ring at the pipeline's hand-over (every 50 ms here).
    const losses = await lossesAfterKills("default", 6, 300, 1500, 20);
    console.info(`kill, default sink (2 s flush), a step every 20 ms: loss ${describeLosses(losses)}`);
    expectWithin(losses, 2100);
  });

  it("loses at most 150 ms of records with a 50 ms flush", async () => {
    const losses = await lossesAfterKills("0.05", 10, 200, 1000);
    console.info(`kill, 50 ms flush: loss ${describeLosses(losses)}`);
    expectWithin(losses, 150);
  });

  it("loses at most 150 ms with a 50 ms flush in a slow loop too (records published by the timer, not by count)", async () => {
    // A step every 20 ms: a few records a step, so the ring is published by its timer.
    const losses = await lossesAfterKills("0.05", 8, 300, 1200, 20);
    console.info(`kill, 50 ms flush, a step every 20 ms: loss ${describeLosses(losses)}`);
    expectWithin(losses, 150);
  });

  it("loses at most 150 ms with a 50 ms flush while every core is busy (the sink's thread gets its share)", async () => {
    const losses = await withEveryCoreBusy(() => lossesAfterKills("0.05", 6, 200, 1000));
    console.info(`kill, 50 ms flush, every core busy: loss ${describeLosses(losses)}`);
    expectWithin(losses, 150);
  });

  it("finds the running session's manifest on disk as soon as start() resolved", async () => {
    for (let run = 0; run < 6; run++) {
      const dir = tempDir();
      const root = join(dir, "sink");
      const { process: proc, sessionId } = await startChild(root, "default", join(dir, "progress"));
      await killNow(proc).exited;
      const sessions = await sessionsIn(root);
      expect(sessions.map((s) => [s.summary.session_id, s.summary.status])).toContainEqual([
        sessionId,
        expect.stringMatching(/running|interrupted/),
      ]);
    }
  });
});
