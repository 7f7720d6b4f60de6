// Live metrics must not slow the training thread. Side by side, one tracker publishing through an
// OpenTelemetry SDK MeterProvider (a reader attached) and one with `metrics: false`:
// - `phase()` with a tfjs-like readSync boundary reading: the metrics add nothing there (durations are
//   read from the record store at the next sampling tick);
// - a sampling tick after 10 phases (what a 100 ms tick sees in a step of ~16 ms with 5 phases): the
//   tick reads those phase records into the duration histogram;
// - one collection, as a Prometheus scrape or a periodic exporter runs it (on the same thread, once
//   per scrape interval, typically 15-60 s).

import { MeterProvider } from "@opentelemetry/sdk-metrics";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { MemoryTracker } from "../src/index.js";
import { CollectOnDemandReader } from "../test/metrics/collect-reader.js";

let bytes = 1_000_000;
const read = (): SampleResult => ({
  kind: "full",
  reading: { allocator_allocated_bytes: bytes, allocator_reserved_bytes: bytes + 4096 },
});
const tfjsLike: MemoryCollector = {
  specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
  name: "stormlog.tfjs_tracker",
  deviceId: 0,
  capabilities: {
    ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
    supports_allocator_allocated: true,
    supports_allocator_reserved: true,
  },
  availability: () => ({ available: true }),
  sample: read,
  readSync: read,
};

const reader = new CollectOnDemandReader();
const meterProvider = new MeterProvider({ readers: [reader] });
const common = {
  collectors: [tfjsLike],
  env: false as const,
  handleProcessExit: false,
  registerGlobal: false,
  leakAlerts: false,
  samplingIntervalMs: 60_000,
};
const published = new MemoryTracker({ ...common, metrics: { meterProvider } });
const silent = new MemoryTracker({ ...common, metrics: false });
for (const tracker of [published, silent]) {
  await tracker.start();
  await tracker.sampleNow();
}

const step = () => {
  bytes += 8;
  return bytes;
};
const PATHS = ["load_batch", "forward", "backward", "optimizer_step"];
/** One step's phases: `train` around four (10 boundaries), then a tick. */
function phasesThenTick(tracker: MemoryTracker): Promise<void> {
  tracker.phase("train", () => {
    for (const path of PATHS) tracker.phase(path, step);
  });
  return tracker.sampleNow();
}

const ROWS = {
  phaseOn: "phase(name, fn), readSync, metrics published (SDK MeterProvider)",
  phaseOff: "phase(name, fn), readSync, metrics: false",
  tickOn: "5 phases + sampling tick, metrics published",
  tickOff: "5 phases + sampling tick, metrics: false",
  collect: "one collection (a scrape) of every instrument",
};
group("live metrics on the training thread", () => {
  // The first row of a run measures slower (JIT, calibration): a warm-up row takes that place.
  bench("warm-up (phase(name, fn), metrics: false)", () => do_not_optimize(silent.phase("forward", step)));
  summary(() => {
    bench(ROWS.phaseOff, () => do_not_optimize(silent.phase("forward", step)));
    bench(ROWS.phaseOn, () => do_not_optimize(published.phase("forward", step)));
  });
  summary(() => {
    bench(ROWS.tickOff, async () => do_not_optimize(await phasesThenTick(silent)));
    bench(ROWS.tickOn, async () => do_not_optimize(await phasesThenTick(published)));
  });
  bench(ROWS.collect, async () => do_not_optimize(await reader.collect()));
});

const results = await run();
const p50 = new Map<string, number>();
for (const trial of results.benchmarks) for (const r of trial.runs) if (r.stats) p50.set(r.name, r.stats.p50);
const at = (row: string) => p50.get(row) ?? Number.NaN;
const ns = (value: number) => `${value.toFixed(0)} ns`;
console.log(
  `medians: phase() ${ns(at(ROWS.phaseOn))} published vs ${ns(at(ROWS.phaseOff))} not ` +
    `(x${(at(ROWS.phaseOn) / at(ROWS.phaseOff)).toFixed(2)}); a step's 5 phases + tick ` +
    `${ns(at(ROWS.tickOn))} vs ${ns(at(ROWS.tickOff))} (+${ns(at(ROWS.tickOn) - at(ROWS.tickOff))}); ` +
    `a collection ${(at(ROWS.collect) / 1000).toFixed(1)} us`,
);
await published.stop();
await silent.stop();
await meterProvider.shutdown();
