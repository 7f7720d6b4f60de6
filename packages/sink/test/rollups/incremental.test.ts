// Rollups merged from per-segment tallies (cached in memory and in `.stormlog-rollups/`) against the
// two-pass rebuild from every event: the same rollups.json byte for byte, whatever the sink holds.
import { createHash } from "node:crypto";
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  encodeTelemetryRecord,
  type JsonObject,
  parseJson,
  stringifyJson,
  type TelemetryRecordV3,
} from "@stormlog/core";
import { beforeEach, describe, expect, it } from "vitest";
import { BASE_NS, sampleRecord } from "../../scripts/sample-records.js";
import { readManifestSync, segmentFilename } from "../../src/directory/manifest.js";
import { recoverSinkDirectory } from "../../src/directory/recovery.js";
import {
  buildTelemetryRollups,
  loadTelemetrySessions,
  type RollupOptions,
  type SegmentTallySource,
  TelemetrySink,
} from "../../src/index.js";
import { describeTelemetryInput } from "../../src/reader/reader.js";
import { rebuildTelemetryRollups } from "../../src/rollups/full-rebuild.js";
import { clearRollupSegmentMemory, ROLLUP_CACHE_DIRNAME } from "../../src/rollups/segment-cache.js";
import { segmentNames, tempDir } from "../helpers.js";

const SECOND = 1_000_000_000n;

/** Deterministic draws for generated sinks: the n-th number in [0, 1) of a seed. */
function draws(seed: number): () => number {
  let n = 0;
  return () => createHash("sha256").update(`${seed}:${n++}`).digest().readUInt32BE(0) / 2 ** 32;
}

/** The text rollups.json would have, with the one field that differs by nature set aside. */
function text(payload: JsonObject): string {
  return stringifyJson({ ...payload, generated_at_ns: 0 }, { sortKeys: true, indent: 2 });
}

async function rebuilt(dir: string, windowSeconds = 1): Promise<string> {
  return text(await rebuildTelemetryRollups(dir, { windowNs: BigInt(windowSeconds) * SECOND }));
}

/** Builds incrementally and says where each segment's tallies came from. */
async function incremental(
  dir: string,
  options: RollupOptions = {},
): Promise<{ text: string; from: Map<string, SegmentTallySource>; fileReads: string[] }> {
  const from = new Map<string, SegmentTallySource>();
  const fileReads: string[] = [];
  const payload = await buildTelemetryRollups(dir, {
    windowSeconds: 1,
    ...options,
    onSegmentTally: (path, source) => {
      const name = path.slice(dir.length + 1);
      from.set(name, source);
      if (source === "file") fileReads.push(name);
    },
  });
  return { text: text(payload), from, fileReads };
}

function sources(from: Map<string, SegmentTallySource>, source: SegmentTallySource): string[] {
  return [...from].filter(([, s]) => s === source).map(([name]) => name);
}

/** A record of the generated sinks: a sample or one of the events the rollups classify. */
function generatedRecord(
  sessionId: string,
  seq: number,
  next: () => number,
  options: { degraded: boolean },
): TelemetryRecordV3 {
  const roll = next();
  const rank = Math.floor(next() * 3);
  const record = sampleRecord(sessionId, seq, { rank, worldSize: 3, withSeq: false });
  // Equal timestamps across ranks and segments: ties are decided by reading order.
  record.timestamp_ns = BASE_NS + BigInt(Math.floor(seq / 2)) * 100_000_000n;
  record.device_id = rank;
  // Few distinct values, so peaks tie often.
  record.device_used_bytes = 2 ** 30 + Math.floor(next() * 4) * 2 ** 20;
  record.allocator_reserved_bytes = 2 ** 29 + Math.floor(next() * 4) * 2 ** 20;
  record.metadata = {
    ...record.metadata,
    collector_health_status: options.degraded ? "degraded" : "healthy",
  };
  if (roll < 0.04)
    return { ...record, event_type: "warning", metadata: { ...record.metadata, severity: "High 90%" } };
  if (roll < 0.06) return { ...record, event_type: "critical" };
  if (roll < 0.08) {
    const path = `/dumps/oom-${Math.floor(next() * 3)}`;
    return {
      ...record,
      event_type: "error",
      metadata: { ...record.metadata, oom_reason: "cuda", oom_dump_path: path },
    };
  }
  if (roll < 0.1)
    return { ...record, event_type: "phase_enter", metadata: { ...record.metadata, severity: "error" } };
  return record;
}

