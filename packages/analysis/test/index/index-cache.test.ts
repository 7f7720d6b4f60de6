import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, stringifyJson, type TelemetryEvent } from "@stormlog/core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  FILLER,
  fill,
  smallFilesystem,
  unmountSmallFilesystems,
} from "../../../sink/test/support/full-filesystem.js";
import {
  appendSample,
  BASE_NS,
  GiB,
  MiB,
  MS,
  settle,
  Timeline,
  writeSink,
} from "../../../sink/test/support/telemetry-fixtures.js";
import { isTemporaryAggregate } from "../../src/index/index-format.js";
import { hashText } from "../../src/index/stored-results.js";
import { type AnalyzeOptions, analyzeTelemetry, INDEX_DIRNAME, reportToJson } from "../../src/index.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-index-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

function rankEvents(rank: number, steps: number, start = BASE_NS): TelemetryEvent[] {
  const t = new Timeline(
    {
      rank,
      world_size: 3,
      job_id: "job-i",
      session_id: `s-${rank}`,
      pid: 10 + rank,
      device_total_bytes: 16 * GiB,
    },
    start + BigInt(rank) * MS,
  );
  t.tensors = 50;
  t.event("start");
  for (let step = 0; step < steps; step++) {
    t.enter("train").sample();
    t.allocated += rank === 1 ? 8192 : 0;
    t.tensors += rank === 1 ? 1 : 0;
    if (step === 15) t.gap += (rank + 1) * GiB;
    t.sample().exit();
  }
  t.event("stop");
  return t.events;
}

/** A sink root with three ranks, several segments each. */
function makeRoot(name: string): string {
  const root = join(temp, name);
  for (const rank of [0, 1, 2])
    writeSink(join(root, `rank-${rank}`), rankEvents(rank, 24), { segmentSize: 30 });
  return root;
}

/** The JSON report as text, for equality with a fresh analysis. */
async function analysed(
  path: string,
  options: AnalyzeOptions = {},
): Promise<{ text: string; index: unknown }> {
  const report = await analyzeTelemetry(path, options);
  return { text: stringifyJson(reportToJson(report)), index: report.index };
}

async function fresh(path: string): Promise<string> {
  return (await analysed(path, { index: false })).text;
}

