// The 64-rank job of bench/generate-multirank.mjs as one .jsonl file (`--single-file`, 352k events,
// ~240 MB: the "220 MB 64-rank file" of issue #20): `analyzeTelemetry` cold (first analysis, which
// builds the index) and warm, side by side with DuckDB's single aggregate over the same file (max
// device_used_bytes per rank) in the same run; then the `stormlog analyze` process on it: cold, and
// the first and second warm runs on a freshly written file with the report written beside it
// (`--output`), with peak RSS, CPU time and page faults; as this environment starts Node, and again without NODE_EXTRA_CA_CERTS
// where it is set (Node 20 parses that bundle at every start, ~70 ms on this VM). The Python reference runs
// side by side when STORMLOG_BENCH_REFERENCE names a command that runs its `gpumemprof` CLI (see
// `referenceCommand`); otherwise its figure is the one measured in the issue, quoted and labelled as such.
// Run: node --conditions=@stormlog/source --import tsx packages/analysis/bench/analyze-file.bench.ts
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DuckDBInstance } from "@duckdb/node-api";
import { bench, do_not_optimize, group, run } from "mitata";
import { cli, cpuNote, envWithoutExtraCerts, runCli } from "../../../bench/cli-process.js";
import { analyzeTelemetry, INDEX_DIRNAME } from "../src/index.js";

/** Cold `python -m stormlog analyze` on the 220 MB file, as measured in issue #20 (quoted when the reference does not run here). */
const PYTHON_REFERENCE_COLD_S = 16.4;

/**
 * The Python reference's CLI as a command (`STORMLOG_BENCH_REFERENCE`, split on spaces: `gpumemprof` where
 * the reference is installed, or `python3 bench/python-reference.py` with STORMLOG_REFERENCE_SOURCE naming a
 * checkout of its source), to which `analyze FILE --output OUT` is appended; null when unset. PyPI is not
 * reachable from this project's machines, so it is set only where someone has the reference at hand.
 */
function referenceCommand(): string[] | null {
  const words = (process.env.STORMLOG_BENCH_REFERENCE ?? "").split(" ").filter((word) => word !== "");
  return words.length === 0 ? null : words;
}

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const dir = mkdtempSync(join(tmpdir(), "stormlog-analyze-bench-"));
const generate = (out: string, ...extra: string[]): void => {
  execFileSync(
    process.execPath,
    ["--import", "tsx", join(REPO, "bench/generate-multirank.mjs"), out, "--quiet", ...extra],
    { cwd: REPO, stdio: "inherit" },
  );
};
const singleDir = join(dir, "single");
generate(singleDir, "--single-file");
const file = join(singleDir, "job.jsonl");

// DuckDB reads the file anew for every query (an in-memory database holds nothing of it).
const duckdb = await DuckDBInstance.create(":memory:");
const connection = await duckdb.connect();
const literal = `'${file.replaceAll("'", "''")}'`;
const QUERIES = {
  auto: `SELECT rank, max(device_used_bytes) AS peak FROM read_json_auto(${literal}) GROUP BY rank ORDER BY rank`,
  typed: `SELECT rank, max(device_used_bytes) AS peak FROM read_ndjson(${literal}, columns = {rank: 'BIGINT', device_used_bytes: 'BIGINT'}) GROUP BY rank ORDER BY rank`,
};
const NAMES = {
  cold: "analyze-file/cold (scan, build the index)",
  warm: "analyze-file/warm (indexed, unchanged)",
  auto: "duckdb/max(device_used_bytes) by rank (read_json_auto)",
  typed: "duckdb/max(device_used_bytes) by rank (read_ndjson, 2 typed columns)",
};

group("analyze: one 240 MB .jsonl (64 ranks), and DuckDB's single aggregate over it", () => {
  bench(NAMES.cold, async () => {
    rmSync(join(singleDir, INDEX_DIRNAME), { recursive: true, force: true });
    do_not_optimize(await analyzeTelemetry(file));
  });
  bench(NAMES.warm, async () => {
    do_not_optimize(await analyzeTelemetry(file));
  });
  bench(NAMES.auto, async () => {
    do_not_optimize(await connection.runAndReadAll(QUERIES.auto));
  });
  bench(NAMES.typed, async () => {
    do_not_optimize(await connection.runAndReadAll(QUERIES.typed));
  });
});

const results = await run();

