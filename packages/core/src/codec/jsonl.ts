import { isUtf8 } from "node:buffer";
import { createReadStream } from "node:fs";
import { JsonlDecodeError, JsonTooDeepError, type StormlogError } from "../runtime/errors.js";
import { openRegularFileSync } from "../runtime/regular-file.js";
import type { TelemetryRecord } from "../schema/schema.js";
import { isPythonBlank } from "../text/python-text.js";
import { type DecodeOptions, decodeTelemetryLine } from "./codec.js";
import { isJsonWhitespace } from "./json-codec.js";

/** One non-blank line of a JSONL file. */
export interface JsonlLine {
  readonly text: string;
  /** 1-based line number in the file. */
  readonly lineNumber: number;
  /** False only for a final line with no newline after it (possibly cut short by a crash). */
  readonly terminated: boolean;
}

/**
 * Whether `line`, which failed to decode with `error`, is one a crash cut short, which the readers
 * drop, as the reference drops a final line `json.loads` rejects: the final line, without newline,
 * unless its only fault is nesting deeper than the parser takes while its brackets all close. That
 * line is whole (the reference parses it): it is refused, as it is with a newline.
 */
export function isCutShortLine(
  line: Pick<JsonlLine, "text" | "terminated">,
  error: unknown,
): error is JsonlDecodeError {
  if (line.terminated || !JsonlDecodeError.isInstance(error)) return false;
  return !JsonTooDeepError.isInstance(error) || !bracketsClose(line.text);
}

/** Whether the brackets of `text` (outside its strings) close, the outermost at its end (JSON whitespace after it). */
function bracketsClose(text: string): boolean {
  let end = text.length;
  while (end > 0 && isJsonWhitespace(text.charCodeAt(end - 1))) end--;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) depth++;
    else if ((c === 0x7d || c === 0x5d) && --depth <= 0) return depth === 0 && i === end - 1;
  }
  return false;
}

/** Options of the JSONL readers. */
export interface JsonlReadOptions {
  /** Bytes read per chunk; memory stays bounded by this plus the longest line. */
  readonly chunkBytes?: number;
}

/**
 * Streams the non-blank lines of a JSONL file without loading it whole. Lines end as the reference
 * reads them (`LineEndFinder`) and each line's UTF-8 is decoded on its own: a line-ending byte never
 * falls inside a multi-byte character, so no chunk-wide string is built (that cost the readers about
 * half their time).
 */
export async function* readJsonlLines(
  path: string,
  options: JsonlReadOptions = {},
): AsyncGenerator<JsonlLine> {
  // Bytes of a line that started in an earlier chunk (a `\r` last: the next byte decides how it ends).
  let carry: Buffer | null = null;
  let lineNumber = 0;
  const ends = new LineEndFinder();
  // Opened without waiting on a FIFO (and refused unless a regular file), then streamed.
  const fd = openRegularFileSync(path);
  const stream = createReadStream(path, { fd, highWaterMark: options.chunkBytes ?? 1 << 20 });
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    ends.begin(chunk);
    let start = 0;
    // Only the line that began in an earlier chunk is joined; the rest is read in place.
    if (carry !== null && carry[carry.length - 1] === CARRIAGE_RETURN) {
      // Its last `\r` ends it: with this chunk's first `\n` as a `\r\n`, or alone.
      lineNumber++;
      const text = lineText(carry, 0, carry.length, path, lineNumber);
      if (text !== null) yield { text, lineNumber, terminated: true };
      carry = null;
      if (chunk[0] === NEWLINE) start = 1;
    } else if (carry !== null) {
      const end = ends.find(0);
      if (end !== -1) {
        const joined = Buffer.concat([carry, chunk.subarray(0, end)]);
        carry = null;
        lineNumber++;
        const text = lineText(joined, 0, joined.length, path, lineNumber);
        if (text !== null) yield { text, lineNumber, terminated: true };
        start = end + 1;
      }
    }
    for (let end = carry === null ? ends.find(start) : -1; end !== -1; end = ends.find(start)) {
      lineNumber++;
      const text = lineText(chunk, start, end, path, lineNumber);
      if (text !== null) yield { text, lineNumber, terminated: true };
      start = end + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      carry = carry === null ? Buffer.from(rest) : Buffer.concat([carry, rest]);
      if (carry.length > MAX_LINE_BYTES) {
        stream.destroy();
        throw lineTooLong(path, lineNumber + 1);
      }
    }
  }
  if (carry !== null) {
    // A final `\r` ends its line as a `\n` would.
    const terminated = carry[carry.length - 1] === CARRIAGE_RETURN;
    const text = lineText(carry, 0, carry.length, path, lineNumber + 1, terminated);
    if (text !== null) yield { text, lineNumber: lineNumber + 1, terminated };
  }
}

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

