import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { SampleResult } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import { SinkWorkerError } from "../src/index.js";
import { OffThreadSink } from "../src/off-thread-sink.js";
import {
  BatchIds,
  type BatchObjects,
  BatchTables,
  EventStore,
  PHASE_ENTER,
  PHASE_EXIT,
  type RecordContext,
  type StoredBatch,
} from "../src/store.js";
import {
  cudaCapabilities,
  full,
  makeTracker,
  reading,
  SequencedCollector,
  temporaryDirectories,
  trackerWithSink,
} from "./helpers.js";

const GiB = 1024 ** 3;
const tempDir = temporaryDirectories("stormlog-off-thread-");

/** A GPU-like collector whose boundary reads carry tensor counts, as tfjs's do. */
class CountingCollector extends SequencedCollector {
  tensors = 0;
  readSync(): SampleResult {
    this.tensors++;
    return {
      kind: "full",
      reading: reading({ allocated: GiB + this.tensors * 1024, reserved: 2 * GiB, total: 4 * GiB }),
      metadata: { tensor_count: this.tensors, backend: "test" },
    };
  }
}

/** The same session (samples, alerts, nested phases with attributes) tracked into `root`. */
async function trackScenario(root: string, sinkThread: "worker" | "main"): Promise<string> {
  const gpu = (allocated: number) =>
    full(reading({ allocated, reserved: allocated, used: allocated, total: 4 * GiB }));
  const collector = new CountingCollector([gpu(1 * GiB), gpu(4 * GiB), gpu(1.5 * GiB)]);
  const { tracker } = makeTracker([collector], {
    sink: { rootDir: root, handleProcessExit: false },
    sinkThread,
    alerts: true,
  });
  await tracker.start();
  await tracker.sampleNow();
  for (let step = 0; step < 3; step++) {
    tracker.phase(
      "train",
      () => {
        tracker.phase("forward", () => undefined);
        tracker.phase("backward", () => undefined, { metadata: { micro_batches: [1, 2], lr: 0.5 } });
      },
      { metadata: { step } },
    );
    await tracker.sampleNow();
  }
  const sessionId = tracker.getSessionSummary()?.session_id ?? "";
  await tracker.stop();
  const segments = readdirSync(root).filter((name) => name.endsWith(".jsonl"));
  const text = segments.map((name) => readFileSync(join(root, name), "utf8")).join("");
  return text.replaceAll(sessionId, "<session>");
}

