// Cost of normalizing records on load: legacy conversion and v2 -> v3 upgrade, vs plain validation.
import { bench, do_not_optimize, group, run, summary } from "mitata";
import {
  formatBytes,
  type JsonObject,
  normalizeTelemetryRecord,
  parseJson,
  validateTelemetryRecord,
} from "../src/index.js";
import { stableLegacySessionId } from "../src/internal.js";

const legacyLines = Array.from(
  { length: 200 },
  (_, i) =>
    `{"timestamp": ${1700000000 + i * 0.25}, "event_type": "allocation", "memory_allocated": ${1024 * i}, ` +
    `"memory_reserved": ${2048 * i}, "memory_change": 1024, "device_id": 0, "metadata_usage_percent": 75.5}`,
);
const legacy = legacyLines.map((line) => parseJson(line) as JsonObject);
const v2 = Array.from({ length: 200 }, (_, i) => ({
  schema_version: 2,
  timestamp_ns: 1_700_000_000_000_000_000n + BigInt(i),
  event_type: "sample",
  collector: "stormlog.cuda_tracker",
  sampling_interval_ms: 100,
  pid: 1234,
  host: "host-a",
  job_id: "job-123",
  rank: 1,
  local_rank: 1,
  world_size: 8,
  device_id: 0,
  allocator_allocated_bytes: 1024 * i,
  allocator_reserved_bytes: 2048 * i,
  allocator_active_bytes: null,
  allocator_inactive_bytes: null,
  allocator_change_bytes: 0,
  device_used_bytes: 2048 * i,
  device_free_bytes: null,
  device_total_bytes: null,
  context: null,
  metadata: { origin: "bench" },
}));

summary(() => {
  group("normalize 200 records", () => {
    bench("normalize/validate v2 only", () => {
      for (const record of v2) do_not_optimize(validateTelemetryRecord(record));
    }).baseline(true);
    bench("normalize/v2 to v3 (file session)", () => {
      for (const record of v2)
        do_not_optimize(normalizeTelemetryRecord(record, { defaultSessionId: "file" }));
    });
    bench("normalize/legacy to v3 (file session)", () => {
      for (const record of legacy)
        do_not_optimize(normalizeTelemetryRecord(record, { defaultSessionId: "file" }));
    });
    bench("normalize/legacy to v3 (synthetic uuid5 ids)", () => {
      for (const record of legacy) do_not_optimize(normalizeTelemetryRecord(record));
    });
  });
});

group("helpers", () => {
  bench("helpers/stableLegacySessionId", () =>
    do_not_optimize(stableLegacySessionId([1700000000.25, "host-a", 1234])),
  );
  bench("helpers/formatBytes", () => do_not_optimize(formatBytes(17_179_869_184)));
});

await run();
