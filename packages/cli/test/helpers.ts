import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { expect } from "vitest";
import { GOLDEN } from "../../sink/test/support/telemetry-fixtures.js";
import { type CliIo, type CliSignal, main } from "../src/index.js";

/** The golden cases generated with the Python reference, at the repo root. */
export const FIXTURES = GOLDEN;
export const REPO_ROOT = join(import.meta.dirname, "../../..");

/** Raw control characters a terminal acts on (C0 but tab and newline, DEL, C1): never printed from input. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: what the tests look for
export const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

/** What one in-process run printed and returned. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** A stream that keeps what is written. */
export function captureStream(isTTY = false): {
  write(chunk: string): boolean;
  text: string;
  isTTY: boolean;
} {
  return {
    isTTY,
    text: "",
    write(chunk: string) {
      this.text += chunk;
      return true;
    },
  };
}

/** Runs `stormlog <argv>` in-process with captured streams. */
export async function runCli(
  argv: readonly string[],
  options: {
    cwd?: string;
    env?: Record<string, string | undefined>;
    onSignal?: CliIo["onSignal"];
    /** Pretend stderr is a terminal (progress is shown). */
    tty?: boolean;
    /** Pretend stdout is a terminal (input-derived text in a result is escaped). */
    stdoutTty?: boolean;
  } = {},
): Promise<CliRun> {
  const stdout = captureStream(options.stdoutTty ?? false);
  const stderr = captureStream(options.tty ?? false);
  const io: Partial<CliIo> = { stdout, stderr, cwd: options.cwd ?? REPO_ROOT };
  const withEnv = options.env === undefined ? io : { ...io, env: options.env };
  const code = await main(
    argv,
    options.onSignal === undefined ? withEnv : { ...withEnv, onSignal: options.onSignal },
  );
  return { code, stdout: stdout.text, stderr: stderr.text };
}

/** A user error: exit 1, exactly one line on stderr, no stack trace, nothing on stdout. */
export function expectOneLineError(run: CliRun, pattern: RegExp): void {
  expect(run.code).toBe(1);
  expect(run.stdout).toBe("");
  const lines = run.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(run.stderr).not.toMatch(/\n\s+at /);
}

/** A signal source the test fires by hand. */
export function manualSignals(): {
  onSignal: CliIo["onSignal"];
  fire(signal: CliSignal): void;
  subscribed(): number;
} {
  const handlers = new Set<(signal: CliSignal) => void>();
  return {
    onSignal(handler) {
      handlers.add(handler);
      return () => handlers.delete(handler);
    },
    fire(signal) {
      for (const handler of handlers) handler(signal);
    },
    subscribed: () => handlers.size,
  };
}

/** A temporary directory removed by the returned function. */
export function tempDir(prefix = "stormlog-cli-"): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** tsx's loader by URL: a child started in another directory (a job's) cannot resolve "tsx" by name. */
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

/** `stormlog <args>` as its own process, from the sources (stdout and stderr piped). */
export function spawnCli(
  args: readonly string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; stdout?: number } = {},
): ChildProcess {
  return spawn(
    process.execPath,
    [
      "--conditions=@stormlog/source",
      "--import",
      TSX_LOADER,
      join(REPO_ROOT, "packages/cli/src/bin.ts"),
      ...args,
    ],
    {
      cwd: options.cwd ?? REPO_ROOT,
      // A descriptor for stdout (a file the test opened), else a pipe.
      stdio: ["ignore", options.stdout ?? "pipe", "pipe"],
      env: options.env ?? process.env,
    },
  );
}

/** What a child printed, and how it ended. */
export function finished(
  child: ChildProcess,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk) => (stdout += chunk));
  child.stderr?.on("data", (chunk) => (stderr += chunk));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}
