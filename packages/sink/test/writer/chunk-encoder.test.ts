import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import { ChunkEncoder } from "../../src/writer/chunk-encoder.js";

/** Encodes `count` records and hands them all to a write, as the writer does. */
function takeLines(chunk: ChunkEncoder, from: number, count: number): Buffer {
  for (let i = from; i < from + count; i++) chunk.encode(sampleRecord("s", i));
  chunk.closeUnit();
  return chunk.take(chunk.length);
}

describe("the chunk encoder's buffers", () => {
  it("encodes into the buffer of a finished write again", () => {
    const chunk = new ChunkEncoder();
    const first = takeLines(chunk, 0, 3);
    chunk.release();
    const second = takeLines(chunk, 3, 3);
    chunk.release();
    // The two buffers take turns: the first comes back.
    const third = takeLines(chunk, 6, 3);
    expect(second.buffer).not.toBe(first.buffer);
    expect(third.buffer).toBe(first.buffer);
  });

  it("never hands out again the buffer of a write abandoned to the thread pool (the exit path)", () => {
    const chunk = new ChunkEncoder();
    const first = takeLines(chunk, 0, 3);
    const written = Buffer.from(first);
    // The write was done again on this thread; the thread pool may still read `first` later.
    chunk.abandonWriting();
    chunk.release();
    for (let round = 1; round < 4; round++) {
      const next = takeLines(chunk, 3 * round, 3);
      expect(next.buffer).not.toBe(first.buffer);
      chunk.release();
    }
    // What the late write reads is still what it was given.
    expect(Buffer.compare(first, written)).toBe(0);
  });
});

describe("an encoder that shed its buffers (a closed session)", () => {
  it("holds neither buffer, and encodes the same lines into new ones", () => {
    const chunk = new ChunkEncoder();
    const before = Buffer.from(takeLines(chunk, 0, 3));
    chunk.release();
    const held = takeLines(chunk, 3, 3).buffer;
    chunk.release();
    chunk.shed();
    const after = takeLines(chunk, 0, 3);
    expect(after.buffer).not.toBe(held);
    expect(Buffer.compare(after, before)).toBe(0);
    chunk.release();
    // The one taken since was not shed: the two take turns again.
    expect(takeLines(chunk, 3, 3).buffer).not.toBe(after.buffer);
  });

  it("keeps what a write in flight still reads, and the lines not written yet", () => {
    const chunk = new ChunkEncoder();
    const inFlight = takeLines(chunk, 0, 3);
    const written = Buffer.from(inFlight);
    chunk.shed();
    chunk.encode(sampleRecord("s", 3));
    chunk.closeUnit();
    chunk.shed();
    chunk.release();
    expect(Buffer.compare(inFlight, written)).toBe(0);
    expect(chunk.take(chunk.length).toString()).toMatch(/"seq": 3,/);
  });
});
