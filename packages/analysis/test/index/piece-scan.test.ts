import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type JsonValue, stringifyJson } from "@stormlog/core";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { writeSink } from "../../../sink/test/support/telemetry-fixtures.js";
import {
  analyzeTelemetry,
  diagnoseTelemetry,
  formatReportText,
  INDEX_DIRNAME,
  reportToJson,
  streamPerfettoTrace,
} from "../../src/index.js";
import { interleaved, pieceJobEvents, pieceJobText, scanIntoFiles } from "../support/piece-job.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-piece-scan-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
afterEach(() => {
  delete process.env.STORMLOG_PIECE_BYTES;
  delete process.env.STORMLOG_SCAN_THREADS;
  delete process.env.STORMLOG_SPILL_MIN_BYTES;
});

/** Bytes per piece that cut the job's file into a few dozen pieces. */
const PIECE = "16384";
/** Bytes per piece that keep it whole. */
const WHOLE = String(1 << 30);

function writeJob(name: string, order: "ranks" | "time" = "ranks"): string {
  const events = pieceJobEvents();
  const dir = join(temp, name);
  mkdirSync(dir);
  const path = join(dir, "job.jsonl");
  writeFileSync(path, pieceJobText(order === "ranks" ? events : interleaved(events)).text);
  return path;
}

/** What the analyses make of the file: the report (JSON and text), the diagnosis, the Perfetto trace. */
async function everything(path: string): Promise<string> {
  const report = await analyzeTelemetry(path);
  report.index = null;
  const diagnosis = await diagnoseTelemetry(path);
  diagnosis.index = null;
  let trace = "";
  for await (const chunk of streamPerfettoTrace(path)) trace += chunk;
  return [
    stringifyJson(reportToJson(report), { indent: 1 }),
    formatReportText(report),
    stringifyJson(diagnosis as unknown as JsonValue, { indent: 1 }),
    trace,
  ].join("\n");
}

function dropIndex(path: string): void {
  rmSync(join(path, "..", INDEX_DIRNAME), { recursive: true, force: true });
}

