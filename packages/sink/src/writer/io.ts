import {
  type BigIntStats,
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
  readlink,
  readlinkSync,
  stat,
  statSync,
  unlink,
  unlinkSync,
  write,
  writeSync,
} from "node:fs";
import {
  rewriteManifestInPlaceSync,
  writeManifestText,
  writeManifestTextSync,
} from "../directory/manifest.js";
import { WriteNoProgressError } from "../errors.js";

/**
 * One file-system step of the writer. The writer's logic yields these and a driver runs them:
 * asynchronously (libuv's thread pool, the normal path) or synchronously (the `exit` path). Every
 * step is safe to run twice, except `close`, which the synchronous driver never repeats.
 */
export type IoOp =
  /** Makes the directory (and its parents); the value is MADE when it was not there. */
  | { readonly op: "mkdir"; readonly path: string }
  | { readonly op: "open"; readonly path: string }
  | { readonly op: "write"; readonly fd: number; readonly data: Buffer; readonly position: number }
  | { readonly op: "truncate"; readonly fd: number; readonly size: number }
  | { readonly op: "fsync"; readonly fd: number }
  /** Closes a descriptor, first syncing it when `fsync` (the file is closed even if the sync fails). */
  | { readonly op: "close"; readonly fd: number; readonly fsync: boolean }
  | { readonly op: "unlink"; readonly path: string }
  /** Whether `path` still leads to the file open as `fd`: FILE_HERE, FILE_DELETED or FILE_ELSEWHERE. */
  | { readonly op: "locate"; readonly fd: number; readonly path: string }
  /**
   * Writes up to `bytes` zero bytes to `path` (space kept for a full disk); the value is what it
   * got: on a disk that fills up meanwhile, what was written is kept (nothing written: an error).
   */
  | { readonly op: "reserve"; readonly path: string; readonly bytes: number }
  /**
   * Writes `bytes` zero bytes to `path` and removes it again: whether the disk takes that many bytes
   * now (a write of records' size, where no records wait to show it).
   */
  | { readonly op: "probe"; readonly path: string; readonly bytes: number }
  | {
      readonly op: "manifest";
      readonly dir: string;
      readonly text: string;
      readonly fsync: boolean;
      /** False once the exit path took over: the asynchronous write then stops short of its rename. */
      readonly stillCurrent?: () => boolean;
      /**
       * Overwrites manifest.json in place (`rewriteManifestInPlaceSync`): the last resort of a full disk
       * (within the file's own space) and of a directory that refuses new files (`grow`: it may lengthen).
       */
      readonly inPlace?: boolean;
      readonly grow?: boolean;
    };

/**
 * What a step gave: a number (fd, bytes, MADE, a FILE_ code) or the error. `path`: where a file
 * found elsewhere now is, when the system tells (Linux).
 */
export type IoResult =
  | { readonly ok: true; readonly value: number; readonly path?: string }
  | { readonly ok: false; readonly error: Error };

export const IO_OK: IoResult = { ok: true, value: 0 };
/** `mkdir`: the directory was not there and was made. */
export const MADE = 1;
/** `locate`: the path leads to the open file; nothing leads to it any more; it is elsewhere (moved). */
export const FILE_HERE = 0;
export const FILE_DELETED = 1;
export const FILE_ELSEWHERE = 2;

// Segments are opened without O_APPEND and written at explicit positions: writing a chunk again
// at the same place is harmless, which is what lets the exit path redo an interrupted write.
const OPEN_FLAGS = constants.O_WRONLY | constants.O_CREAT;

function fail(error: unknown): IoResult {
  return { ok: false, error: error instanceof Error ? error : new Error(String(error)) };
}

function done(value: number): IoResult {
  return { ok: true, value };
}

/** Writes all of `data` at `position`; the callback gets the error, if any, and the bytes written. */
function writeAll(
  fd: number,
  data: Buffer,
  position: number,
  callback: (error: Error | null, written: number) => void,
): void {
  let offset = 0;
  const step = (error: Error | null, written: number): void => {
    if (error) {
      callback(error, offset);
      return;
    }
    if (written <= 0) {
      callback(new WriteNoProgressError(offset, data.length), offset);
      return;
    }
    offset += written;
    if (offset >= data.length) callback(null, offset);
    else write(fd, data, offset, data.length - offset, position + offset, step);
  };
  write(fd, data, 0, data.length, position, step);
}

/** The disk (or the user's quota) is full. */
export function isOutOfSpace(error: Error | null): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === "ENOSPC" || code === "EDQUOT";
}

/** The directory refused a new file or a rename (read-only to this user): its files may still be writable. */
export function isDirectoryDenied(error: Error | null): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === "EACCES" || code === "EPERM";
}

/** A reserve cut short by a full disk keeps what it got: some room for the final manifest beats none. */
function keepsShortReserve(error: Error, written: number): boolean {
  return written > 0 && isOutOfSpace(error);
}

