// Exports of a small job of bench/generate-multirank.mjs (8 ranks x 2,000 samples, ~13 MB),
// generated once into a temporary directory: the streaming Perfetto trace (index warm, so the
// figure is the export itself), the in-memory trace it replaces (load every event, build, format),
// and the CSV and JSONL record streams. Output goes nowhere (each chunk is only measured).
// Run: node --conditions=@stormlog/source --import tsx packages/analysis/bench/export.bench.ts
// For the 64-rank job's RSS, see the one-off command in the package README.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { encodeTelemetryRecord } from "@stormlog/core";
import { bench, do_not_optimize, group, run } from "mitata";
import {
  analyzeTelemetry,
  buildPerfettoTrace,
  loadDistributedEvents,
  openSelectedEvents,
  perfettoTraceChunks,
  streamPerfettoTrace,
  telemetryCsvLines,
} from "../src/index.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const dir = mkdtempSync(join(tmpdir(), "stormlog-export-bench-"));
const sink = join(dir, "job");
execFileSync(
  process.execPath,
  [
    "--import",
    "tsx",
    join(REPO, "bench/generate-multirank.mjs"),
    sink,
    "--ranks",
    "8",
    "--samples",
    "2000",
    "--quiet",
  ],
  { cwd: REPO, stdio: "inherit" },
);
// Files written within the last two seconds are not trusted by the index: let them age, then index.
await new Promise((done) => setTimeout(done, 2100));
await analyzeTelemetry(sink);

async function drain(chunks: AsyncIterable<string> | Iterable<string>): Promise<number> {
  let length = 0;
  for await (const chunk of chunks) length += chunk.length;
  return length;
}

group("export: 8 ranks x 2,000 samples (~13 MB)", () => {
  bench("export/perfetto stream (index warm)", async () => {
    do_not_optimize(await drain(streamPerfettoTrace(sink)));
  });
  bench("export/perfetto in memory (load + build)", async () => {
    const { selection, events } = await loadDistributedEvents(sink);
    const trace = buildPerfettoTrace(events, { sessionId: selection.summary?.session_id ?? null });
    do_not_optimize(await drain(perfettoTraceChunks(trace)));
  });
  bench("export/csv stream", async () => {
    const selected = await openSelectedEvents(sink);
    do_not_optimize(await drain(telemetryCsvLines(selected.events())));
  });
  bench("export/jsonl stream", async () => {
    const selected = await openSelectedEvents(sink);
    let length = 0;
    for await (const event of selected.events()) length += encodeTelemetryRecord(event).length;
    do_not_optimize(length);
  });
});

try {
  await run();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