/** mitata's median (ns) of the bench named `name`. */
function median(name: string): number {
  for (const trial of results.benchmarks) {
    for (const r of trial.runs) if (r.name === name && r.stats !== undefined) return r.stats.p50;
  }
  return Number.NaN;
}
const seconds = (ns: number): string => `${(ns / 1e9).toFixed(3)} s`;
const ours = median(NAMES.cold);
console.log("\none .jsonl file, medians of this run (in-process, JIT warm):");
console.log(`  stormlog analyze cold ${seconds(ours)}, warm ${seconds(median(NAMES.warm))}`);
for (const key of ["auto", "typed"] as const) {
  const theirs = median(NAMES[key]);
  console.log(
    `  DuckDB ${key === "auto" ? "read_json_auto" : "read_ndjson (typed)"} ${seconds(theirs)}: stormlog cold / DuckDB = ${(ours / theirs).toFixed(2)}`,
  );
}
if (referenceCommand() === null) {
  console.log(
    `  Python reference cold: ${PYTHON_REFERENCE_COLD_S} s as measured in issue #20 (quoted, not run here): ` +
      `${(PYTHON_REFERENCE_COLD_S / (ours / 1e9)).toFixed(1)}x our cold median`,
  );
}
// The same answer: DuckDB's per-rank maximum is the report's per-rank device-used peak.
const duck = (await connection.runAndReadAll(QUERIES.auto)).getRows();
const peaks = new Map(
  (await analyzeTelemetry(file)).summary.per_rank.map((rank) => [rank.rank, rank.peak_device_used_bytes]),
);
const agree =
  duck.length === peaks.size && duck.every(([rank, peak]) => peaks.get(Number(rank)) === Number(peak));
console.log(`  DuckDB and stormlog agree on max device_used_bytes for all ${duck.length} ranks: ${agree}`);
connection.closeSync();

// The command itself, as a user runs it: the built CLI when there is one (`pnpm build`), else from
// source through tsx (which adds its own start-up). The file is written anew first (a copy renamed
// over it), so the warm runs start within two seconds of its mtime; the report goes beside it.
const command = (env: NodeJS.ProcessEnv): string => {
  const result = runCli(["analyze", file, "--output", join(singleDir, "report.txt")], env);
  return `${Math.round(result.ms)} ms${cpuNote(result)}, peak RSS ${result.rssMb} MB`;
};
const nodeAlone = (env: NodeJS.ProcessEnv): number => {
  const started = performance.now();
  spawnSync(process.execPath, ["-e", "0"], { env });
  return Math.round(performance.now() - started);
};
const withoutCerts = envWithoutExtraCerts();
const environments: [string, NodeJS.ProcessEnv][] = [["this environment", process.env]];
if (withoutCerts !== null) environments.push(["without NODE_EXTRA_CA_CERTS", withoutCerts]);
/** Cold commands per environment: one is noise on a shared machine; their median is compared. */
const COLD_RUNS = 5;
const commandColdMs: number[] = [];
for (const [label, env] of environments) {
  console.log(`stormlog analyze FILE --output report.txt (beside it), ${cli.label}, ${label}:`);
  const colds: ReturnType<typeof runCli>[] = [];
  for (let run = 0; run < COLD_RUNS; run++) {
    rmSync(join(singleDir, INDEX_DIRNAME), { recursive: true, force: true });
    copyFileSync(file, `${file}.new`);
    renameSync(`${file}.new`, file);
    colds.push(runCli(["analyze", file, "--output", join(singleDir, "report.txt")], env));
  }
  colds.sort((a, b) => a.ms - b.ms);
  const cold = colds[Math.floor(COLD_RUNS / 2)]!;
  commandColdMs.push(cold.ms);
  console.log(
    `  cold, freshly written file, median of ${COLD_RUNS}: ${Math.round(cold.ms)} ms${cpuNote(cold)}, peak RSS ${cold.rssMb} MB ` +
      `(all: ${colds.map((c) => Math.round(c.ms)).join(", ")} ms)`,
  );
  console.log(`  first warm:                 ${command(env)}`);
  console.log(`  second warm:                ${command(env)}`);
  console.log(`  (node -e 0 alone:           ${nodeAlone(env)} ms)`);
}

// The reference on the same file, in the same run, as its user runs it (no index: every run is cold).
const reference = referenceCommand();
if (reference !== null) {
  const started = performance.now();
  const run = spawnSync(
    reference[0]!,
    [...reference.slice(1), "analyze", file, "--output", join(dir, "reference.txt")],
    {
      encoding: "utf8",
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  const referenceS = (performance.now() - started) / 1000;
  if (run.status !== 0) throw new Error(`the reference failed (${run.status}): ${run.stderr || run.stdout}`);
  console.log(
    `Python reference (${reference.join(" ")} analyze FILE --output ...), this run: ${referenceS.toFixed(2)} s`,
  );
  console.log(`  ${(referenceS / (ours / 1e9)).toFixed(1)}x the in-process cold median`);
  const [asIs, withoutExtraCerts] = commandColdMs;
  console.log(`  ${(referenceS / (asIs! / 1000)).toFixed(1)}x stormlog analyze cold (this environment)`);
  if (withoutExtraCerts !== undefined)
    console.log(
      `  ${(referenceS / (withoutExtraCerts / 1000)).toFixed(1)}x stormlog analyze cold (without NODE_EXTRA_CA_CERTS)`,
    );
}
rmSync(dir, { recursive: true, force: true });
