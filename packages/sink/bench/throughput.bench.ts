// Sustained write rate of the sink with default settings: how fast records reach the disk when the
// producer is never the bottleneck. The producer appends in batches and, like any producer faced with
// a bounded queue, waits while more than 8k records are pending (an unpaced producer would just fill
// the queue and have records dropped, by design). events/s = 100k / the time below.
// Run: node --conditions=@stormlog/source --import tsx packages/sink/bench/throughput.bench.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bench, group, run } from "mitata";
import { sampleRecord } from "../scripts/sample-records.js";
import { type FsyncPolicy, TelemetrySink } from "../src/index.js";

const EVENTS = 100_000;
const BATCH = 1_000;
// A pool of tracker-like samples (counters change, metadata does not), reused round robin.
const records = Array.from({ length: 1024 }, (_, i) => sampleRecord("bench", i, { withSeq: false }));

/** Writes EVENTS records through a fresh sink; resolves when the session is closed on disk. */
async function writeAll(fsync: FsyncPolicy): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-sink-bench-"));
  const sink = new TelemetrySink({ rootDir: dir, handleProcessExit: false, writeRollups: false, fsync });
  sink.startSession({ session_id: "bench" });
  for (let i = 0; i < EVENTS; i += BATCH) {
    for (let j = i; j < i + BATCH; j++) sink.append(records[j & 1023]!);
    do await new Promise((resolve) => setImmediate(resolve));
    while (sink.pendingEvents > 8_000);
  }
  await sink.close();
  const { written_events: written, dropped_events: dropped } = sink.getDiagnostics();
  if (written !== EVENTS || dropped !== 0) throw new Error(`wrote ${written}, dropped ${dropped}`);
  rmSync(dir, { recursive: true, force: true });
}

group(`sink: ${EVENTS} records to disk, default settings`, () => {
  bench(`sink/write ${EVENTS / 1000}k records (fsync=segment, default)`, () => writeAll("segment")).gc(
    "once",
  );
  bench(`sink/write ${EVENTS / 1000}k records (fsync=always, as the reference)`, () => writeAll("always")).gc(
    "once",
  );
  bench(`sink/write ${EVENTS / 1000}k records (fsync=never)`, () => writeAll("never")).gc("once");
});

await run();