describe("a sink on a worker thread", () => {
  it("writes, byte for byte, the lines the training thread's sink writes", async () => {
    const onWorker = await trackScenario(join(tempDir(), "worker"), "worker");
    const onMain = await trackScenario(join(tempDir(), "main"), "main");
    const lines = onWorker.trimEnd().split("\n");
    // Samples, an alert (float-marked usage_percent), and phase records with boundary detail.
    expect(lines.length).toBeGreaterThan(20);
    expect(onWorker).toMatch(/"event_type": "critical".*"usage_percent": 100.0/);
    expect(onWorker).toContain('"tensor_count": 12');
    expect(onWorker).toContain('"attributes": {"lr": 0.5, "micro_batches": [1, 2]}');
    expect(onWorker).toBe(onMain);
  });

  it("closes the session with the sink's counters once the worker has written everything", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    await tracker.start();
    await tracker.sampleNow();
    for (let i = 0; i < 300; i++) tracker.phase("step", () => undefined);
    await tracker.stop();
    const sessions = await loadTelemetrySessions(root);
    expect(sessions[0]?.summary.status).toBe("completed");
    // start, peak, sample, 600 boundaries, stop: more than one 256-record batch.
    expect(sessions[0]?.events).toHaveLength(604);
    const statistics = tracker.getStatistics();
    expect(statistics.finalRetainedFiles).toBe(1);
    expect(statistics.finalRetainedBytes).toBe(readFileSync(join(root, "segment-000001.jsonl")).length);
  });

  it("runs the worker at the lowest priority, and only the worker", async () => {
    const { tracker } = trackerWithSink(join(tempDir(), "sink"));
    await tracker.start();
    // Field 19 of /proc/<pid>/task/<tid>/stat is the thread's nice value.
    const niceOf = (task: string) =>
      Number(readFileSync(`/proc/${process.pid}/task/${task}/stat`, "utf8").split(") ")[1]?.split(" ")[16]);
    const nices = readdirSync(`/proc/${process.pid}/task`).map(niceOf);
    await tracker.stop();
    expect(nices.filter((nice) => nice === 19)).toHaveLength(1);
    expect(niceOf(String(process.pid))).toBe(0);
  });

  it("stops a session whose start is still waiting for the worker", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root);
    const starting = tracker.start();
    await tracker.stop();
    await starting;
    expect(tracker.isTracking).toBe(false);
    const sessions = await loadTelemetrySessions(root);
    expect(sessions.map((session) => session.summary.status)).toEqual(["completed"]);
    expect(sessions[0]?.events.map((event) => event.event_type)).toEqual(["start", "stop"]);
  });

  it("takes a burst far beyond the sink's queue without dropping a record", async () => {
    const root = join(tempDir(), "sink");
    const { tracker } = trackerWithSink(root, { maxQueueEvents: 500 });
    await tracker.start();
    // 8000 records with no pause: 32 batches reach the worker at once, 16 times its sink's queue.
    for (let i = 0; i < 4000; i++) tracker.phase("step", () => undefined);
    await tracker.stop();
    const sessions = await loadTelemetrySessions(root);
    expect(sessions[0]?.summary.status).toBe("completed");
    expect(sessions[0]?.events).toHaveLength(8002);
  });

  it("returns the summary its worker's sink registers, source included", async () => {
    const root = join(tempDir(), "sink");
    const sink = new OffThreadSink({ rootDir: root, handleProcessExit: false, source: "my.trainer" });
    const summary = sink.startSession({ session_id: "s", started_at_ns: 5n });
    await sink.close();
    const [written] = await loadTelemetrySessions(root);
    expect(summary.source).toBe("my.trainer");
    expect(written?.summary.source).toBe(summary.source);
  });

  it("reports a failed worker: the tracker goes on without the sink and the session is incomplete", async () => {
    const root = join(tempDir(), "sink");
    const warnings: string[] = [];
    const sink = new OffThreadSink({
      rootDir: root,
      handleProcessExit: false,
      logger: { warn: (message) => warnings.push(message) },
    });
    sink.startSession({ session_id: "a", started_at_ns: 1n });
    // A record of another session: the worker's sink refuses it, and the worker reports the failure.
    sink.append({ session_id: "b" } as never);
    await expect.poll(() => warnings.length, { timeout: 10_000 }).toBe(1);
    expect(warnings[0]).toMatch(/worker thread failed \(Record session_id "b" does not match/);
    expect(warnings[0]).toContain('sinkThread: "main"');
    let thrown: unknown;
    try {
      sink.append({ session_id: "a" } as never);
    } catch (error) {
      thrown = error;
    }
    expect(SinkWorkerError.isInstance(thrown)).toBe(true);
    await sink.close();
    // The worker closed the session it had opened: incomplete, not left running.
    await expect
      .poll(async () => (await loadTelemetrySessions(root)).map((session) => session.summary.status), {
        timeout: 10_000,
      })
      .toEqual(["incomplete"]);
  });

  it("rejects an unknown sinkThread", () => {
    expect(() => makeTracker([], { sinkThread: "gpu" as never })).toThrow(/sinkThread.*"worker" or "main"/);
  });
});

