import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { TelemetrySink } from "@stormlog/sink";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { MemoryTracker } from "../src/index.js";

// Phase enter+exit through a tracker. Goals: <= 500 ns running without boundary readings,
// <= 2 us with a tfjs-like readSync() boundary reading and a sink attached.
const capabilities = {
  ...noCapabilities("tensorflow", "stormlog.tfjs_tracker", "tf.memory"),
  supports_allocator_allocated: true,
  supports_allocator_reserved: true,
};
let bytes = 1_000_000;
// What the tfjs adapter's readSync does: read engine counters into a fresh result (~20 ns).
const read = (): SampleResult => ({
  kind: "full",
  reading: { allocator_allocated_bytes: bytes, allocator_reserved_bytes: bytes + 4096 },
});
const tfjsLike: MemoryCollector = {
  specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
  name: "stormlog.tfjs_tracker",
  deviceId: 0,
  capabilities,
  availability: () => ({ available: true }),
  sample: read,
  readSync: read,
};
const { readSync: _drop, ...withoutReadSync } = tfjsLike;
const asyncOnly: MemoryCollector = withoutReadSync;

const common = {
  env: false as const,
  handleProcessExit: false,
  registerGlobal: false,
  samplingIntervalMs: 60_000,
};
const stopped = new MemoryTracker({ ...common, collectors: [asyncOnly] });
const plain = new MemoryTracker({ ...common, collectors: [asyncOnly], boundaryReadings: false });
const reading = new MemoryTracker({ ...common, collectors: [tfjsLike] });
const dir = mkdtempSync(join(tmpdir(), "stormlog-bench-"));
// A sync loop never lets the sink drain: bound its queue so that appends reach a steady state (the
// hot path is the same whether a record is queued or counted as dropped) instead of measuring the GC
// of a million queued records. The async group below charges the deferred encoding and writing.
const sink = new TelemetrySink({
  rootDir: join(dir, "sink"),
  handleProcessExit: false,
  maxQueueEvents: 2048,
  logger: { warn: () => undefined },
});
const withSink = new MemoryTracker({ ...common, collectors: [tfjsLike], sink });
const flushed = new TelemetrySink({
  rootDir: join(dir, "flushed"),
  handleProcessExit: false,
  fsync: "never",
  logger: { warn: () => undefined },
});
const withFlushedSink = new MemoryTracker({ ...common, collectors: [tfjsLike], sink: flushed });
await plain.start();
await reading.start();
await withSink.start();
await withFlushedSink.start();
await plain.sampleNow();
await reading.sampleNow();
await withSink.sampleNow();

const step = () => {
  bytes += 8;
  return bytes;
};

group("phase enter+exit through a tracker", () => {
  summary(() => {
    bench("tracker/phase(name, fn), tracker not started", () =>
      do_not_optimize(stopped.phase("forward", step)),
    );
    bench("tracker/phase(name, fn), running, no boundary reading", () =>
      do_not_optimize(plain.phase("forward", step)),
    );
    bench("tracker/phase(name, fn), running, tfjs readSync boundary reading", () =>
      do_not_optimize(reading.phase("forward", step)),
    );
    bench("tracker/phase(name, fn), running, tfjs readSync + sink append", () =>
      do_not_optimize(withSink.phase("forward", step)),
    );
    bench("tracker/using scope, running, tfjs readSync + sink append", () => {
      using scope = withSink.phase("forward");
      do_not_optimize(scope);
    });
  });
});

// The sink encodes and writes off the hot path; this charges that work too: 100 phases, then a flush.
group("phase enter+exit with the sink's deferred encoding and write", () => {
  bench("tracker/100 phases + sink flush (tfjs readSync, real sink)", async () => {
    for (let i = 0; i < 100; i++) withFlushedSink.phase("forward", step);
    await flushed.flush();
  });
});

await run();
await Promise.all([plain.stop(), reading.stop(), withSink.stop(), withFlushedSink.stop()]);
rmSync(dir, { recursive: true, force: true });
