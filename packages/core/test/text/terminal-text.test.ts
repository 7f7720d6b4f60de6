import { describe, expect, it } from "vitest";
import { MAX_JSON_DEPTH } from "../../src/codec/json-codec.js";
import { decodeTelemetryLine, JsonlDecodeError, parseJson } from "../../src/index.js";
import { terminalText } from "../../src/internal.js";
import { TERMINAL_TEXT_MAX_LENGTH } from "../../src/text/terminal-text.js";

describe("terminalText", () => {
  it("keeps plain text, unicode and astral characters as they are", () => {
    expect(terminalText("train/forward")).toBe("train/forward");
    expect(terminalText("Grüße 数据 🚀")).toBe("Grüße 数据 🚀");
  });

  it("shows C0, ESC, DEL and C1 controls as escapes", () => {
    const hostile = "a\x1b]0;title\x07b\x1b[2Jc\u009b31m\x7f\x00";
    const shown = terminalText(hostile);
    expect(shown).toBe("a\\x1b]0;title\\x07b\\x1b[2Jc\\x9b31m\\x7f\\x00");
    // biome-ignore lint/suspicious/noControlCharactersInRegex: checking that none is left
    expect(shown).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
  });

  it("puts newlines, tabs and carriage returns on one line", () => {
    expect(terminalText("row\nFAKE\r\tx")).toBe("row\\nFAKE\\r\\tx");
  });

  it("shows bidi overrides, zero-width characters, separators and lone surrogates", () => {
    expect(terminalText("a\u202eb\u200bc\u2066d\ufeffe\u2028f\ud800")).toBe(
      "a\\u202eb\\u200bc\\u2066d\\ufeffe\\u2028f\\ud800",
    );
  });

  it("cuts long values with a marker counting what was left out", () => {
    const long = "x".repeat(TERMINAL_TEXT_MAX_LENGTH + 50);
    expect(terminalText(long)).toBe(`${"x".repeat(TERMINAL_TEXT_MAX_LENGTH)}…(+50 chars)`);
    expect(terminalText("abcdef", { maxLength: 4 })).toBe("abcd…(+2 chars)");
    // An escape is never split: it either fits whole or is left out.
    expect(terminalText("ab\x1bcd", { maxLength: 4 })).toBe("ab…(+3 chars)");
    expect(terminalText("🚀🚀🚀", { maxLength: 4 })).toBe("🚀🚀…(+1 chars)");
  });
});

describe("JSON nesting limit", () => {
  const nested = (depth: number, open = "[", close = "]") => `${open.repeat(depth)}${close.repeat(depth)}`;

  it("reads values nested up to the limit", () => {
    expect(() => parseJson(nested(MAX_JSON_DEPTH))).not.toThrow();
  });

  it("refuses 5,000 levels with a decode error naming the file and line, not a stack overflow", () => {
    for (const text of [
      nested(5000),
      `{"a": ${nested(5000)}}`,
      `${'{"a": '.repeat(5000)}1${"}".repeat(5000)}`,
    ]) {
      let caught: unknown;
      try {
        parseJson(text, { file: "deep.jsonl", line: 7 });
      } catch (error) {
        caught = error;
      }
      expect(JsonlDecodeError.isInstance(caught)).toBe(true);
      expect((caught as Error).message).toMatch(/nested deeper than 512 levels.*\(deep\.jsonl:7\)$/);
    }
  });

  it("refuses deep metadata on the canonical fast path too", () => {
    const line =
      '{"allocator_active_bytes": null, "allocator_allocated_bytes": 1, "allocator_change_bytes": 0, ' +
      '"allocator_inactive_bytes": null, "allocator_reserved_bytes": 1, "collector": "c", "context": null, ' +
      '"device_free_bytes": null, "device_id": 0, "device_total_bytes": null, "device_used_bytes": 1, ' +
      `"event_type": "sample", "host": "h", "job_id": null, "local_rank": 0, "metadata": {"x": ${'{"y": '.repeat(
        5000,
      )}1${"}".repeat(5000)}}, "pid": 1, "rank": 0, "sampling_interval_ms": 100, "schema_version": 3, ` +
      '"session_id": "s", "timestamp_ns": 1, "world_size": 1}';
    expect(() => decodeTelemetryLine(line, { location: { file: "seg.jsonl", line: 2 } })).toThrow(
      /nested deeper than 512 levels.*\(seg\.jsonl:2\)$/,
    );
    // The same line with shallow metadata takes the fast path and decodes.
    const shallow = line.replace(/"metadata": \{.*\}, "pid"/, '"metadata": {"x": {"y": 1}}, "pid"');
    expect(decodeTelemetryLine(shallow).metadata).toEqual({ x: { y: 1 } });
  });
});

describe("terminalText and invisible characters", () => {
  it("escapes format, private-use and filler characters a terminal prints as nothing (or as look-alikes)", () => {
    const cases: [string, string][] = [
      ["soft\u00adhyphen", "soft\\xadhyphen"],
      ["in\u206ahibit", "in\\u206ahibit"],
      ["arabic\u0600sign", "arabic\\u0600sign"],
      ["syriac\u070fmark", "syriac\\u070fmark"],
      ["hangul\u3164filler\u115f", "hangul\\u3164filler\\u115f"],
      ["non\ufffechar\uffff", "non\\ufffechar\\uffff"],
      ["private\ue000use", "private\\ue000use"],
      ["tag\u{e0041}\u{e0001}s", "tag\\u{e0041}\\u{e0001}s"],
      ["music\u{1d173}", "music\\u{1d173}"],
    ];
    for (const [input, shown] of cases) expect(terminalText(input)).toBe(shown);
  });

  it("keeps printable astral characters and the rest of the text as they are", () => {
    expect(terminalText("rank 😀 ok — ünï 中文")).toBe("rank 😀 ok — ünï 中文");
  });

  it("tells apart two ids that differ only by tag characters", () => {
    expect(terminalText("job\u{e0061}")).not.toBe(terminalText("job"));
  });
});