/**
 * Finds where lines end as the reference's readers do (Python's text mode, universal newlines):
 * at a `\n`, a `\r\n` (its `\n`; the line's `\r` is the caller's to drop) or a lone `\r`. The
 * reference's `str.splitlines` also splits inside JSON strings at U+2028, U+2029 and U+0085 and
 * then refuses the file; those stay inside their line here (docs/python-interop.md).
 */
export class LineEndFinder {
  private bytes: Uint8Array = new Uint8Array(0);
  /**
   * The first `\n` at or after the last line's start, or -1 when there is none: searched for again
   * only once a line starts past it (a search from every line's start to a distant one made a file
   * of lone `\r` ends quadratic).
   */
  private nextLf = -1;
  /**
   * A reader that asks for a line's end at every line: the first `\r` at or after the last line's
   * start (-1: none to the end), searched for like `nextLf`. A sparse one (`begin`'s `sparse`: the
   * scan, whose kernel reads most lines itself) searches for a `\r` only before the line's `\n`,
   * each byte once: one search of every 4 MiB chunk to its end cost the scan ~17 ms of 240 MB, where
   * a per-line search costs a reader that asks at every line about as much again.
   */
  private sparse = false;
  private nextCr = -1;
  /** Sparse: no `\r` lies before this. */
  private crFreeUntil = 0;

  /** Starts on new bytes (lines are found in `bytes[0, bytes.length)`); `sparse`: see `nextCr`. */
  begin(bytes: Uint8Array, sparse = false): void {
    this.bytes = bytes;
    this.sparse = sparse;
    this.nextLf = bytes.indexOf(NEWLINE);
    this.nextCr = sparse ? -1 : bytes.indexOf(CARRIAGE_RETURN);
    this.crFreeUntil = 0;
  }

  /**
   * The index of the byte that ends the line starting at `start` (at or after the last line's
   * start: lines are found in order): a `\n`, or a lone `\r`; or -1
   * when it does not end within the bytes: a `\r` last may be half of a `\r\n`, which more bytes
   * decide (at the end of a file it ends its line).
   */
  find(start: number): number {
    const bytes = this.bytes;
    let lf = this.nextLf;
    if (lf !== -1 && lf < start) {
      lf = bytes.indexOf(NEWLINE, start);
      this.nextLf = lf;
    }
    const cr = this.sparse ? this.crBefore(start, lf === -1 ? bytes.length : lf) : this.crFrom(start);
    if (cr === -1 || (lf !== -1 && cr >= lf)) return lf;
    if (cr + 1 === bytes.length) return -1;
    // `\r\n`: the line ends at its `\n` (which is `lf`, the first `\n` after `start`).
    return bytes[cr + 1] === NEWLINE ? cr + 1 : cr;
  }

  /** The first `\r` at or after `start`, or -1 (dense). */
  private crFrom(start: number): number {
    let cr = this.nextCr;
    if (cr !== -1 && cr < start) {
      cr = this.bytes.indexOf(CARRIAGE_RETURN, start);
      this.nextCr = cr;
    }
    return cr;
  }

