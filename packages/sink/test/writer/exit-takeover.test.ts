// The exit path (`closeSync`) takes over from a write still under way on the thread pool: it writes
// the same bytes again itself, and the pool's write lands later. That late write must land in its own
// segment, never in a file opened after its descriptor was closed and its number given out again.
import { closeSync, fstatSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { TelemetrySink } from "../../src/index.js";
import { memoryLogger, quiet, segmentNames, tempDir } from "../helpers.js";

/** Thread-pool writes held back while `hold` is set, released by `release()`. */
const pool = vi.hoisted(() => ({ hold: false, held: [] as (() => void)[] }));
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  const write = ((...args: Parameters<typeof fs.write>) => {
    if (!pool.hold) return (fs.write as (...a: unknown[]) => void)(...args);
    pool.held.push(() => (fs.write as (...a: unknown[]) => void)(...args));
  }) as typeof fs.write;
  return { ...fs, write };
});

afterEach(() => {
  pool.hold = false;
  for (const release of pool.held.splice(0)) release();
});

describe("closeSync taking over from a write on the thread pool", () => {
  it("closes that write's segment only once it has landed: no file opened meanwhile gets its bytes", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, ...quiet, fsync: "never", logger: memoryLogger() });
    sink.startSession({ session_id: "exit" });
    await sink.flush();
    for (let i = 0; i < 200; i++) sink.append(sampleRecord("exit", i));
    pool.hold = true;
    void sink.flush();
    for (let tries = 0; pool.held.length === 0 && tries < 1000; tries++)
      await new Promise((resolve) => setImmediate(resolve));
    expect(pool.held.length).toBeGreaterThan(0);

    sink.closeSync("interrupted");
    // Files opened now take the lowest free descriptor numbers: the segment's, had it been closed.
    const others = Array.from({ length: 16 }, (_, n) => openSync(join(dir, `other-${n}.txt`), "w"));
    pool.hold = false;
    const landed = pool.held.splice(0).map(
      (release) =>
        new Promise<void>((resolve) => {
          release();
          setTimeout(resolve, 50);
        }),
    );
    await Promise.all(landed);
    try {
      for (const fd of others) expect(fstatSync(fd).size).toBe(0);
    } finally {
      for (const fd of others) closeSync(fd);
    }
    // The segment holds every record once, whole.
    const lines = segmentNames(dir).flatMap((name) =>
      readFileSync(join(dir, name), "utf8").trimEnd().split("\n"),
    );
    expect(lines).toHaveLength(200);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
  });

  it("writes batch after batch with blocking I/O only: no write left on the pool to land later with reused bytes", async () => {
    // The tracker's sink worker on process.exit(): append a batch, writeQueuedSync, append more.
    const dir = tempDir();
    // Segments of 200 records: a batch's write is settled (done again here) by the rollover within it.
    const sink = new TelemetrySink({
      rootDir: dir,
      ...quiet,
      fsync: "never",
      logger: memoryLogger(),
      flushEveryEvents: 50,
      rolloverMaxEvents: 200,
    });
    sink.startSession({ session_id: "batches" });
    await sink.flush();
    pool.hold = true;
    for (let batch = 0; batch < 8; batch++) {
      for (let i = 0; i < 150; i++) sink.append(sampleRecord("batches", batch * 150 + i));
      sink.writeQueuedSync();
    }
    sink.closeSync("interrupted");
    pool.hold = false;
    const late = pool.held.splice(0);
    for (const release of late) release();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const lines = segmentNames(dir).flatMap((name) =>
      readFileSync(join(dir, name), "utf8").trimEnd().split("\n"),
    );
    // Every line whole, the 1200 records in order (timestamps compared exactly, as text).
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(lines.map((line) => /"timestamp_ns": (\d+)/.exec(line)?.[1])).toEqual(
      Array.from({ length: 1200 }, (_, n) => String(sampleRecord("batches", n).timestamp_ns)),
    );
  });
});
