import { closeSync, openSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { WriteNoProgressError } from "../../src/errors.js";
import { execAsync, execSync, type IoResult } from "../../src/writer/io.js";
import { tempDir } from "../helpers.js";

// A file system that takes no byte of a write and reports no error.
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  type Done = (error: Error | null, written: number) => void;
  return {
    ...fs,
    writeSync: () => 0,
    write: (...args: unknown[]) => process.nextTick(args.at(-1) as Done, null, 0),
  };
});

function failure(result: IoResult): Error {
  if (result.ok) throw new Error("the write succeeded");
  return result.error;
}

describe("a write the file system takes none of", () => {
  it.each(["sync", "async"] as const)("fails typed, saying what to do (%s)", async (how) => {
    const fd = openSync(join(tempDir(), "segment-000001.jsonl"), "w");
    try {
      const op = { op: "write", fd, data: Buffer.from("line\n"), position: 0 } as const;
      const error = failure(how === "sync" ? execSync(op) : await execAsync(op));
      expect(WriteNoProgressError.isInstance(error)).toBe(true);
      expect(error).toMatchObject({ written: 0, size: 5 });
      expect(error.message).toMatch(/^write made no progress: .*free some space or check the disk$/);
    } finally {
      closeSync(fd);
    }
  });

  it("fails a reserve with it too, and leaves no file", async () => {
    const path = join(tempDir(), "manifest.reserve");
    const error = failure(execSync({ op: "reserve", path, bytes: 4096 }));
    expect(WriteNoProgressError.isInstance(error)).toBe(true);
    expect(await import("node:fs").then((fs) => fs.existsSync(path))).toBe(false);
  });
});