/**
 * Writes `sessions` sessions through the real sink (small segments, so every session spans several
 * and retention prunes), each with degraded/recovered spans that cross segment boundaries. Calls
 * `afterClose` after each close (the sink writes no rollups itself: the test builds them).
 */
async function writeGeneratedSink(
  dir: string,
  seed: number,
  afterClose: (session: number) => Promise<void>,
  shape: { sessions: number; records: number; rolloverMaxEvents: number; retentionMaxFiles: number },
): Promise<void> {
  const next = draws(seed);
  const sink = new TelemetrySink({
    rootDir: dir,
    handleProcessExit: false,
    writeRollups: false,
    flushEveryEvents: 7,
    rolloverMaxEvents: shape.rolloverMaxEvents,
    retentionMaxFiles: shape.retentionMaxFiles,
    fsync: "never",
  });
  for (let s = 0; s < shape.sessions; s++) {
    const sessionId = `gen-${seed}-${s}`;
    const offset = s * shape.records;
    sink.startSession({
      session_id: sessionId,
      started_at_ns: BASE_NS + BigInt(Math.floor(offset / 2)) * 100_000_000n,
    });
    let degraded = false;
    for (let i = 0; i < shape.records; i++) {
      if (next() < 0.03) {
        degraded = !degraded;
        const record = sampleRecord(sessionId, offset + i, { withSeq: false });
        record.timestamp_ns = BASE_NS + BigInt(Math.floor((offset + i) / 2)) * 100_000_000n;
        sink.append({ ...record, event_type: degraded ? "collector_degraded" : "collector_recovered" });
      } else {
        sink.append(generatedRecord(sessionId, offset + i, next, { degraded }));
      }
      if (next() < 0.05) await sink.flush();
    }
    // Some sessions end degraded: their degraded time runs to the session's end.
    await sink.close(next() < 0.3 ? "interrupted" : "completed");
    await afterClose(s);
  }
}

beforeEach(() => clearRollupSegmentMemory());

