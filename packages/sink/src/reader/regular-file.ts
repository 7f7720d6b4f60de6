/**
 * Whole-file reads of files the input names (a manifest, a JSON document, an index or rollups file)
 * that never wait on a special file (`openRegularFileSync`), with a cap on what is read whole.
 */
import { closeSync, promises as fsPromises, fstatSync, readFileSync } from "node:fs";
import { StormlogError } from "@stormlog/core";
import {
  openRegularFileSync,
  REGULAR_OPEN_FLAGS,
  refuseUnlessRegular,
  utf8FileText,
} from "@stormlog/core/internal";
import { TelemetrySourceError } from "../errors.js";

/**
 * The most a whole-file read takes (a JSON document, a manifest): a string beyond V8's limit (512 MiB)
 * cannot be made, and parsing one that large would take gigabytes.
 */
export const MAX_WHOLE_FILE_BYTES = 256 * 1024 * 1024;

const TOO_LARGE_MARKER = Symbol.for("stormlog.error.whole_file_too_large");

/**
 * A file read whole (a JSON document, a manifest, an index file) holds more than
 * `MAX_WHOLE_FILE_BYTES`. Records belong in JSONL, which is read a line at a time.
 */
export class WholeFileTooLargeError extends TelemetrySourceError {
  readonly [TOO_LARGE_MARKER] = true;
  override readonly name: string = "WholeFileTooLargeError";
  readonly sizeBytes: number;

  constructor(path: string, sizeBytes: number) {
    super(
      path,
      `${Math.round(sizeBytes / 2 ** 20)} MiB is more than a file read whole may hold ` +
        `(${MAX_WHOLE_FILE_BYTES / 2 ** 20} MiB): write records as JSONL, one per line, which is read a line at a time`,
    );
    this.sizeBytes = sizeBytes;
  }

  static override isInstance(error: unknown): error is WholeFileTooLargeError {
    return StormlogError.hasMarker(error, TOO_LARGE_MARKER);
  }
}

/**
 * How a whole file's text is decoded: `utf8` refuses bytes that are not UTF-8 with a
 * `JsonlDecodeError` naming the line (telemetry, as the reference's strict decoding); `utf8-lenient`
 * reads them as U+FFFD (a manifest, whose stray byte must not cost its ledger).
 */
export type WholeFileEncoding = "utf8" | "utf8-lenient";

/**
 * The text of the regular file at `path` (refused with `WholeFileTooLargeError` past
 * `MAX_WHOLE_FILE_BYTES`), or, with `null`, its bytes.
 */
export function readRegularFileSync(path: string, encoding?: WholeFileEncoding): string;
export function readRegularFileSync(path: string, encoding: null): Buffer;
export function readRegularFileSync(
  path: string,
  encoding: WholeFileEncoding | null = "utf8",
): string | Buffer {
  const fd = openRegularFileSync(path);
  try {
    if (encoding === null) return readFileSync(fd);
    refuseTooLarge(fstatSync(fd).size, path);
    return decodeWhole(readFileSync(fd), path, encoding);
  } finally {
    closeSync(fd);
  }
}

/** `readRegularFileSync`'s text without blocking the thread. */
export async function readRegularFile(path: string, encoding: WholeFileEncoding = "utf8"): Promise<string> {
  const handle = await fsPromises.open(path, REGULAR_OPEN_FLAGS);
  try {
    const stats = await handle.stat();
    refuseUnlessRegular(stats, path);
    refuseTooLarge(stats.size, path);
    return decodeWhole(await handle.readFile(), path, encoding);
  } finally {
    await handle.close();
  }
}

function decodeWhole(bytes: Buffer, path: string, encoding: WholeFileEncoding): string {
  return encoding === "utf8" ? utf8FileText(bytes, path) : bytes.toString("utf8");
}

function refuseTooLarge(size: number, path: string): void {
  if (size > MAX_WHOLE_FILE_BYTES) throw new WholeFileTooLargeError(path, size);
}
