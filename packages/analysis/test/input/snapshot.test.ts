import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, stringifyJson, type TelemetryEvent } from "@stormlog/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  appendSample,
  BASE_NS,
  GiB,
  MS,
  settle,
  Timeline,
  writeSink,
} from "../../../sink/test/support/telemetry-fixtures.js";
import { SegmentIndex } from "../../src/index/index-cache.js";
import { readStoredRendering } from "../../src/index/stored-results.js";
import {
  analyzeTelemetry,
  diagnoseTelemetry,
  formatReportText,
  INDEX_DIRNAME,
  renderTelemetryAnalysis,
  renderTelemetryDiagnosis,
  reportToJson,
} from "../../src/index.js";
import { contentCheck, locateInput, snapshotInput } from "../../src/input/snapshot.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-snapshot-"));
const previousCache = process.env.STORMLOG_CACHE_DIR;
const previousXdg = process.env.XDG_CACHE_HOME;
afterAll(() => {
  rmSync(temp, { recursive: true, force: true });
  if (previousCache === undefined) delete process.env.STORMLOG_CACHE_DIR;
  else process.env.STORMLOG_CACHE_DIR = previousCache;
  if (previousXdg === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = previousXdg;
});

function rankEvents(rank: number, steps: number, start = BASE_NS, job = "job-s"): TelemetryEvent[] {
  const t = new Timeline(
    {
      rank,
      world_size: 2,
      job_id: job,
      session_id: `s-${rank}`,
      pid: 20 + rank,
      device_total_bytes: 16 * GiB,
    },
    start + BigInt(rank) * MS,
  );
  t.event("start");
  for (let step = 0; step < steps; step++) {
    t.enter("train").sample();
    t.allocated += rank === 1 ? 4096 : 0;
    t.sample().exit();
  }
  t.event("stop");
  return t.events;
}

function makeRoot(name: string): string {
  const root = join(temp, name);
  for (const rank of [0, 1]) writeSink(join(root, `rank-${rank}`), rankEvents(rank, 12), { segmentSize: 20 });
  return root;
}

/** The analysis of an input, as JSON text. */
async function jsonOf(path: string, index = true): Promise<string> {
  return stringifyJson(reportToJson(await analyzeTelemetry(path, { index })));
}

/** Whether the stored snapshot still vouches for the input (a warm analysis skips resolving it). */
function vouched(path: string): boolean {
  const location = locateInput(path);
  return location !== null && SegmentIndex.reuse(location, { index: true }) !== null;
}

const NAMES = [
  "append",
  "rank",
  "segment",
  "beside",
  "manifest",
  "pruned",
  "render",
  "link",
  "jsonl",
  "diagnose",
  "diagnoseRender",
] as const;
const roots = {} as Record<(typeof NAMES)[number], string>;

describe("input snapshot (warm analyses skip resolving an unchanged input)", () => {
  beforeAll(async () => {
    delete process.env.STORMLOG_CACHE_DIR;
    process.env.XDG_CACHE_HOME = join(temp, "xdg");
    for (const name of NAMES) roots[name] = makeRoot(name);
    symlinkSync(join(roots.link, "rank-1"), join(roots.link, "rank-9"));
    await settle();
    // The first analysis creates the index directory, which changes the root: not trusted for two seconds.
    for (const name of NAMES) await analyzeTelemetry(roots[name]);
    await analyzeTelemetry(join(roots.jsonl, "rank-0", "segment-000001.jsonl"));
    await settle();
    for (const name of NAMES) await analyzeTelemetry(roots[name]);
    await analyzeTelemetry(join(roots.jsonl, "rank-0", "segment-000001.jsonl"));
  }, 30_000);

  it("is stored once nothing changed for two seconds, and vouches for the stored report", async () => {
    const root = roots.append;
    expect(existsSync(join(root, INDEX_DIRNAME, "inputs.json"))).toBe(true);
    expect(vouched(root)).toBe(true);
    const report = await analyzeTelemetry(root);
    expect(report.index).toMatchObject({ status: "reused", report_reused: true, segments_reused: 6 });
    expect(stringifyJson(reportToJson(report))).toBe(await jsonOf(root, false));
  });

  it("stops vouching when a line is appended to a segment, and the change is analysed", async () => {
    const root = roots.append;
    appendSample(
      join(root, "rank-0", "segment-000001.jsonl"),
      { rank: 0, world_size: 2, job_id: "job-s", session_id: "s-0", pid: 20 },
      BASE_NS + 10n ** 10n,
      9 * GiB,
    );
    expect(vouched(root)).toBe(false);
    expect(await jsonOf(root)).toBe(await jsonOf(root, false));
  });

  it("stops vouching when a rank directory appears", async () => {
    const root = roots.rank;
    writeSink(join(root, "rank-2"), rankEvents(0, 4, BASE_NS, "job-t"), { segmentSize: 50 });
    expect(vouched(root)).toBe(false);
    const text = await jsonOf(root);
    expect(text).toBe(await jsonOf(root, false));
    expect(JSON.parse(text).sink.directory_count).toBe(3);
  });

  it("stops vouching when a segment appears that no manifest lists", async () => {
    const root = roots.segment;
    const extra = rankEvents(1, 3, BASE_NS + 10n ** 11n);
    writeFileSync(
      join(root, "rank-1", "segment-000042.jsonl"),
      extra.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""),
    );
    expect(vouched(root)).toBe(false);
    expect(await jsonOf(root)).toBe(await jsonOf(root, false));
  });

  it("stops vouching when a file beside the sinks changes the input's size", async () => {
    const root = roots.beside;
    const before = (await analyzeTelemetry(root)).input.size_bytes;
    writeFileSync(join(root, "notes.txt"), "x".repeat(1000));
    expect(vouched(root)).toBe(false);
    expect((await analyzeTelemetry(root)).input.size_bytes).toBe(before + 1000);
    expect(await jsonOf(root)).toBe(await jsonOf(root, false));
  });

  it("stops vouching when a manifest is rewritten in place", async () => {
    const root = roots.manifest;
    const manifest = join(root, "rank-0", "manifest.json");
    const text = readFileSync(manifest, "utf8");
    // Same length, other session status: only the file's times tell.
    writeFileSync(manifest, text.replace('"completed"', '"completeD"'));
    expect(vouched(root)).toBe(false);
  });

  it("stops vouching when a segment is pruned", async () => {
    const root = roots.pruned;
    rmSync(join(root, "rank-1", "segment-000001.jsonl"));
    expect(vouched(root)).toBe(false);
    const text = await jsonOf(root);
    expect(text).toBe(await jsonOf(root, false));
    expect(JSON.parse(text).sink.missing_segment_count).toBe(1);
  });

  it("is not stored for an input with a link in it (changes behind it would not show)", () => {
    expect(snapshotInput(locateInput(roots.link)!, INDEX_DIRNAME).reusable).toBe(false);
    expect(existsSync(join(roots.link, INDEX_DIRNAME, "inputs.json"))).toBe(false);
    expect(vouched(roots.link)).toBe(false);
  });

  it("covers a segment given as the input: its directory's files", () => {
    const segment = join(roots.jsonl, "rank-0", "segment-000001.jsonl");
    expect(existsSync(join(roots.jsonl, "rank-0", INDEX_DIRNAME, "inputs-segment-000001.jsonl.json"))).toBe(
      true,
    );
    expect(vouched(segment)).toBe(true);
    writeFileSync(join(roots.jsonl, "rank-0", "rollups.json"), "{}");
    expect(vouched(segment)).toBe(false);
  });

  it("renders as analyze prints, and stores a reused report's rendering for the next run", async () => {
    const root = roots.render;
    const json = await renderTelemetryAnalysis(root, { format: "json" });
    expect(json).toBe(`${stringifyJson(reportToJson(await analyzeTelemetry(root)), { indent: 2 })}\n`);
    // Read back as stored: the same text.
    expect(await renderTelemetryAnalysis(root, { format: "json" })).toBe(json);
    const expectedText = async (): Promise<string> => formatReportText(await analyzeTelemetry(root));
    const text = await renderTelemetryAnalysis(root, { format: "txt" });
    expect(text).toBe(await expectedText());
    expect(text.endsWith("\n")).toBe(true);
    expect(await renderTelemetryAnalysis(root, { format: "txt" })).toBe(text);
    expect(await renderTelemetryAnalysis(root, { format: "txt", color: true })).toContain("\x1b[");
    // The text names the input's size: a file beside the sinks changes it, and the stored rendering is not used.
    const size = (await analyzeTelemetry(root)).input.size_bytes;
    expect(text).toContain(`Input directory: ${root}`);
    expect(text).toContain(`Directory size: ${size} bytes (`);
    mkdirSync(join(root, "notes"));
    writeFileSync(join(root, "notes", "a.txt"), "y".repeat(333));
    const after = await renderTelemetryAnalysis(root, { format: "txt" });
    expect(after).toContain(`Directory size: ${size + 333} bytes (`);
    expect(after).toBe(await expectedText());
  });

  it("vouches for diagnose's stored result too, and stops when a segment changes", async () => {
    const root = roots.diagnose;
    const plain = (result: object): unknown => ({ ...result, index: null });
    await diagnoseTelemetry(root);
    expect(vouched(root)).toBe(true);
    const warm = await diagnoseTelemetry(root);
    expect(warm.index).toMatchObject({ report_reused: true });
    expect(plain(warm)).toEqual(plain(await diagnoseTelemetry(root, { index: false })));
    appendFileSync(join(root, "rank-1", "segment-000001.jsonl"), "\n");
    expect(vouched(root)).toBe(false);
    const changed = await diagnoseTelemetry(root);
    expect(changed.index).toMatchObject({ report_reused: false });
  });

  it("keeps a diagnosis's rendering once its result was read back, and renders again after a change", async () => {
    const root = roots.diagnoseRender;
    let calls = 0;
    const render = async (key = "table v1") =>
      renderTelemetryDiagnosis(root, {
        renderKey: key,
        render: (result) => {
          calls++;
          return { rows: result.diagnostics.rows.length, reused: result.index?.report_reused === true };
        },
      });
    // Computed, then read back from the index (rendered again, and stored), then the stored rendering.
    expect(await render()).toEqual({ rows: 2, reused: false });
    expect(await render()).toEqual({ rows: 2, reused: true });
    expect(calls).toBe(2);
    expect(await render()).toEqual({ rows: 2, reused: true });
    expect(calls).toBe(2);
    // Another renderer's key is not served this one's rendering.
    expect(await render("table v2")).toEqual({ rows: 2, reused: true });
    expect(calls).toBe(3);
    writeSink(join(root, "rank-2"), rankEvents(0, 4, BASE_NS, "job-t"), { segmentSize: 50 });
    expect(await render()).toEqual({ rows: 2, reused: false });
    expect(calls).toBe(4);
  });
});

