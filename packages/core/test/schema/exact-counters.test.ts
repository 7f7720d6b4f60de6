import { describe, expect, it } from "vitest";
import {
  decodeTelemetryLine,
  encodeTelemetryRecord,
  type JsonObject,
  normalizeTelemetryRecord,
  parseJson,
  stringifyJson,
  TelemetryValidationError,
  validateTelemetryRecord,
} from "../../src/index.js";
import { counterValue, exactCountersOf, exactQuotient } from "../../src/internal.js";

const line = (overrides: Record<string, bigint | number | null>): string =>
  stringifyJson(
    {
      allocator_active_bytes: null,
      allocator_allocated_bytes: 1,
      allocator_change_bytes: 0,
      allocator_inactive_bytes: null,
      allocator_reserved_bytes: 2,
      collector: "stormlog.test",
      context: null,
      device_free_bytes: null,
      device_id: 0,
      device_total_bytes: null,
      device_used_bytes: 3,
      event_type: "sample",
      host: "h",
      job_id: null,
      local_rank: 0,
      metadata: {},
      pid: 1,
      rank: 0,
      sampling_interval_ms: 10,
      schema_version: 3,
      session_id: "s",
      timestamp_ns: 1_760_000_000_000_000_000n,
      world_size: 1,
      ...overrides,
    },
    { sortKeys: true },
  );

describe("counters past 2^53", () => {
  it("decode to their nearest double, the exact value kept beside the record", () => {
    const used = 2n ** 60n + 1n;
    const record = decodeTelemetryLine(
      line({ device_used_bytes: used, allocator_change_bytes: -(2n ** 54n) - 1n }),
    );
    expect(record.device_used_bytes).toBe(Number(used));
    expect(exactCountersOf(record)).toEqual({
      device_used_bytes: used,
      allocator_change_bytes: -(2n ** 54n) - 1n,
    });
    expect(counterValue(record, "device_used_bytes")).toBe(used);
    expect(counterValue(record, "allocator_reserved_bytes")).toBe(2);
    expect(exactCountersOf(decodeTelemetryLine(line({})))).toBeUndefined();
  });

  it("encode back to every digit read, and a legacy count in MB past 2^53 to its integer's digits", () => {
    const text = line({
      device_used_bytes: 72_057_594_037_927_945n,
      device_total_bytes: 2n ** 60n + 1n,
      allocator_change_bytes: -(2n ** 54n) - 1n,
    });
    expect(encodeTelemetryRecord(decodeTelemetryLine(text))).toBe(text);
    const legacy = normalizeTelemetryRecord(parseJson('{"timestamp": 1, "memory_mb": 1e300}') as JsonObject);
    const encoded = encodeTelemetryRecord(legacy);
    // Python's int(1e300 * 1024**2): the double's own integer, every digit, no exponent.
    expect(encoded).toContain(`"allocator_allocated_bytes": ${BigInt(1e300 * 1024 * 1024)},`);
    expect(() => decodeTelemetryLine(encoded)).not.toThrow();
  });

  it("are checked exactly: used above total by one is refused although their doubles are equal", () => {
    expect(() =>
      decodeTelemetryLine(line({ device_used_bytes: 2n ** 60n + 1n, device_total_bytes: 2n ** 60n })),
    ).toThrow(/device_used_bytes.*must be <= device_total_bytes/);
    expect(() => decodeTelemetryLine(line({ device_used_bytes: -(2n ** 60n) }))).toThrow(/must be >= 0/);
  });

  it("as a JavaScript number (already rounded) are refused", () => {
    const record = JSON.parse(line({})) as Record<string, unknown>;
    record.timestamp_ns = 1_760_000_000_000_000_000n;
    record.device_used_bytes = 2 ** 60;
    expect(() => validateTelemetryRecord(record)).toThrow(TelemetryValidationError);
  });

  it("divide as Python's int / int does: the exact quotient rounded once", () => {
    expect(exactQuotient(2n ** 60n + 1001n, 3n)).toBe(384307168202282700);
    expect(exactQuotient(-7n, 2n)).toBe(-3.5);
    expect(exactQuotient(1n, 3n)).toBe(1 / 3);
    // (2^60 + 32) / 3 is exactly 384307168202282336; the doubles' quotient rounds 2^60 + 32 first.
    expect(exactQuotient(2n ** 60n + 32n, 3n)).toBe(Number(384307168202282336n));
    expect(Number(2n ** 60n + 32n) / 3).not.toBe(Number(384307168202282336n));
  });
});
