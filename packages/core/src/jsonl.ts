import { createReadStream } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import { type DecodeOptions, decodeTelemetryLine } from "./codec.js";
import { JsonlDecodeError, type StormlogError } from "./errors.js";
import type { TelemetryRecord } from "./schema.js";

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
 * before it is dropped) and decodes UTF-8 across chunk boundaries.
 */
export async function* readJsonlLines(
  path: string,
  options: JsonlReadOptions = {},
): AsyncGenerator<JsonlLine> {
  const decoder = new StringDecoder("utf8");
  let pending = "";
  let lineNumber = 0;
  const stream = createReadStream(path, { highWaterMark: options.chunkBytes ?? 1 << 20 });
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    const text = pending + decoder.write(chunk);
    let start = 0;
    for (;;) {
      const end = text.indexOf("\n", start);
      if (end === -1) break;
      lineNumber++;
      const line = stripCarriageReturn(text.slice(start, end));
      if (!isBlank(line)) yield { text: line, lineNumber, terminated: true };
      start = end + 1;
    }
    pending = text.slice(start);
  }
  pending += decoder.end();
  if (!isBlank(pending))
    yield { text: stripCarriageReturn(pending), lineNumber: lineNumber + 1, terminated: false };
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
