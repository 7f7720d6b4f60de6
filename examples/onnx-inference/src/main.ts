/**
 * onnxruntime-node inference tracked by Stormlog: a small MLP generated as ONNX at start-up is
 * served through an instrumented session with varying batch sizes, in repeated create/release
 * cycles. The tracker records phases per run, per create and per release (with input shapes and
 * the cycle number), and host memory (onnxruntime's CPU arena lives in the process's RSS).
 *
 *   pnpm start [--cycles N] [--out DIR] [--json FILE]
 */
import { writeFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { createInstrumentedSession } from "@stormlog/adapter-onnxruntime";
import { analyzeTelemetry, formatReportText, reportToJson } from "@stormlog/analysis";
import { formatBytes, stringifyJson } from "@stormlog/core";
import { MemoryTracker, processCollector } from "@stormlog/tracker";
import * as ort from "onnxruntime-node";
import { buildMlpModel, DEFAULT_SHAPE } from "./model.js";

// `pnpm start -- --flag` passes the `--` through: skip it.
const argv = process.argv.slice(2);
if (argv[0] === "--") argv.shift();
const { values: args } = parseArgs({
  args: argv,
  options: {
    cycles: { type: "string", default: "8" },
    out: { type: "string" },
    json: { type: "string" },
  },
});
const cycles = Number(args.cycles);
if (!Number.isInteger(cycles) || cycles < 1) {
  console.error(`--cycles must be a whole number >= 1, got ${args.cycles}`);
  process.exit(1);
}
const sinkDir = resolve(args.out ?? process.env.STORMLOG_SINK_DIR ?? "stormlog-sink");
const userCwd = process.env.INIT_CWD ?? process.cwd();
const shown = (path: string) => {
  const rel = relative(userCwd, path);
  return rel === "" ? "." : rel.startsWith("..") ? path : rel;
};

// Set-up: the model is generated in memory (onnx-proto), as an exported model file would be read.
const model = buildMlpModel();
const { inputs } = DEFAULT_SHAPE;

/**
 * Batch sizes of every cycle: several shapes, new to each session. The same every cycle, so memory
 * that still grows from one cycle to the next is what a create/run/release cycle leaves behind.
 */
const BATCH_SIZES = [1, 8, 32, 8, 1, 512];

function feeds(batch: number): { x: ort.Tensor } {
  const data = new Float32Array(batch * inputs);
  for (let i = 0; i < data.length; i++) data[i] = Math.sin(i);
  return { x: new ort.Tensor("float32", data, [batch, inputs]) };
}

// The process collector reads RSS when sampled, and on demand at the boundaries of phases that ask
// for readings: the adapter's run, create and release phases do (onnxruntime runs take hundreds of
// microseconds), and so does each cycle's `serve` phase below, so each has its exact before and after.
const tracker = new MemoryTracker({
  collectors: [processCollector()],
  samplingIntervalMs: 50,
  sink: { rootDir: sinkDir },
});

console.log("Stormlog onnx-inference example: onnxruntime-node sessions, created, run and released");
console.log(
  `  model      MLP ${DEFAULT_SHAPE.inputs} → ${DEFAULT_SHAPE.hidden} → ${DEFAULT_SHAPE.outputs} ` +
    `(${formatBytes(model.byteLength)} of ONNX, batch dimension dynamic)`,
);
console.log(
  "  collector  process RSS (onnxruntime's CPU arena lives there): every 50 ms, and at each phase's enter and exit",
);
console.log(`  sink       ${shown(sinkDir)}`);
console.log(`  cycles     ${cycles} × (create, run batches ${BATCH_SIZES.join(", ")}, release)`);
console.log();
console.log("  cycle  RSS after create  after the runs  after release  since the last cycle");

await tracker.start();
const sessionId = tracker.getSessionSummary()?.session_id ?? "";
let previousRelease: number | undefined;
for (let cycle = 1; cycle <= cycles; cycle++) {
  const measured = await tracker.phase(
    "serve",
    async () => {
      // Phase "serve / onnx:mlp / create", then "... / run" per run and "... / release".
      const session = await createInstrumentedSession(
        ort,
        model,
        { enableCpuMemArena: true, enableMemPattern: true, graphOptimizationLevel: "all" },
        tracker,
        { name: "mlp" },
      );
      const created = process.memoryUsage.rss();
      for (const batch of BATCH_SIZES) await session.run(feeds(batch));
      const afterRuns = process.memoryUsage.rss();
      await session.release();
      return { created, afterRuns, released: process.memoryUsage.rss() };
    },
    { metadata: { cycle }, readings: true },
  );
  const growth = previousRelease === undefined ? "" : sign(measured.released - previousRelease);
  console.log(
    `  ${String(cycle).padStart(5)}  ${formatBytes(measured.created).padEnd(16)}  ` +
      `${formatBytes(measured.afterRuns).padEnd(14)}  ${formatBytes(measured.released).padEnd(13)}  ${growth}`,
  );
  previousRelease = measured.released;
  await new Promise((resolveTick) => setTimeout(resolveTick, 60));
}
await tracker.stop();

const report = await analyzeTelemetry(sinkDir, { sessionId });
console.log();
console.log("── stormlog analyze ────────────────────────────────────────────────────────");
console.log(formatReportText(report));
if (args.json !== undefined)
  writeFileSync(args.json, `${stringifyJson(reportToJson(report), { indent: 2 })}\n`);
console.log("────────────────────────────────────────────────────────────────────────────");
console.log(`Telemetry: ${shown(sinkDir)} (session ${sessionId})`);
console.log(`Next: pnpm exec stormlog analyze ${shown(sinkDir)} --format json   (after \`pnpm build\`)`);

function sign(bytes: number): string {
  return bytes >= 0 ? `+${formatBytes(bytes)}` : `-${formatBytes(-bytes)}`;
}
