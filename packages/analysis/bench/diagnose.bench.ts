// `stormlog diagnose` on the 64-rank job of bench/generate-multirank.mjs (64 sink directories, 352k
// events, ~240 MB): the event version it used to run (`loadDistributedEvents` +
// `buildDistributedDiagnostics`, every event in memory) against `diagnoseTelemetry` on the indexed
// dataset, cold (scan, build the index), warm (stored result) and indexed with the result recomputed.
// Run: node --conditions=@stormlog/source --import tsx packages/analysis/bench/diagnose.bench.ts
// Peak RSS: packages/analysis/bench/memory.ts.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { bench, do_not_optimize, group, run } from "mitata";
import {
  buildDistributedDiagnostics,
  diagnoseTelemetry,
  INDEX_DIRNAME,
  loadDistributedEvents,
} from "../src/index.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const dir = mkdtempSync(join(tmpdir(), "stormlog-diagnose-bench-"));
const sink = join(dir, "job");
execFileSync(
  process.execPath,
  ["--import", "tsx", join(REPO, "bench/generate-multirank.mjs"), sink, "--quiet"],
  { cwd: REPO, stdio: "inherit" },
);
// Files written within the last two seconds are not trusted by the index: let them age.
await new Promise((done) => setTimeout(done, 2100));
const index = join(sink, INDEX_DIRNAME);

group("diagnose: 64 ranks, 352k events, 240 MB", () => {
  bench("diagnose/events (every event loaded, no index)", async () => {
    const { events } = await loadDistributedEvents(sink);
    do_not_optimize(buildDistributedDiagnostics(events));
  });
  bench("diagnose/cold (scan, build the index)", async () => {
    rmSync(index, { recursive: true, force: true });
    do_not_optimize(await diagnoseTelemetry(sink));
  });
  bench("diagnose/warm (indexed, unchanged)", async () => {
    do_not_optimize(await diagnoseTelemetry(sink));
  });
  bench("diagnose/indexed (index reused, result recomputed)", async () => {
    for (const name of readdirSync(index))
      if (name.startsWith("report-")) rmSync(join(index, name), { force: true });
    do_not_optimize(await diagnoseTelemetry(sink));
  });
});

try {
  await run();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