describe("stored batches", () => {
  const context: RecordContext = {
    schemaVersion: 3,
    sessionId: "s",
    samplingIntervalMs: 100,
    pid: 1,
    host: "h",
    jobId: null,
    rank: 0,
    localRank: 0,
    worldSize: 1,
  };
  const group = { collectorString: "test", deviceId: 0, capabilities: cudaCapabilities() };
  const base = { collector_health_status: "healthy", telemetry_partial: false };
  const scope = {
    scopeId: "s:1",
    name: "forward",
    path: ["train", "forward"],
    phasePath: "train / forward",
    depth: 1,
    parentScopeId: "s:0",
    sequence: 1,
    threadId: 1,
    threadName: "main",
    attributes: { step: 3 },
  } as never;

  /** The worker (`tables`, `worker`) rebuilds each packed record as the tracker's store builds it. */
  function expectRebuiltAlike(
    store: EventStore,
    indices: readonly number[],
    batch: StoredBatch,
    tables: BatchTables,
    worker: EventStore,
  ): void {
    tables.learn(batch);
    for (let i = 0; i < batch.count; i++) {
      const rebuilt = worker.materialize(worker.unpack(batch, i, tables), context);
      expect(rebuilt).toEqual(store.materialize(indices[i] as number, context));
    }
  }

  function fill(store: EventStore, extra: Record<string, unknown> | null): number[] {
    const counters = reading({ allocated: 10, reserved: 20 });
    return [
      store.push(5n, "sample", "Sample", group, counters, 0, base, extra as never, null, 0, 0),
      store.push(6n, "phase_enter", null, group, counters, 0, base, { tensors: 4 }, scope, 1, PHASE_ENTER),
      store.push(7n, "phase_exit", null, group, null, null, base, null, scope, 2, PHASE_EXIT),
    ];
  }

  it("rebuild the records the tracker stored, as JSON text or, with a bigint, as objects", () => {
    for (const extra of [{ usage_percent: 50, fragmentation: 0.25 }, { huge: 2n ** 64n }]) {
      const store = new EventStore(8);
      const indices = fill(store, extra);
      const batch = store.pack(indices, new BatchIds());
      expect(typeof batch.objects).toBe(typeof extra.huge === "bigint" ? "object" : "string");
      const tables = new BatchTables();
      expectRebuiltAlike(store, indices, batch, tables, new EventStore(1));
      // A scope is forgotten after its exit record.
      expect(tables.scopes.size).toBe(0);
    }
  });

  it("send each group, base and scope once", () => {
    const store = new EventStore(8);
    const ids = new BatchIds();
    const first = store.pack(fill(store, null), ids);
    const second = store.pack([store.push(8n, "sample", null, group, null, 0, base, null, null, 0, 0)], ids);
    const objects = (batch: typeof first) => JSON.parse(batch.objects as string);
    expect(objects(first).groups).toHaveLength(1);
    expect(objects(first).bases).toHaveLength(1);
    expect(objects(first).scopes).toHaveLength(1);
    expect(objects(second)).toMatchObject({ texts: [], groups: [], bases: [], kinds: [], scopes: [] });
  });

  it("send a phase's path, thread and scope id prefix once, and each later scope in a few bytes", () => {
    const store = new EventStore(8);
    const ids = new BatchIds();
    const tables = new BatchTables();
    const worker = new EventStore(1);
    const objects = (batch: StoredBatch) => JSON.parse(batch.objects as string) as BatchObjects;
    for (const sequence of [10, 20]) {
      const next = { ...(scope as object), scopeId: `s:${sequence}`, sequence } as never;
      const indices = [
        store.push(6n, "phase_enter", null, group, null, 0, base, null, next, sequence, PHASE_ENTER),
        store.push(7n, "phase_exit", null, group, null, 0, base, null, next, sequence + 1, PHASE_EXIT),
      ];
      const batch = store.pack(indices, ids);
      const sent = objects(batch);
      expect(sent.scopes).toHaveLength(1);
      expect(sent.scopes[0]?.[3]).toBe(String(sequence));
      // The kind (name, path, thread) and the texts (event types, "s:") only with the first batch.
      expect(sent.kinds).toHaveLength(sequence === 10 ? 1 : 0);
      expect(sent.texts.map(([, text]) => text)).toEqual(
        sequence === 10 ? ["s:", "phase_enter", "phase_exit"] : [],
      );
      expectRebuiltAlike(store, indices, batch, tables, worker);
    }
  });

  it("keep only the last batch's base metadata on both sides, however often health flaps", () => {
    const store = new EventStore(8);
    const ids = new BatchIds();
    const tables = new BatchTables();
    const worker = new EventStore(1);
    const sample = (onBase: object) =>
      store.push(5n, "sample", "Sample", group, null, 0, onBase as never, null, null, 0, 0);
    const sentBases = (batch: StoredBatch) => (JSON.parse(batch.objects as string) as BatchObjects).bases;
    const steady = { ...base };
    for (let round = 0; round < 100; round++) {
      // A flapping collector: a new base each sample, beside the steady one.
      const flapping = { ...base, collector_health_status: round % 2 ? "healthy" : "degraded" };
      const indices = [sample(steady), sample(flapping)];
      const batch = store.pack(indices, ids);
      expect(sentBases(batch)).toHaveLength(round === 0 ? 2 : 1);
      expectRebuiltAlike(store, indices, batch, tables, worker);
      expect(tables.bases.size).toBe(2);
    }
    // A base used again after a batch without it is sent again, and rebuilt alike.
    const gap = store.pack([sample({ ...base })], ids);
    expectRebuiltAlike(store, [store.written - 1], gap, tables, worker);
    const again = [sample(steady)];
    const batch = store.pack(again, ids);
    expect(sentBases(batch)).toHaveLength(1);
    expectRebuiltAlike(store, again, batch, tables, worker);
  });

  it("keep apart paths that join into one phase path, and scope ids of any form", () => {
    const store = new EventStore(8);
    const nested = {
      ...(scope as object),
      ...{ name: "b", path: ["a", "b"], phasePath: "a / b", depth: 2 },
      ...{ scopeId: "run:7:3", parentScopeId: "other:2" },
    };
    const slashed = {
      ...nested,
      name: "a / b",
      path: ["a / b"],
      depth: 1,
      scopeId: "plain",
      parentScopeId: null,
    };
    const indices = [nested, slashed].map((one, i) =>
      store.push(BigInt(i), "phase_enter", null, group, null, 0, base, null, one as never, i, PHASE_ENTER),
    );
    const batch = store.pack(indices, new BatchIds());
    expect((JSON.parse(batch.objects as string) as BatchObjects).kinds).toHaveLength(2);
    expectRebuiltAlike(store, indices, batch, new BatchTables(), new EventStore(1));
  });
});
