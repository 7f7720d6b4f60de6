// Child processes running scripts/write-events.ts, for the process-level tests.
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";

const SCRIPT = join(import.meta.dirname, "../scripts/write-events.ts");

export type WriterChild = ChildProcess & { output: () => string };

/** Starts `write-events.ts <args>` (see its header for the modes), keeping what it prints. */
export function start(args: string[], env: NodeJS.ProcessEnv = process.env): WriterChild {
  const child = spawn(
    process.execPath,
    ["--conditions=@stormlog/source", "--import", "tsx", SCRIPT, ...args],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env,
    },
  );
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr!.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return Object.assign(child, { output: () => output });
}

export function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
}

export async function waitFor(child: WriterChild, pattern: RegExp, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pattern.test(child.output())) {
    if (Date.now() > deadline || child.exitCode !== null)
      throw new Error(`child never printed ${pattern}: ${child.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