  /** The first `\r` in `[start, to)`, or -1 (sparse: `to` is the line's `\n`, or the end). */
  private crBefore(start: number, to: number): number {
    if (this.nextCr >= start) return this.nextCr < to ? this.nextCr : -1;
    const from = Math.max(start, this.crFreeUntil);
    if (from >= to) return -1;
    const found = this.bytes.subarray(from, to).indexOf(CARRIAGE_RETURN);
    if (found === -1) {
      this.crFreeUntil = to;
      return -1;
    }
    this.nextCr = from + found;
    this.crFreeUntil = this.nextCr;
    return this.nextCr;
  }
}

/**
 * The longest line a reader takes: a telemetry line is about a kilobyte, and a string beyond V8's
 * limit (512 MiB) cannot even be made. Longer: not telemetry JSONL (a binary file, a document
 * without line breaks), refused with its file and line.
 */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

/** The error for line `line` of `file`, longer than `MAX_LINE_BYTES`. */
export function lineTooLong(file: string, line: number): JsonlDecodeError {
  return new JsonlDecodeError(
    "a line longer than 64 MiB: not telemetry JSONL (a binary file, or JSON without line breaks)",
    { location: { file, line } },
  );
}

/** A whole file's bytes as UTF-8 text, refused like `utf8LineText` naming the first line that is not UTF-8. */
export function utf8FileText(bytes: Buffer, file: string): string {
  const text = bytes.toString("utf8");
  if (!text.includes("\uFFFD") || isUtf8(bytes)) return text;
  // A line-ending byte never falls inside a character: each line is checked on its own.
  const ends = new LineEndFinder();
  ends.begin(bytes);
  for (let start = 0, line = 1; start <= bytes.length; line++) {
    const found = ends.find(start);
    const end = found === -1 ? bytes.length : found;
    utf8LineText(bytes, start, end, file, line);
    start = end + 1;
  }
  return text;
}

/**
 * `bytes[start, end)` as UTF-8 text. Bytes that are not UTF-8 are refused with their file and line,
 * as the reference's strict decoding refuses the file, rather than read as U+FFFD: only text that
 * holds a U+FFFD is checked again.
 */
export function utf8LineText(bytes: Buffer, start: number, end: number, file: string, line: number): string {
  const text = bytes.toString("utf8", start, end);
  if (text.includes("\uFFFD") && !isUtf8(bytes.subarray(start, end)))
    throw new JsonlDecodeError("bytes that are not UTF-8: telemetry is UTF-8 text; fix or remove the line", {
      location: { file, line },
    });
  return text;
}

/**
 * `utf8LineText` for a final line without its newline, which a crash may have cut inside its last
 * character: an incomplete sequence in its last 3 bytes is decoded as U+FFFD (the readers then drop
 * the line as cut short); bytes that are not UTF-8 before it are refused.
 */
export function utf8TailText(bytes: Buffer, start: number, end: number, file: string, line: number): string {
  const text = bytes.toString("utf8", start, end);
  if (!text.includes("\uFFFD") || isUtf8(bytes.subarray(start, end))) return text;
  for (let cut = 1; cut <= 3 && end - cut >= start; cut++)
    if (bytes[end - cut]! >= 0xc0 && isUtf8(bytes.subarray(start, end - cut))) return text;
  return utf8LineText(bytes, start, end, file, line);
}

/**
 * The line `bytes[start, end)` as text without a final `\r`; null when it is blank. Not UTF-8: refused
 * with its file and line (`utf8TailText`'s rule for a final line without its newline).
 */
