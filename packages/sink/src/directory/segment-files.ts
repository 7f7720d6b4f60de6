import { closeSync, fstatSync, ftruncateSync, openSync, readSync, writeSync } from "node:fs";
import { parseJson } from "@stormlog/core";
import { isPythonBlank } from "@stormlog/core/internal";

const CHUNK = 1 << 20;
/** Non-ASCII bytes of an otherwise blank line decoded to tell whether it is blank. */
const MAX_UNSURE_BYTES = 96;

/** Python's ASCII whitespace (`str.strip()`), line ends aside. */
function isBlankByte(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0b || byte === 0x0c || (byte >= 0x1c && byte <= 0x1f);
}

/**
 * Counts the non-blank lines of a file (the reference's `_count_records`), reading it in chunks.
 * Lines end at `\n`, `\r\n` or a lone `\r`, as the reference's text mode reads them (a `\r\n`
 * counts once: the nothing between its two bytes is blank).
 */
export function countRecordsSync(path: string): number {
  const fd = openSync(path, "r");
  try {
    const buffer = Buffer.allocUnsafe(CHUNK);
    let count = 0;
    let lineHasContent = false;
    // The non-ASCII bytes of a line with nothing else but blanks so far: Unicode spaces (U+00A0,
    // U+3000...) are blank to Python too, which only their text tells.
    let unsure: number[] | null = null;
    const counts = (): boolean =>
      lineHasContent || (unsure !== null && !isPythonBlank(Buffer.from(unsure).toString("utf8")));
    let position = 0;
    for (;;) {
      const read = readSync(fd, buffer, 0, CHUNK, position);
      if (read <= 0) break;
      position += read;
      for (let i = 0; i < read; i++) {
        const byte = buffer[i]!;
        if (byte === 0x0a || byte === 0x0d) {
          if (counts()) count++;
          lineHasContent = false;
          unsure = null;
        } else if (!lineHasContent && byte >= 0x80) {
          unsure ??= [];
          // A line of more than a few dozen Unicode spaces is taken as a record.
          if (unsure.length < MAX_UNSURE_BYTES) unsure.push(byte);
          else lineHasContent = true;
        } else if (!lineHasContent && !isBlankByte(byte)) {
          lineHasContent = true;
        }
      }
    }
    return counts() ? count + 1 : count;
  } finally {
    closeSync(fd);
  }
}

/** What `repairSegmentTailSync` did to a segment's last line. */
export interface TailRepair {
  /** `terminated`: a complete record lacked its newline, one was added; `truncated`: a cut line was removed. */
  readonly action: "none" | "terminated" | "truncated";
  /** Bytes removed (`truncated`). */
  readonly droppedBytes: number;
  /** The file's size afterwards. */
  readonly size: number;
}

function findTailStart(fd: number, size: number): number {
  const buffer = Buffer.allocUnsafe(Math.min(CHUNK, size));
  let end = size;
  while (end > 0) {
    const start = Math.max(0, end - buffer.length);
    const read = readSync(fd, buffer, 0, end - start, start);
    const block = buffer.subarray(0, read);
    // After the last line end: a `\n`, or a `\r` (which ends a line as the reference reads it).
    const index = Math.max(block.lastIndexOf(0x0a), block.lastIndexOf(0x0d));
    if (index >= 0) return start + index + 1;
    end = start;
  }
  return 0;
}

/**
 * Makes a segment end on a whole line, as a crash mid-write may leave it cut: a last line without
 * line end that parses as a JSON object gets its newline; one that does not is removed (in place,
 * with `ftruncate`, so the whole lines before it are never rewritten).
 */
export function repairSegmentTailSync(path: string): TailRepair {
  const fd = openSync(path, "r+");
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return { action: "none", droppedBytes: 0, size };
    const last = Buffer.allocUnsafe(1);
    readSync(fd, last, 0, 1, size - 1);
    // A last line ended by `\r` is whole too: never truncated (the reference cuts back to its last `\n`,
    // which empties a segment written with `\r` line ends).
    if (last[0] === 0x0a || last[0] === 0x0d) return { action: "none", droppedBytes: 0, size };
    const tailStart = findTailStart(fd, size);
    const tail = Buffer.allocUnsafe(size - tailStart);
    readSync(fd, tail, 0, tail.length, tailStart);
    const text = tail.toString("utf8");
    if (text.trim() === "") return { action: "none", droppedBytes: 0, size };
    let complete = false;
    try {
      const value = parseJson(text);
      complete = typeof value === "object" && value !== null && !Array.isArray(value);
    } catch {
      complete = false;
    }
    if (complete) {
      writeSync(fd, "\n", size, "utf8");
      return { action: "terminated", droppedBytes: 0, size: size + 1 };
    }
    ftruncateSync(fd, tailStart);
    return { action: "truncated", droppedBytes: size - tailStart, size: tailStart };
  } finally {
    closeSync(fd);
  }
}
