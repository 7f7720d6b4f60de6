import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord } from "@stormlog/core";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, MiB, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { Accumulator, roomForSamples } from "../../src/input/aggregate.js";
import { type ScanScratch, scanRangeSync } from "../../src/input/scan.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-sizing-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** Adds `count` samples of `rank` (session-a), one a millisecond; the next line number. */
function addSamples(accumulator: Accumulator, rank: number, count: number, line: number): number {
  for (let i = 0; i < count; i++) {
    const ts = BASE_NS + BigInt(line) * 1_000_000n;
    accumulator.addEvent(record("sample", ts, { rank, device_used_bytes: (i + 1) * MiB }), line++);
  }
  return line;
}

/** Room the columns of `rank`'s part have now. */
const room = (accumulator: Accumulator, rank: number): number =>
  accumulator.session("session-a").ranks.get(rank)!.samples.t.length;

describe("rank parts are sized like the ranks before them", () => {
  it("sizes a rank after a partial one like the whole one before it", () => {
    const scan = new Accumulator();
    let line = addSamples(scan, 0, 1000, 1);
    // A rank cut short (the end of a piece, or a rank that stopped early) does not size the next one.
    line = addSamples(scan, 1, 100, line);
    line = addSamples(scan, 2, 1, line);
    expect(room(scan, 2)).toBe(roomForSamples(1000));
    addSamples(scan, 2, 999, line);
    expect(room(scan, 2)).toBe(roomForSamples(1000));
    expect(scan.recentSamples).toBe(1000);
  });

  it("carries the size to the next range of the same input, whose first rank is the rest of a cut one", () => {
    const first = new Accumulator();
    let line = addSamples(first, 0, 1000, 1);
    line = addSamples(first, 1, 100, line);
    // What `scanRangeSync` hands the next range through its scratch.
    const carried = first.recentSamples;
    expect(carried).toBe(1000);
    const next = new Accumulator(roomForSamples(carried), null, carried);
    line = addSamples(next, 1, 900, line);
    line = addSamples(next, 2, 1, line);
    expect(room(next, 2)).toBe(roomForSamples(1000));
    // Without it, the rank after the cut one is sized by that one's rest, and then grows.
    const alone = new Accumulator(roomForSamples(carried));
    line = addSamples(alone, 1, 900, line);
    addSamples(alone, 2, 1, line);
    expect(room(alone, 2)).toBe(roomForSamples(900));
  });

  it("carries it from one piece of a file to the next through the scan's scratch, and not to another file", () => {
    // Ranks 0, 1 and 2 with 1,000 samples each, cut into two pieces after 100 of rank 1's.
    const lines: string[] = [];
    for (const rank of [0, 1, 2])
      for (let i = 0; i < 1000; i++) {
        const ts = BASE_NS + BigInt(lines.length) * 1_000_000n;
        lines.push(
          encodeTelemetryRecord(
            record("sample", ts, { rank, world_size: 4, device_used_bytes: (i + 1) * MiB }),
          ),
        );
      }
    const path = join(temp, "job.jsonl");
    writeFileSync(path, `${lines.join("\n")}\n`);
    const cut = lines.slice(0, 1100).reduce((bytes, line) => bytes + Buffer.byteLength(line) + 1, 0);
    const segment = { path, hint: null, defaultSessionId: "default-session" };
    const firstPiece = { start: 0, end: cut, lineOffset: 0 };
    const secondPiece = { start: cut, end: Number.POSITIVE_INFINITY, lineOffset: 1100 };
    /** Room of the columns rank 2's samples were stored in (trimmed in place when they had little spare). */
    const rank2Room = (scratch: ScanScratch): number => {
      const { aggregate } = scanRangeSync(segment, secondPiece, undefined, scratch);
      const samples = aggregate.sessions.get("session-a")!.ranks.get(2)!.samples;
      expect(samples.count).toBe(1000);
      return samples.t.buffer.byteLength / Float64Array.BYTES_PER_ELEMENT;
    };
    const scratch: ScanScratch = { buf: null };
    scanRangeSync(segment, firstPiece, undefined, scratch);
    expect(scratch.ranks).toEqual({ path, samples: 1000 });
    expect(rank2Room(scratch)).toBe(roomForSamples(1000));
    // Another file's ranks are not carried: rank 2 is sized by the cut rank's rest, grows, and is copied to size.
    expect(rank2Room({ buf: null, ranks: { path: join(temp, "other.jsonl"), samples: 1000 } })).toBe(1000);
  });
});