describe("transparent index", () => {
  const root = join(temp, "root");
  const cacheDir = join(temp, "cache");
  const previousCache = process.env.STORMLOG_CACHE_DIR;
  const previousXdg = process.env.XDG_CACHE_HOME;

  beforeAll(async () => {
    delete process.env.STORMLOG_CACHE_DIR;
    process.env.XDG_CACHE_HOME = join(temp, "xdg");
    makeRoot("root");
    makeRoot("elsewhere");
    makeRoot("readonly");
    // Past the two-second window in which a just-written file is not trusted.
    await settle();
  }, 20_000);
  afterAll(() => {
    if (previousCache === undefined) delete process.env.STORMLOG_CACHE_DIR;
    else process.env.STORMLOG_CACHE_DIR = previousCache;
    if (previousXdg === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = previousXdg;
  });

  it("is built beside the sink by the first analysis, and reused by the next", async () => {
    const first = await analysed(root);
    expect(first.index).toMatchObject({
      status: "built",
      location: join(root, INDEX_DIRNAME),
      segments_scanned: 12,
      report_reused: false,
    });
    expect(readdirSync(join(root, INDEX_DIRNAME)).sort()).toEqual(
      expect.arrayContaining(["README", "index.json", "segments"]),
    );
    expect(readdirSync(join(root, INDEX_DIRNAME, "segments"))).toHaveLength(12);
    const second = await analysed(root);
    expect(second.index).toMatchObject({
      status: "reused",
      segments_reused: 12,
      segments_scanned: 0,
      report_reused: true,
    });
    expect(second.text).toBe(first.text);
    expect(first.text).toBe(await fresh(root));
    // The index directory is not mistaken for a sink, and not counted in the input's size.
    const report = await analyzeTelemetry(root);
    expect(report.sink.directory_count).toBe(3);
    expect(report.input.size_bytes).toBe((await analyzeTelemetry(root, { index: false })).input.size_bytes);
  });

  it("re-reads only a modified segment, and the result equals a fresh analysis", async () => {
    const segment = join(root, "rank-1", "segment-000001.jsonl");
    const lines = readFileSync(segment, "utf8").split("\n");
    // Same size, other content: one digit of a counter changes.
    const index = lines.findIndex((line) => line.includes('"event_type": "sample"'));
    lines[index] = lines[index]!.replace(
      /"allocator_reserved_bytes": (\d)/,
      (_m, d: string) => `"allocator_reserved_bytes": ${d === "9" ? "8" : "9"}`,
    );
    writeFileSync(segment, lines.join("\n"));
    const after = await analysed(root);
    expect(after.index).toMatchObject({
      status: "updated",
      segments_scanned: 1,
      segments_reused: 11,
      report_reused: false,
    });
    expect(after.text).toBe(await fresh(root));
  });

  it("scans a segment that appeared and forgets one that was pruned", { timeout: 20_000 }, async () => {
    await settle();
    const extra = rankEvents(2, 6, BASE_NS + 10n ** 11n).map((event) => ({ ...event }));
    writeFileSync(
      join(root, "rank-2", "segment-000009.jsonl"),
      extra.map((e) => `${encodeTelemetryRecord(e)}\n`).join(""),
    );
    const added = await analysed(root);
    // The new segment only: the one modified by the previous test was indexed while it was still
    // fresh, and its content check still matches.
    expect(added.index).toMatchObject({ status: "updated", segments_scanned: 1 });
    expect(added.text).toBe(await fresh(root));

    rmSync(join(root, "rank-0", "segment-000001.jsonl"));
    const pruned = await analysed(root);
    // The segment added a moment ago is inside the two-second window, and trusted by its content check.
    expect(pruned.index).toMatchObject({ status: "updated", segments_dropped: 1, segments_scanned: 0 });
    expect(pruned.text).toBe(await fresh(root));
    expect(JSON.parse(pruned.text).sink.missing_segment_count).toBe(1);
  });

  it("removes temporary aggregate files an analysis that ended mid-write left, once they are old", async () => {
    const own = makeRoot("leftovers");
    await analysed(own);
    const segments = join(own, INDEX_DIRNAME, "segments");
    const written = readdirSync(segments).find((name) => name.endsWith(".agg"))!;
    const old = join(segments, `${written}.4242.k3x9.tmp`);
    const recent = join(segments, `${written}.4243.p7q2.tmp`);
    writeFileSync(old, "partial");
    writeFileSync(recent, "partial");
    const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
    utimesSync(old, twoHoursAgo, twoHoursAgo);
    // A change, so that the index is written again (and tidied).
    writeSink(join(own, "rank-3"), rankEvents(2, 4), { segmentSize: 30 });
    expect((await analysed(own)).index).toMatchObject({ status: "updated" });
    expect(existsSync(old)).toBe(false);
    // A recent one may be another analysis's write under way.
    expect(existsSync(recent)).toBe(true);
  });

  it("sees an appended line, even right after the last analysis", async () => {
    await analysed(root);
    appendSample(
      join(root, "rank-0", "segment-000002.jsonl"),
      { rank: 0, world_size: 3, job_id: "job-i", session_id: "s-0", pid: 10 },
      BASE_NS + 10n ** 10n,
      40 * GiB,
    );
    const appended = await analysed(root);
    expect((appended.index as { segments_scanned: number }).segments_scanned).toBeGreaterThanOrEqual(1);
    expect(appended.text).toBe(await fresh(root));
    // Written within the last two seconds: its stored results hold while its content check matches.
    const again = await analysed(root);
    expect(again.index).toMatchObject({ report_reused: true });
    expect(again.text).toBe(appended.text);
  });

  it("rebuilds when the index was written by another version", async () => {
    const catalog = join(root, INDEX_DIRNAME, "index.json");
    const content = JSON.parse(readFileSync(catalog, "utf8"));
    writeFileSync(catalog, JSON.stringify({ ...content, version: 0 }));
    // The stored snapshot (of this version) would vouch for the stored report without the catalog.
    rmSync(join(root, INDEX_DIRNAME, "inputs.json"), { force: true });
    const rebuilt = await analysed(root);
    expect(rebuilt.index).toMatchObject({
      status: "built",
      reason: expect.stringContaining("another version"),
    });
    expect(rebuilt.text).toBe(await fresh(root));
  });

  it("never trusts a damaged aggregate file", async () => {
    await settle();
    await analysed(root);
    const dir = join(root, INDEX_DIRNAME, "segments");
    const victim = readdirSync(dir)[0]!;
    writeFileSync(join(dir, victim), "garbage");
    for (const name of readdirSync(join(root, INDEX_DIRNAME)))
      if (name.startsWith("report-")) rmSync(join(root, INDEX_DIRNAME, name));
    const repaired = await analysed(root);
    expect(repaired.index).toMatchObject({ status: "updated", segments_scanned: 1 });
    expect(repaired.text).toBe(await fresh(root));
  }, 20_000);

  it("writes to the cache directory when asked, and nothing beside the input", async () => {
    const path = join(temp, "elsewhere");
    const first = await analysed(path, { cacheDir });
    expect((first.index as { location: string }).location.startsWith(cacheDir)).toBe(true);
    expect(existsSync(join(path, INDEX_DIRNAME))).toBe(false);
    expect((await analysed(path, { cacheDir })).index).toMatchObject({ report_reused: true });
  });

  it("falls back to the user cache when the sink's location is not writable", async () => {
    const path = join(temp, "readonly");
    // A file where the index directory would go makes the location unusable (chmod does not bind root).
    writeFileSync(join(path, INDEX_DIRNAME), "not a directory");
    const first = await analysed(path);
    expect((first.index as { location: string }).location.startsWith(join(temp, "xdg", "stormlog"))).toBe(
      true,
    );
    expect((await analysed(path)).index).toMatchObject({ report_reused: true });
    expect(first.text).toBe(await fresh(path));
  });

  it("spills large inputs to a temporary directory without an index, and removes it", async () => {
    const path = join(temp, "elsewhere");
    const spills = (): string[] =>
      readdirSync(tmpdir()).filter((name) => name.startsWith("stormlog-analysis-"));
    const before = spills();
    process.env.STORMLOG_SPILL_MIN_BYTES = "1";
    try {
      const spilled = await analysed(path, { index: false });
      expect(spilled.index).toMatchObject({ status: "disabled", segments_scanned: 12 });
      delete process.env.STORMLOG_SPILL_MIN_BYTES;
      expect(spilled.text).toBe(await fresh(path));
    } finally {
      delete process.env.STORMLOG_SPILL_MIN_BYTES;
    }
    expect(spills()).toEqual(before);
  });

  it("writes nothing with index: false", async () => {
    const path = makeRoot("noindex");
    const report = await analyzeTelemetry(path, { index: false });
    expect(report.index).toMatchObject({ status: "disabled", segments_scanned: 12 });
    expect(existsSync(join(path, INDEX_DIRNAME))).toBe(false);
    expect(report.leaks.find((leak) => leak.phase_path === "train")?.leaking_ranks).toEqual([1]);
    expect(report.gap_analysis.length).toBeGreaterThan(0);
    expect(report.summary.peaks.device_used_bytes?.value).toBeGreaterThan(3 * GiB + MiB);
  });

  it("keeps just-scanned aggregates in memory within its budget, reads the others back: the same report", async () => {
    // None kept, some kept (a few KiB), all kept (the default budget).
    for (const budget of ["0", "6000", undefined]) {
      const path = makeRoot(`keep-${budget ?? "default"}`);
      if (budget === undefined) delete process.env.STORMLOG_KEEP_SCANNED_BYTES;
      else process.env.STORMLOG_KEEP_SCANNED_BYTES = budget;
      try {
        const first = await analysed(path);
        expect(first.index).toMatchObject({ status: "built", segments_scanned: 12 });
        expect(first.text).toBe(await fresh(path));
      } finally {
        delete process.env.STORMLOG_KEEP_SCANNED_BYTES;
      }
      // Every aggregate reached its file, whole: a later analysis reads them all back.
      const files = readdirSync(join(path, INDEX_DIRNAME, "segments"));
      expect(files.filter((name) => name.endsWith(".agg"))).toHaveLength(12);
      expect(files.filter((name) => name.endsWith(".tmp"))).toEqual([]);
      for (const name of readdirSync(join(path, INDEX_DIRNAME)))
        if (name.startsWith("report-") || name.startsWith("inputs")) rmSync(join(path, INDEX_DIRNAME, name));
      const again = await analysed(path);
      expect(again.index).toMatchObject({ status: "reused", segments_reused: 12, report_reused: false });
      expect(again.text).toBe(await fresh(path));
    }
  });
});

describe("an index on a full filesystem", () => {
  afterEach(unmountSmallFilesystems);

  /** Every file under `dir`, by path. */
  const filesUnder = (dir: string): string[] =>
    readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => join(entry.parentPath, entry.name));

  it("gives the same report when its aggregate files cannot be written, leaves no part of them, and is built once there is room", async () => {
    const path = makeRoot("full-disk");
    const cacheDir = smallFilesystem(256);
    // Room for the index's directories and a little more: the aggregates' writes run out of space.
    fill(cacheDir, 8 * 1024);
    const expected = await fresh(path);
    const first = await analysed(path, { cacheDir });
    expect(first.text).toBe(expected);
    expect(first.index).toMatchObject({ status: "unavailable", reason: expect.stringMatching(/ENOSPC/) });
    expect(filesUnder(cacheDir).filter((file) => isTemporaryAggregate(file))).toEqual([]);
    rmSync(join(cacheDir, FILLER));
    const second = await analysed(path, { cacheDir });
    expect(second.text).toBe(expected);
    expect(second.index).toMatchObject({ status: "built", segments_scanned: 12 });
    expect((await analysed(path, { cacheDir })).index).toMatchObject({ report_reused: true });
  });
});

