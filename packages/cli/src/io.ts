import { createWriteStream, fstatSync, type WriteStream, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { describeFileSystemError, fileSystemErrorCode } from "@stormlog/sink/internal";

/** Where the CLI writes: `process.stdout`/`process.stderr`, or a test's buffer. */
export interface CliStream {
  write(chunk: string): unknown;
  /** True for a terminal (progress is shown on stderr only then). */
  readonly isTTY?: boolean;
}

/** A signal the CLI reacts to. */
export type CliSignal = "SIGINT" | "SIGTERM";

/** Everything the CLI touches outside itself, injectable for tests. */
export interface CliIo {
  readonly stdout: CliStream;
  readonly stderr: CliStream;
  /** Relative paths are resolved against it (default `process.cwd()`). */
  readonly cwd: string;
  /** Environment of `track`'s child (default `process.env`). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Subscribes to SIGINT/SIGTERM for the duration of a command; returns the unsubscribe function. */
  onSignal(handler: (signal: CliSignal) => void): () => void;
}

/** Subscribes to the process's SIGINT and SIGTERM. */
function processSignals(handler: (signal: CliSignal) => void): () => void {
  const onInt = () => handler("SIGINT");
  const onTerm = () => handler("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  return () => {
    process.off("SIGINT", onInt);
    process.off("SIGTERM", onTerm);
  };
}

let pipeWatched = false;
/** Whether this process's stdout / stderr stream was made (see `whenOutputFlushed`). */
let stdoutMade = false;
let stderrMade = false;

/**
 * `process.stdout`, made on first use (a command that writes to `--output` never creates it: a
 * fresh process pays ~5 ms for Node's stream modules). `stormlog export ... | head` closes the
 * pipe early: then stop quietly, as other Unix tools do. Any other failure to write (a full disk
 * behind a redirection) ends the command with one line on stderr.
 */
function processStdout(): NodeJS.WriteStream {
  stdoutMade = true;
  const stdout = process.stdout;
  if (!pipeWatched) {
    pipeWatched = true;
    stdout.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "EPIPE") process.exit(0);
      process.stderr.write(`stormlog: ${cannotWrite("standard output", error)}\n`);
      process.exit(1);
    });
  }
  return stdout;
}

/** `cannot write to <where>: <what> (<CODE>) (hint: …)`, for a failed write of the CLI's result. */
function cannotWrite(where: string, error: NodeJS.ErrnoException): string {
  const code = fileSystemErrorCode(error) ?? error.code ?? "EIO";
  const { what, todo } = describeFileSystemError(code, error.message);
  return `cannot write to ${where}: ${what} (${code}) (hint: ${todo})`;
}

/** A write error of `--output FILE` that names the file (a failed `write` does not say its path). */
function naming(error: unknown, path: string): unknown {
  const errno = error as NodeJS.ErrnoException;
  if (typeof errno === "object" && errno !== null && errno.code !== undefined && errno.path === undefined)
    errno.path = path;
  return error;
}

/**
 * Whether `fd` may be a terminal, from one `fstat`: a character device other than the memory
 * devices (`/dev/null` and kin, major 1 on Linux). Only then is Node's stream made to ask exactly:
 * making it loads the tty and net modules (~5 ms), which a command whose stderr is a pipe or a
 * file never needs.
 */
function mayBeTerminal(fd: number): boolean {
  try {
    const info = fstatSync(fd);
    return info.isCharacterDevice() && info.rdev >> 8 !== 1;
  } catch {
    return false;
  }
}

/** `process.stderr`, made when written to, or when it may be a terminal and someone asks. */
const processStderr: CliStream = {
  write: (chunk: string) => {
    stderrMade = true;
    return process.stderr.write(chunk);
  },
  get isTTY() {
    if (!mayBeTerminal(2)) return false;
    stderrMade = true;
    return process.stderr.isTTY === true;
  },
};

/**
 * Calls `done` once what the CLI wrote to stdout and stderr is written out (a pipe is asynchronous on
 * some systems), without making a stream it never wrote to (Node's stream modules, ~5 ms of a
 * command that wrote its report to `--output`).
 */
export function whenOutputFlushed(done: () => void): void {
  const flushStderr = (): void => {
    if (stderrMade) process.stderr.write("", done);
    else done();
  };
  if (stdoutMade) process.stdout.write("", flushStderr);
  else flushStderr();
}

/** The process's streams (made on first use), directory, environment and signals, with `overrides` on top. */
export function resolveIo(overrides: Partial<CliIo> = {}): CliIo {
  return {
    get stdout() {
      return overrides.stdout ?? processStdout();
    },
    stderr: overrides.stderr ?? processStderr,
    cwd: overrides.cwd ?? process.cwd(),
    env: overrides.env ?? process.env,
    onSignal: overrides.onSignal ?? processSignals,
  };
}

