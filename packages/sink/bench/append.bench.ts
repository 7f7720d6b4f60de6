// Cost of the sink on the calling thread: `append` itself, and the per-record work the writer does
// later on the event loop (check + encode), with a realistic tracker sample.
// Run: node --conditions=@stormlog/source --import tsx packages/sink/bench/append.bench.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type TelemetryRecordV3 } from "@stormlog/core";
import { TelemetryLineEncoder } from "@stormlog/core/internal";
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { sampleRecord } from "../scripts/sample-records.js";
import { TelemetrySink } from "../src/index.js";
import { whyNotWritable } from "../src/writer/record-check.js";

const BATCH = 10_000;
const dir = mkdtempSync(join(tmpdir(), "stormlog-sink-bench-"));
const sink = new TelemetrySink({
  rootDir: dir,
  handleProcessExit: false,
  writeRollups: false,
  maxQueueEvents: 2 * BATCH,
});
sink.startSession({ session_id: "bench" });
const records = Array.from({ length: BATCH }, (_, i) => sampleRecord("bench", i));
// The writer never gets to run inside a batch (it runs on timers); empty its queue between batches.
const internals = sink as unknown as { queue: unknown[]; queuedRecords: number };

group("sink: calling thread", () => {
  summary(() => {
    bench(`sink/append x${BATCH}`, () => {
      for (let i = 0; i < BATCH; i++) sink.append(records[i]!);
      internals.queue = [];
      internals.queuedRecords = 0;
    });
    bench(`sink/array push x${BATCH} (floor)`, () => {
      const queue: unknown[] = [];
      for (let i = 0; i < BATCH; i++) queue.push(records[i]);
      do_not_optimize(queue);
    });
  });
});

/** A phase boundary as the tracker writes it: phase_scope, the health keys, phase_counters. */
function phaseRecord(seq: number): TelemetryRecordV3 {
  const enter = seq % 2 === 0;
  const sample = sampleRecord("bench", seq, {
    withSeq: false,
    eventType: enter ? "phase_enter" : "phase_exit",
  });
  return {
    ...sample,
    context: `${enter ? "Phase entered" : "Phase exited"}: train / step`,
    metadata: {
      phase_scope: {
        action: enter ? "enter" : "exit",
        name: "step",
        path: ["train", "step"],
        depth: 1,
        scope_id: `3f2a9c1e-${seq >> 1}`,
        parent_scope_id: "3f2a9c1e-root",
        thread_id: 0,
        thread_name: "main",
        sequence: seq,
      },
      ...sample.metadata,
      phase_counters: "last_sample",
    },
  };
}

group("sink: writer work per record (event loop, off the append call)", () => {
  // A stream of samples as a tracker writes them (counters and timestamps change, metadata does not).
  const stream = Array.from({ length: 1024 }, (_, i) => sampleRecord("bench", i, { withSeq: false }));
  // A training loop's stream: each sample followed by a phase's enter and exit records.
  const mixed = Array.from({ length: 1024 }, (_, i) =>
    i % 3 === 0 ? sampleRecord("bench", i, { withSeq: false }) : phaseRecord(i),
  );
  const encoder = new TelemetryLineEncoder();
  const out = Buffer.allocUnsafeSlow(4 << 20);
  let i = 0;
  let offset = 0;
  /** Encodes into a reused buffer, as the writer does (its chunk is written and reused). */
  const encodeInto = (record: TelemetryRecordV3): number => {
    if (offset > 3 << 20) offset = 0;
    offset = encoder.encodeInto(record, out, offset) + 1;
    return offset;
  };
  bench("sink/check record", () => do_not_optimize(whyNotWritable(stream[i++ & 1023]!)));
  bench("sink/encode record (LineEncoder.encodeInto, as the writer)", () =>
    do_not_optimize(encodeInto(stream[i++ & 1023]!)),
  );
  bench("sink/encode record (LineEncoder.encode, string)", () =>
    do_not_optimize(encoder.encode(stream[i++ & 1023]!)),
  );
  bench("sink/encode record (core encodeTelemetryRecord)", () =>
    do_not_optimize(encodeTelemetryRecord(stream[i++ & 1023]!)),
  );
  bench("sink/encode mixed samples + phase records (LineEncoder.encodeInto, as the writer)", () =>
    do_not_optimize(encodeInto(mixed[i++ & 1023]!)),
  );
  bench("sink/encode mixed samples + phase records (core encodeTelemetryRecord)", () =>
    do_not_optimize(encodeTelemetryRecord(mixed[i++ & 1023]!)),
  );
});

await run();
sink.closeSync();
rmSync(dir, { recursive: true, force: true });
