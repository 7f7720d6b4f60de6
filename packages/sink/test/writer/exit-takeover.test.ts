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
    const [segment] = segmentNames(dir);
    const lines = readFileSync(join(dir, segment as string), "utf8")
      .trimEnd()
      .split("\n");
    expect(lines).toHaveLength(200);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
  });
});