/**
 * Whether a command's result (`--output FILE`, `-` or none) is shown on a terminal: only then is
 * input-derived text in it escaped or coloured (files and pipes get the exact bytes).
 */
export function writesToTerminal(io: CliIo, file?: string): boolean {
  return (file === undefined || file === "-") && io.stdout.isTTY === true;
}

/** Where a command's result goes: a file (`--output`) or stdout. */
export interface Output {
  write(chunk: string): Promise<void> | void;
  close(): Promise<void>;
}

/** Opens `--output FILE` (created or truncated), or stdout when no file is given. */
export async function openOutput(io: CliIo, file: string | undefined): Promise<Output> {
  if (file === undefined || file === "-") {
    const stdout = io.stdout as CliStream & Partial<Pick<NodeJS.WritableStream, "once" | "off">>;
    return {
      // A slow reader on the other end of a pipe: wait for `drain` instead of buffering the export.
      write(chunk) {
        if (stdout.write(chunk) !== false || typeof stdout.once !== "function") return;
        return new Promise<void>((done) => {
          const finish = () => {
            stdout.off?.("drain", finish);
            stdout.off?.("close", finish);
            done();
          };
          stdout.once?.("drain", finish);
          stdout.once?.("close", finish);
        });
      },
      close: async () => undefined,
    };
  }
  const path = resolve(io.cwd, file);
  const stream: WriteStream = createWriteStream(path);
  let failure: Error | null = null;
  stream.on("error", (error) => {
    failure = naming(error, path) as Error;
  });
  await new Promise<void>((done, fail) => {
    stream.once("open", () => done());
    stream.once("error", fail);
  });
  return {
    write(chunk) {
      if (failure) throw failure;
      if (stream.write(chunk)) return;
      return new Promise<void>((done, fail) => {
        const onError = (error: Error) => fail(error);
        stream.once("error", onError);
        stream.once("drain", () => {
          stream.off("error", onError);
          done();
        });
      });
    },
    close() {
      return new Promise<void>((done, fail) => {
        if (failure) {
          fail(failure);
          return;
        }
        stream.once("error", fail);
        stream.end(() => done());
      });
    },
  };
}

/**
 * Writes a command's whole result to `--output FILE` (created or truncated) or stdout. A file is
 * written with one blocking call: a fresh process pays ~10 ms for a write stream's round trips.
 */
export async function writeOutput(io: CliIo, file: string | undefined, text: string): Promise<void> {
  if (file !== undefined && file !== "-") {
    const path = resolve(io.cwd, file);
    try {
      writeFileSync(path, text);
    } catch (error) {
      throw naming(error, path);
    }
    return;
  }
  const output = await openOutput(io, file);
  await output.write(text);
  await output.close();
}

/** A one-line progress counter on stderr, shown only when stderr is a terminal. */
export interface Progress {
  update(done: number, total?: number, unit?: string): void;
  /** Shows the elapsed time every 200 ms until `finish()`, for loads that cannot count. */
  elapsed(): void;
  /** Clears the line. */
  finish(): void;
}

/** Progress for long loads; a no-op unless stderr is a terminal. Redraws at most 10 times a second. */
export function createProgress(io: CliIo, label: string): Progress {
  // Asked at the first update, so that a load that never reports progress never touches stderr.
  let terminal: boolean | undefined;
  const shownHere = (): boolean => (terminal ??= io.stderr.isTTY === true);
  let last = 0;
  let shown = false;
  let timer: NodeJS.Timeout | null = null;
  const draw = (text: string) => {
    io.stderr.write(`\r\x1b[2K${label}${text}`);
    shown = true;
  };
  return {
    update(done, total, unit = "events") {
      if (!shownHere()) return;
      const now = Date.now();
      if (now - last < 100) return;
      last = now;
      const count = done.toLocaleString("en-US");
      const of =
        total !== undefined && total > 0
          ? ` / ${total.toLocaleString("en-US")} ${unit} (${Math.min(100, Math.floor((done / total) * 100))}%)`
          : ` ${unit}`;
      draw(`: ${count}${of}`);
    },
    elapsed() {
      if (!shownHere()) return;
      const start = Date.now();
      draw("...");
      timer = setInterval(() => draw(`... ${((Date.now() - start) / 1000).toFixed(1)} s`), 200);
      timer.unref();
    },
    finish() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      if (shown) io.stderr.write("\r\x1b[2K");
      shown = false;
    },
  };
}
