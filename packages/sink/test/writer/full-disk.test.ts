// ENOSPC on a really full filesystem: a small tmpfs the test mounts (we run as root), filled by a
// file the test writes. What must hold: the loss and the final status reach the disk, retries follow
// the documented schedule, no empty segment per retry, "works again" only after a real write.
import { existsSync, readdirSync, rmSync, statfsSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Clock, Scheduler, TimerHandle } from "@stormlog/core";
import { afterEach, describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync, type SinkManifest } from "../../src/directory/manifest.js";
import { TelemetrySink, type TelemetrySinkOptions } from "../../src/index.js";
import { MANIFEST_RESERVE_FILENAME } from "../../src/writer/writer.js";
import { memoryLogger, quiet } from "../helpers.js";
import { FILLER, fill, smallFilesystem, unmountSmallFilesystems } from "../support/full-filesystem.js";

afterEach(unmountSmallFilesystems);

function segmentSizes(dir: string): number[] {
  return readdirSync(dir)
    .filter((name) => name.startsWith("segment-"))
    .map((name) => statSync(join(dir, name)).size);
}

async function until(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const worksAgain = (infos: string[]): string[] => infos.filter((line) => line.includes("works again"));

function sinkIn(dir: string, options: Partial<TelemetrySinkOptions>) {
  const logger = memoryLogger();
  const sink = new TelemetrySink({ rootDir: dir, ...quiet, logger, flushEveryEvents: 10, ...options });
  return { logger, sink };
}

/** Closes the sink as `how` says; the manifest must then record the session as ended `incomplete`. */
async function closedIncomplete(
  sink: TelemetrySink,
  dir: string,
  sessionId: string,
  how: "close" | "closeSync",
): Promise<SinkManifest> {
  if (how === "close") await sink.close();
  else sink.closeSync();
  const manifest = readManifestSync(dir)!;
  expect(manifest.sessions[0]).toMatchObject({ session_id: sessionId, status: "incomplete" });
  expect(manifest.sessions[0]!.ended_at_ns).not.toBeNull();
  return manifest;
}

/**
 * A sink on a fresh 512 KiB filesystem with 20 records of session `sessionId` written, then the
 * filesystem filled: the next write fails with ENOSPC.
 */
async function sinkOnFilledDisk(sessionId: string, options: Partial<TelemetrySinkOptions>) {
  const dir = smallFilesystem(512);
  const { logger, sink } = sinkIn(dir, options);
  sink.startSession({ session_id: sessionId });
  for (let i = 0; i < 20; i++) sink.append(sampleRecord(sessionId, i));
  await sink.flush();
  fill(dir);
  return { dir, logger, sink };
}

/**
 * Leaves room for a manifest and its copy, not for a hundred records (~100 KB), and appends a hundred
 * records: their write fails.
 */
async function failWhereOnlyAManifestFits(
  dir: string,
  sink: TelemetrySink,
  sessionId: string,
): Promise<void> {
  rmSync(join(dir, FILLER));
  fill(dir, 3 * statfsSync(dir).bsize);
  for (let i = 20; i < 120; i++) sink.append(sampleRecord(sessionId, i));
  await until(() => sink.getDiagnostics().io_failures > 0, "the write to fail");
}

/**
 * A write of 20 records failed on a full disk, then the disk got room back; the next retry is a minute
 * away (when the job ends, say).
 */
async function outageOverBeforeClose(sessionId: string) {
  const filled = await sinkOnFilledDisk(sessionId, {
    failureBackoffSeconds: 60,
    failureBackoffMaxSeconds: 60,
  });
  for (let i = 20; i < 40; i++) filled.sink.append(sampleRecord(sessionId, i));
  await until(() => filled.sink.getDiagnostics().io_failures > 0, "the write to fail");
  rmSync(join(filled.dir, FILLER));
  return filled;
}

describe("a filesystem that fills up (ENOSPC)", () => {
  it("writes the drop counts once space returns, then the incomplete status at close", async () => {
    const { dir, logger, sink } = await sinkOnFilledDisk("full", {
      flushEverySeconds: 0.02,
      failureBackoffSeconds: 0.05,
      failureBackoffMaxSeconds: 0.2,
    });
    let seq = 20;
    await until(() => {
      for (let i = 0; i < 20; i++) sink.append(sampleRecord("full", seq++));
      return sink.getDiagnostics().io_failures >= 3;
    }, "three failed attempts");
    expect(sink.getDiagnostics().state).toBe("retrying");
    expect(segmentSizes(dir).filter((size) => size === 0)).toEqual([]);
    expect(worksAgain(logger.infos)).toEqual([]);

    rmSync(join(dir, FILLER));
    // Records keep coming: the first that reaches a segment ends the failures (a manifest alone does not).
    await until(() => {
      sink.append(sampleRecord("full", seq++));
      return sink.getDiagnostics().state === "ok";
    }, "writing to work again");
    const lost = sink.getDiagnostics().dropped_io_error;
    expect(lost).toBeGreaterThan(0);
    // The session still runs, and the disk already says what it lost.
    await until(
      () => readManifestSync(dir)?.session_losses?.[0]?.dropped_io_error === lost,
      "the loss in the manifest",
    );
    expect(readManifestSync(dir)?.sessions[0]?.status).toBe("running");

    await sink.close();
    const manifest = readManifestSync(dir)!;
    expect(manifest.sessions[0]).toMatchObject({ session_id: "full", status: "incomplete" });
    expect(manifest.sessions[0]!.ended_at_ns).not.toBeNull();
    const diagnostics = sink.getDiagnostics();
    expect(manifest.session_losses).toEqual([
      {
        session_id: "full",
        dropped_events: diagnostics.dropped_events,
        dropped_io_error: diagnostics.dropped_io_error,
        dropped_queue_full: 0,
      },
    ]);
    expect(manifest.segments.reduce((sum, s) => sum + s.event_count, 0)).toBe(diagnostics.written_events);
    expect(diagnostics.written_events + diagnostics.dropped_events).toBe(seq);
    expect(segmentSizes(dir).filter((size) => size === 0)).toEqual([]);
    expect(worksAgain(logger.infos)).toHaveLength(1);
  });

  it("says writing works again once the disk takes records, though no record comes to show it", async () => {
    const { dir, logger, sink } = await sinkOnFilledDisk("idle-after", {
      flushEverySeconds: 0.02,
      failureBackoffSeconds: 0.05,
      failureBackoffMaxSeconds: 0.1,
    });
    await failWhereOnlyAManifestFits(dir, sink, "idle-after");
    // The loss reaches the manifest (it fits); the producer has nothing more to say, and the retries
    // find no room for records yet.
    await until(() => readManifestSync(dir)?.session_losses !== undefined, "the loss in the manifest");
    await until(() => sink.getDiagnostics().io_failures >= 3, "two more failed attempts");
    expect(sink.getDiagnostics().state).toBe("retrying");
    expect(worksAgain(logger.infos)).toEqual([]);

    rmSync(join(dir, FILLER));
    await until(() => sink.getDiagnostics().state === "ok", "the state to say ok", 5000);
    expect(worksAgain(logger.infos)).toHaveLength(1);
    expect(sink.getDiagnostics()).toMatchObject({
      consecutive_io_failures: 0,
      written_events: 20,
      dropped_io_error: 100,
    });
    // The probe's file is gone, and no reader takes it for a segment.
    expect(readdirSync(dir).filter((name) => name.includes("probe"))).toEqual([]);
    await sink.close();
    expect(readManifestSync(dir)?.sessions[0]?.status).toBe("incomplete");
  });

  it("says writing works again at close when the disk took nothing more since it failed records", async () => {
    const { logger, sink } = await outageOverBeforeClose("close-after");
    await sink.close();
    expect(sink.getDiagnostics()).toMatchObject({ state: "ok", dropped_io_error: 20 });
    expect(worksAgain(logger.infos)).toHaveLength(1);
  });

  it("tries the disk at close whatever the retry schedule: after an outage that is over, only the failed write is lost", async () => {
    const { dir, logger, sink } = await outageOverBeforeClose("short-outage");
    for (let i = 40; i < 140; i++) sink.append(sampleRecord("short-outage", i));
    await sink.close();

    // Only the write that failed is lost; what came after it reaches the disk.
    expect(sink.getDiagnostics()).toMatchObject({
      written_events: 120,
      dropped_io_error: 20,
      dropped_events: 20,
    });
    const manifest = readManifestSync(dir)!;
    expect(manifest.sessions[0]).toMatchObject({ session_id: "short-outage", status: "incomplete" });
    expect(manifest.segments.reduce((sum, s) => sum + s.event_count, 0)).toBe(120);
    expect(worksAgain(logger.infos)).toHaveLength(1);
  });

  it.each(["close", "closeSync"] as const)(
    "records the session as incomplete on %s although the disk stays full",
    async (how) => {
      const { dir, logger, sink } = await sinkOnFilledDisk("stays-full", {
        failureBackoffSeconds: 30,
        failureBackoffMaxSeconds: 60,
      });
      for (let i = 20; i < 200; i++) sink.append(sampleRecord("stays-full", i));
      await sink.flush();
      await until(() => sink.getDiagnostics().io_failures > 0, "the write to fail");
      const manifest = await closedIncomplete(sink, dir, "stays-full", how);
      expect(manifest.session_losses?.[0]).toMatchObject({ session_id: "stays-full", dropped_events: 180 });
      expect(manifest.segments.map((s) => s.event_count)).toEqual([20]);
      expect(segmentSizes(dir).filter((size) => size === 0)).toEqual([]);
      // Only the manifest was written, from the reserve: no record ever reached the disk again.
      expect(worksAgain(logger.infos)).toEqual([]);
      expect(sink.getDiagnostics().state).toBe("retrying");
      // Still full but for the reserve the sink gave back: the filler was never removed.
      expect(() => writeFileSync(join(dir, "probe"), Buffer.alloc(128 << 10))).toThrow(/ENOSPC/);
    },
  );

  it("says writing works again only once records reach a segment, not when a manifest fits where records do not", async () => {
    const { dir, logger, sink } = await sinkOnFilledDisk("manifest-fits", {
      failureBackoffSeconds: 30,
      failureBackoffMaxSeconds: 60,
    });
    await failWhereOnlyAManifestFits(dir, sink, "manifest-fits");
    await sink.close();

    expect(readManifestSync(dir)?.sessions[0]).toMatchObject({ status: "incomplete" });
    expect(sink.getDiagnostics()).toMatchObject({
      written_events: 20,
      dropped_io_error: 100,
      state: "retrying",
    });
    expect(worksAgain(logger.infos)).toEqual([]);
  });

  it.each([
    { how: "close", freeBlocks: 2 },
    { how: "closeSync", freeBlocks: 2 },
    { how: "close", freeBlocks: 3 },
    { how: "closeSync", freeBlocks: 3 },
  ] as const)(
    "records the session as incomplete on $how when the disk was too full for the reserve from the start ($freeBlocks blocks free)",
    async ({ how, freeBlocks }) => {
      const dir = smallFilesystem(512);
      const block = statfsSync(dir).bsize;
      // A block for the lock and one for the session's first manifest; a third, if any, for the reserve.
      fill(dir, freeBlocks * block);
      const { logger, sink } = sinkIn(dir, { failureBackoffSeconds: 30 });
      sink.startSession({ session_id: "no-reserve" });
      await sink.flush();
      expect(readManifestSync(dir)?.sessions[0]?.status).toBe("running");
      // What could be had is kept (a full 64 KiB never was).
      const reserve = join(dir, MANIFEST_RESERVE_FILENAME);
      expect(existsSync(reserve) ? statSync(reserve).size : 0).toBe((freeBlocks - 2) * block);
      for (let i = 0; i < 100; i++) sink.append(sampleRecord("no-reserve", i));
      await until(() => sink.getDiagnostics().io_failures > 0, "the write to fail");
      const manifest = await closedIncomplete(sink, dir, "no-reserve", how);
      expect(manifest.session_losses).toEqual([
        { session_id: "no-reserve", dropped_events: 100, dropped_io_error: 100, dropped_queue_full: 0 },
      ]);
      expect(manifest.segments).toEqual([]);
      // The lock given back, and no file left by an attempt that found no room, nor by a write on the
      // thread pool that closeSync overtook (it removes its manifest.tmp when it ends).
      await expect
        .poll(() => readdirSync(dir).sort(), { timeout: 10_000 })
        .toEqual([FILLER, "manifest.json"]);
      expect(worksAgain(logger.infos)).toEqual([]);
    },
  );

  it("retries 1, 2, 4 … 60 s apart while records fail, though the small manifest still fits", async () => {
    const dir = smallFilesystem(1024);
    let nowMs = 1_700_000_000_000;
    const clock: Clock = { nowNs: () => BigInt(nowMs) * 1_000_000n };
    const timers = new Map<number, { dueMs: number; run: () => void }>();
    let nextHandle = 1;
    const scheduler: Scheduler = {
      setTimeout(run, delayMs): TimerHandle {
        const handle = nextHandle++;
        timers.set(handle, { dueMs: nowMs + delayMs, run });
        return handle;
      },
      clearTimeout(handle) {
        timers.delete(handle as number);
      },
    };
    const logger = memoryLogger();
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      logger,
      clock,
      scheduler,
      flushEverySeconds: 5,
    });
    sink.startSession({ session_id: "schedule" });
    let seq = 0;
    for (; seq < 20; seq++) sink.append(sampleRecord("schedule", seq));
    await sink.flush();
    // Room for a manifest, not for a hundred records.
    fill(dir, 16 << 10);

    /** Runs the earliest timer at its time, with records waiting, and lets the writer finish. */
    const runNextTimer = async (): Promise<void> => {
      const [handle, timer] = [...timers].sort((a, b) => a[1].dueMs - b[1].dueMs)[0]!;
      timers.delete(handle);
      nowMs = Math.max(nowMs, timer.dueMs);
      const before = sink.getDiagnostics().io_failures;
      timer.run();
      await until(() => sink.getDiagnostics().io_failures > before || timers.size > 0, "the writer");
      await new Promise((resolve) => setTimeout(resolve, 20));
    };

    const failedAtMs: number[] = [];
    for (; seq < 120; seq++) sink.append(sampleRecord("schedule", seq));
    await until(() => sink.getDiagnostics().io_failures === 1, "the first failure");
    failedAtMs.push(nowMs);
    while (failedAtMs.length < 9) {
      for (let i = 0; i < 100; i++) sink.append(sampleRecord("schedule", seq++));
      const before = sink.getDiagnostics().io_failures;
      await runNextTimer();
      const after = sink.getDiagnostics().io_failures;
      expect(after - before).toBeLessThanOrEqual(1);
      if (after > before) failedAtMs.push(nowMs);
    }
    const gapsS = failedAtMs.slice(1).map((at, i) => (at - failedAtMs[i]!) / 1000);
    expect(gapsS).toEqual([1, 2, 4, 8, 16, 32, 60, 60]);
    expect(worksAgain(logger.infos)).toEqual([]);
    expect(segmentSizes(dir).filter((size) => size === 0)).toEqual([]);

    rmSync(join(dir, FILLER));
    const written = sink.getDiagnostics().written_events;
    for (let i = 0; i < 10; i++) sink.append(sampleRecord("schedule", seq++));
    while (sink.getDiagnostics().state !== "ok") await runNextTimer();
    expect(sink.getDiagnostics().written_events).toBeGreaterThan(written);
    expect(worksAgain(logger.infos)).toHaveLength(1);
    await sink.close();
    expect(readManifestSync(dir)?.sessions[0]?.status).toBe("incomplete");
  }, 30_000);
});
