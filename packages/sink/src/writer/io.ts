import {
  close,
  closeSync,
  constants,
  fstat,
  fstatSync,
  fsync,
  fsyncSync,
  ftruncate,
  ftruncateSync,
  mkdir,
  mkdirSync,
  open,
  openSync,
  unlink,
  unlinkSync,
  write,
  writeSync,
} from "node:fs";
import { writeManifestText, writeManifestTextSync } from "../directory/manifest.js";

/**
 * One file-system step of the writer. The writer's logic yields these and a driver runs them:
 * asynchronously (libuv's thread pool, the normal path) or synchronously (the `exit` path). Every
 * step is safe to run twice, except `close`, which the synchronous driver never repeats.
 */
export type IoOp =
  | { readonly op: "mkdir"; readonly path: string }
  | { readonly op: "open"; readonly path: string }
  | { readonly op: "write"; readonly fd: number; readonly data: Buffer; readonly position: number }
  | { readonly op: "truncate"; readonly fd: number; readonly size: number }
  | { readonly op: "fsync"; readonly fd: number }
  /** Closes a descriptor, first syncing it when `fsync` (the file is closed even if the sync fails). */
  | { readonly op: "close"; readonly fd: number; readonly fsync: boolean }
  | { readonly op: "unlink"; readonly path: string }
  | { readonly op: "nlink"; readonly fd: number }
  /** Writes `bytes` zero bytes to `path` (space kept for a full disk); a file left short is removed. */
  | { readonly op: "reserve"; readonly path: string; readonly bytes: number }
  | {
      readonly op: "manifest";
      readonly dir: string;
      readonly text: string;
      readonly fsync: boolean;
      /** False once the exit path took over: the asynchronous write then stops short of its rename. */
      readonly stillCurrent?: () => boolean;
    };

/** What a step gave: a number (fd, bytes, link count) or the error. */
export type IoResult =
  | { readonly ok: true; readonly value: number }
  | { readonly ok: false; readonly error: Error };

export const IO_OK: IoResult = { ok: true, value: 0 };

// Segments are opened without O_APPEND and written at explicit positions: writing a chunk again
// at the same place is harmless, which is what lets the exit path redo an interrupted write.
const OPEN_FLAGS = constants.O_WRONLY | constants.O_CREAT;

function fail(error: unknown): IoResult {
  return { ok: false, error: error instanceof Error ? error : new Error(String(error)) };
}

function done(value: number): IoResult {
  return { ok: true, value };
}

function writeAll(fd: number, data: Buffer, position: number, callback: (error: Error | null) => void): void {
  let offset = 0;
  const step = (error: Error | null, written: number): void => {
    if (error) {
      callback(error);
      return;
    }
    if (written <= 0) {
      callback(new Error("write made no progress"));
      return;
    }
    offset += written;
    if (offset >= data.length) callback(null);
    else write(fd, data, offset, data.length - offset, position + offset, step);
  };
  write(fd, data, 0, data.length, position, step);
}

function reserveAsync(path: string, bytes: number, callback: (error: Error | null) => void): void {
  open(path, "w", 0o666, (error, fd) => {
    if (error) {
      callback(error);
      return;
    }
    writeAll(fd, Buffer.alloc(bytes), 0, (writeError) =>
      close(fd, (closeError) => {
        const failed = writeError ?? closeError;
        if (failed) unlink(path, () => callback(failed));
        else callback(null);
      }),
    );
  });
}

function reserveSync(path: string, bytes: number): void {
  const fd = openSync(path, "w", 0o666);
  try {
    const zeros = Buffer.alloc(bytes);
    for (let offset = 0; offset < bytes; ) {
      const written = writeSync(fd, zeros, offset, bytes - offset, offset);
      if (written <= 0) throw new Error("write made no progress");
      offset += written;
    }
    closeSync(fd);
  } catch (error) {
    try {
      closeSync(fd);
    } catch {}
    try {
      unlinkSync(path);
    } catch {}
    throw error;
  }
}

/** Runs a step off the event loop's thread. Never rejects. */
export function execAsync(op: IoOp): Promise<IoResult> {
  return new Promise<IoResult>((resolve) => {
    const settle = (error: Error | null | undefined, value = 0): void =>
      resolve(error ? fail(error) : done(value));
    try {
      switch (op.op) {
        case "mkdir":
          mkdir(op.path, { recursive: true }, (error) => settle(error));
          return;
        case "open":
          open(op.path, OPEN_FLAGS, 0o666, (error, fd) => settle(error, fd));
          return;
        case "write":
          writeAll(op.fd, op.data, op.position, (error) => settle(error, op.data.length));
          return;
        case "truncate":
          ftruncate(op.fd, op.size, (error) => settle(error));
          return;
        case "fsync":
          fsync(op.fd, (error) => settle(error));
          return;
        case "close":
          if (!op.fsync) {
            close(op.fd, (error) => settle(error));
            return;
          }
          fsync(op.fd, (syncError) => close(op.fd, (error) => settle(syncError ?? error)));
          return;
        case "unlink":
          unlink(op.path, (error) =>
            settle(error && (error as NodeJS.ErrnoException).code === "ENOENT" ? null : error),
          );
          return;
        case "nlink":
          fstat(op.fd, (error, stats) => settle(error, stats?.nlink ?? 0));
          return;
        case "reserve":
          reserveAsync(op.path, op.bytes, (error) => settle(error, op.bytes));
          return;
        case "manifest":
          writeManifestText(op.dir, op.text, op.fsync, op.stillCurrent).then(
            () => settle(null),
            (error: unknown) => resolve(fail(error)),
          );
          return;
      }
    } catch (error) {
      resolve(fail(error));
    }
  });
}

/** Runs a step on the calling thread (the `exit` path, where nothing asynchronous runs any more). */
export function execSync(op: IoOp): IoResult {
  try {
    switch (op.op) {
      case "mkdir":
        mkdirSync(op.path, { recursive: true });
        return IO_OK;
      case "open":
        return done(openSync(op.path, OPEN_FLAGS, 0o666));
      case "write": {
        let offset = 0;
        while (offset < op.data.length) {
          const written = writeSync(op.fd, op.data, offset, op.data.length - offset, op.position + offset);
          if (written <= 0) throw new Error("write made no progress");
          offset += written;
        }
        return done(op.data.length);
      }
      case "truncate":
        ftruncateSync(op.fd, op.size);
        return IO_OK;
      case "fsync":
        fsyncSync(op.fd);
        return IO_OK;
      case "close":
        try {
          if (op.fsync) fsyncSync(op.fd);
        } finally {
          closeSync(op.fd);
        }
        return IO_OK;
      case "unlink":
        try {
          unlinkSync(op.path);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
        }
        return IO_OK;
      case "nlink":
        return done(fstatSync(op.fd).nlink);
      case "reserve":
        reserveSync(op.path, op.bytes);
        return done(op.bytes);
      case "manifest":
        writeManifestTextSync(op.dir, op.text, op.fsync);
        return IO_OK;
    }
  } catch (error) {
    return fail(error);
  }
}

/** `ENOSPC: no space left on device` style text for logs. */
export function describeIoError(error: Error): string {
  const code = (error as NodeJS.ErrnoException).code;
  return code && !error.message.startsWith(code) ? `${code}: ${error.message}` : error.message;
}
