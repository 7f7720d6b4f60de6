/**
 * A long-running tracked service (the cookbook's "always-on tracking" recipe): bounded history in
 * memory, an append-only sink with a small rollover size and retention budget, phases around each
 * step, and counters to watch printed every second. Stop it with Ctrl+C (the session closes
 * `interrupted`), let --duration end it (`completed`), or kill it: the sink marks the session
 * `interrupted` the next time the directory is opened.
 *
 *   pnpm service [-- --sink DIR] [--duration SECONDS]
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { formatBytes } from "@stormlog/core";
import { MemoryTracker, processCollector, type TrackerStatistics } from "@stormlog/tracker";

// `pnpm start -- --flag` passes the `--` through: skip it.
const argv = process.argv.slice(2);
if (argv[0] === "--") argv.shift();
const { values: args } = parseArgs({
  args: argv,
  options: {
    sink: { type: "string" },
    duration: { type: "string" },
    "step-ms": { type: "string", default: "20" },
  },
});
const sinkDir = resolve(args.sink ?? process.env.STORMLOG_SINK_DIR ?? "stormlog-sink");
const durationS = args.duration === undefined ? Number.POSITIVE_INFINITY : Number(args.duration);
const stepMs = Number(args["step-ms"]);
if (!(durationS > 0) || !(stepMs > 0)) {
  console.error("--duration and --step-ms must be positive numbers");
  process.exit(1);
}

const KIB = 1024;
// The recipe's flags, scaled down so that a few seconds show rollover and pruning:
//   --interval 0.5 --telemetry-flush-seconds 2.0 --telemetry-rollover-mb 64
//   --telemetry-retention-files 8 --telemetry-retention-total-mb 512
const tracker = new MemoryTracker({
  collectors: [processCollector()],
  samplingIntervalMs: 50,
  maxEvents: 200, // bounded history: older records are counted as dropped, the sink keeps them
  thresholds: { memoryWarningPercent: 75, memoryCriticalPercent: 90 },
  sink: {
    rootDir: sinkDir,
    flushEverySeconds: 0.5,
    rolloverMaxBytes: 64 * KIB,
    retentionMaxFiles: 12,
    retentionMaxTotalBytes: 1536 * KIB,
  },
});

function counters(stats: TrackerStatistics): string {
  return [
    `rollover_count=${stats.rolloverCount}`,
    `pruned_segment_count=${stats.prunedSegmentCount}`,
    `pruned_bytes=${stats.prunedBytes}`,
    `final_retained_files=${stats.finalRetainedFiles}`,
    `final_retained_bytes=${stats.finalRetainedBytes}`,
    `history_retained_events=${stats.historyRetainedEvents}`,
    `history_dropped_events=${stats.historyDroppedEvents}`,
    `collector_health_status=${stats.collectorHealthStatus}`,
  ].join(" ");
}

await tracker.start();
const session = tracker.getSessionSummary();
console.log(`session ${session?.session_id} started (pid ${process.pid}), sink ${sinkDir}`);

/** A stand-in workload: buffers that live for one step, the memory a real step would touch. */
function work(bytes: number): number {
  const buffer = new Float64Array(bytes / 8);
  for (let i = 0; i < buffer.length; i += 512) buffer[i] = i;
  return buffer.length;
}

const sleep = (ms: number) => new Promise((resolveSleep) => setTimeout(resolveSleep, ms));
const endAt = performance.now() + durationS * 1000;
let nextReport = performance.now() + 1000;
let step = 0;
while (performance.now() < endAt) {
  await tracker.phase(
    "train",
    async () => {
      tracker.phase("load_batch", () => work(512 * KIB));
      tracker.phase("forward", () => work(1024 * KIB));
      tracker.phase("backward", () => work(1024 * KIB));
      tracker.phase("optimizer_step", () => work(256 * KIB));
      await sleep(stepMs);
    },
    { metadata: { step } },
  );
  step++;
  if (performance.now() >= nextReport) {
    nextReport += 1000;
    console.log(`step ${step} ${counters(tracker.getStatistics())}`);
  }
}

await tracker.stop();
const stats = tracker.getStatistics();
console.log(`session ${session?.session_id} ${stats.sessionStatus} after ${step} steps`);
console.log(`peak RSS ${formatBytes(stats.peakMemory ?? 0)}`);
console.log(`final ${counters(stats)}`);