describe("a big .jsonl scanned in pieces", () => {
  it("runs a process's first big scan on scan workers", async () => {
    const path = writeJob("workers");
    process.env.STORMLOG_PIECE_BYTES = PIECE;
    const dir = join(temp, "workers-agg");
    const { segment: scanned, files } = await scanIntoFiles(path, dir, Number(PIECE));
    expect(files.length).toBeGreaterThanOrEqual(8);
    // Every piece came back from a worker: none was scanned (and held) here.
    expect(scanned.pieces.every((piece) => piece.aggregate === null && piece.written)).toBe(true);
    expect(readdirSync(dir).sort()).toEqual(files.map((file) => file.slice(dir.length + 1)).sort());
    expect(scanned.digest.eventCount).toBe(pieceJobEvents().length);
  });

  for (const order of ["ranks", "time"] as const) {
    it(`gives what one scan of the whole file gives, on workers and on one thread, cold and warm (${order === "ranks" ? "rank after rank" : "ranks interleaved"})`, async () => {
      const path = writeJob(`same-${order}`, order);
      process.env.STORMLOG_PIECE_BYTES = WHOLE;
      const whole = await everything(path);
      const segments = join(path, "..", INDEX_DIRNAME, "segments");
      expect(readdirSync(segments)).toHaveLength(1);

      process.env.STORMLOG_PIECE_BYTES = PIECE;
      for (const threads of ["2", "1", "2"]) {
        dropIndex(path);
        if (threads === undefined) delete process.env.STORMLOG_SCAN_THREADS;
        else process.env.STORMLOG_SCAN_THREADS = threads;
        expect(await everything(path)).toBe(whole);
      }
      const pieces = readdirSync(segments).filter((name) => /^seg-[0-9a-f]{24}-\d+\.agg$/.test(name));
      expect(pieces.length).toBeGreaterThanOrEqual(8);
      // Read back from the index's pieces (the stored results removed), and once the report is stored.
      for (const name of readdirSync(join(path, "..", INDEX_DIRNAME)))
        if (name.startsWith("report-") || name.startsWith("inputs"))
          rmSync(join(path, "..", INDEX_DIRNAME, name));
      const again = await analyzeTelemetry(path);
      expect(again.index).toMatchObject({ status: "reused", segments_reused: 1, report_reused: false });
      expect(await everything(path)).toBe(whole);
    });
  }

  it("scans a root of sinks' segments on workers: what one scan after the other gives", async () => {
    const root = join(temp, "root");
    const events = pieceJobEvents();
    for (const sessionId of new Set(events.map((event) => event.session_id)))
      writeSink(
        join(root, sessionId),
        events.filter((event) => event.session_id === sessionId),
        { segmentSize: 40 },
      );
    process.env.STORMLOG_PIECE_BYTES = WHOLE;
    const expected = await everything(root);
    // Workers take whole segments (at 64 KiB per piece: ~30 KB segments, enough bytes in all for
    // workers), and pieces of them (at 16 KiB); on one thread as well.
    for (const [bytes, threads] of [
      ["65536", "2"],
      [PIECE, "2"],
      [PIECE, "1"],
    ] as const) {
      rmSync(join(root, INDEX_DIRNAME), { recursive: true, force: true });
      process.env.STORMLOG_PIECE_BYTES = bytes;
      if (threads === undefined) delete process.env.STORMLOG_SCAN_THREADS;
      else process.env.STORMLOG_SCAN_THREADS = threads;
      expect(await everything(root)).toBe(expected);
    }
  });

  it("reads CRLF, lone CR and mixed line ends as LF (the reference's text mode), in pieces and whole", async () => {
    const path = writeJob("line-ends");
    const lf = readFileSync(path, "utf8");
    // The file's size differs (one byte more per `\r\n`); nothing else may.
    const withoutSize = (text: string) =>
      text
        .replace(/"retained_bytes": \d+/g, '"retained_bytes": N')
        .replace(/File size: \d+ bytes \([^)]*\)/g, "File size: N")
        .replace(/1 segment, [\d.]+ KB/g, "1 segment, N");
    process.env.STORMLOG_PIECE_BYTES = WHOLE;
    const expected = withoutSize(await everything(path));
    const lines = lf.split("\n");
    const variants = {
      crlf: lf.replaceAll("\n", "\r\n"),
      cr: lf.replaceAll("\n", "\r"),
      // Every third line ends in `\r`, every third in `\r\n`: pieces are cut after a `\n` only.
      mixed: lines
        .map((line, k) => line + (k === lines.length - 1 ? "" : ["\n", "\r", "\r\n"][k % 3]))
        .join(""),
    };
    for (const [name, text] of Object.entries(variants)) {
      writeFileSync(path, text);
      for (const bytes of [WHOLE, PIECE]) {
        dropIndex(path);
        process.env.STORMLOG_PIECE_BYTES = bytes;
        expect(withoutSize(await everything(path)), `${name}, pieces of ${bytes} bytes`).toBe(expected);
      }
    }
  });

  it("spills its pieces without an index, and forgets pieces the file no longer has", async () => {
    const path = writeJob("spill");
    process.env.STORMLOG_PIECE_BYTES = WHOLE;
    const expected = stringifyJson(
      reportToJson({ ...(await analyzeTelemetry(path, { index: false })), index: null }),
    );
    process.env.STORMLOG_PIECE_BYTES = PIECE;
    process.env.STORMLOG_SPILL_MIN_BYTES = "1";
    const spilled = await analyzeTelemetry(path, { index: false });
    expect(stringifyJson(reportToJson({ ...spilled, index: null }))).toBe(expected);

    // Indexed in pieces, then the file rewritten smaller: one aggregate file, the pieces gone.
    delete process.env.STORMLOG_SPILL_MIN_BYTES;
    await analyzeTelemetry(path);
    const segments = join(path, "..", INDEX_DIRNAME, "segments");
    expect(readdirSync(segments).length).toBeGreaterThanOrEqual(8);
    writeFileSync(path, readFileSync(path, "utf8").split("\n").slice(0, 20).join("\n"));
    process.env.STORMLOG_PIECE_BYTES = WHOLE;
    await analyzeTelemetry(path);
    expect(readdirSync(segments)).toHaveLength(1);
  });
});
