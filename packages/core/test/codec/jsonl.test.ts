import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { splitJsonlText } from "../../src/codec/jsonl.js";
import { type JsonlLine, readJsonlLines } from "../../src/internal.js";

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
  "a line of Unicode spaces only is blank, as trim() says": '{"a": 1}\n\u00a0\u3000\u2028\n{"b": 2}\n',
  "multi-byte characters": '{"name": "Grüße ✓ 𝄞 日本語"}\n{"x": "é"}\n',
  "a control character is not blank": '{"a": 1}\n\u0001\n',
  "a line longer than many chunks": `{"long": "${"x".repeat(200)}"}\n{"b": 2}\n`,
  "only blank": "\n\n  \n",
  empty: "",
  "final line of spaces and no newline": '{"a": 1}\n   ',
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

  it("numbers lines from 1, blank ones included, and marks a final line without newline", async () => {
    const lines = await readAll('{"a": 1}\n\n{"b": 2}\r\n{"c": 3', 4);
    expect(lines).toEqual([
      { text: '{"a": 1}', lineNumber: 1, terminated: true },
      { text: '{"b": 2}', lineNumber: 3, terminated: true },
      { text: '{"c": 3', lineNumber: 4, terminated: false },
    ]);
  });
});
