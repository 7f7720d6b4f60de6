import { describe, expect, it } from "vitest";
import {
  decodeTelemetryLine,
  encodeTelemetryRecord,
  JsonlDecodeError,
  type JsonObject,
  normalizeTelemetryRecord,
  parseJson,
} from "../../src/index.js";

/** A canonical v3 line. */
const LINE =
  '{"allocator_active_bytes": null, "allocator_allocated_bytes": 1, "allocator_change_bytes": 0, ' +
  '"allocator_inactive_bytes": null, "allocator_reserved_bytes": 1, "collector": "c", "context": null, ' +
  '"device_free_bytes": null, "device_id": 0, "device_total_bytes": null, "device_used_bytes": 1, ' +
  '"event_type": "sample", "host": "h", "job_id": null, "local_rank": 0, "metadata": {}, ' +
  '"pid": 1, "rank": 0, "sampling_interval_ms": 100, "schema_version": 3, "session_id": "s", ' +
  '"timestamp_ns": 1, "world_size": 1}';

describe("hostile JSON", () => {
  it("keeps a __proto__ key as data, as JSON.parse and Python do, instead of replacing the prototype", () => {
    for (const text of [
      '{"__proto__": {"polluted": 1}, "a": 2}',
      '{"__proto__": null}',
      '{"__proto__": [1]}',
    ]) {
      const value = parseJson(text) as Record<string, unknown>;
      expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
      expect(Object.keys(value)).toEqual(Object.keys(JSON.parse(text)));
      // The own data property (JSON.parse makes one too), read without the prototype accessor.
      expect(Object.getOwnPropertyDescriptor(value, "__proto__")?.value).toEqual(
        Object.getOwnPropertyDescriptor(JSON.parse(text), "__proto__")?.value,
      );
      expect((value as { polluted?: unknown }).polluted).toBeUndefined();
    }
    // A record's metadata keeps it, and writes it back.
    const line = LINE.replace('"metadata": {}', '"metadata": {"__proto__": {"x": 1}}');
    const record = decodeTelemetryLine(line);
    expect(Object.keys(record.metadata)).toEqual(["__proto__"]);
    expect(encodeTelemetryRecord(record)).toBe(line);
  });

  it("refuses a record whose fields come through a __proto__ key, naming the key as unknown", () => {
    const text = LINE.replace("{", '{"__proto__": {"pid": 7}, ');
    expect(() => decodeTelemetryLine(text)).toThrow("Unknown telemetry fields: __proto__");
    expect(() => normalizeTelemetryRecord(parseJson(text) as JsonObject)).toThrow(
      "Unknown telemetry fields: __proto__",
    );
  });

  it("keeps a __proto__ key of a legacy record's metadata", () => {
    const legacy = parseJson(
      '{"timestamp": 1.5, "memory_allocated": 10, "metadata": {"__proto__": {"x": 1}}}',
    );
    const event = normalizeTelemetryRecord(legacy as JsonObject, { defaultSessionId: "s" });
    expect(Object.keys(event.metadata)).toContain("__proto__");
    expect(Object.getPrototypeOf(event.metadata)).toBe(Object.prototype);
  });

  it("quotes a field name that would break the error's line", () => {
    const text = LINE.replace("{", '{"bad\\nkey": 1, ');
    expect(() => decodeTelemetryLine(text)).toThrow('Unknown telemetry fields: "bad\\nkey"');
  });

  it("names the line of a document's error, and the column in that line", () => {
    const text = '[\n  {"a": 1},\n  {"b": 2,, "c": 3}\n]';
    expect(() => parseJson(text, { file: "doc.json" })).toThrow(
      new JsonlDecodeError("Invalid JSON at column 11: expected a string key", {
        location: { file: "doc.json", line: 3 },
      }),
    );
    // A JSONL line keeps its line number; its column counts from the line's start.
    expect(() => parseJson('{"b": 2,, "c": 3}', { file: "seg.jsonl", line: 7 })).toThrow(
      "Invalid JSON at column 9: expected a string key (seg.jsonl:7)",
    );
  });
});
