import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TelemetryEvent } from "@stormlog/core";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { TimeRangeError } from "../../src/errors.js";
import { encodeAggregateParts } from "../../src/index/index-format.js";
import { scanSegments } from "../../src/index/piece-scan.js";
import { loadRanks, planDataset, type RankSeries } from "../../src/input/dataset.js";
import { digestToJson } from "../../src/input/digest.js";
import { type PieceRange, pieceRanges } from "../../src/input/pieces.js";
import { scanSegmentSync } from "../../src/input/scan.js";
import { inMemorySegment, type SegmentData, type SegmentPiece } from "../../src/input/sessions.js";
import { interleaved, pieceJobEvents, pieceJobText } from "../support/piece-job.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-pieces-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

let files = 0;
/** Writes `text` to a new file; its segment. */
function segmentOf(text: string) {
  const path = join(temp, `job-${++files}.jsonl`);
  writeFileSync(path, text);
  return { path, hint: null, defaultSessionId: "default-session" };
}

/** Pieces that begin at the given lines (0-based; the first piece begins at line 0). */
function rangesAt(lineStarts: readonly number[], cuts: readonly number[]): PieceRange[] {
  const starts = [0, ...cuts.map((line) => lineStarts[line]!)];
  return starts.map((start, k) => ({ start, end: starts[k + 1] ?? Number.POSITIVE_INFINITY }));
}

/**
 * The segment scanned in `ranges` by `scanSegments` (on this thread: too few bytes for workers),
 * its aggregates written to files, as the index hands it to the analysis.
 */
async function scannedInPieces(
  segment: ReturnType<typeof segmentOf>,
  ranges: readonly PieceRange[],
): Promise<SegmentData> {
  const dir = mkdtempSync(join(temp, "agg-"));
  const files = ranges.map((_, k) => join(dir, `piece-${k}.agg`));
  const stamps = ranges.map((_, k) => `stamp ${k}`);
  const { segments, pending } = await scanSegments(
    [{ segment, size: Number.POSITIVE_INFINITY, ranges, files, stamps }],
    {
      encode: (aggregate, stamp) => encodeAggregateParts(aggregate, stamp),
      later: async (path, parts) => {
        writeFileSync(path, Buffer.concat(parts));
        return true;
      },
    },
    0,
    () => undefined,
    { buf: null },
  );
  await Promise.all(pending);
  const scanned = segments[0]!;
  const pieces = scanned.pieces.map(
    (piece, k): SegmentPiece => ({
      start: piece.range.start,
      end: piece.range.end,
      lineOffset: piece.lineOffset,
      digest: piece.digest,
      aggregate: piece.aggregate,
      file: { path: files[k]!, stamp: stamps[k]! },
    }),
  );
  return {
    source: segment.path,
    hint: null,
    digest: scanned.digest,
    aggregate: null,
    file: null,
    segment,
    pieces,
  };
}

/** Every series of `segment` as the analyses see them (plain values; lines as storage order only). */
function seriesOf(segment: SegmentData): unknown[] {
  const members = segment.digest.sessions.map((session) => session.sessionId);
  const out: unknown[] = [];
  for (const { series } of loadRanks(planDataset([segment], members)))
    for (const one of series) out.push(plainSeries(one));
  return out;
}

function plainSeries(series: RankSeries): unknown {
  const n = series.count;
  const column = (array: ArrayLike<number> | null) => (array === null ? null : Array.from(array).slice(0, n));
  // A boundary's, alert's or instant's `line` counts within its piece: `*Order` holds its storage order.
  const withoutLine = <T extends { line: number }>(entries: readonly T[]) =>
    entries.map(({ line: _line, ...rest }) => rest);
  return {
    ...series,
    t: column(series.t),
    order: column(series.order),
    allocated: column(series.allocated),
    reserved: column(series.reserved),
    used: column(series.used),
    total: column(series.total),
    tensors: column(series.tensors),
    identity: column(series.identity),
    rules: column(series.rules),
    exact: series.exact === null ? null : [...series.exact],
    origins: series.origins === null ? null : [...series.origins],
    // The scope's text is kept while scanned, not once stored: its value is what counts.
    boundaries: withoutLine(series.boundaries).map(({ scopeJson: _text, ...boundary }) => ({
      ...boundary,
      scope: boundary.scope,
    })),
    boundaryOrder: column(series.boundaryOrder),
    alerts: withoutLine(series.alerts),
    alertOrder: column(series.alertOrder),
    instants: withoutLine(series.instants),
    instantOrder: column(series.instantOrder),
  };
}

describe("pieceRanges", () => {
  it("cuts a file into pieces that start just after a newline and cover it", () => {
    const { text } = pieceJobText(pieceJobEvents());
    const segment = segmentOf(text);
    const size = Buffer.byteLength(text);
    const ranges = pieceRanges(segment.path, size, 20_000);
    expect(ranges.length).toBeGreaterThan(5);
    expect(ranges[0]!.start).toBe(0);
    expect(ranges.at(-1)!.end).toBe(Number.POSITIVE_INFINITY);
    for (const [k, range] of ranges.entries()) {
      if (k > 0) expect(text[range.start - 1]).toBe("\n");
      if (k > 0) expect(ranges[k - 1]!.end).toBe(range.start);
      // About the piece size, the last one up to half a piece more.
      const end = Math.min(range.end, size);
      expect(end - range.start).toBeGreaterThan(10_000);
      expect(end - range.start).toBeLessThan(31_000);
    }
  });

  it("keeps a small file, and one without a newline to cut at, whole", () => {
    const small = segmentOf("{}\n{}\n");
    expect(pieceRanges(small.path, 6, 4)).toEqual([{ start: 0, end: Number.POSITIVE_INFINITY }]);
    const long = segmentOf("x".repeat(10_000));
    expect(pieceRanges(long.path, 10_000, 1000)).toEqual([{ start: 0, end: Number.POSITIVE_INFINITY }]);
  });
});