describe("incremental rollups", () => {
  it.each([1, 2, 3, 4, 5, 6])(
    "generated sink %i: after every close, the merged rollups equal the rebuild byte for byte",
    async (seed) => {
      const dir = tempDir();
      const next = draws(1000 + seed);
      const shape = {
        sessions: 3 + Math.floor(next() * 3),
        records: 60 + Math.floor(next() * 120),
        rolloverMaxEvents: 9 + Math.floor(next() * 16),
        retentionMaxFiles: 3 + Math.floor(next() * 4),
      };
      let closes = 0;
      await writeGeneratedSink(
        dir,
        seed,
        async () => {
          closes++;
          const want = await rebuilt(dir);
          expect((await incremental(dir)).text).toBe(want);
          // The cached tallies alone (a new process) give the same.
          clearRollupSegmentMemory();
          const fromDisk = await incremental(dir);
          expect(fromDisk.text).toBe(want);
          expect(sources(fromDisk.from, "file")).toEqual([]);
        },
        shape,
      );
      expect(closes).toBe(shape.sessions);
      // Retention pruned some segments, and their cache entries went with them.
      expect(readManifestSync(dir)!.segments[0]!.filename).not.toBe(segmentFilename(1));
      const cached = readdirSync(join(dir, ROLLUP_CACHE_DIRNAME)).sort();
      expect(cached).toEqual(segmentNames(dir).map((name) => name.replace(/\.jsonl$/, ".json")));
    },
  );

  it("a second close reads only the segments written since the first", async () => {
    const dir = tempDir();
    const seen: Map<string, SegmentTallySource>[] = [];
    await writeGeneratedSink(
      dir,
      42,
      async () => {
        seen.push((await incremental(dir)).from);
      },
      { sessions: 2, records: 100, rolloverMaxEvents: 20, retentionMaxFiles: 100 },
    );
    const [first, second] = seen as [Map<string, SegmentTallySource>, Map<string, SegmentTallySource>];
    expect(sources(first, "file").length).toBeGreaterThanOrEqual(5);
    expect(sources(first, "memory")).toEqual([]);
    // Only the second session's segments were read; the first session's came from memory.
    const manifest = readManifestSync(dir)!;
    const ofSession = (id: string) =>
      manifest.segments.filter((segment) => segment.session_id === id).map((segment) => segment.filename);
    expect(sources(second, "file")).toEqual(ofSession("gen-42-1"));
    expect(sources(second, "memory")).toEqual(ofSession("gen-42-0"));
  });

  it("the writer's closes keep the cache: old entries are not rewritten, new segments get theirs", async () => {
    const dir = tempDir();
    const sink = new TelemetrySink({
      rootDir: dir,
      handleProcessExit: false,
      flushEveryEvents: 10,
      rolloverMaxEvents: 25,
      rollupWindowSeconds: 1,
      fsync: "never",
    });
    sink.startSession({ session_id: "a", started_at_ns: BASE_NS });
    for (let i = 0; i < 100; i++) sink.append(sampleRecord("a", i));
    await sink.close();
    const cacheDir = join(dir, ROLLUP_CACHE_DIRNAME);
    const stamp = (name: string) => {
      const info = statSync(join(cacheDir, name), { bigint: true });
      return `${info.ino}:${info.mtimeNs}`;
    };
    const before = new Map(readdirSync(cacheDir).map((name) => [name, stamp(name)]));
    expect([...before.keys()].sort()).toEqual(
      segmentNames(dir).map((name) => name.replace(".jsonl", ".json")),
    );
    sink.startSession({ session_id: "b", started_at_ns: BASE_NS + 100n * 100_000_000n });
    for (let i = 100; i < 160; i++) sink.append(sampleRecord("b", i));
    await sink.close();
    const after = readdirSync(cacheDir);
    expect(after.length).toBeGreaterThan(before.size);
    for (const [name, was] of before) expect(stamp(name)).toBe(was);
    const written = parseJson(readFileSync(join(dir, "rollups.json"), "utf8")) as JsonObject;
    const want = await rebuildTelemetryRollups(dir, {
      windowNs: SECOND,
      coverage: parseJson(stringifyJson(written.coverage!)) as never,
    });
    expect(text(written)).toBe(text(parseJson(stringifyJson(want)) as JsonObject));
  });

  describe("a cached segment that changed is read again", () => {
    async function sinkWithCache(): Promise<string> {
      const dir = tempDir();
      await writeGeneratedSink(dir, 7, async () => undefined, {
        sessions: 2,
        records: 80,
        rolloverMaxEvents: 30,
        retentionMaxFiles: 100,
      });
      const { from } = await incremental(dir);
      expect(sources(from, "file").length).toBe(segmentNames(dir).length);
      return dir;
    }

    it("cut short, then repaired by recovery", async () => {
      const dir = await sinkWithCache();
      const target = segmentNames(dir)[1]!;
      const path = join(dir, target);
      // A crash mid-write: part of a line after the last newline.
      appendFileSync(path, '{"schema_version": 3, "session_id": "gen-7-0", "timest');
      let result = await incremental(dir);
      expect(sources(result.from, "file")).toEqual([target]);
      expect(result.text).toBe(await rebuilt(dir));
      expect(result.text).toContain("dropped a final line cut short");
      recoverSinkDirectory(dir, { clock: { nowNs: () => BASE_NS + 10_000n * SECOND }, fsync: false });
      result = await incremental(dir);
      expect(sources(result.from, "file")).toEqual([target]);
      expect(result.text).toBe(await rebuilt(dir));
      expect(result.text).not.toContain("dropped a final line cut short");
    });

    it("truncated to fewer lines, and rewritten in place with the same size", async () => {
      const dir = await sinkWithCache();
      const [, second, third] = segmentNames(dir) as [string, string, string];
      const lines = readFileSync(join(dir, second), "utf8").split("\n");
      truncateSync(join(dir, second), Buffer.byteLength(`${lines.slice(0, 3).join("\n")}\n`));
      // Same bytes count, other figures: a peak moved.
      const original = readFileSync(join(dir, third), "utf8");
      const changed = original.replace(
        /"device_used_bytes": (\d)/,
        (_m, d) => `"device_used_bytes": ${(Number(d) + 1) % 10}`,
      );
      expect(changed.length).toBe(original.length);
      expect(changed).not.toBe(original);
      writeFileSync(`${join(dir, third)}.new`, changed);
      renameSync(`${join(dir, third)}.new`, join(dir, third));
      const result = await incremental(dir);
      expect(sources(result.from, "file").sort()).toEqual([second, third]);
      expect(result.text).toBe(await rebuilt(dir));
    });

    it("a damaged cache entry is not trusted", async () => {
      const dir = await sinkWithCache();
      const [first] = segmentNames(dir) as [string];
      const entry = join(dir, ROLLUP_CACHE_DIRNAME, first.replace(".jsonl", ".json"));
      const [header, body] = readFileSync(entry, "utf8").split("\n") as [string, string];
      writeFileSync(entry, `${header}\n${body.replace(/"events": \d+/, '"events": 999999')}\n`);
      clearRollupSegmentMemory();
      const result = await incremental(dir);
      expect(sources(result.from, "file")).toEqual([first]);
      expect(result.text).toBe(await rebuilt(dir));
    });

    it("other options (window width, strictness) do not reuse entries made under others", async () => {
      const dir = await sinkWithCache();
      const result = await incremental(dir, { windowSeconds: 2 });
      expect(sources(result.from, "file").length).toBe(segmentNames(dir).length);
      expect(result.text).toBe(await rebuilt(dir, 2));
    });
  });

  it("sessions the ledger lacks: windows from their earliest event in any segment, sessionless lines, empty and cut segments", async () => {
    const dir = tempDir();
    const line = (record: TelemetryRecordV3) => `${encodeTelemetryRecord(record)}\n`;
    const at = (seq: number, sessionId: string) => {
      const record = sampleRecord(sessionId, seq);
      return record;
    };
    // No manifest: every session is inferred from its events. "late" starts in segment 3.
    writeFileSync(join(dir, segmentFilename(1)), [5, 6, 30].map((s) => line(at(s, "late"))).join(""));
    writeFileSync(join(dir, segmentFilename(2)), "");
    const sessionless = line(at(12, "x")).replace('"session_id": "x", ', "");
    expect(sessionless).not.toContain("session_id");
    writeFileSync(
      join(dir, segmentFilename(3)),
      `${line(at(1, "late"))}${line(at(2, "other"))}${line({ ...at(40, "other"), event_type: "stop" })}${sessionless}{"cut`,
    );
    const first = await incremental(dir);
    expect(first.text).toBe(await rebuilt(dir));
    // Segment 1 was counted from its own first event, then again from the session's real start.
    expect(first.fileReads).toEqual([1, 2, 3, 1].map(segmentFilename));
    const late = (parseJson(first.text) as { sessions: JsonObject[] }).sessions.find(
      (s) => (s.session as JsonObject).session_id === "late",
    )!;
    expect((late.session as JsonObject).started_at_ns).toBe(BASE_NS + 100_000_000n);
    expect((late.windows as JsonObject[]).map((w) => Number(w.index))).toEqual([0, 2]);
    const second = await incremental(dir);
    expect(second.text).toBe(first.text);
    expect(sources(second.from, "file")).toEqual([]);
  });

  it("what the Python reference and our loaders read is the same with the sidecar there", async () => {
    const dir = tempDir();
    await writeGeneratedSink(dir, 9, async () => undefined, {
      sessions: 2,
      records: 50,
      rolloverMaxEvents: 20,
      retentionMaxFiles: 100,
    });
    const loaded = () => loadTelemetrySessions(dir);
    const without = await loaded();
    await incremental(dir);
    expect(existsSync(join(dir, ROLLUP_CACHE_DIRNAME))).toBe(true);
    // The reference's discovery: `segment-*.jsonl` globbed in the sink directory itself.
    const pythonGlob = readdirSync(dir).filter((name) => /^segment-.*\.jsonl$/.test(name));
    expect(pythonGlob).toEqual(segmentNames(dir));
    expect(readdirSync(join(dir, ROLLUP_CACHE_DIRNAME)).some((name) => name.endsWith(".jsonl"))).toBe(false);
    expect(await loaded()).toEqual(without);
    expect((await describeTelemetryInput(dir)).directories).toEqual([dir]);
    // Recovery adopts no segment from it.
    const before = readManifestSync(dir)!.segments.map((segment) => segment.filename);
    recoverSinkDirectory(dir, { clock: { nowNs: () => BASE_NS }, fsync: false });
    expect(readManifestSync(dir)!.segments.map((segment) => segment.filename)).toEqual(before);
  });

  it("`segmentCache: 'off'` reads every segment and leaves the sidecar alone", async () => {
    const dir = tempDir();
    await writeGeneratedSink(dir, 11, async () => undefined, {
      sessions: 1,
      records: 60,
      rolloverMaxEvents: 20,
      retentionMaxFiles: 100,
    });
    mkdirSync(join(dir, ROLLUP_CACHE_DIRNAME));
    writeFileSync(join(dir, ROLLUP_CACHE_DIRNAME, "unrelated.txt"), "kept");
    const off = await incremental(dir, { segmentCache: "off" });
    expect(off.text).toBe(await rebuilt(dir));
    expect(readdirSync(join(dir, ROLLUP_CACHE_DIRNAME))).toEqual(["unrelated.txt"]);
    const again = await incremental(dir, { segmentCache: "off" });
    expect(sources(again.from, "file").length).toBe(segmentNames(dir).length);
  });
});
