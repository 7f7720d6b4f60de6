import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { splitJsonlText } from "../../src/codec/jsonl.js";
import { JsonlDecodeError, TelemetryValidationError } from "../../src/index.js";
import {
  isCutShortLine,
  type JsonlLine,
  JsonTooDeepError,
  LineEndFinder,
  readJsonlLines,
} from "../../src/internal.js";

const dir = mkdtempSync(join(tmpdir(), "stormlog-jsonl-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function readAll(text: string, chunkBytes: number): Promise<JsonlLine[]> {
  const path = join(dir, `case-${chunkBytes}-${Math.random().toString(36).slice(2)}.jsonl`);
  writeFileSync(path, text, "utf8");
  const lines: JsonlLine[] = [];
  for await (const line of readJsonlLines(path, { chunkBytes })) lines.push(line);
  return lines;
}

// Each case read with chunk sizes that cut lines, CRLF pairs and multi-byte characters apart.
const CASES: Record<string, string> = {
  plain: '{"a": 1}\n{"b": 2}\n',
  "no final newline": '{"a": 1}\n{"b": 2}',
  "CRLF line ends": '{"a": 1}\r\n{"b": 2}\r\n',
  "blank lines: empty, spaces, tabs, a lone CR": '\n{"a": 1}\n   \n\t\t\n\r\n{"b": 2}\n',
  "a line of Unicode spaces only is blank, as Python's strip() says":
    '{"a": 1}\n\u00a0\u3000\u2028\n{"b": 2}\n',
  "multi-byte characters": '{"name": "Grüße ✓ 𝄞 日本語"}\n{"x": "é"}\n',
  "a control character is not blank": '{"a": 1}\n\u0001\n',
  "a line longer than many chunks": `{"long": "${"x".repeat(200)}"}\n{"b": 2}\n`,
  "only blank": "\n\n  \n",
  empty: "",
  "final line of spaces and no newline": '{"a": 1}\n   ',
  // Lines end as the reference's text mode reads them: `\n`, `\r\n` or a lone `\r`.
  "CR line ends (classic Mac)": '{"a": 1}\r{"b": 2}\r{"c": 3}\r',
  "mixed line ends": '{"a": 1}\n{"b": 2}\r{"c": 3}\r\n{"d": 4}',
  "CR CR LF is a line and a blank one": '{"a": 1}\r\r\n{"b": 2}\n',
  "a final CR ends the last line": '{"a": 1}\n{"b": 2}\r',
  "CR line ends around multi-byte characters": '{"x": "é"}\r{"y": "𝄞"}\r',
};

describe("readJsonlLines", () => {
  for (const [name, text] of Object.entries(CASES)) {
    it(`reads what splitJsonlText reads: ${name}`, async () => {
      const expected = splitJsonlText(text);
      for (const chunkBytes of [1, 2, 3, 5, 16, 1 << 20]) {
        expect(await readAll(text, chunkBytes), `chunkBytes ${chunkBytes}`).toEqual(expected);
      }
    });
  }

  it("ends lines where Python's text mode does, for any mix of line ends and chunk cuts", async () => {
    // The oracle: universal newlines one character at a time (`\r\n` one end, a lone `\r` one end).
    const universal = (text: string): JsonlLine[] => {
      const lines: JsonlLine[] = [];
      let current = "";
      let lineNumber = 0;
      const push = (terminated: boolean) => {
        lineNumber++;
        if (current.trim() !== "") lines.push({ text: current, lineNumber, terminated });
        current = "";
      };
      for (let i = 0; i < text.length; i++) {
        const c = text[i]!;
        if (c === "\n" || c === "\r") {
          if (c === "\r" && text[i + 1] === "\n") i++;
          push(true);
        } else current += c;
      }
      if (current !== "") push(false);
      return lines;
    };
    const pieces = ["{", "a", "1", " ", "\t", "\r", "\n", "\r\n", "é", "𝄞"];
    let state = 20261128;
    const next = () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state;
    };
    for (let trial = 0; trial < 150; trial++) {
      let text = "";
      for (let n = next() % 24; n > 0; n--) text += pieces[next() % pieces.length];
      const expected = universal(text);
      expect(splitJsonlText(text), JSON.stringify(text)).toEqual(expected);
      for (const chunkBytes of [1, 2, 3, 7]) {
        expect(await readAll(text, chunkBytes), `${JSON.stringify(text)} in chunks of ${chunkBytes}`).toEqual(
          expected,
        );
      }
    }
  });

  it("reads each byte a bounded number of times, whatever the line ends, asked at every line or sparsely", () => {
    // 200,000 lines in one buffer: a search from every line's start to the buffer's end would read
    // ~10^10 bytes. Counted: the bytes each search reads (from its start to what it finds, or to the end).
    const searchedBytes = (
      bytes: Buffer,
      sparse: boolean,
      most = Number.POSITIVE_INFINITY,
    ): { lines: number; searched: number } => {
      const ends = new LineEndFinder();
      const indexOf = Buffer.prototype.indexOf;
      let searched = 0;
      Buffer.prototype.indexOf = function (this: Buffer, value: number, from?: number) {
        const found = indexOf.call(this, value, from);
        searched += (found === -1 ? this.length : found + 1) - (from ?? 0);
        return found;
      } as typeof indexOf;
      let lines = 0;
      try {
        ends.begin(bytes, sparse);
        for (
          let start = 0, end = ends.find(0);
          end !== -1 && lines < most;
          start = end + 1, end = ends.find(start)
        )
          lines++;
      } finally {
        Buffer.prototype.indexOf = indexOf;
      }
      return { lines, searched };
    };
    const count = 200_000;
    // Lone `\r` ends; the last may be half of a `\r\n` until more bytes come.
    const lone = Buffer.from("{}\r".repeat(count));
    // `\n` ends and one `\r` at the very end.
    const unix = Buffer.from(`${"{}\n".repeat(count)}{}\r`);
    for (const sparse of [false, true]) {
      expect(searchedBytes(lone, sparse).lines).toBe(count - 1);
      expect(searchedBytes(lone, sparse).searched).toBeLessThanOrEqual(3 * lone.length);
      expect(searchedBytes(unix, sparse).lines).toBe(count);
      expect(searchedBytes(unix, sparse).searched).toBeLessThanOrEqual(3 * unix.length);
    }
    // Sparse (a scan's chunk, mostly read by its kernel): a line's end is found within the lines read.
    expect(searchedBytes(unix, true, 1).searched).toBeLessThanOrEqual(4 * 3);
  });

  it("finds the same line ends sparsely as at every line", () => {
    const pieces = ["{", "a", " ", "\r", "\n", "\r\n", "\r\r", "\n\n"];
    let state = 20261129;
    const next = () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state;
    };
    const endsOf = (bytes: Buffer, sparse: boolean): number[] => {
      const ends = new LineEndFinder();
      ends.begin(bytes, sparse);
      const found: number[] = [];
      for (let start = 0, end = ends.find(0); end !== -1; start = end + 1, end = ends.find(start))
        found.push(end);
      return found;
    };
    for (let trial = 0; trial < 500; trial++) {
      let text = "";
      for (let n = next() % 40; n > 0; n--) text += pieces[next() % pieces.length];
      const bytes = Buffer.from(text);
      expect(endsOf(bytes, true), JSON.stringify(text)).toEqual(endsOf(bytes, false));
    }
  });

  it("skips the lines the reference skips: blank to Python's `str.strip()`, not JavaScript's `trim()`", async () => {
    // \x1c-\x1f and U+0085 are Python whitespace; U+FEFF is JavaScript whitespace only.
    const text = '{"a": 1}\n\x1c\x1d\x1e\x1f\n\u0085\n\ufeff\n{"b": 2}\n';
    const expected = [
      { text: '{"a": 1}', lineNumber: 1, terminated: true },
      { text: "\ufeff", lineNumber: 4, terminated: true },
      { text: '{"b": 2}', lineNumber: 5, terminated: true },
    ];
    expect(splitJsonlText(text)).toEqual(expected);
    for (const chunkBytes of [1, 3, 1 << 20]) expect(await readAll(text, chunkBytes)).toEqual(expected);
  });

  it("numbers lines from 1, blank ones included, and marks a final line without newline", async () => {
    const lines = await readAll('{"a": 1}\n\n{"b": 2}\r\n{"c": 3', 4);
    expect(lines).toEqual([
      { text: '{"a": 1}', lineNumber: 1, terminated: true },
      { text: '{"b": 2}', lineNumber: 3, terminated: true },
      { text: '{"c": 3', lineNumber: 4, terminated: false },
    ]);
  });
});