describe("a file scanned in pieces", () => {
  const events = pieceJobEvents();
  const ranks = events.map((event) => `${event.session_id}/${event.rank}`);
  // Line 0 of each piece: mid-rank, at a rank's first line, two lines in a row, the last line.
  const changes = ranks.map((key, i) => (i > 0 && key !== ranks[i - 1] ? i : -1)).filter((i) => i > 0);
  const splits: Record<string, number[]> = {
    "mid-rank": [Math.floor(changes[0]! / 2), changes[1]! + 7, changes[2]! + 100],
    "at rank changes": changes,
    "lines in a row, and the last line": [1, 2, 3, changes[1]! + 1, events.length - 1],
  };

  for (const [order, records] of [
    ["rank after rank", events],
    ["interleaved (ranks and sessions mixed)", interleaved(events)],
  ] as const) {
    for (const [where, cuts] of Object.entries(splits)) {
      it(`gives the digest and the series of one scan of the whole file: ${order}, cut ${where}`, async () => {
        const { text, lineStarts } = pieceJobText(records);
        const segment = segmentOf(text);
        const whole = inMemorySegment(segment.path, null, scanSegmentSync(segment));
        const pieces = await scannedInPieces(segment, rangesAt(lineStarts, cuts));
        expect(pieces.pieces).toHaveLength(cuts.length + 1);
        // Sessions, event types, ranks and jobs in the same order, ties decided the same way.
        expect(digestToJson(pieces.digest)).toEqual(digestToJson(whole.digest));
        expect(seriesOf(pieces)).toEqual(seriesOf(whole));
      });
    }
  }

  it("cuts sessions and ranks: the splits above do", () => {
    // Every rank of the rank-after-rank file spans at least one cut of "mid-rank" or "lines in a row".
    const cut = new Set([...splits["mid-rank"]!, ...splits["lines in a row, and the last line"]!]);
    const spanned = new Set<string>();
    for (const line of cut) if (ranks[line] === ranks[line - 1]) spanned.add(ranks[line]!);
    expect(spanned.size).toBeGreaterThanOrEqual(3);
  });

  it("throws the error one scan of the whole file throws, naming its line", async () => {
    const { text, lineStarts } = pieceJobText(events);
    const bad = events.length - 40;
    const broken = `${text.slice(0, lineStarts[bad]!)}{"schema_version": 3, "oops"\n${text.slice(lineStarts[bad]!)}`;
    const segment = segmentOf(broken);
    const expected = (() => {
      try {
        scanSegmentSync(segment);
      } catch (error) {
        return error as Error;
      }
      throw new Error("the whole file scanned");
    })();
    expect(expected.message).toContain(`:${bad + 1}`);
    await expect(scannedInPieces(segment, rangesAt(lineStarts, [100, bad - 10]))).rejects.toThrow(
      expected.message,
    );
  });

  it("warns about a final line cut short as one scan of the whole file does", async () => {
    const { text, lineStarts } = pieceJobText(events);
    const segment = segmentOf(`${text}{"schema_version": 3, "session_id": "p-r`);
    const whole = inMemorySegment(segment.path, null, scanSegmentSync(segment));
    expect(whole.digest.warnings).toHaveLength(1);
    const pieces = await scannedInPieces(segment, rangesAt(lineStarts, [200, events.length - 3]));
    expect(digestToJson(pieces.digest)).toEqual(digestToJson(whole.digest));
    expect(pieces.digest.warnings[0]!.message).toContain(`:${events.length + 1}:`);
  });

  it("checks a rank's timestamps against its first event's, wherever its records lie", async () => {
    const day = 86_400_000_000_000n;
    const at = (ts: bigint): TelemetryEvent => record("sample", ts, { session_id: "far", rank: 0 });
    // 9,007,198.5 s after the rank's first record: within the range one scan allows (9,007,199 s),
    // too close to its edge to take a later piece's own scan on trust, so that piece is scanned again.
    const near: TelemetryEvent[] = [
      at(BASE_NS),
      ...Array.from({ length: 30 }, (_, i) => at(BASE_NS - 3n * day + BigInt(i))),
      at(BASE_NS + 9_007_198_500_000_000n),
    ];
    const { text, lineStarts } = pieceJobText(near);
    const segment = segmentOf(text);
    const whole = inMemorySegment(segment.path, null, scanSegmentSync(segment));
    const pieces = await scannedInPieces(segment, rangesAt(lineStarts, [5, near.length - 1]));
    expect(seriesOf(pieces)).toEqual(seriesOf(whole));

    // A day later: beyond it, and refused as one scan refuses it, at the same line.
    appendFileSync(segment.path, pieceJobText([at(BASE_NS + 105n * day)]).text);
    const refused = (() => {
      try {
        scanSegmentSync(segment);
      } catch (error) {
        return error as Error;
      }
      throw new Error("the whole file scanned");
    })();
    expect(refused).toBeInstanceOf(TimeRangeError);
    await expect(scannedInPieces(segment, rangesAt(lineStarts, [5, near.length - 1]))).rejects.toThrow(
      refused.message,
    );
  });
});
