// What a session costs in a directory that many sessions used before it (a service opening a session
// per job, request or epoch): open the directory (recovery), start a session, write 100 records, close
// it (manifest, rollups.json). It must not grow with the sessions that came before.
// Run: pnpm bench sessions.bench
//  or: node --conditions=@stormlog/source --import tsx packages/sink/bench/sessions.bench.ts
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bench, group, run } from "mitata";
import { sampleRecord } from "../scripts/sample-records.js";
import { TelemetrySink, type TelemetrySinkOptions } from "../src/index.js";

const RECORDS = 100;
const PAST = [10, 1000];
// No fsync: what is measured is the writer's own work, not the disk's.
const options = { handleProcessExit: false, fsync: "never" } satisfies Partial<TelemetrySinkOptions>;

let sequence = 0;
/** One session as the tracker's worker runs it: a sink of its own on the shared directory. */
async function session(dir: string, writeRollups: boolean): Promise<void> {
  const sink = new TelemetrySink({ rootDir: dir, ...options, writeRollups });
  const id = `job-${sequence++}`;
  sink.startSession({ session_id: id });
  for (let i = 0; i < RECORDS; i++) sink.append(sampleRecord(id, i));
  await sink.close();
}

/** A directory `past` sessions used (default retention: 8 segments). */
async function usedDirectory(past: number): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-sessions-bench-"));
  for (let n = 0; n < past; n++) await session(dir, false);
  return dir;
}

const dirs = new Map<number, string>();
for (const past of PAST) dirs.set(past, await usedDirectory(past));

group(`sink: a session of ${RECORDS} records in a directory used before`, () => {
  for (const past of PAST) {
    const dir = dirs.get(past)!;
    bench(`sink/start+stop with ${past} past sessions in the directory`, () => session(dir, true));
  }
});

await run();
