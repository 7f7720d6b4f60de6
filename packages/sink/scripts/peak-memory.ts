// Peak memory (and rate) while a sink with default settings writes 5 million records.
// Run: node --conditions=@stormlog/source --import tsx packages/sink/scripts/peak-memory.ts
//        [--events N] [--dir DIR] [--fsync segment|always|never] [--unpaced]
//   default: the producer waits while more than 8k records are pending (backpressure), so every record
//            is written and the figure is the writer's own footprint at full speed;
//   --unpaced: the producer never waits (it yields to the event loop between batches only): the queue
//            fills, records beyond maxQueueEvents are dropped and counted, and memory stays bounded.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type FsyncPolicy, TelemetrySink } from "../src/index.js";
import { sampleRecord } from "./sample-records.js";

const args = process.argv.slice(2);
const option = (name: string, fallback: string): string => {
  const index = args.indexOf(name);
  return index >= 0 ? args[index + 1]! : fallback;
};
const events = Number(option("--events", "5000000"));
const unpaced = args.includes("--unpaced");
const dir = mkdtempSync(join(option("--dir", tmpdir()), "stormlog-sink-memory-"));
const BATCH = 1000;

const fsync = option("--fsync", "segment") as FsyncPolicy;
const sink = new TelemetrySink({ rootDir: dir, handleProcessExit: false, writeRollups: false, fsync });
const { session_id: id } = sink.startSession({ source: "stormlog.bench" });
const mib = (bytes: number): string => (bytes / 1024 / 1024).toFixed(1);
let peakHeap = 0;
const sample = (): void => {
  peakHeap = Math.max(peakHeap, process.memoryUsage().heapUsed);
};
const baselineRss = process.memoryUsage().rss;
const started = performance.now();
const checkpoints: string[] = [];
for (let i = 0; i < events; i += BATCH) {
  // Records are made as a tracker makes them, one at a time, and dropped by the caller at once.
  for (let j = i; j < Math.min(events, i + BATCH); j++) sink.append(sampleRecord(id, j, { withSeq: false }));
  do await new Promise((resolve) => setImmediate(resolve));
  while (!unpaced && sink.pendingEvents > 8_000);
  if (i % 1_000_000 === 0) {
    sample();
    checkpoints.push(`${i / 1e6}M: rss ${mib(process.memoryUsage().rss)} MiB`);
  }
  if (i % 50_000 === 0) sample();
}
await sink.close();
const seconds = (performance.now() - started) / 1000;
sample();
const diagnostics = sink.getDiagnostics();
const maxRssMiB = process.resourceUsage().maxRSS / 1024;
console.log(
  JSON.stringify(
    {
      events,
      mode: unpaced ? "unpaced (drops beyond the queue bound)" : "backpressure (every record written)",
      fsync,
      seconds: Number(seconds.toFixed(2)),
      events_per_second: Math.round(diagnostics.written_events / seconds),
      written_events: diagnostics.written_events,
      dropped_events: diagnostics.dropped_events,
      peak_rss_mib: Number(maxRssMiB.toFixed(1)),
      baseline_rss_mib: Number(mib(baselineRss)),
      peak_heap_used_mib: Number(mib(peakHeap)),
      retained: { files: diagnostics.final_retained_files, bytes: diagnostics.final_retained_bytes },
      checkpoints,
    },
    null,
    2,
  ),
);
rmSync(dir, { recursive: true, force: true });
