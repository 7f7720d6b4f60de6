// `analyzeTelemetry` on the 64-rank job of bench/generate-multirank.mjs (64 sink directories, 352k
// events, ~240 MB): cold (first analysis, which builds the index), warm (indexed, nothing changed),
// and incremental (one of the 64 segments changed since the last analysis).
// Run: node --conditions=@stormlog/source --import tsx packages/analysis/bench/analyze.bench.ts
// Peak RSS of each case, in a fresh process, is printed after the timings.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { bench, do_not_optimize, group, run } from "mitata";
import { analyzeTelemetry, INDEX_DIRNAME } from "../src/index.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const dir = mkdtempSync(join(tmpdir(), "stormlog-analyze-bench-"));
const sink = join(dir, "job");
execFileSync(
  process.execPath,
  ["--import", "tsx", join(REPO, "bench/generate-multirank.mjs"), sink, "--quiet"],
  {
    cwd: REPO,
    stdio: "inherit",
  },
);
// Files written within the last two seconds are trusted only through a check of their content: let
// them age, so that the warm figure is the plain one.
await new Promise((done) => setTimeout(done, 2100));
const segment = join(sink, readdirSync(sink).sort()[5]!, "segment-000001.jsonl");

group("analyze: 64 ranks, 352k events, 240 MB", () => {
  bench("analyze/cold (scan, build the index)", async () => {
    rmSync(join(sink, INDEX_DIRNAME), { recursive: true, force: true });
    do_not_optimize(await analyzeTelemetry(sink));
  });
  bench("analyze/warm (indexed, unchanged)", async () => {
    do_not_optimize(await analyzeTelemetry(sink));
  });
  bench("analyze/incremental (1 of 64 segments changed)", async () => {
    const now = new Date();
    utimesSync(segment, now, now);
    do_not_optimize(await analyzeTelemetry(sink));
  });
});

await run();

// Peak RSS per case, each in its own process (the built-in figure above is time only): the built
// package when there is one (\`pnpm build\`), as users run it; else the source through tsx, which also
// compiles the scan workers' source in each of them (about 0.2 s and 40 MB more per worker).
const built = new URL("../dist/index.js", import.meta.url);
const fromDist = existsSync(fileURLToPath(built));
const script = `
  // VmHWM: getrusage's maxRSS of a spawned child on Linux also counts the parent it was forked from.
  const { readFileSync: readStatus } = await import("node:fs");
  const peakRssMb = () => { try { return Math.round(Number(/VmHWM:\\s+(\\d+)/.exec(readStatus("/proc/self/status", "utf8"))[1]) / 1024); } catch { return Math.round(process.resourceUsage().maxRSS / 1024); } };
  const { analyzeTelemetry } = await import(${JSON.stringify(fromDist ? built.href : new URL("../src/index.ts", import.meta.url).href)});
  const t = performance.now();
  const report = await analyzeTelemetry(process.argv[1], { index: process.argv[2] !== "noindex" });
  const ms = performance.now() - t;
  console.log(JSON.stringify({ ms: Math.round(ms), maxRssMb: peakRssMb(), status: report.index?.status, reportReused: report.index?.report_reused }));
`;
const measure = (mode: string): string =>
  execFileSync(
    process.execPath,
    [
      ...(fromDist ? [] : ["--conditions=@stormlog/source", "--import", "tsx"]),
      "--input-type=module",
      "-e",
      script,
      sink,
      mode,
    ],
    {
      cwd: REPO,
      encoding: "utf8",
    },
  ).trim();
rmSync(join(sink, INDEX_DIRNAME), { recursive: true, force: true });
// The segment touched above is still inside the two-second window: let it age first.
await new Promise((done) => setTimeout(done, 2100));
console.log(
  `in a fresh process, ${fromDist ? "the built package (dist/)" : "the source through tsx (run pnpm build for the built package's figures)"}:`,
);
console.log(`cold (builds the index): ${measure("index")}`);
console.log(`warm:                    ${measure("index")}`);
console.log(`no index:                ${measure("noindex")}`);
rmSync(dir, { recursive: true, force: true });
