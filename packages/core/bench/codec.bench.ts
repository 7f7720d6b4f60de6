// Decode/encode throughput of telemetry lines vs plain JSON.parse/JSON.stringify of the same lines.
import { readFileSync } from "node:fs";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { decodeTelemetryLine, encodeTelemetryRecord, type TelemetryRecord } from "../src/index.js";

const lines = readFileSync(
  new URL("../../../fixtures/golden/cross-rank/case-11-0003/input.jsonl", import.meta.url),
  "utf8",
)
  .split("\n")
  .filter((line) => line.length > 0)
  .slice(0, 200);
const bytes = lines.reduce((sum, line) => sum + Buffer.byteLength(line) + 1, 0);
const records: TelemetryRecord[] = lines.map((line) => decodeTelemetryLine(line));
// JSON.stringify cannot write bigint; give it the same records with a number timestamp (lossy).
const plainRecords = lines.map((line) => JSON.parse(line) as unknown);

console.log(`batch: ${lines.length} lines, ${bytes} bytes (${(bytes / lines.length).toFixed(0)} B/line)`);

summary(() => {
  group("decode 200 lines", () => {
    bench("decode/JSON.parse (lossy, unvalidated)", () => {
      for (const line of lines) do_not_optimize(JSON.parse(line));
    }).baseline(true);
    bench("decode/stormlog (lossless, validated)", () => {
      for (const line of lines) do_not_optimize(decodeTelemetryLine(line));
    });
  });
});

summary(() => {
  group("encode 200 records", () => {
    bench("encode/JSON.stringify", () => {
      for (const record of plainRecords) do_not_optimize(JSON.stringify(record));
    }).baseline(true);
    bench("encode/stormlog (canonical sink line)", () => {
      for (const record of records) do_not_optimize(encodeTelemetryRecord(record));
    });
  });
});

await run();
