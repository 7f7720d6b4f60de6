/**
 * Live metrics from a training job: the application registers an OpenTelemetry MeterProvider (here
 * with a periodic reader and an in-memory exporter; in production an OTLP or Prometheus exporter),
 * then starts a Stormlog tracker, which publishes the job's memory, phase durations, alerts and
 * collector health through it while the job trains.
 *
 *   pnpm start [-- --steps 40] [--json FILE]
 *
 * It prints what the exporter received at the end: the phase durations per path (count, total),
 * the last memory readings per collector, the collectors' health.
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { metrics } from "@opentelemetry/api";
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from "@opentelemetry/sdk-metrics";
import { tfjsCollector } from "@stormlog/adapter-tfjs";
import { MemoryTracker, processCollector } from "@stormlog/tracker";
import * as tf from "@tensorflow/tfjs";

const argv = process.argv.slice(2);
if (argv[0] === "--") argv.shift();
const { values: args } = parseArgs({
  args: argv,
  options: { steps: { type: "string", default: "40" }, json: { type: "string" } },
});
const steps = Number(args.steps);

// 1. The application's metrics pipeline, registered before the tracker starts.
const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 200 });
const meterProvider = new MeterProvider({ readers: [reader] });
metrics.setGlobalMeterProvider(meterProvider);

// 2. A tracked training loop.
tf.enableProdMode();
await tf.ready();
const tracker = new MemoryTracker({
  collectors: [tfjsCollector(tf), processCollector()],
  samplingIntervalMs: 50,
  identity: { jobId: "live-metrics-demo", rank: 0, worldSize: 1 },
  registerGlobal: false,
});
await tracker.start();
const model = tf.sequential({
  layers: [
    tf.layers.dense({ units: 64, inputShape: [32], activation: "relu" }),
    tf.layers.dense({ units: 4 }),
  ],
});
const optimizer = tf.train.adam(0.01);
for (let step = 0; step < steps; step++) {
  await tracker.phase("train_step", async () => {
    const [xs, ys] = tracker.phase("load_batch", () => [tf.randomNormal([64, 32]), tf.randomNormal([64, 4])]);
    tracker.phase("forward_backward", () => {
      const loss = optimizer.minimize(
        () => tf.losses.meanSquaredError(ys!, model.predict(xs!) as tf.Tensor),
        true,
      );
      loss?.dispose();
    });
    xs!.dispose();
    ys!.dispose();
  });
  // Let the sampling timer and the periodic reader run between steps.
  await new Promise((resolve) => setTimeout(resolve, 5));
}
await tracker.stop();
await meterProvider.forceFlush();

// 3. What the application's exporter received (the last export: cumulative values).
const exported = exporter.getMetrics().at(-1);
const received = new Map<string, DataPoint<unknown>[]>();
for (const scope of exported?.scopeMetrics ?? [])
  for (const metric of scope.metrics)
    received.set(metric.descriptor.name, metric.dataPoints as DataPoint<unknown>[]);

const phases = (received.get("stormlog.phase.duration") ?? []).map((point) => {
  const histogram = point.value as Histogram;
  return {
    path: String(point.attributes["stormlog.phase.path"]),
    count: histogram.count,
    sumS: histogram.sum ?? 0,
  };
});
const memory = (received.get("stormlog.memory.allocated") ?? []).map((point) => ({
  collector: String(point.attributes["stormlog.collector"]),
  device: Number(point.attributes["stormlog.device"]),
  allocatedBytes: Number(point.value),
}));
const health = (received.get("stormlog.collector.health") ?? [])
  .filter((point) => point.value === 1)
  .map(
    (point) => `${point.attributes["stormlog.collector"]}: ${point.attributes["stormlog.collector.state"]}`,
  );
const recordedExits = new Map<string, number>();
for (const event of tracker.getEvents({ eventType: "phase_exit" })) {
  const scope = event.metadata.phase_scope as { path?: string[] } | undefined;
  const path = (scope?.path ?? []).join(" / ");
  recordedExits.set(path, (recordedExits.get(path) ?? 0) + 1);
}

console.log(`trained ${steps} steps; the application's exporter received ${received.size} instruments:`);
for (const phase of phases)
  console.log(`  phase ${phase.path}: ${phase.count} durations, ${(phase.sumS * 1000).toFixed(1)} ms in all`);
for (const entry of memory)
  console.log(
    `  memory ${entry.collector} (device ${entry.device}): ${entry.allocatedBytes} bytes allocated`,
  );
console.log(`  health: ${health.join(", ")}`);
if (args.json !== undefined)
  writeFileSync(
    args.json,
    JSON.stringify({
      instruments: [...received.keys()].sort(),
      phases,
      memory,
      health,
      recordedExits: Object.fromEntries(recordedExits),
    }),
  );
await meterProvider.shutdown();
