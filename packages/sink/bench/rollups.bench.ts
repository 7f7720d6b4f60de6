// What closing a session costs when the sink already holds others: the writer rebuilds rollups.json
// from every retained segment (two passes, as the reference), so this grows with what is retained.
// Also the reader every loader uses. Run: node --conditions=@stormlog/source --import tsx packages/sink/bench/rollups.bench.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readJsonlLines } from "@stormlog/core";
import { bench, do_not_optimize, group, run } from "mitata";
import { sampleRecord } from "../scripts/sample-records.js";
import { buildTelemetryRollups, segmentFilename, TelemetrySink } from "../src/index.js";

const SESSIONS = 4;
const RECORDS = 20_000;
const dir = mkdtempSync(join(tmpdir(), "stormlog-rollups-bench-"));
const sink = new TelemetrySink({ rootDir: dir, handleProcessExit: false, writeRollups: false });
for (let s = 0; s < SESSIONS; s++) {
  const sessionId = `bench-${s}`;
  sink.startSession({ session_id: sessionId });
  for (let i = 0; i < RECORDS; i++) {
    sink.append(sampleRecord(sessionId, s * RECORDS + i));
    if (i % 4096 === 0) await sink.flush();
  }
  await sink.close();
}

group(`sink: ${SESSIONS} sessions x ${RECORDS / 1000}k records retained`, () => {
  bench("sink/rollups rebuild (what each session close does)", async () =>
    do_not_optimize(await buildTelemetryRollups(dir)),
  );
  bench("core/readJsonlLines over one segment", async () => {
    let lines = 0;
    for await (const _line of readJsonlLines(join(dir, segmentFilename(1)))) lines++;
    return do_not_optimize(lines);
  });
});

await run();
rmSync(dir, { recursive: true, force: true });
