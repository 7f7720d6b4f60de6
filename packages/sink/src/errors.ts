import { StormlogError } from "@stormlog/core";
import { inputText } from "@stormlog/core/internal";

const SESSION_MISMATCH_MARKER = Symbol.for("stormlog.error.sink_session_mismatch");

/**
 * A record was appended whose `session_id` is not the sink's active session. Segments never mix
 * sessions: close the active session first (`await sink.close()`), or append records of the active one.
 */
export class SinkSessionMismatchError extends StormlogError {
  readonly [SESSION_MISMATCH_MARKER] = true;
  override readonly name = "SinkSessionMismatchError";
  readonly activeSessionId: string;
  readonly recordSessionId: unknown;

  constructor(activeSessionId: string, recordSessionId: unknown) {
    super(
      `Record session_id ${JSON.stringify(recordSessionId)} does not match the sink's active session ` +
        `${JSON.stringify(activeSessionId)}: close the active session (await sink.close()) before appending ` +
        "records of another session, or use one sink per session",
    );
    this.activeSessionId = activeSessionId;
    this.recordSessionId = recordSessionId;
  }

  static override isInstance(error: unknown): error is SinkSessionMismatchError {
    return StormlogError.hasMarker(error, SESSION_MISMATCH_MARKER);
  }
}

const WRITE_NO_PROGRESS_MARKER = Symbol.for("stormlog.error.sink_write_no_progress");

/**
 * The file system took none of the bytes of a write and reported no error (a write that returned 0):
 * retrying at once would loop forever, so the writer treats it as a failed write (retried later).
 */
export class WriteNoProgressError extends StormlogError {
  readonly [WRITE_NO_PROGRESS_MARKER] = true;
  override readonly name = "WriteNoProgressError";
  /** Bytes of the write that did reach the file before it stalled, and the write's size. */
  readonly written: number;
  readonly size: number;

  constructor(written: number, size: number) {
    super(
      `write made no progress: the file system took none of the last ${size - written} of ${size} bytes ` +
        "and reported no error; the device may be full or failing: free some space or check the disk",
    );
    this.written = written;
    this.size = size;
  }

  static override isInstance(error: unknown): error is WriteNoProgressError {
    return StormlogError.hasMarker(error, WRITE_NO_PROGRESS_MARKER);
  }
}

const MANIFEST_NO_ROOM_MARKER = Symbol.for("stormlog.error.sink_manifest_no_room_in_place");

/**
 * On a full disk, the manifest's last resort (rewriting `manifest.json` within the space its file
 * already holds) found the new text longer than that space: as a full disk would refuse it (ENOSPC).
 * The writer retries once space returns; the segments keep every record meanwhile.
 */
export class ManifestNoRoomInPlaceError extends StormlogError {
  readonly [MANIFEST_NO_ROOM_MARKER] = true;
  override readonly name = "ManifestNoRoomInPlaceError";
  readonly code = "ENOSPC";
  readonly path: string;
  /** Bytes the manifest needs, and the bytes its file can take in place. */
  readonly needed: number;
  readonly room: number;

  constructor(path: string, needed: number, room: number) {
    super(
      `ENOSPC: ${path} has room for ${room} bytes in place, ${needed} needed: the disk is full; free some ` +
        "space and the manifest is written at the next retry (the segments keep the records meanwhile)",
    );
    this.path = path;
    this.needed = needed;
    this.room = room;
  }

  static override isInstance(error: unknown): error is ManifestNoRoomInPlaceError {
    return StormlogError.hasMarker(error, MANIFEST_NO_ROOM_MARKER);
  }
}

const SESSION_NOT_FOUND_MARKER = Symbol.for("stormlog.error.session_not_found");

/** A requested session id is not among the sessions of the input. Lists the ids that exist. */
export class SessionNotFoundError extends StormlogError {
  readonly [SESSION_NOT_FOUND_MARKER] = true;
  override readonly name = "SessionNotFoundError";
  readonly sessionId: string;
  readonly availableSessionIds: readonly string[];

  constructor(sessionId: string, availableSessionIds: readonly string[], source: string) {
    const listed =
      availableSessionIds.length === 0
        ? "it holds no sessions"
        : `sessions there: ${availableSessionIds.map(inputText).join(", ")}`;
    super(
      `Requested session_id not found: ${inputText(sessionId)} in ${source} (${listed}); pass one of the listed ids`,
    );
    this.sessionId = sessionId;
    this.availableSessionIds = availableSessionIds;
  }

