import { isUtf8 } from "node:buffer";
import { createReadStream } from "node:fs";
import { JsonlDecodeError, type StormlogError } from "../runtime/errors.js";
import { openRegularFileSync } from "../runtime/regular-file.js";
import type { TelemetryRecord } from "../schema/schema.js";
import { type DecodeOptions, decodeTelemetryLine } from "./codec.js";

/** One non-blank line of a JSONL file. */
export interface JsonlLine {
  readonly text: string;
  /** 1-based line number in the file. */
  readonly lineNumber: number;
  /** False only for a final line with no newline after it (possibly cut short by a crash). */
  readonly terminated: boolean;
}

/** Options of the JSONL readers. */
export interface JsonlReadOptions {
  /** Bytes read per chunk; memory stays bounded by this plus the longest line. */
  readonly chunkBytes?: number;
}

/**
 * Streams the non-blank lines of a JSONL file without loading it whole. Splits on `\n` (a `\r`
 * before it is dropped) and decodes each line's UTF-8 on its own: a `\n` byte never falls inside a
 * multi-byte character, so no chunk-wide string is built (that cost the readers about half their time).
 */
export async function* readJsonlLines(
  path: string,
  options: JsonlReadOptions = {},
): AsyncGenerator<JsonlLine> {
  // Bytes of a line that started in an earlier chunk.
  let carry: Buffer | null = null;
  let lineNumber = 0;
  // Opened without waiting on a FIFO (and refused unless a regular file), then streamed.
  const fd = openRegularFileSync(path);
  const stream = createReadStream(path, { fd, highWaterMark: options.chunkBytes ?? 1 << 20 });
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    let start = 0;
    let end = chunk.indexOf(NEWLINE);
    if (carry !== null && end !== -1) {
      // Only the line that began in an earlier chunk is joined; the rest is read in place.
      const joined = Buffer.concat([carry, chunk.subarray(0, end)]);
      carry = null;
      lineNumber++;
      const text = lineText(joined, 0, joined.length, path, lineNumber);
      if (text !== null) yield { text, lineNumber, terminated: true };
      start = end + 1;
      end = chunk.indexOf(NEWLINE, start);
    }
    for (; end !== -1; end = chunk.indexOf(NEWLINE, start)) {
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
    const text = lineText(carry, 0, carry.length, path, lineNumber + 1, false);
    if (text !== null) yield { text, lineNumber: lineNumber + 1, terminated: false };
  }
}

const NEWLINE = 0x0a;

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
  // A newline byte never falls inside a character: each line is checked on its own.
  for (let start = 0, line = 1; start <= bytes.length; line++) {
    const newline = bytes.indexOf(NEWLINE, start);
    const end = newline === -1 ? bytes.length : newline;
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
    if (byte !== 0x20 && (byte < 0x09 || byte > 0x0d)) onlyAsciiSpace = false;
  }
  if (onlyAsciiSpace) return null;
  // Control or non-ASCII characters only: blank when trim() says so (Unicode spaces), as before.
  const text = decode(bytes, start, end, file, line);
  return isBlank(text) ? null : text;
}

/** Splits JSONL text already in memory, with the same rules as `readJsonlLines`. */
export function splitJsonlText(text: string): JsonlLine[] {
  const lines: JsonlLine[] = [];
  let start = 0;
  let lineNumber = 0;
  for (;;) {
    const end = text.indexOf("\n", start);
    lineNumber++;
    if (end === -1) {
      const last = stripCarriageReturn(text.slice(start));
      if (!isBlank(last)) lines.push({ text: last, lineNumber, terminated: false });
      return lines;
    }
    const line = stripCarriageReturn(text.slice(start, end));
    if (!isBlank(line)) lines.push({ text: line, lineNumber, terminated: true });
    start = end + 1;
  }
}

function stripCarriageReturn(line: string): string {
  return line.endsWith("\r") ? line.slice(0, -1) : line;
}

function isBlank(line: string): boolean {
  return line.length === 0 || line.trim().length === 0;
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
    if (!line.terminated && JsonlDecodeError.isInstance(error)) {
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