describe("isCutShortLine", () => {
  const deep = (depth: number) => `{"a": ${"[".repeat(depth)}${"]".repeat(depth)}}`;
  const tooDeep = new JsonTooDeepError("too deep");

  it("takes a final line without newline that does not decode, as the readers drop it", () => {
    const decode = new JsonlDecodeError("bad");
    expect(isCutShortLine({ text: '{"a": 1', terminated: false }, decode)).toBe(true);
    expect(isCutShortLine({ text: '{"a": 1', terminated: true }, decode)).toBe(false);
    // Not a decoding failure: a record that decodes and breaks the schema is refused.
    expect(isCutShortLine({ text: '{"a": 1}', terminated: false }, new TelemetryValidationError("x"))).toBe(
      false,
    );
  });

  it("refuses a too-deep line whose brackets close, and drops one cut inside its nesting", () => {
    expect(isCutShortLine({ text: deep(600), terminated: false }, tooDeep)).toBe(false);
    expect(isCutShortLine({ text: `${deep(600)} \r\n`, terminated: false }, tooDeep)).toBe(false);
    expect(isCutShortLine({ text: deep(600).slice(0, 900), terminated: false }, tooDeep)).toBe(true);
    // Brackets in strings do not count; data after the value is no whole JSON.
    expect(
      isCutShortLine({ text: `{"s": "]}\\"]", "a": ${deep(600).slice(6)}`, terminated: false }, tooDeep),
    ).toBe(false);
    expect(
      isCutShortLine({ text: `{"s": "[[", "a": ${deep(600).slice(6, 900)}`, terminated: false }, tooDeep),
    ).toBe(true);
    expect(isCutShortLine({ text: `${deep(600)} {}`, terminated: false }, tooDeep)).toBe(true);
  });
});