  static override isInstance(error: unknown): error is SessionNotFoundError {
    return StormlogError.hasMarker(error, SESSION_NOT_FOUND_MARKER);
  }
}

const SOURCE_MARKER = Symbol.for("stormlog.error.telemetry_source");

/** A path given to a loader is missing or holds no telemetry this package can read. */
export class TelemetrySourceError extends StormlogError {
  readonly [SOURCE_MARKER] = true;
  override readonly name: string = "TelemetrySourceError";
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(`${message} (${path})`, options);
    this.path = path;
  }

  static override isInstance(error: unknown): error is TelemetrySourceError {
    return StormlogError.hasMarker(error, SOURCE_MARKER);
  }
}

/**
 * File-system error codes met while reading or writing telemetry: what happened, and what to do
 * about it (one place for the loaders' errors and the CLI's).
 */
export const FILE_SYSTEM_ERRORS: Readonly<Record<string, { readonly what: string; readonly todo: string }>> =
  {
    ENOENT: { what: "no such file or directory", todo: "check the path" },
    EACCES: {
      what: "permission denied",
      todo: "check the path's permissions, or run as a user who may read (or, for an output, write) it",
    },
    EPERM: { what: "operation not permitted", todo: "check the path's permissions" },
    EISDIR: { what: "is a directory", todo: "pass a file, or the directory that holds it" },
    ENOTDIR: { what: "a part of the path is not a directory", todo: "check the path" },
    ELOOP: { what: "symbolic link loop", todo: "remove or fix the looping link" },
    ENAMETOOLONG: { what: "path too long", todo: "use a shorter path" },
    ENOSPC: { what: "no space left on device", todo: "free some space" },
    EROFS: { what: "read-only file system", todo: "write somewhere else" },
    EMFILE: { what: "too many open files", todo: "raise the limit (ulimit -n)" },
    EIO: { what: "input/output error", todo: "check the disk" },
    EFTYPE: {
      what: "not a regular file (a pipe, socket or device)",
      todo: "put the real file there, or remove the special one",
    },
  };

/** The `code` of a Node.js file-system error (`ELOOP`, `EACCES`...), else undefined. */
export function fileSystemErrorCode(error: unknown): string | undefined {
  const errno = error as NodeJS.ErrnoException | null | undefined;
  return typeof errno === "object" &&
    errno !== null &&
    typeof errno.code === "string" &&
    typeof errno.syscall === "string"
    ? errno.code
    : undefined;
}

/** What happened and what to do, for a file-system error code. */
export function describeFileSystemError(code: string, message = ""): { what: string; todo: string } {
  return FILE_SYSTEM_ERRORS[code] ?? { what: message || code, todo: "check the path and its permissions" };
}

const INPUT_ACCESS_MARKER = Symbol.for("stormlog.error.telemetry_input_access");

/**
 * The file system refused a read of the input (a symbolic link loop, a permission, a file where a
 * directory was expected...). One line: what, the code, what to do, and the path. A
 * `TelemetrySourceError` too.
 */
export class TelemetryInputAccessError extends TelemetrySourceError {
  readonly [INPUT_ACCESS_MARKER] = true;
  override readonly name = "TelemetryInputAccessError";
  /** The file-system error code (`ELOOP`, `EACCES`, `ENOTDIR`...). */
  readonly code: string;

  constructor(path: string, code: string, options?: { cause?: unknown; message?: string }) {
    const { what, todo } = describeFileSystemError(code, options?.message);
    super(path, `Cannot read the telemetry input: ${what} (${code}); ${todo}`, { cause: options?.cause });
    this.code = code;
  }

  /** `error` as a `TelemetryInputAccessError` about `path` when it is a file-system error; else `error`. */
  static wrap(path: string, error: unknown): unknown {
    if (TelemetryInputAccessError.isInstance(error)) return error;
    const code = fileSystemErrorCode(error);
    if (code === undefined) return error;
    const errorPath = (error as NodeJS.ErrnoException).path;
    return new TelemetryInputAccessError(typeof errorPath === "string" ? errorPath : path, code, {
      cause: error,
      message: (error as Error).message,
    });
  }

  static override isInstance(error: unknown): error is TelemetryInputAccessError {
    return StormlogError.hasMarker(error, INPUT_ACCESS_MARKER);
  }
}

/**
 * Runs `read`, a file-system call on the input at `path`; a file-system error it throws becomes a
 * `TelemetryInputAccessError` (other errors pass as they are).
 */
export function readingInput<T>(path: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    throw TelemetryInputAccessError.wrap(path, error);
  }
}
