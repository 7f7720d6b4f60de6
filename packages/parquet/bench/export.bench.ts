// The 64-rank job of bench/generate-multirank.mjs (64 sink directories, 352k events, ~240 MB of
// JSONL) written as a Parquet dataset: `exportParquet` cold (no analysis index: scan, index, analyse,
// write), with the index warm (analyse and write every part), and again into the same dataset (parts
// unchanged, kept), in-process; then fresh processes of `stormlog export --format parquet` (the built
// CLI when there is one) on the sink directories and on the same records as one .jsonl file, with
// their peak RSS. MB/s is JSONL input per second of the export. DuckDB then checks the dataset against
// the report (peak device used per rank).
// Run: pnpm bench parquet   (or node --conditions=@stormlog/source --import tsx packages/parquet/bench/export.bench.ts)
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { analyzeTelemetry, INDEX_DIRNAME } from "@stormlog/analysis";
import { bench, do_not_optimize, group, run } from "mitata";
import { cli, cpuNote, runCli } from "../../../bench/cli-process.js";
import { exportParquet, queryParquet } from "../src/index.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const dir = mkdtempSync(join(tmpdir(), "stormlog-parquet-bench-"));
const generate = (out: string, ...extra: string[]): void => {
  execFileSync(
    process.execPath,
    ["--import", "tsx", join(REPO, "bench/generate-multirank.mjs"), out, "--quiet", ...extra],
    { cwd: REPO, stdio: "inherit" },
  );
};
const sinks = join(dir, "job");
generate(sinks);
const singleDir = join(dir, "single");
generate(singleDir, "--single-file");
const file = join(singleDir, "job.jsonl");

/** Bytes of JSONL under `path`. */
function jsonlBytes(path: string): number {
  const stat = statSync(path);
  if (stat.isFile()) return path.endsWith(".jsonl") ? stat.size : 0;
  let total = 0;
  for (const entry of readdirSync(path)) if (entry !== INDEX_DIRNAME) total += jsonlBytes(join(path, entry));
  return total;
}
const inputBytes = jsonlBytes(sinks);
const MB = 1_000_000;
const out = join(dir, "dataset");

const NAMES = {
  cold: "parquet/export cold (scan, index, analyse, write)",
  warm: "parquet/export, index warm (analyse, write every part)",
  again: "parquet/export again, unchanged (parts kept)",
};
group(`parquet: the 64-rank job (${(inputBytes / MB).toFixed(0)} MB of JSONL in 64 sink directories)`, () => {
  bench(NAMES.cold, async () => {
    rmSync(join(sinks, INDEX_DIRNAME), { recursive: true, force: true });
    rmSync(out, { recursive: true, force: true });
    do_not_optimize(await exportParquet(sinks, out));
  });
  bench(NAMES.warm, async () => {
    rmSync(out, { recursive: true, force: true });
    do_not_optimize(await exportParquet(sinks, out));
  });
  bench(NAMES.again, async () => {
    do_not_optimize(await exportParquet(sinks, out));
  });
});

const results = await run();

function median(name: string): number {
  for (const trial of results.benchmarks) {
    for (const r of trial.runs) if (r.name === name && r.stats !== undefined) return r.stats.p50;
  }
  return Number.NaN;
}
console.log("\nin-process medians (JIT warm):");
for (const [key, name] of Object.entries(NAMES)) {
  const seconds = median(name) / 1e9;
  console.log(
    `  ${key.padEnd(5)} ${seconds.toFixed(3)} s  ${(inputBytes / MB / seconds).toFixed(0)} MB/s of JSONL`,
  );
}

// Fresh processes, as a user runs the command (peak RSS from /proc/self/status: VmHWM).
function command(input: string, target: string): string {
  const result = runCli(["export", input, "--format", "parquet", "--output", target]);
  const seconds = result.ms / 1000;
  return `${seconds.toFixed(2)} s, ${(jsonlBytes(input) / MB / seconds).toFixed(0)} MB/s${cpuNote(result)}, peak RSS ${result.rssMb} MB`;
}
console.log(`stormlog export <input> --format parquet --output DIR, fresh processes, ${cli.label}:`);
for (const [label, input] of [
  ["64 sink directories", sinks],
  ["one .jsonl file", file],
] as const) {
  const index = input === file ? join(singleDir, INDEX_DIRNAME) : join(sinks, INDEX_DIRNAME);
  rmSync(index, { recursive: true, force: true });
  rmSync(out, { recursive: true, force: true });
  console.log(`  ${label}, cold:        ${command(input, out)}`);
  rmSync(out, { recursive: true, force: true });
  console.log(`  ${label}, index warm:  ${command(input, out)}`);
  console.log(`  ${label}, unchanged:   ${command(input, out)}`);
}
const floor = performance.now();
spawnSync(process.execPath, ["-e", "0"]);
console.log(`  (node -e 0 alone: ${Math.round(performance.now() - floor)} ms)`);

// The dataset agrees with the report: DuckDB's per-rank maximum is the report's device-used peak.
const duck = await queryParquet(
  out,
  "SELECT rank, max(device_used_bytes) FROM samples GROUP BY rank ORDER BY rank",
);
const peaks = new Map(
  (await analyzeTelemetry(file)).summary.per_rank.map((rank) => [rank.rank, rank.peak_device_used_bytes]),
);
const agree =
  duck.rows.length === peaks.size &&
  duck.rows.every(([rank, peak]) => peaks.get(Number(rank)) === Number(peak));
console.log(
  `DuckDB over the dataset and the report agree on the device-used peak of all ${duck.rows.length} ranks: ${agree}`,
);
rmSync(dir, { recursive: true, force: true });
