import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { removedWhileRead } from "@stormlog/sink/internal";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { BASE_NS, MS, record, writeSink } from "../../../sink/test/support/telemetry-fixtures.js";
import { SegmentIndex } from "../../src/index/index-cache.js";
import { analyzeTelemetry } from "../../src/index.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-pruned-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
afterEach(() => {
  vi.restoreAllMocks();
  vi.unstubAllEnvs();
});

/** A sink of three segments of `perSegment` samples each. */
function sinkOfThree(name: string, perSegment: number): { dir: string; segments: string[] } {
  const dir = join(temp, name);
  const events = Array.from({ length: 3 * perSegment }, (_, i) =>
    record("sample", BASE_NS + BigInt(i) * 10n * MS, { allocator_allocated_bytes: 1000 + i }),
  );
  return { dir, segments: writeSink(dir, events, { segmentSize: perSegment }) };
}

/** The analysis with the second segment removed after the input was listed and fingerprinted. */
async function analyzedWhilePruned(dir: string, victim: string, index: boolean) {
  const open = SegmentIndex.open.bind(SegmentIndex);
  vi.spyOn(SegmentIndex, "open").mockImplementation(async (input, options) => {
    const opened = await open(input, options);
    rmSync(victim);
    return opened;
  });
  return analyzeTelemetry(dir, { index, cacheDir: join(temp, "cache") });
}

describe("a segment pruned while the analysis reads the sink (a live writer's retention)", () => {
  for (const index of [false, true]) {
    it(`is read without, with the reader's warning and no 'cut short' one (index ${index})`, async () => {
      const { dir, segments } = sinkOfThree(`small-${index}`, 20);
      const report = await analyzedWhilePruned(dir, segments[1] as string, index);
      expect(report.sink.warnings).toContain(removedWhileRead(segments[1] as string));
      expect(report.sink.warnings.join("\n")).not.toContain("could be read");
      expect(report.summary.event_count).toBe(40);
    });
  }

  it("is read without when it is big enough to be scanned in pieces", async () => {
    vi.stubEnv("STORMLOG_PIECE_BYTES", "4096");
    const { dir, segments } = sinkOfThree("pieces", 200);
    const report = await analyzedWhilePruned(dir, segments[1] as string, false);
    expect(report.sink.warnings.filter((w) => w === removedWhileRead(segments[1] as string))).toHaveLength(1);
    expect(report.summary.event_count).toBe(400);
  });
});

describe("segments pruned between listing the sink and opening its index", () => {
  for (const index of [false, true]) {
    it(`are read without, however many (index ${index})`, async () => {
      const dir = join(temp, `listed-${index}`);
      const events = Array.from({ length: 4 * 20 }, (_, i) =>
        record("sample", BASE_NS + BigInt(i) * 10n * MS),
      );
      const segments = writeSink(dir, events, { segmentSize: 20 });
      const open = SegmentIndex.open.bind(SegmentIndex);
      vi.spyOn(SegmentIndex, "open").mockImplementation(async (input, options) => {
        rmSync(segments[0] as string);
        rmSync(segments[2] as string);
        return open(input, options);
      });
      const report = await analyzeTelemetry(dir, { index, cacheDir: join(temp, "cache-listed") });
      expect(report.sink.warnings).toEqual(
        expect.arrayContaining([segments[0], segments[2]].map((s) => removedWhileRead(s as string))),
      );
      expect(report.summary.event_count).toBe(40);
    });
  }
});
