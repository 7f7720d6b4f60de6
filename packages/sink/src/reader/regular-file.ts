/**
 * Reads of files the input names (a manifest, a JSON document, an index or rollups file) that never
 * wait on a special file: a FIFO's read would wait forever for a writer, a device never ends. Files
 * are opened without blocking, and anything but a regular file is refused with a file-system error
 * (`EISDIR` for a directory, else `EFTYPE`), worded like the others (`describeFileSystemError`).
 */
import {
  closeSync,
  constants,
  promises as fsPromises,
  fstatSync,
  openSync,
  readFileSync,
  type Stats,
} from "node:fs";
import { TelemetrySourceError } from "../errors.js";

const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

/**
 * The most a whole-file read takes (a JSON document, a manifest): a string beyond V8's limit (512 MiB)
 * cannot be made, and parsing one that large would take gigabytes.
 */
export const MAX_WHOLE_FILE_BYTES = 256 * 1024 * 1024;

/** Opens the regular file at `path` for reading; the caller closes it. */
export function openRegularFileSync(path: string): number {
  const fd = openSync(path, OPEN_FLAGS);
  try {
    refuseUnlessRegular(fstatSync(fd), path);
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  return fd;
}

/** The text (or, with `null`, the bytes) of the regular file at `path`. */
export function readRegularFileSync(path: string): string;
export function readRegularFileSync(path: string, encoding: null): Buffer;
export function readRegularFileSync(path: string, encoding: "utf8" | null = "utf8"): string | Buffer {
  const fd = openRegularFileSync(path);
  try {
    return encoding === null ? readFileSync(fd) : readFileSync(fd, encoding);
  } finally {
    closeSync(fd);
  }
}

/**
 * `readRegularFileSync` without blocking the thread, for a file read whole: one of more than
 * `MAX_WHOLE_FILE_BYTES` is refused with a `TelemetrySourceError` that says to write JSONL.
 */
export async function readRegularFile(path: string): Promise<string> {
  const handle = await fsPromises.open(path, OPEN_FLAGS);
  try {
    const stats = await handle.stat();
    refuseUnlessRegular(stats, path);
    if (stats.size > MAX_WHOLE_FILE_BYTES)
      throw new TelemetrySourceError(
        path,
        `${Math.round(stats.size / 2 ** 20)} MiB is more than one JSON document read whole may hold (256 MiB): ` +
          "write the records as JSONL, one per line, which is read a line at a time",
      );
    return await handle.readFile("utf8");
  } finally {
    await handle.close();
  }
}

function refuseUnlessRegular(stats: Stats, path: string): void {
  if (stats.isFile()) return;
  const code = stats.isDirectory() ? "EISDIR" : "EFTYPE";
  throw Object.assign(new Error(`${code}: not a regular file, open '${path}'`), {
    code,
    syscall: "open",
    path,
  });
}
