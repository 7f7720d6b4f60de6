import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { openOutput, resolveIo } from "../src/io.js";

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
