import { EventEmitter } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { openOutput, resolveIo, writeOutput } from "../src/io.js";

/** A stdout whose buffer is full after every write until `drain` is emitted. */
class SlowStdout extends EventEmitter {
  chunks: string[] = [];
  write(chunk: string): boolean {
    this.chunks.push(chunk);
    return false;
  }
}

describe("openOutput to stdout", () => {
  it("waits for drain when the reader is slow, instead of buffering everything", async () => {
    const stdout = new SlowStdout();
    const output = await openOutput(resolveIo({ stdout }), undefined);
    let drained = false;
    const pending = Promise.resolve(output.write("chunk")).then(() => {
      drained = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(drained).toBe(false);
    stdout.emit("drain");
    await pending;
    expect(drained).toBe(true);
    expect(stdout.chunks).toEqual(["chunk"]);
    expect(stdout.listenerCount("drain")).toBe(0);
  });

  it("does not wait on a stream that accepts the chunk", async () => {
    const chunks: string[] = [];
    const output = await openOutput(
      resolveIo({ stdout: { write: (chunk: string) => chunks.push(chunk) } }),
      "-",
    );
    expect(output.write("a")).toBeUndefined();
    expect(chunks).toEqual(["a"]);
  });
});

describe("writeOutput", () => {
  it("replaces a file's content, relative to the working directory", async () => {
    const dir = mkdtempSync(join(tmpdir(), "stormlog-output-"));
    try {
      writeFileSync(join(dir, "report.json"), "an older, longer report\n");
      await writeOutput(resolveIo({ cwd: dir }), "report.json", "{}\n");
      expect(readFileSync(join(dir, "report.json"), "utf8")).toBe("{}\n");
      await expect(writeOutput(resolveIo({ cwd: dir }), "missing/report.json", "{}\n")).rejects.toMatchObject(
        {
          code: "ENOENT",
        },
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("writes to stdout without a file or with -", async () => {
    const chunks: string[] = [];
    const io = resolveIo({ stdout: { write: (chunk: string) => chunks.push(chunk) } });
    await writeOutput(io, undefined, "a\n");
    await writeOutput(io, "-", "b\n");
    expect(chunks).toEqual(["a\n", "b\n"]);
  });
});
