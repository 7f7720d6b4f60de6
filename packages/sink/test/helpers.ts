import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach } from "vitest";
import type { SinkLogger } from "../src/index.js";

const made: string[] = [];

/** A fresh temporary directory, removed after the test. */
export function tempDir(prefix = "stormlog-sink-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A logger that keeps what it is told. */
export function memoryLogger(): SinkLogger & { warnings: string[]; infos: string[] } {
  const warnings: string[] = [];
  const infos: string[] = [];
  return { warnings, infos, warn: (m) => warnings.push(m), info: (m) => infos.push(m) };
}

/** Segment file names in a directory, sorted. */
export function segmentNames(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => name.startsWith("segment-") && name.endsWith(".jsonl"))
    .sort();
}

/** Non-empty lines of a file. */
export function fileLines(path: string): string[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((line) => line.length > 0);
}

/** Options every in-test sink takes: no process hooks, quiet. */
export const quiet = { handleProcessExit: false, writeRollups: false } as const;
