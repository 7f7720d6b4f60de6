import { readFileSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  decodeTelemetryJsonl,
  decodeTelemetryLine,
  encodeTelemetryRecord,
  JsonlDecodeError,
  type JsonObject,
  parseJson,
  readTelemetryJsonl,
  stringifyJson,
  type TelemetryRecordV3,
  TelemetryValidationError,
  type TruncatedTail,
} from "../../src/index.js";
import { ByteOrderMarkError, TelemetryLineEncoder } from "../../src/internal.js";
import { goldenJsonlFiles } from "../golden.js";

const SAMPLE_LINE =
  '{"allocator_active_bytes": null, "allocator_allocated_bytes": 1073741824, "allocator_change_bytes": 0, ' +
  '"allocator_inactive_bytes": null, "allocator_reserved_bytes": 1140850688, "collector": "stormlog.cuda_tracker", ' +
  '"context": null, "device_free_bytes": 23622320128, "device_id": 0, "device_total_bytes": 25769803776, ' +
  '"device_used_bytes": 2147483648, "event_type": "sample", "host": "trainer-a", "job_id": "job-sink", ' +
  '"local_rank": 0, "metadata": {}, "pid": 4242, "rank": 0, "sampling_interval_ms": 100, "schema_version": 3, ' +
  '"session_id": "2cfda835", "timestamp_ns": 1763790000123456789, "world_size": 1}';

function withField(field: string, token: string): string {
  return SAMPLE_LINE.replace(new RegExp(`"${field}": [^,}]+`), `"${field}": ${token}`);
}

describe("golden lines written by the Python reference", () => {
  const files = goldenJsonlFiles();

  it("finds the golden fixtures", () => {
    expect(files.length).toBeGreaterThan(50);
  });

  it("decodes, validates and re-encodes every line byte-identical", () => {
    let lines = 0;
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      const rawLines = text.split("\n").filter((line) => line.length > 0);
      const decoded = decodeTelemetryJsonl(text, { file });
      expect(decoded).toHaveLength(rawLines.length);
      decoded.forEach(({ record }, index) => {
        expect(encodeTelemetryRecord(record)).toBe(rawLines[index]);
      });
      lines += decoded.length;
    }
    expect(lines).toBeGreaterThan(8000);
  });

  it("re-encodes every line byte-identical through the streaming encoder too", () => {
    const encoder = new TelemetryLineEncoder();
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      const rawLines = text.split("\n").filter((line) => line.length > 0);
      decodeTelemetryJsonl(text, { file }).forEach(({ record }, index) => {
        expect(encoder.encode(record as TelemetryRecordV3)).toBe(rawLines[index]);
      });
    }
  });
});

