// Peak RSS and time of `analyzeTelemetry` and `diagnoseTelemetry` as the input grows: the 64-rank
// job of bench/generate-multirank.mjs at 5,000 samples per rank (~240 MB) and at 23,000 (~1.1 GB),
// each run cold (building the index), warm, and without an index, in a fresh process; then
// `analyzeTelemetry` on the same records as one .jsonl file (`--single-file`), cold and warm.
// Run (about a minute; needs ~1.5 GB of temporary disk):
//   node --conditions=@stormlog/source --import tsx packages/analysis/bench/memory.ts
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cli, cpuNote, runCli } from "../../../bench/cli-process.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
// The built package when there is one (`pnpm build`), as users run it; else the source through tsx,
// which also compiles the scan workers' source in each of them (about 0.2 s and 40 MB more per worker).
const built = new URL("../dist/index.js", import.meta.url);
const fromDist = existsSync(fileURLToPath(built));
const entry = fromDist ? built.href : new URL("../src/index.ts", import.meta.url).href;
const script = `
  // VmHWM: getrusage's maxRSS of a spawned child on Linux also counts the parent it was forked from.
  const { readFileSync: readStatus } = await import("node:fs");
  const peakRssMb = () => { try { return Math.round(Number(/VmHWM:\\s+(\\d+)/.exec(readStatus("/proc/self/status", "utf8"))[1]) / 1024); } catch { return Math.round(process.resourceUsage().maxRSS / 1024); } };
  const { analyzeTelemetry } = await import(${JSON.stringify(entry)});
  const t = performance.now();
  const report = await analyzeTelemetry(process.argv[1], { index: process.argv[2] !== "noindex" });
  const ms = performance.now() - t;
  console.log(JSON.stringify({ ms: Math.round(ms), maxRssMb: peakRssMb(), events: report.summary.event_count, status: report.index?.status, reportReused: report.index?.report_reused }));
`;
const diagnoseScript = `
  const { readFileSync: readStatus } = await import("node:fs");
  const peakRssMb = () => { try { return Math.round(Number(/VmHWM:\\s+(\\d+)/.exec(readStatus("/proc/self/status", "utf8"))[1]) / 1024); } catch { return Math.round(process.resourceUsage().maxRSS / 1024); } };
  const { diagnoseTelemetry } = await import(${JSON.stringify(entry)});
  const t = performance.now();
  const result = await diagnoseTelemetry(process.argv[1], { index: process.argv[2] !== "noindex" });
  const ms = performance.now() - t;
  console.log(JSON.stringify({ ms: Math.round(ms), maxRssMb: peakRssMb(), anomalies: result.diagnostics.anomalies.length, status: result.index?.status, reused: result.index?.report_reused }));
`;
const measure = (path: string, mode: string, code = script): string =>
  execFileSync(
    process.execPath,
    [
      ...(fromDist ? [] : ["--conditions=@stormlog/source", "--import", "tsx"]),
      "--input-type=module",
      "-e",
      code,
      path,
      mode,
    ],
    {
      cwd: REPO,
      encoding: "utf8",
    },
  ).trim();

console.log(
  fromDist
    ? "the built package (dist/)"
    : "the source through tsx (run pnpm build for the built package's figures)",
);
const dir = mkdtempSync(join(tmpdir(), "stormlog-memory-bench-"));
try {
  for (const samples of [5000, 23000]) {
    const sink = join(dir, `job-${samples}`);
    execFileSync(
      process.execPath,
      ["--import", "tsx", join(REPO, "bench/generate-multirank.mjs"), sink, "--samples", String(samples)],
      {
        cwd: REPO,
        stdio: "inherit",
      },
    );
    await new Promise((done) => setTimeout(done, 2100));
    console.log(`  cold:     ${measure(sink, "index")}`);
    console.log(`  warm:     ${measure(sink, "index")}`);
    console.log(`  no index: ${measure(sink, "noindex")}`);
    rmSync(join(sink, ".stormlog-index"), { recursive: true, force: true });
    console.log(`  diagnose cold:     ${measure(sink, "index", diagnoseScript)}`);
    console.log(`  diagnose warm:     ${measure(sink, "index", diagnoseScript)}`);
    console.log(`  diagnose no index: ${measure(sink, "noindex", diagnoseScript)}`);
    rmSync(sink, { recursive: true, force: true });
    const single = join(dir, `file-${samples}`);
    execFileSync(
      process.execPath,
      [
        "--import",
        "tsx",
        join(REPO, "bench/generate-multirank.mjs"),
        single,
        "--samples",
        String(samples),
        "--single-file",
      ],
      { cwd: REPO, stdio: "inherit" },
    );
    const file = join(single, "job.jsonl");
    console.log(`  one file, cold: ${measure(file, "index")}`);
    console.log(`  one file, warm: ${measure(file, "index")}`);
    rmSync(join(single, ".stormlog-index"), { recursive: true, force: true });
    // The command as users run it (the built CLI: from 512 MiB its launcher runs a first scan in a child
    // with glibc's trim threshold fixed; from source through tsx there is no launcher).
    const result = runCli(["analyze", file, "--output", join(single, "report.txt")]);
    console.log(
      `  one file, stormlog analyze cold (${cli.label}): ${Math.round(result.ms)} ms${cpuNote(result)}, peak RSS ${result.rssMb} MB`,
    );
    rmSync(single, { recursive: true, force: true });
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