/** `probe`: the whole size or an error (no short file kept), and the file removed in any case. */
function reserveAsync(
  path: string,
  bytes: number,
  probe: boolean,
  callback: (error: Error | null, kept: number) => void,
): void {
  open(path, "w", 0o666, (error, fd) => {
    if (error) {
      callback(error, 0);
      return;
    }
    writeAll(fd, Buffer.alloc(bytes), 0, (writeError, written) =>
      close(fd, (closeError) => {
        const failed =
          writeError !== null && !probe && keepsShortReserve(writeError, written)
            ? closeError
            : (writeError ?? closeError);
        if (failed || probe) unlink(path, () => callback(failed, written));
        else callback(null, written);
      }),
    );
  });
}

function reserveSync(path: string, bytes: number, probe: boolean): number {
  const fd = openSync(path, "w", 0o666);
  let offset = 0;
  let failure: unknown = null;
  try {
    const zeros = Buffer.alloc(bytes);
    while (offset < bytes) {
      const written = writeSync(fd, zeros, offset, bytes - offset, offset);
      if (written <= 0) throw new WriteNoProgressError(offset, bytes);
      offset += written;
    }
  } catch (error) {
    if (probe || !keepsShortReserve(error as Error, offset)) failure = error;
  }
  try {
    closeSync(fd);
  } catch (error) {
    failure ??= error;
  }
  if (failure === null && !probe) return offset;
  try {
    unlinkSync(path);
  } catch {}
  if (failure !== null) throw failure;
  return offset;
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}

/** Where the file open as `fd` is now (Linux's /proc), or undefined. */
function openFilePath(fd: number, callback: (path: string | undefined) => void): void {
  readlink(`/proc/self/fd/${fd}`, (error, target) => callback(error ? undefined : target));
}

function openFilePathSync(fd: number): string | undefined {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return undefined;
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
          mkdir(op.path, { recursive: true }, (error, first) =>
            settle(error, first === undefined ? 0 : MADE),
          );
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
        case "locate":
          fstat(op.fd, { bigint: true }, (error, own) => {
            if (error) return settle(error);
            if (own.nlink === 0n) return settle(null, FILE_DELETED);
            stat(op.path, { bigint: true }, (statError, there) => {
              // Another error (a permission) tells nothing about where the file is.
              if (statError ? !isMissing(statError) : there.ino === own.ino && there.dev === own.dev)
                return settle(null, FILE_HERE);
              openFilePath(op.fd, (path) => {
                // Some file systems (old overlayfs, FUSE) answer stat and fstat with other ids for one
                // file: where the descriptor's file is (procfs) settles it.
                if (statError === null && path === op.path) return settle(null, FILE_HERE);
                // Removed between the first look and the path's (`rm -r` unlinks file by file): deleted, not moved.
                fstat(op.fd, { bigint: true }, (againError, again) => {
                  if (!againError && again.nlink === 0n) return settle(null, FILE_DELETED);
                  resolve({ ok: true, value: FILE_ELSEWHERE, ...(path === undefined ? {} : { path }) });
                });
              });
            });
          });
          return;
        case "reserve":
        case "probe":
          reserveAsync(op.path, op.bytes, op.op === "probe", settle);
          return;
        case "manifest":
          if (op.inPlace === true) {
            // Here, not on the thread pool: a late write of it could land over the exit path's.
            if (op.stillCurrent?.() !== false)
              rewriteManifestInPlaceSync(op.dir, op.text, op.fsync, op.grow === true);
            settle(null);
            return;
          }
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
        return done(mkdirSync(op.path, { recursive: true }) === undefined ? 0 : MADE);
      case "open":
        return done(openSync(op.path, OPEN_FLAGS, 0o666));
      case "write": {
        let offset = 0;
        while (offset < op.data.length) {
          const written = writeSync(op.fd, op.data, offset, op.data.length - offset, op.position + offset);
          if (written <= 0) throw new WriteNoProgressError(offset, op.data.length);
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
      case "locate": {
        const own = fstatSync(op.fd, { bigint: true });
        if (own.nlink === 0n) return done(FILE_DELETED);
        let there: BigIntStats | undefined;
        try {
          there = statSync(op.path, { bigint: true });
        } catch (error) {
          if (!isMissing(error)) return done(FILE_HERE);
        }
        if (there !== undefined && there.ino === own.ino && there.dev === own.dev) return done(FILE_HERE);
        const path = openFilePathSync(op.fd);
        // As above: other ids for one file on some file systems.
        if (there !== undefined && path === op.path) return done(FILE_HERE);
        // As above: removed meanwhile.
        if (fstatSync(op.fd, { bigint: true }).nlink === 0n) return done(FILE_DELETED);
        return { ok: true, value: FILE_ELSEWHERE, ...(path === undefined ? {} : { path }) };
      }
      case "reserve":
      case "probe":
        return done(reserveSync(op.path, op.bytes, op.op === "probe"));
      case "manifest":
        if (op.inPlace === true) rewriteManifestInPlaceSync(op.dir, op.text, op.fsync, op.grow === true);
        else writeManifestTextSync(op.dir, op.text, op.fsync);
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
