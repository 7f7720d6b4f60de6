import { describe, expect, it } from "vitest";
import { CANONICAL_END, CANONICAL_PREFIX, CANONICAL_V3_FIELDS } from "../../src/codec/canonical-line.js";
import {
  decodeTelemetryLine,
  encodeTelemetryRecord,
  TELEMETRY_V3_FIELDS,
  type TelemetryEvent,
} from "../../src/index.js";
import { TelemetryLineEncoder } from "../../src/internal.js";

const record: TelemetryEvent = {
  schema_version: 3,
  session_id: "s-1",
  timestamp_ns: 1_760_000_000_123_456_789n,
  event_type: "sample",
  collector: "stormlog.tfjs_tracker",
  sampling_interval_ms: 100,
  pid: 4242,
  host: "node-0",
  job_id: null,
  rank: 1,
  local_rank: 1,
  world_size: 2,
  device_id: 0,
  allocator_allocated_bytes: 1024,
  allocator_reserved_bytes: 2048,
  allocator_active_bytes: null,
  allocator_inactive_bytes: null,
  allocator_change_bytes: -16,
  device_used_bytes: 4096,
  device_free_bytes: null,
  device_total_bytes: 8192,
  context: "Collected telemetry sample.",
  metadata: { tfjs_num_tensors: 3 },
};

/** The line cut at each field's prefix, in table order (throws when a prefix is not where the table says). */
function valuesByLayout(line: string): string[] {
  const values: string[] = [];
  let at = 0;
  CANONICAL_V3_FIELDS.forEach((field, i) => {
    expect(line.startsWith(field.prefix, at), `${field.key} at ${at}`).toBe(true);
    at += field.prefix.length;
    const next = CANONICAL_V3_FIELDS[i + 1];
    const end = next === undefined ? line.length - CANONICAL_END.length : line.indexOf(next.prefix, at);
    values.push(line.slice(at, end));
    at = end;
  });
  expect(line.endsWith(CANONICAL_END)).toBe(true);
  return values;
}

describe("the canonical v3 line's table", () => {
  it("lists every v3 key once, sorted, the first opening the object", () => {
    expect(CANONICAL_V3_FIELDS.map((field) => field.key)).toEqual([...TELEMETRY_V3_FIELDS].sort());
    expect(CANONICAL_PREFIX.allocator_active_bytes).toBe('{"allocator_active_bytes": ');
    expect(CANONICAL_PREFIX.world_size).toBe(', "world_size": ');
  });

  it("is the layout both encoders write and the fast decoder reads", () => {
    const line = encodeTelemetryRecord(record);
    expect(new TelemetryLineEncoder().encode(record)).toBe(line);
    const values = valuesByLayout(line);
    const byKey = Object.fromEntries(CANONICAL_V3_FIELDS.map((field, i) => [field.key, values[i]]));
    expect(byKey.allocator_change_bytes).toBe("-16");
    expect(byKey.job_id).toBe("null");
    expect(byKey.timestamp_ns).toBe("1760000000123456789");
    expect(byKey.metadata).toBe('{"tfjs_num_tensors": 3}');
    expect(decodeTelemetryLine(line)).toEqual(record);
  });

  it("gives each value the form the table says", () => {
    const values = valuesByLayout(encodeTelemetryRecord(record));
    const forms: Record<string, RegExp> = {
      count: /^\d+$/,
      "nullable-count": /^(?:\d+|null)$/,
      int: /^-?\d+$/,
      text: /^".+"$/,
      "nullable-string": /^(?:".*"|null)$/,
      "nullable-text": /^(?:".+"|null)$/,
      object: /^\{.*\}$/,
    };
    CANONICAL_V3_FIELDS.forEach((field, i) => {
      expect(values[i], field.key).toMatch(forms[field.form]!);
    });
  });
});
