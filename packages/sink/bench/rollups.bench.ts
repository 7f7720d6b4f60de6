// What one session close's rollups cost when the sink already retains many segments: the two-pass
// rebuild over every retained segment (what each close did before) against the incremental build
// (only the segment the closing session wrote is read; the others' tallies come from this process's
// memory, or, for a new process, from the .stormlog-rollups/ sidecar). Prints the medians and ratios.
// Run: pnpm bench rollups.bench
//  or: node --conditions=@stormlog/source --import tsx packages/sink/bench/rollups.bench.ts
import { mkdtempSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bench, do_not_optimize, group, run } from "mitata";
import { sampleRecord } from "../scripts/sample-records.js";
import { readManifestSync } from "../src/directory/manifest.js";
import { buildTelemetryRollups, TelemetrySink } from "../src/index.js";
import { rebuildTelemetryRollups } from "../src/rollups/full-rebuild.js";
import { clearRollupSegmentMemory } from "../src/rollups/segment-cache.js";

const RECORDS_PER_SEGMENT = 10_000;
const SHAPES = [8, 32];
const WINDOW_NS = 60_000_000_000n;

/** A sink of `segments` sessions, one full segment each (a service closing a session per segment). */
async function retainedSink(segments: number): Promise<{ dir: string; newest: string }> {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-rollups-bench-"));
  const sink = new TelemetrySink({
    rootDir: dir,
    handleProcessExit: false,
    writeRollups: false,
    rolloverMaxEvents: RECORDS_PER_SEGMENT,
    retentionMaxFiles: segments,
    fsync: "never",
  });
  for (let s = 0; s < segments; s++) {
    const sessionId = `bench-${s}`;
    sink.startSession({ session_id: sessionId });
    for (let i = 0; i < RECORDS_PER_SEGMENT; i++) {
      sink.append(sampleRecord(sessionId, s * RECORDS_PER_SEGMENT + i));
      if (i % 4096 === 0) await sink.flush();
    }
    await sink.close();
  }
  const retained = readManifestSync(dir)!.segments;
  if (retained.length !== segments) throw new Error(`expected ${segments} segments, got ${retained.length}`);
  return { dir, newest: join(dir, retained.at(-1)!.filename) };
}

/** The newest segment looks freshly written (new times), so its cached tallies no longer apply. */
function rewriteStamp(path: string): void {
  const now = new Date();
  utimesSync(path, now, now);
}

const sinks: { dir: string; newest: string; segments: number }[] = [];
for (const segments of SHAPES) {
  const sink = await retainedSink(segments);
  sinks.push({ ...sink, segments });
  // Warm the cache as the previous closes would have.
  await buildTelemetryRollups(sink.dir);
}

const names = (segments: number) => ({
  rebuild: `today: two-pass rebuild of ${segments} segments`,
  memory: "incremental: newest segment read, the rest from memory",
  disk: "incremental, new process: newest segment read, the rest from .stormlog-rollups/",
});

const groupName = (segments: number) =>
  `rollups at a session close: ${segments} segments x ${RECORDS_PER_SEGMENT / 1000}k records`;

for (const { dir, newest, segments } of sinks) {
  const name = names(segments);
  group(groupName(segments), () => {
    bench(name.rebuild, async () =>
      do_not_optimize(await rebuildTelemetryRollups(dir, { windowNs: WINDOW_NS })),
    );
    bench(name.memory, async () => {
      rewriteStamp(newest);
      return do_not_optimize(await buildTelemetryRollups(dir));
    });
    bench(name.disk, async () => {
      rewriteStamp(newest);
      clearRollupSegmentMemory();
      return do_not_optimize(await buildTelemetryRollups(dir));
    });
  });
}

const results = await run();
const p50 = new Map<string, number>();
for (const trial of results.benchmarks) {
  const inGroup = results.layout[trial.group ?? -1]?.name;
  for (const r of trial.runs) if (r.stats) p50.set(`${inGroup}:${r.name}`, r.stats.p50);
}
const ms = (ns: number) => `${(ns / 1e6).toFixed(1)} ms`;
for (const { segments } of sinks) {
  const name = names(segments);
  const at = (bench: string) => p50.get(`${groupName(segments)}:${bench}`) ?? Number.NaN;
  const rebuild = at(name.rebuild);
  const memory = at(name.memory);
  const disk = at(name.disk);
  console.log(
    `${segments} segments x ${RECORDS_PER_SEGMENT} records, medians: rebuild ${ms(rebuild)}, ` +
      `incremental ${ms(memory)} (${(rebuild / memory).toFixed(1)}x less), ` +
      `incremental from the sidecar ${ms(disk)} (${(rebuild / disk).toFixed(1)}x less)`,
  );
}
for (const { dir } of sinks) rmSync(dir, { recursive: true, force: true });