describe("decodeTelemetryLine", () => {
  it("keeps nanosecond timestamps above 2^53 exact", () => {
    const record = decodeTelemetryLine(SAMPLE_LINE) as TelemetryRecordV3;
    expect(record.timestamp_ns).toBe(1763790000123456789n);
    expect(encodeTelemetryRecord(record)).toContain('"timestamp_ns": 1763790000123456789,');
  });

  it("fills the optional identity fields with the reference's defaults", () => {
    const line = SAMPLE_LINE.replace('"job_id": "job-sink", ', "")
      .replace('"local_rank": 0, ', "")
      .replace('"rank": 0, ', "")
      .replace(', "world_size": 1', "");
    const record = decodeTelemetryLine(line);
    expect([record.job_id, record.rank, record.local_rank, record.world_size]).toEqual([null, 0, 0, 1]);
  });

  it("rejects a float token in an integer field in strict mode, naming field, file and line", () => {
    const location = { file: "segment-000001.jsonl", line: 7 };
    for (const token of ["1.0", "1e3", "100.0E0"]) {
      const line = withField("sampling_interval_ms", token);
      try {
        decodeTelemetryLine(line, { location });
        expect.unreachable(`accepted ${token}`);
      } catch (error) {
        expect(TelemetryValidationError.isInstance(error)).toBe(true);
        const validation = error as TelemetryValidationError;
        expect(validation.field).toBe("sampling_interval_ms");
        expect(validation.message).toContain("segment-000001.jsonl:7");
      }
    }
  });

  it("accepts an integral float in lenient mode and says so", () => {
    const notes: string[] = [];
    const record = decodeTelemetryLine(withField("pid", "4242.0"), {
      strict: false,
      onNote: (n) => notes.push(n),
    });
    expect(record.pid).toBe(4242);
    expect(notes).toHaveLength(1);
    expect(notes[0]).toContain("'pid'");
  });

  it("rejects a fractional integer field even in lenient mode", () => {
    expect(() => decodeTelemetryLine(withField("pid", "4242.5"), { strict: false })).toThrow(
      /'pid' must be an integer/,
    );
  });

  it("rejects booleans where integers belong, including schema_version", () => {
    expect(() => decodeTelemetryLine(withField("device_id", "true"))).toThrow(
      /'device_id' must be an integer/,
    );
    expect(() => decodeTelemetryLine(withField("schema_version", "true"))).toThrow(
      /Unsupported schema_version/,
    );
  });

  it("rejects unknown top-level fields and lists missing ones", () => {
    expect(() => decodeTelemetryLine(SAMPLE_LINE.replace("{", '{"zzz": 1, "aaa": 2, '))).toThrow(
      "Unknown telemetry fields: aaa, zzz",
    );
    expect(() => decodeTelemetryLine(SAMPLE_LINE.replace('"host": "trainer-a", ', ""))).toThrow(
      "Missing required telemetry fields: host",
    );
  });

  it("enforces ranges and identity rules", () => {
    expect(() => decodeTelemetryLine(withField("pid", "-2"))).toThrow(/'pid' must be >= -1/);
    expect(() => decodeTelemetryLine(withField("rank", "1"))).toThrow(
      /'rank' \(1\) must be < world_size \(1\)/,
    );
    expect(() => decodeTelemetryLine(withField("device_used_bytes", "25769803777"))).toThrow(
      /must be <= device_total_bytes/,
    );
    expect(() => decodeTelemetryLine(withField("host", '"  "'))).toThrow(/'host' must be a non-empty string/);
    expect(() => decodeTelemetryLine(withField("allocator_change_bytes", "-5"))).not.toThrow();
  });

  it("reports malformed JSON as a JsonlDecodeError with the location", () => {
    try {
      decodeTelemetryLine(SAMPLE_LINE.slice(0, 120), { location: { file: "a.jsonl", line: 3 } });
      expect.unreachable();
    } catch (error) {
      expect(JsonlDecodeError.isInstance(error)).toBe(true);
      expect((error as Error).message).toContain("a.jsonl:3");
    }
  });

  it("reports a line starting with a byte order mark as a ByteOrderMarkError (a JsonlDecodeError) saying what to do", () => {
    try {
      decodeTelemetryLine(`\ufeff${SAMPLE_LINE}`, { location: { file: "a.jsonl", line: 1 } });
      expect.unreachable();
    } catch (error) {
      expect(ByteOrderMarkError.isInstance(error)).toBe(true);
      expect(JsonlDecodeError.isInstance(error)).toBe(true);
      expect((error as Error).name).toBe("ByteOrderMarkError");
      expect((error as Error).message).toMatch(/byte order mark \(BOM\).*without BOM.*\(a\.jsonl:1\)$/);
    }
  });

  it("reads v2 lines without session_id and re-encodes them", () => {
    const v2 = SAMPLE_LINE.replace(
      '"schema_version": 3, "session_id": "2cfda835", ',
      '"schema_version": 2, ',
    );
    const record = decodeTelemetryLine(v2);
    expect(record.schema_version).toBe(2);
    expect(encodeTelemetryRecord(record)).toBe(v2);
  });

  it("keeps metadata numbers, floats and escapes byte-identical", () => {
    const metadata =
      '{"big": 12345678901234567890, "fragmentation": 0.3125, "nested": {"list": [1, 2.0, "\\u00e9"]}, ' +
      '"retry": 1e-05, "usage_percent": 85.0}';
    const line = SAMPLE_LINE.replace('"metadata": {}', `"metadata": ${metadata}`);
    const record = decodeTelemetryLine(line);
    const meta = record.metadata as JsonObject;
    expect(meta.big).toBe(12345678901234567890n);
    expect(meta.usage_percent).toBe(85);
    expect(encodeTelemetryRecord(record)).toBe(line);
  });

  it("finds a lone float or long integer wherever JSON puts a number, and not in strings", () => {
    for (const metadata of [
      '{"a": 2.0}',
      '{"a": -0.5}',
      '{"a": 1e+16}',
      '{"a": [2.0]}',
      '{"a": [1, 3.0]}',
      '{"a": {"b": {"c": 4.0}}}',
      '{"a": 1234567890123456789}',
      '{"a": [-1234567890123456789]}',
      // Digits and "e" inside strings only: nothing to keep exact, JSON.parse reads them right.
      '{"scope_id": "eb1e2016-30e2-4c0f-9c31-3a07859772e2:9991", "text": "x: 1.5, [2e3"}',
      '{"id": "12345678901234567890"}',
    ]) {
      const line = SAMPLE_LINE.replace('"metadata": {}', `"metadata": ${metadata}`);
      expect(encodeTelemetryRecord(decodeTelemetryLine(line)), metadata).toBe(line);
    }
  });
});

describe("phase records", () => {
  const scope =
    '{"action": "enter", "attributes": {"batch": 3, "lr": 0.5}, "depth": 2, "name": "forward", ' +
    '"parent_scope_id": "s:1", "path": ["train", "forward"], "scope_id": "s:2", "sequence": 2, ' +
    '"thread_id": 0, "thread_name": "main"}';

  it("writes phase_scope with attributes exactly, through the dedicated writer", () => {
    const line = SAMPLE_LINE.replace('"metadata": {}', `"metadata": {"phase_scope": ${scope}}`);
    expect(encodeTelemetryRecord(decodeTelemetryLine(line))).toBe(line);
  });

  it("falls back to the generic writer for other shapes and still matches", () => {
    for (const variant of [
      scope.replace('"depth": 2', '"depth": 2.0'),
      scope.replace('"thread_name": "main"}', '"thread_name": "main", "zz": null}'),
      scope.replace('["train", "forward"]', '["train", 7]'),
    ]) {
      const line = SAMPLE_LINE.replace('"metadata": {}', `"metadata": {"phase_scope": ${variant}}`);
      expect(encodeTelemetryRecord(decodeTelemetryLine(line))).toBe(line);
    }
  });
});

