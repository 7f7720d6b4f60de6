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
});
