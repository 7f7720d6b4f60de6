/**
 * The Stormlog demo: a TensorFlow.js training job tracked phase by phase, then analysed.
 *
 *   pnpm start [-- --leak] [--out DIR] [--json FILE] [--report FILE] [--epochs N] [--batches N]
 *
 * --leak   `backward` keeps a gradient copy every step (a leak), `load_batch` hands the step tensors
 *          it disposes (not one); samples attribute live tensors to the phase they were born in.
 * --out    the sink directory (default ./stormlog-sink; STORMLOG_SINK_DIR also sets it).
 * --json   also write the analysis as JSON to FILE.
 * --report the HTML report's file (default stormlog-report.html beside the sink): open it in a browser.
 */
import { existsSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { tfjsCollector } from "@stormlog/adapter-tfjs";
import { analyzeTelemetry, formatReportText, reportToJson } from "@stormlog/analysis";
import { stringifyJson } from "@stormlog/core";
import { writeReport } from "@stormlog/report";
import { MemoryTracker, processCollector } from "@stormlog/tracker";
import { loadTensorFlow } from "./tfjs.js";
import {
  buildModel,
  DEFAULT_CONFIG,
  SyntheticData,
  type TrainConfig,
  trainCustomLoop,
  trainWithFit,
} from "./train.js";

// `pnpm start -- --flag` passes the `--` through: skip it.
const argv = process.argv.slice(2);
if (argv[0] === "--") argv.shift();
const { values: args } = parseArgs({
  args: argv,
  options: {
    leak: { type: "boolean", default: false },
    out: { type: "string" },
    json: { type: "string" },
    report: { type: "string" },
    epochs: { type: "string" },
    batches: { type: "string" },
    quiet: { type: "boolean", default: false },
  },
});

function count(text: string | undefined, fallback: number, name: string): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) {
    console.error(`--${name} must be a whole number >= 1, got ${text}`);
    process.exit(1);
  }
  return value;
}

const config: TrainConfig = {
  ...DEFAULT_CONFIG,
  epochs: count(args.epochs, DEFAULT_CONFIG.epochs, "epochs"),
  batchesPerEpoch: count(args.batches, DEFAULT_CONFIG.batchesPerEpoch, "batches"),
  leak: args.leak ?? false,
};
const sinkDir = resolve(args.out ?? process.env.STORMLOG_SINK_DIR ?? "stormlog-sink");
const reportFile = resolve(args.report ?? join(dirname(sinkDir), "stormlog-report.html"));
// Paths and commands are shown relative to where the user typed the command (pnpm sets INIT_CWD).
const userCwd = process.env.INIT_CWD ?? process.cwd();
const shown = (path: string) => {
  const rel = relative(userCwd, path);
  return rel === "" ? "." : rel.startsWith("..") ? path : rel;
};
const log = args.quiet ? () => undefined : (line = "") => console.log(line);

const { tf, packageName } = await loadTensorFlow();
// Made before the model: tensors are attributed to the phase they are born in from now on, and the
// model's weights, born outside any phase, show under "".
const tfjs = tfjsCollector(tf);
const model = buildModel(tf, config);
const optimizer = tf.train.adam(0.01);
const data = new SyntheticData(tf, config);

// Both collectors read the host (device -1), so each sample is one record: tfjs's tensor bytes as
// allocated (read again at every phase boundary) and the process's resident set as reserved.
const tracker = new MemoryTracker({
  collectors: [tfjs, processCollector()],
  samplingIntervalMs: 100,
  sink: { rootDir: sinkDir },
});

log("tfjs-training: a TensorFlow.js training job under the Stormlog memory tracker");
log();
log(`  TensorFlow.js   ${packageName}, backend ${tf.getBackend()}`);
log(
  `  model           MLP ${config.features} → ${config.hidden} → ${config.hidden} → ${config.classes}, ` +
    `${model.countParams().toLocaleString("en-US")} parameters, Adam, batch ${config.batchSize}`,
);
log("  collectors      tf.memory() (tensor bytes, every sample and phase boundary), process RSS");
log("  attribution     each sample: live tensors by the phase that created them (tfjs_live_by_phase)");
log(`  sampling        every ${tracker.samplingIntervalMs} ms, into the sink ${shown(sinkDir)}`);
if (config.leak) {
  log("  --leak          `backward` keeps a copy of a gradient every step, never disposed (a leak);");
  log("                  `load_batch` hands the step tensors that it disposes later (not a leak)");
}
log();

await tracker.start();
const sessionId = tracker.getSessionSummary()?.session_id ?? "";

log(
  `▶ custom loop: ${config.epochs} epochs × ${config.batchesPerEpoch} batches, phases ` +
    "train / load_batch, forward, backward, optimizer_step",
);
await trainCustomLoop(tf, tracker, model, optimizer, data, config, (epoch, loss) =>
  log(`    epoch ${epoch + 1}  loss ${loss.toFixed(3)}  tensors ${tf.memory().numTensors}`),
);

log("▶ model.fit with stormlogCallback(tracker): phases fit / epoch / batch");
await trainWithFit(tf, tracker, model, data, config, (epoch, loss) =>
  log(`    epoch ${epoch + 1}  loss ${loss.toFixed(3)}  tensors ${tf.memory().numTensors}`),
);

await tracker.stop();
const stats = tracker.getStatistics();

const report = await analyzeTelemetry(sinkDir, { sessionId });
log();
log("── stormlog analyze ────────────────────────────────────────────────────────");
log(formatReportText(report));
if (args.json !== undefined)
  writeFileSync(args.json, `${stringifyJson(reportToJson(report), { indent: 2 })}\n`);

// The same session as one HTML page: timelines with the phases under them, the tables above.
const page = await writeReport(sinkDir, reportFile, { sessionId, title: "tfjs-training: the Stormlog demo" });

const sink = shown(sinkDir);
log("────────────────────────────────────────────────────────────────────────────");
log(`Telemetry: ${sink}`);
log(`  session ${sessionId}, ${stats.totalEvents} records (schema v3: the Python Stormlog reads it too)`);
log(
  `Report: ${shown(reportFile)} (${(page.bytes / 1048576).toFixed(2)} MB; open it in a browser, it loads nothing)`,
);
log();
// `pnpm demo` builds the packages; run on its own from source, the command may not be built yet.
const cliBuilt = existsSync(
  join(createRequire(import.meta.url).resolve("@stormlog/cli/package.json"), "..", "dist", "launch.cjs"),
);
log(cliBuilt ? "Try next:" : "Try next (the `stormlog` command is built by `pnpm build`; run it first):");
log(`  pnpm exec stormlog analyze ${sink} --format json    # this analysis as JSON`);
log(`  pnpm exec stormlog sessions ${sink}                 # every run recorded in this sink`);
log(`  pnpm exec stormlog report ${sink} -o report.html    # this page again, or another session's`);
log(`  pnpm exec stormlog export ${sink} --format perfetto --output trace.json`);
log("      # phases and memory on a timeline: open trace.json in https://ui.perfetto.dev");
if (!config.leak) {
  // From the repository root the demo script is at hand; anywhere else in the workspace, --filter is.
  const atRoot = existsSync(join(userCwd, "pnpm-workspace.yaml"));
  const leakCommand = atRoot ? "pnpm demo -- --leak" : "pnpm --filter tfjs-training start --leak";
  log(`  ${leakCommand}    # a tensor kept every step, and a loader that only looks like a leak`);
}