describe("hashText (names index files, keys stored reports)", () => {
  it("is deterministic hex of the asked length", () => {
    expect(hashText("rank-0/segment-000001.jsonl=1|2|3", 32)).toMatch(/^[0-9a-f]{32}$/);
    expect(hashText("rank-0/segment-000001.jsonl=1|2|3", 8)).toBe(
      hashText("rank-0/segment-000001.jsonl=1|2|3", 32).slice(0, 8),
    );
    expect(hashText("", 32)).toMatch(/^[0-9a-f]{32}$/);
  });

  it("tells apart fingerprints that differ in one character, one digit or their order", () => {
    const base = Array.from(
      { length: 64 },
      (_, rank) => `rank-${rank}/segment-000001.jsonl=3560000|1795528101409000000`,
    );
    const variants = new Set<string>([base.join("\n")]);
    for (let rank = 0; rank < 64; rank++)
      for (let digit = 0; digit < 10; digit++) {
        const changed = [...base];
        changed[rank] = changed[rank]!.replace(/0$/, String(digit));
        variants.add(changed.join("\n"));
      }
    variants.add([...base].reverse().join("\n"));
    variants.add(base.join("\n").replace("rank-1/", "rank-7/"));
    const hashes = new Set([...variants].map((text) => hashText(text, 24)));
    expect(variants.size).toBe(64 * 9 + 3);
    expect(hashes.size).toBe(variants.size);
    // Every output bit depends on the input: one changed character flips about half of them.
    const bits = (hex: string) => BigInt(`0x${hex}`);
    const a = bits(hashText(base.join("\n"), 32));
    const b = bits(hashText(base.join("\n").replace("3560000", "3560001"), 32));
    const flipped = (a ^ b)
      .toString(2)
      .split("")
      .filter((bit) => bit === "1").length;
    expect(flipped).toBeGreaterThan(40);
    expect(flipped).toBeLessThan(88);
  });
});
