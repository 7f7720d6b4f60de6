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
      `${Math.round(sizeBytes / 2 ** 20)} MiB is more than a file read whole may hold (256 MiB): write ` +
        "records as JSONL, one per line, which is read a line at a time; a manifest or index file this " +
        "large is damaged (remove it)",
    );
    this.sizeBytes = sizeBytes;
  }

  static override isInstance(error: unknown): error is WholeFileTooLargeError {
    return StormlogError.hasMarker(error, TOO_LARGE_MARKER);
  }
}

/**
 * The text of the regular file at `path` (refused with `WholeFileTooLargeError` past
 * `MAX_WHOLE_FILE_BYTES`, and with a `JsonlDecodeError` naming the line when it is not UTF-8), or,
 * with `null`, its bytes.
 */
export function readRegularFileSync(path: string): string;
export function readRegularFileSync(path: string, encoding: null): Buffer;
export function readRegularFileSync(path: string, encoding: "utf8" | null = "utf8"): string | Buffer {
  const fd = openRegularFileSync(path);
  try {
    if (encoding === null) return readFileSync(fd);
    refuseTooLarge(fstatSync(fd).size, path);
    return utf8FileText(readFileSync(fd), path);
  } finally {
    closeSync(fd);
  }
}

/** `readRegularFileSync`'s text without blocking the thread. */
export async function readRegularFile(path: string): Promise<string> {
  const handle = await fsPromises.open(path, REGULAR_OPEN_FLAGS);
  try {
    const stats = await handle.stat();
    refuseUnlessRegular(stats, path);
    refuseTooLarge(stats.size, path);
    return utf8FileText(await handle.readFile(), path);
  } finally {
    await handle.close();
  }
}

function refuseTooLarge(size: number, path: string): void {
  if (size > MAX_WHOLE_FILE_BYTES) throw new WholeFileTooLargeError(path, size);
}
