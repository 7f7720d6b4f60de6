import { encodeTelemetryRecord, type TelemetryRecordV3, type TelemetryRecordV4 } from "@stormlog/core";
import { markFloat, TelemetryLineEncoder } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";

/** A deterministic pseudo-random generator, so failures reproduce. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const STRINGS = [
  "cuda",
  "héllo wörld",
  'quote " and \\ backslash',
  "tab\tnew\nline",
  "emoji 🙂",
  "\u007f\u0000",
  "",
  "phase / forward",
];

describe("TelemetryLineEncoder", () => {
  it("writes the same bytes as core's encoder for a stream of varied records", () => {
    const next = random(42);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
    const encoder = new TelemetryLineEncoder();
    let previous: TelemetryRecordV3 = sampleRecord("s", 0);
    for (let i = 0; i < 3000; i++) {
      // Mostly like the previous record (what the caches see), sometimes changed anywhere.
      const record: TelemetryRecordV3 = {
        ...previous,
        metadata: { ...previous.metadata },
        timestamp_ns: previous.timestamp_ns + 1n,
      };
      const roll = next();
      if (roll < 0.1) record.context = next() < 0.3 ? null : pick(STRINGS);
      else if (roll < 0.2)
        record.metadata[pick(["backend", "extra", "ü-key", "a"])] = pick([
          ...STRINGS,
          1,
          2.5,
          1e21,
          -0,
          true,
          null,
        ]);
      else if (roll < 0.3)
        record.metadata.phase_scope = {
          path: [pick(STRINGS), "x"],
          depth: Math.floor(next() * 3),
          ratio: next(),
        };
      else if (roll < 0.35) record.metadata = {};
      else if (roll < 0.4) record.metadata = { z: 1, a: [1, 2, { b: "c" }], m: { y: 2, x: 1 } };
      else if (roll < 0.45)
        record.metadata.collector_partial_fields = next() < 0.5 ? [] : ["device_free_bytes"];
      else if (roll < 0.5) {
        record.host = pick(STRINGS.filter((s) => s.trim() !== ""));
        record.job_id = next() < 0.5 ? null : "job-2";
      } else if (roll < 0.55) record.session_id = pick(["s", "t-ü"]);
      else if (roll < 0.6) record.device_total_bytes = next() < 0.5 ? null : 2 ** 40;
      else if (roll < 0.65) {
        // A float-marked value, as records decoded from a file carry.
        record.metadata.usage = 85;
        markFloat(record.metadata, "usage");
      }
      record.allocator_allocated_bytes = Math.floor(next() * 2 ** 40);
      record.device_used_bytes = Math.floor(next() * 2 ** 30);
      expect(encoder.encode(record)).toBe(encodeTelemetryRecord(record));
      previous = record;
    }
  });

  it("notices in-place changes of nested metadata objects", () => {
    const encoder = new TelemetryLineEncoder();
    const record = sampleRecord("s", 0);
    const scope = { path: ["train"], depth: 1 };
    record.metadata.phase_scope = scope;
    expect(encoder.encode(record)).toBe(encodeTelemetryRecord(record));
    scope.depth = 2;
    expect(encoder.encode(record)).toContain('"depth": 2');
    expect(encoder.encode(record)).toBe(encodeTelemetryRecord(record));
  });

  it("writes only ASCII, so a line's length is its size in bytes", () => {
    const encoder = new TelemetryLineEncoder();
    const record = { ...sampleRecord("sé", 0), context: "日本語 🙂", metadata: { ключ: "значение" } };
    const line = encoder.encode(record);
    expect(Buffer.byteLength(line, "utf8")).toBe(line.length);
    expect(line).toContain("\\u65e5\\u672c\\u8a9e \\ud83d\\ude42");
  });

  it("encodes v4 records with null counters", () => {
    const encoder = new TelemetryLineEncoder();
    const v4 = {
      ...sampleRecord("s", 0),
      schema_version: 4,
      allocator_allocated_bytes: null,
      allocator_change_bytes: null,
    } as unknown as TelemetryRecordV4;
    expect(encoder.encode(v4)).toBe(encodeTelemetryRecord(v4));
  });
});