describe("parseJson / stringifyJson", () => {
  const python = JSON.parse(
    readFileSync(new URL("../fixtures/python-json-dumps.json", import.meta.url), "utf8"),
  ) as Record<string, string>;

  it("writes what Python's json.dumps writes (sort_keys, indent=2, ensure_ascii)", () => {
    const doc = parseJson(python.flat!);
    expect(stringifyJson(doc)).toBe(python.flat);
    expect(stringifyJson(doc, { sortKeys: true })).toBe(python.flat_sorted);
    expect(stringifyJson(doc, { sortKeys: true, indent: 2 })).toBe(python.indent2_sorted);
  });

  it("keeps big integers as bigint", () => {
    expect(parseJson('{"t": 1795315973457684235}')).toEqual({ t: 1795315973457684235n });
  });

  it("accepts Python's NaN and Infinity tokens", () => {
    const value = parseJson("[NaN, Infinity, -Infinity]") as number[];
    expect(value[0]).toBeNaN();
    expect(stringifyJson(value)).toBe("[NaN, Infinity, -Infinity]");
  });

  it("rejects trailing data", () => {
    expect(() => parseJson("{} x")).toThrow(JsonlDecodeError);
  });
});

describe("JSONL readers", () => {
  it("skips blank lines, drops and reports a truncated final line", async () => {
    const dir = await mkdtemp(join(tmpdir(), "stormlog-core-"));
    const file = join(dir, "segment-000001.jsonl");
    await writeFile(file, `${SAMPLE_LINE}\n\n  \r\n${SAMPLE_LINE}\r\n${SAMPLE_LINE.slice(0, 200)}`);
    const tails: TruncatedTail[] = [];
    const records = [];
    for await (const decoded of readTelemetryJsonl(file, {
      onTruncatedTail: (tail) => tails.push(tail),
      chunkBytes: 64,
    })) {
      records.push(decoded);
    }
    expect(records.map((r) => r.lineNumber)).toEqual([1, 4]);
    expect(tails).toHaveLength(1);
    expect(tails[0]).toMatchObject({ file, lineNumber: 5, length: 200 });
  });

  it("fails on a malformed line that is not the last, naming file and line", async () => {
    const dir = await mkdtemp(join(tmpdir(), "stormlog-core-"));
    const file = join(dir, "bad.jsonl");
    await writeFile(file, `${SAMPLE_LINE}\n{"oops"\n${SAMPLE_LINE}\n`);
    const read = async () => {
      for await (const _ of readTelemetryJsonl(file)) {
        // drain
      }
    };
    await expect(read()).rejects.toThrow(`${file}:2`);
  });

  it("keeps a complete final line without newline", () => {
    expect(decodeTelemetryJsonl(`${SAMPLE_LINE}\n${SAMPLE_LINE}`)).toHaveLength(2);
  });

  it("forgives a final line without newline that is not JSON, not one that is JSON but no object", () => {
    // The reference drops only a last line json.loads cannot parse; a whole array or number there raises.
    for (const last of ["[1, 2]", "7", '"text"', "null"]) {
      const error = (() => {
        try {
          decodeTelemetryJsonl(`${SAMPLE_LINE}\n${last}`, { file: "f.jsonl" });
        } catch (caught) {
          return caught;
        }
        return null;
      })();
      expect(TelemetryValidationError.isInstance(error), last).toBe(true);
      expect((error as Error).message).toMatch(/must be a JSON object, got .*f\.jsonl:2/);
    }
    for (const cut of ["[1, ", "tru", '"tex']) {
      const tails: TruncatedTail[] = [];
      expect(
        decodeTelemetryJsonl(`${SAMPLE_LINE}\n${cut}`, { onTruncatedTail: (tail) => tails.push(tail) }),
      ).toHaveLength(1);
      expect(tails.map((tail) => tail.lineNumber)).toEqual([2]);
    }
    // Not the last line: refused either way, naming the line.
    expect(() => decodeTelemetryJsonl(`[1,\n${SAMPLE_LINE}\n`, { file: "f.jsonl" })).toThrow(
      /must be a JSON object.*f\.jsonl:1/,
    );
  });
});

describe("fast and general decode paths", () => {
  it("agree on every golden line when the line is not in canonical layout", () => {
    let compared = 0;
    for (const file of goldenJsonlFiles().slice(0, 12)) {
      for (const { record } of decodeTelemetryJsonl(readFileSync(file, "utf8"), { file })) {
        // Reversed key order: only the general path reads this layout.
        const fields = parseJson(encodeTelemetryRecord(record)) as JsonObject;
        const reordered = stringifyJson(Object.fromEntries(Object.entries(fields).reverse()));
        expect(decodeTelemetryLine(reordered)).toEqual(record);
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(1000);
  });
});
