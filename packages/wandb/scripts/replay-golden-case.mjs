#!/usr/bin/env node
// Replays one W&B golden case (a folder laid out as ../shared/golden/wandb/<case>: input/config.json,
// stats.json, a sink folder, artifact sources) through our export, in offline mode, on a copy of its
// input/, and writes the W&B offline run directory under <out-dir>/wandb/offline-run-<time>-<id>/.
// Where the Python reference raised (a missing diagnose folder, a value of the wrong type), it exits
// with status 1 and a one-line error, and writes no run.
//
// Usage (from the repository root, after `pnpm build`):
//   node packages/wandb/scripts/replay-golden-case.mjs <case-dir> <out-dir>
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

function fail(message) {
  process.stderr.write(`replay-golden-case: ${String(message).replace(/\s*\n\s*/g, " ")}\n`);
  process.exit(1);
}

const [caseArg, outArg] = process.argv.slice(2);
if (caseArg === undefined || outArg === undefined) {
  fail("usage: node packages/wandb/scripts/replay-golden-case.mjs <case-dir> <out-dir>");
}
const caseDir = resolve(caseArg);
const outDir = resolve(outArg);
if (!existsSync(join(caseDir, "input", "config.json"))) fail(`${caseDir} has no input/config.json`);

// The package imports itself by name: its built files, or its sources when run with
// `--conditions=@stormlog/source --import tsx` (as the tests do).
let api;
let internal;
try {
  api = await import("@stormlog/wandb");
  internal = await import("@stormlog/wandb/internal");
} catch (error) {
  if (error?.code === "ERR_MODULE_NOT_FOUND") {
    fail(`a built file is missing (${error.message.split("\n")[0]}): run \`pnpm build\` first`);
  }
  throw error;
}
const { WandbOfflineClient } = api;
const { readGoldenCaseConfig, runGoldenCaseExport } = internal;

const work = mkdtempSync(join(tmpdir(), "stormlog-wandb-replay-"));
const input = join(work, "input");
cpSync(join(caseDir, "input"), input, { recursive: true });
mkdirSync(outDir, { recursive: true });
if (!statSync(outDir).isDirectory()) fail(`${outDir} is not a folder`);

const client = new WandbOfflineClient({ dir: outDir });
let code = 0;
try {
  const config = readGoldenCaseConfig(input);
  // A run already active when the export starts: the export logs into it and neither opens nor
  // finishes it; here, as in a training script, the code that opened it finishes it.
  const active = config.activeRun
    ? await client.init({ project: config.wandb.project || "stormlog", mode: "offline" })
    : null;
  await runGoldenCaseExport(input, client);
  if (active !== null) await active.finish();
  for (const run of client.runs) process.stdout.write(`${run.runDir}\n`);
} catch (error) {
  for (const run of client.runs) {
    try {
      await run.finish();
    } catch {
      // already finished
    }
    rmSync(run.runDir, { recursive: true, force: true });
  }
  const name = error instanceof Error ? error.name : "Error";
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`replay-golden-case: ${name}: ${message.replace(/\s*\n\s*/g, " ")}\n`);
  code = 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
process.exit(code);
