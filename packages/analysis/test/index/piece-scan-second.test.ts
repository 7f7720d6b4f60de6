import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { pieceBytes } from "../../src/input/pieces.js";
import { pieceJobEvents, pieceJobText, scanIntoFiles } from "../support/piece-job.js";

// A file of its own: which scan is a process's first is this module's state.
const started = vi.hoisted(() => ({ workers: 0 }));
vi.mock("@stormlog/core/internal", async (importOriginal) => {
  const internal = await importOriginal<typeof import("@stormlog/core/internal")>();
  return {
    ...internal,
    startWorkerBeside: (...args: Parameters<typeof internal.startWorkerBeside>) => {
      started.workers++;
      return internal.startWorkerBeside(...args);
    },
  };
});

const temp = mkdtempSync(join(tmpdir(), "stormlog-piece-scan-second-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
afterEach(() => {
  delete process.env.STORMLOG_PIECE_BYTES;
  delete process.env.STORMLOG_SCAN_THREADS;
});

describe("a process's second big scan", () => {
  it("has a worker beside this thread where its first ran here alone, and keeps it for the next", async () => {
    expect(availableParallelism()).toBeGreaterThanOrEqual(2);
    const path = join(temp, "job.jsonl");
    writeFileSync(path, pieceJobText(pieceJobEvents()).text);
    // Enough pieces for a worker (8 or more), too few for a first scan on workers alone (32).
    process.env.STORMLOG_PIECE_BYTES = String(Math.ceil(statSync(path).size / 16));

    process.env.STORMLOG_SCAN_THREADS = "1";
    expect(
      (await scanIntoFiles(path, join(temp, "first"), pieceBytes())).files.length,
    ).toBeGreaterThanOrEqual(8);
    expect(started.workers).toBe(0);

    delete process.env.STORMLOG_SCAN_THREADS;
    expect((await scanIntoFiles(path, join(temp, "second"), pieceBytes())).segment.digest.eventCount).toBe(
      pieceJobEvents().length,
    );
    expect(started.workers).toBe(1);
    expect((await scanIntoFiles(path, join(temp, "third"), pieceBytes())).segment.digest.eventCount).toBe(
      pieceJobEvents().length,
    );
    expect(started.workers).toBe(1);
  });
});