/** Sets a file's mtime an hour ahead: racy for as long as the test runs, whatever the machine's speed. */
function makeRacy(path: string): void {
  const ahead = new Date(Date.now() + 3_600_000);
  utimesSync(path, ahead, ahead);
}

/** The stored snapshot's entries of a single segment's index. */
function storedEntries(segment: string): [string, string][] {
  const dir = join(segment, "..", INDEX_DIRNAME);
  const name = `inputs-${segment.slice(segment.lastIndexOf("/") + 1)}.json`;
  return JSON.parse(readFileSync(join(dir, name), "utf8")).entries;
}

describe("racy inputs and files beside a single segment", () => {
  beforeAll(() => {
    delete process.env.STORMLOG_CACHE_DIR;
    process.env.XDG_CACHE_HOME = join(temp, "xdg");
  });

  it("stores a freshly written segment's results at once, vouched for by its content check", async () => {
    const dir = join(temp, "racy-segment");
    writeSink(dir, rankEvents(0, 12), { segmentSize: 1000, manifest: false });
    const segment = join(dir, "segment-000001.jsonl");
    makeRacy(segment);
    const cold = await analyzeTelemetry(segment);
    expect(cold.index).toMatchObject({ status: "built", report_reused: false });
    // The entry carries its content check; the file's times alone would not vouch for it.
    const [own] = storedEntries(segment);
    expect(own?.[0]).toBe("segment-000001.jsonl");
    expect(own?.[1]).toContain("#f");
    expect(vouched(segment)).toBe(true);
    const warm = await analyzeTelemetry(segment);
    expect(warm.index).toMatchObject({ status: "reused", report_reused: true });
    expect(await jsonOf(segment)).toBe(await jsonOf(segment, false));
    // Both renderings after the cold run come from the index, and are what a fresh analysis renders.
    const first = await renderTelemetryAnalysis(segment, { format: "json" });
    expect(await renderTelemetryAnalysis(segment, { format: "json" })).toBe(first);
    expect(first).toBe(await renderTelemetryAnalysis(segment, { format: "json", index: false }));
  });

  it("stores with a cold analysis the rendering the next run makes, read back without the analysis", async () => {
    const dir = join(temp, "cold-rendering");
    writeSink(dir, rankEvents(0, 12), { segmentSize: 1000, manifest: false });
    const segment = join(dir, "segment-000001.jsonl");
    makeRacy(segment);
    for (const format of ["json", "txt"] as const) {
      rmSync(join(dir, INDEX_DIRNAME), { recursive: true, force: true });
      expect(readStoredRendering(segment, { format, color: false, index: true })).toBeNull();
      const cold = await renderTelemetryAnalysis(segment, { format });
      const stored = readStoredRendering(segment, { format, color: false, index: true });
      // What the next run renders without it: the stored report, read back ("reused").
      const report = await analyzeTelemetry(segment);
      expect(report.index).toMatchObject({ report_reused: true });
      const next =
        format === "json"
          ? `${stringifyJson(reportToJson(report), { indent: 2 })}\n`
          : formatReportText(report).replace(/\n?$/, "\n");
      expect(stored).toBe(next);
      expect(await renderTelemetryAnalysis(segment, { format })).toBe(next);
      // Neither rendering names how the index was used.
      expect(cold).toBe(next);
      // Another choice, no index, or a changed input: nothing stored to read.
      expect(readStoredRendering(segment, { format, color: true, index: true })).toBeNull();
      expect(readStoredRendering(segment, { format, color: false, index: false })).toBeNull();
    }
    appendFileSync(segment, "\n");
    expect(readStoredRendering(segment, { format: "txt", color: false, index: true })).toBeNull();
  });

  it("stops vouching for a racy segment when its content check no longer matches", async () => {
    const dir = join(temp, "racy-check");
    writeSink(dir, rankEvents(0, 12), { segmentSize: 1000, manifest: false });
    const segment = join(dir, "segment-000001.jsonl");
    makeRacy(segment);
    await analyzeTelemetry(segment);
    expect(vouched(segment)).toBe(true);
    // What a same-size rewrite within the file system's timestamp granularity would leave: the
    // fingerprint as stored and other bytes. Fingerprints cannot be forged here, so the stored
    // check is: the segment is then read again.
    const indexDir = join(dir, INDEX_DIRNAME);
    const snapshotFile = join(indexDir, "inputs-segment-000001.jsonl.json");
    const snapshot = JSON.parse(readFileSync(snapshotFile, "utf8"));
    snapshot.entries[0][1] = snapshot.entries[0][1].replace(/#f\d+:[0-9a-f]+$/, "#f1:00000000deadbeef");
    writeFileSync(snapshotFile, JSON.stringify(snapshot));
    expect(vouched(segment)).toBe(false);
    const catalogFile = join(indexDir, "index-segment-000001.jsonl.json");
    const catalog = JSON.parse(readFileSync(catalogFile, "utf8"));
    expect(catalog.segments[0]).toMatchObject({ racy: true, check: expect.any(String) });
    catalog.segments[0].check = "1:00000000deadbeef";
    writeFileSync(catalogFile, JSON.stringify(catalog));
    for (const name of readdirSync(indexDir)) if (name.startsWith("report-")) rmSync(join(indexDir, name));
    const again = await analyzeTelemetry(segment);
    expect(again.index).toMatchObject({ status: "updated", segments_scanned: 1, segments_reused: 0 });
    expect(await jsonOf(segment)).toBe(await jsonOf(segment, false));
  });

  it("keeps vouching for a single segment when a report is written beside it", async () => {
    const dir = join(temp, "beside-segment");
    writeSink(dir, rankEvents(1, 12), { segmentSize: 1000 });
    const segment = join(dir, "segment-000001.jsonl");
    makeRacy(segment);
    const text = await renderTelemetryAnalysis(segment, { format: "txt" });
    writeFileSync(join(dir, "report.txt"), text);
    expect(vouched(segment)).toBe(true);
    await renderTelemetryAnalysis(segment, { format: "txt" });
    writeFileSync(join(dir, "report.txt"), text);
    expect(vouched(segment)).toBe(true);
    // What its analysis reads beside it still counts: the manifest, rollups.json.
    const manifest = join(dir, "manifest.json");
    writeFileSync(manifest, readFileSync(manifest, "utf8").replace('"completed"', '"completeD"'));
    expect(vouched(segment)).toBe(false);
    const rollups = join(temp, "beside-rollups");
    writeSink(rollups, rankEvents(1, 6), { segmentSize: 1000 });
    const other = join(rollups, "segment-000001.jsonl");
    await analyzeTelemetry(other);
    expect(vouched(other)).toBe(true);
    writeFileSync(join(rollups, "rollups.json"), "{}");
    expect(vouched(other)).toBe(false);
  });

  it("re-checks a racy directory by its entries' names", async () => {
    const root = makeRoot("racy-root");
    for (const path of [root, join(root, "rank-0"), join(root, "rank-1")]) makeRacy(path);
    // The first analysis adds the index directory (the root changes after its snapshot), the second stores it.
    await analyzeTelemetry(root);
    await analyzeTelemetry(root);
    expect(vouched(root)).toBe(true);
    const stored = JSON.parse(readFileSync(join(root, INDEX_DIRNAME, "inputs.json"), "utf8")).entries;
    expect(stored.find(([path]: [string, string]) => path === "rank-0")?.[1]).toContain("#d");
    writeFileSync(join(root, "rank-0", "notes.txt"), "x");
    expect(vouched(root)).toBe(false);
  });

  it("does not snapshot a segment given through a link into another directory", () => {
    const dir = join(temp, "linked-segment");
    writeSink(join(dir, "real"), rankEvents(0, 4), { segmentSize: 1000 });
    mkdirSync(join(dir, "view"));
    symlinkSync(join(dir, "real", "segment-000001.jsonl"), join(dir, "view", "segment-000001.jsonl"));
    const location = locateInput(join(dir, "view", "segment-000001.jsonl"))!;
    expect(location.linked).toBe(true);
    expect(snapshotInput(location, INDEX_DIRNAME).reusable).toBe(false);
    expect(locateInput(join(dir, "real", "segment-000001.jsonl"))!.linked).toBe(false);
  });
});

describe("contentCheck", () => {
  it("tells apart a change of one byte at either end or in a block between, and of the size", () => {
    const path = join(temp, "check.bin");
    const size = 1 << 20;
    const bytes = Buffer.alloc(size, 0x61);
    writeFileSync(path, bytes);
    const base = contentCheck(path, size);
    expect(base).toMatch(/^1048576:[0-9a-f]{16}$/);
    expect(contentCheck(path, size)).toBe(base);
    const stride = Math.floor((size - 2 * 65536) / 17);
    for (const offset of [0, 65535, 65536 + stride, size - 65536, size - 1]) {
      const changed = Buffer.from(bytes);
      changed[offset] = 0x62;
      writeFileSync(path, changed);
      expect(contentCheck(path, size), `byte ${offset}`).not.toBe(base);
    }
    writeFileSync(path, Buffer.concat([bytes, Buffer.from("\n")]));
    expect(contentCheck(path, statSync(path).size)).not.toBe(base);
    expect(contentCheck(join(temp, "no-such-file"), 10)).toBeNull();
  });

  it("reads a small file whole", () => {
    const path = join(temp, "check-small.txt");
    writeFileSync(path, "abc");
    const before = contentCheck(path, 3);
    writeFileSync(path, "abd");
    expect(contentCheck(path, 3)).not.toBe(before);
  });
});
