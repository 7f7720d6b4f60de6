// The HTML report of the 64-rank job of bench/generate-multirank.mjs (64 ranks x 5000 samples,
// about 230 MB in 64 sink directories): `generateReport` with the analysis index already built (the
// second report of a sink, or the one after `stormlog analyze`), and the page alone from its data;
// then, once, the cold report (index built), the page's size and, when Chromium is installed
// (scripts/setup.sh), its paint time in headless Chromium opened from file://.
// Run: node --conditions=@stormlog/source --import tsx packages/report/bench/report.bench.ts
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { INDEX_DIRNAME } from "@stormlog/analysis";
import { bench, do_not_optimize, group, run } from "mitata";
import { generateReport } from "../src/index.js";
import { launchChromium } from "../test/support.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const dir = mkdtempSync(join(tmpdir(), "stormlog-report-bench-"));
const job = join(dir, "job");
execFileSync(
  process.execPath,
  ["--import", "tsx", join(REPO, "bench/generate-multirank.mjs"), job, "--quiet"],
  {
    cwd: REPO,
    stdio: "inherit",
  },
);

let started = performance.now();
const cold = await generateReport(job);
const coldMs = performance.now() - started;

group("report: the 64-rank job (64 x 5000 samples, 230 MB)", () => {
  bench("report/generateReport (index built)", async () => {
    do_not_optimize(await generateReport(job));
  });
});
await run();

const MB = 1024 * 1024;
const html = join(dir, "report.html");
writeFileSync(html, cold.html);
const ranks = cold.data.timeline.ranks;
const rows = ranks.reduce((sum, rank) => sum + rank.rowCount, 0);
const drawn = ranks.reduce((sum, rank) => sum + rank.dt.length + 1, 0);
console.log("\nthe 64-rank job's report:");
console.log(`  cold (scan, build the index, report): ${Math.round(coldMs)} ms`);
console.log(
  `  page: ${(cold.bytes / MB).toFixed(2)} MB (limit 5 MB); ${rows.toLocaleString("en-US")} rows read, ` +
    `${drawn.toLocaleString("en-US")} kept at ${cold.data.timeline.columns} columns per rank`,
);
if (existsSync("/usr/bin/chromium")) {
  const browser = await launchChromium();
  const paints: number[] = [];
  for (let i = 0; i < 5; i++) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    started = performance.now();
    await page.goto(pathToFileURL(html).href);
    await page.waitForSelector("html[data-report-ready]");
    const ready = (await page.evaluate("window.__stormlogReport")) as { paintedMs: number };
    paints.push(ready.paintedMs);
    await page.close();
  }
  await browser.close();
  paints.sort((a, b) => a - b);
  console.log(
    `  paint in headless Chromium (navigation start to the first screen of charts drawn), 5 loads: ` +
      `median ${Math.round(paints[2]!)} ms, max ${Math.round(paints[4]!)} ms (limit 1000 ms)`,
  );
} else console.log("  paint: /usr/bin/chromium is missing (bash scripts/setup.sh installs it)");
rmSync(join(job, INDEX_DIRNAME), { recursive: true, force: true });
rmSync(dir, { recursive: true, force: true });