function lineText(
  bytes: Buffer,
  start: number,
  end: number,
  file: string,
  line: number,
  terminated = true,
): string | null {
  if (end > start && bytes[end - 1] === 0x0d) end--;
  const decode = terminated ? utf8LineText : utf8TailText;
  let onlyAsciiSpace = true;
  for (let i = start; i < end; i++) {
    const byte = bytes[i]!;
    // A printable ASCII character: not blank, no need to look further.
    if (byte > 0x20 && byte < 0x7f) return decode(bytes, start, end, file, line);
    // Python's ASCII whitespace: \t-\r, \x1c-\x1f and the space.
    if (byte !== 0x20 && (byte < 0x09 || byte > 0x0d) && (byte < 0x1c || byte > 0x1f)) onlyAsciiSpace = false;
  }
  if (onlyAsciiSpace) return null;
  // Control or non-ASCII characters only: blank when Python's `str.strip()` leaves nothing (the reference's rule).
  const text = decode(bytes, start, end, file, line);
  return isBlank(text) ? null : text;
}

/** Splits JSONL text already in memory, with the same rules as `readJsonlLines`. */
export function splitJsonlText(text: string): JsonlLine[] {
  // Universal newlines (`LineEndFinder`): `\r\n` and a lone `\r` end a line as `\n` does.
  if (text.includes("\r")) text = text.replace(/\r\n?/g, "\n");
  const lines: JsonlLine[] = [];
  let start = 0;
  let lineNumber = 0;
  for (;;) {
    const end = text.indexOf("\n", start);
    lineNumber++;
    if (end === -1) {
      const last = text.slice(start);
      if (!isBlank(last)) lines.push({ text: last, lineNumber, terminated: false });
      return lines;
    }
    const line = text.slice(start, end);
    if (!isBlank(line)) lines.push({ text: line, lineNumber, terminated: true });
    start = end + 1;
  }
}

/** The reference skips a line when `line.strip()` is empty: Python's whitespace, not JavaScript's (U+FEFF is none). */
function isBlank(line: string): boolean {
  return line.length === 0 || isPythonBlank(line);
}

/** A final line without newline that does not parse: what a crash mid-write leaves. */
export interface TruncatedTail {
  readonly file: string | undefined;
  readonly lineNumber: number;
  readonly length: number;
  readonly error: StormlogError;
}

/** Options of the telemetry JSONL readers. */
export interface TelemetryJsonlOptions extends Omit<DecodeOptions, "location">, JsonlReadOptions {
  /** Named in errors and reports. */
  readonly file?: string;
  /**
   * Called when the last line has no newline and does not decode: it is dropped (the reference drops
   * it silently; we tell). Any other malformed line throws.
   */
  readonly onTruncatedTail?: (tail: TruncatedTail) => void;
}

/** A decoded record with its line number. */
export interface DecodedLine {
  readonly record: TelemetryRecord;
  readonly lineNumber: number;
}

function decodeOrTail(line: JsonlLine, options: TelemetryJsonlOptions): TelemetryRecord | undefined {
  try {
    return decodeTelemetryLine(line.text, {
      ...options,
      location: { file: options.file, line: line.lineNumber },
    });
  } catch (error) {
    if (isCutShortLine(line, error)) {
      options.onTruncatedTail?.({
        file: options.file,
        lineNumber: line.lineNumber,
        length: line.text.length,
        error,
      });
      return undefined;
    }
    throw error;
  }
}

/** Streams validated records from a telemetry JSONL file. */
export async function* readTelemetryJsonl(
  path: string,
  options: TelemetryJsonlOptions = {},
): AsyncGenerator<DecodedLine> {
  const withFile = { ...options, file: options.file ?? path };
  for await (const line of readJsonlLines(path, options)) {
    const record = decodeOrTail(line, withFile);
    if (record) yield { record, lineNumber: line.lineNumber };
  }
}

/** Decodes telemetry JSONL text already in memory. */
export function decodeTelemetryJsonl(text: string, options: TelemetryJsonlOptions = {}): DecodedLine[] {
  const out: DecodedLine[] = [];
  for (const line of splitJsonlText(text)) {
    const record = decodeOrTail(line, options);
    if (record) out.push({ record, lineNumber: line.lineNumber });
  }
  return out;
}
