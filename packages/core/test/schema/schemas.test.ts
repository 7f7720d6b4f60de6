import { readFileSync } from "node:fs";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { encodeTelemetryRecord } from "../../src/codec/codec.js";
import type { JsonObject } from "../../src/codec/json.js";
import { TelemetryValidationError } from "../../src/runtime/errors.js";
import { normalizeTelemetryRecord } from "../../src/schema/legacy.js";
import type { TelemetryRecord } from "../../src/schema/schema.js";
import { validateTelemetryRecord } from "../../src/schema/validate.js";

// The reference schemas nest `required` under `if` without `type: object`, valid JSON Schema that ajv flags.
const ajv = new Ajv2020({ allErrors: true, allowUnionTypes: true, strictTypes: false });
const schemas = Object.fromEntries(
  ([2, 3, 4] as const).map((version) => {
    const url = new URL(`../../schemas/telemetry_event_v${version}.schema.json`, import.meta.url);
    return [version, ajv.compile(JSON.parse(readFileSync(url, "utf8")))];
  }),
) as Record<2 | 3 | 4, ValidateFunction>;

/** What a JSON Schema validator sees of a record: its encoded line, read back with JSON.parse. */
function asPlainJson(record: TelemetryRecord): unknown {
  return JSON.parse(encodeTelemetryRecord(record));
}

function conforms(record: TelemetryRecord): boolean {
  const validate = schemas[record.schema_version];
  const ok = validate(asPlainJson(record));
  if (!ok) console.error(validate.errors);
  return ok;
}

function v2(): JsonObject {
  return {
    schema_version: 2,
    timestamp_ns: 1_700_000_000_000_000_000n,
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
    allocator_allocated_bytes: 1024,
    allocator_reserved_bytes: 2048,
    allocator_active_bytes: 512,
    allocator_inactive_bytes: 1536,
    allocator_change_bytes: 256,
    device_used_bytes: 2048,
    device_free_bytes: 4096,
    device_total_bytes: 6144,
    context: "unit",
    metadata: { origin: "test" },
  };
}

const legacyRecords: JsonObject[] = [
  {
    timestamp: 1700000000.25,
    event_type: "allocation",
    memory_allocated: 10_000,
    memory_reserved: 15_000,
    memory_change: 512,
    device_id: 0,
    context: "alloc",
    metadata_usage_percent: 75.5,
  },
  {
    timestamp: 1700000001.0,
    event_type: "allocation",
    memory_allocated: 8_192,
    memory_change: 1_024,
    context: "cpu",
  },
  { timestamp: 1700000002.5, type: "sample", memory_mb: 2.0, device: "/GPU:0" },
  {
    timestamp: 1700000004.0,
    memory_allocated: 1024,
    memory_reserved: 2048,
    device_id: 0,
    total_memory: null,
  },
  {
    timestamp_ns: 5,
    memory_allocated: 1,
    total_memory: 10,
    metadata: { rank: 1, world_size: 2, job_id: "j" },
  },
];

describe("JSON Schemas (docs/schemas of the reference)", () => {
  it("accept the reference's v2 record as validated and encoded by core", () => {
    expect(conforms(validateTelemetryRecord(v2()))).toBe(true);
  });

  it("accept converted legacy records as v3, and as v4 when upgraded", () => {
    for (const legacy of legacyRecords) {
      expect(conforms(normalizeTelemetryRecord(legacy, { defaultSamplingIntervalMs: 100 }))).toBe(true);
      const upgraded = normalizeTelemetryRecord(legacy, { upgradeTo: 4 });
      expect(upgraded.schema_version).toBe(4);
      expect(conforms(upgraded)).toBe(true);
    }
  });

  it("accept v2 records upgraded to v3 and v4", () => {
    expect(conforms(normalizeTelemetryRecord(v2()))).toBe(true);
    expect(conforms(normalizeTelemetryRecord(v2(), { upgradeTo: 4 }))).toBe(true);
  });

  it("accept a device-only v4 record", () => {
    const record = normalizeTelemetryRecord({
      ...v2(),
      schema_version: 4,
      session_id: "device-only",
      allocator_allocated_bytes: null,
      allocator_reserved_bytes: null,
      allocator_active_bytes: null,
      allocator_inactive_bytes: null,
      allocator_change_bytes: null,
      device_used_bytes: 3,
      device_free_bytes: 1,
      device_total_bytes: 4,
      metadata: {
        memory_capabilities: {
          backend: "future",
          telemetry_collector: "stormlog.future_tracker",
          sampling_source: "future.device_memory",
          supports_allocator_allocated: false,
          supports_allocator_reserved: false,
          supports_allocator_active: false,
          supports_allocator_inactive: false,
          supports_device_used: true,
          supports_device_free: true,
          supports_device_total: true,
          supports_native_allocator_history: false,
          supports_fragmentation_analysis: false,
          supports_allocator_attribution: false,
          supports_bounded_profiling: false,
        },
      },
    });
    expect(conforms(record)).toBe(true);
  });

  const base = () => asPlainJson(validateTelemetryRecord(v2())) as Record<string, unknown>;
  const v4Base = () =>
    asPlainJson(normalizeTelemetryRecord(v2(), { upgradeTo: 4 })) as Record<string, unknown>;
  const rejected: [string, () => Record<string, unknown>, 2 | 3 | 4][] = [
    ["a missing required field", () => ({ ...base(), collector: undefined }), 2],
    ["an unknown field", () => ({ ...base(), unknown_counter: 42 }), 2],
    ["a negative counter", () => ({ ...base(), allocator_allocated_bytes: -1 }), 2],
    ["a pid below -1", () => ({ ...base(), pid: -2 }), 2],
    ["an empty host", () => ({ ...base(), host: "" }), 2],
    ["non-object metadata", () => ({ ...base(), metadata: [] }), 2],
    ["a boolean schema_version", () => ({ ...base(), schema_version: true }), 2],
    ["a v3 record without session", () => ({ ...base(), schema_version: 3 }), 3],
    [
      "a null core counter in v3",
      () => ({ ...base(), schema_version: 3, session_id: "s", device_used_bytes: null }),
      3,
    ],
    ["v4 without capabilities", () => ({ ...v4Base(), metadata: {} }), 4],
    [
      "a v4 counter whose capability is false",
      () => {
        const record = v4Base();
        const metadata = record.metadata as { memory_capabilities: Record<string, unknown> };
        metadata.memory_capabilities.supports_device_used = false;
        return record;
      },
      4,
    ],
  ];
  for (const [name, build, version] of rejected) {
    it(`and core's validation both reject ${name}`, () => {
      const candidate = JSON.parse(JSON.stringify(build())) as Record<string, unknown>;
      expect(schemas[version](candidate)).toBe(false);
      expect(() => validateTelemetryRecord(candidate)).toThrow(TelemetryValidationError);
    });
  }
});
