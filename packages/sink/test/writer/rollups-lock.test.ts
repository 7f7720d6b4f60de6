// A closing writer keeps the directory locked until its rollups.json is written: a next writer that
// took the directory at once would otherwise have its rollups replaced by this older build.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { WRITER_LOCK_FILENAME } from "../../src/directory/writer-lock.js";
import { TelemetrySink } from "../../src/index.js";
import { tempDir } from "../helpers.js";
import { samples } from "../support/telemetry-fixtures.js";

const lockedAtWrite = vi.hoisted(() => [] as boolean[]);

vi.mock("../../src/rollups/rollups.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/rollups/rollups.js")>();
  return {
    ...original,
    writeTelemetryRollups: async (...args: Parameters<typeof original.writeTelemetryRollups>) => {
      // The second build of a run is the slow one: it ends after the first.
      if (lockedAtWrite.length % 2 === 1) await new Promise((resolve) => setTimeout(resolve, 300));
      lockedAtWrite.push(existsSync(join(args[0], WRITER_LOCK_FILENAME)));
      return original.writeTelemetryRollups(...args);
    },
  };
});

describe("closing a session", () => {
  it("writes rollups.json while the directory is still locked, and frees it after", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, handleProcessExit: false });
    const { session_id: sessionId } = sink.startSession({ session_id: "first" });
    for (const event of samples(5, { sessionId })) sink.append(event);
    expect(existsSync(join(dir, WRITER_LOCK_FILENAME))).toBe(true);
    await sink.close();
    expect(lockedAtWrite).toEqual([true]);
    expect(existsSync(join(dir, WRITER_LOCK_FILENAME))).toBe(false);
    expect(existsSync(join(dir, "rollups.json"))).toBe(true);
  });

  it("keeps it locked until the rollups of two sessions closed back to back are both written", async () => {
    lockedAtWrite.length = 0;
    const dir = tempDir();
    const sink = new TelemetrySink({ rootDir: dir, handleProcessExit: false });
    const first = sink.startSession({ session_id: "one" }).session_id;
    for (const event of samples(3, { sessionId: first })) sink.append(event);
    const closingFirst = sink.close();
    const second = sink.startSession({ session_id: "two" }).session_id;
    for (const event of samples(3, { sessionId: second })) sink.append(event);
    await Promise.all([closingFirst, sink.close()]);
    expect(lockedAtWrite).toEqual([true, true]);
    expect(existsSync(join(dir, WRITER_LOCK_FILENAME))).toBe(false);
  });
});
