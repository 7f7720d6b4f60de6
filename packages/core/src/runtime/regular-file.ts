/**
 * Opening files the input names without ever waiting on a special file: a FIFO's open or read would
 * wait forever for a writer, a device never ends. Files are opened without blocking, and anything but
 * a regular file is refused with a file-system error (`EISDIR` for a directory, else `EFTYPE`).
 */
import { closeSync, constants, fstatSync, openSync, type Stats } from "node:fs";

/** Read-only, and an open that does not wait for a FIFO's writer. */
export const REGULAR_OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

/** Opens the regular file at `path` for reading; the caller closes it. */
export function openRegularFileSync(path: string): number {
  const fd = openSync(path, REGULAR_OPEN_FLAGS);
  try {
    refuseUnlessRegular(fstatSync(fd), path);
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  return fd;
}

/** Throws `EISDIR` for a directory, `EFTYPE` for anything else that is not a regular file. */
export function refuseUnlessRegular(stats: Stats, path: string): void {
  if (stats.isFile()) return;
  const code = stats.isDirectory() ? "EISDIR" : "EFTYPE";
  throw Object.assign(new Error(`${code}: not a regular file, open '${path}'`), {
    code,
    syscall: "open",
    path,
  });
}
