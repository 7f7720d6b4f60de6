import type { JsonObject, TelemetryEvent } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import {
  REUSE_WINDOW,
  RecordRingReader,
  RecordRingWriter,
  type RingObject,
  ringBuffers,
  type SpillChunk,
} from "../../src/pipeline/record-ring.js";
import { EventStore, PHASE_ENTER, PHASE_EXIT, type RecordContext } from "../../src/store.js";
import { cudaCapabilities, reading } from "../helpers.js";

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
};

/** A writer and a reader over one ring, as the tracker and its worker use them; posts are held until `deliver`. */
function ring(capacity = 64, startAt = 0) {
  const buffers = ringBuffers(capacity);
  // A ring that has already carried `startAt` records (head and tail as the int32 cells hold them).
  const control = new Int32Array(buffers.control);
  control[0] = startAt | 0;
  control[1] = startAt | 0;
  const posted: { objects: RingObject[][]; spills: SpillChunk[] } = { objects: [], spills: [] };
  const writer = new RecordRingWriter(
    { objects: (objects) => posted.objects.push(objects), spill: (chunk) => posted.spills.push(chunk) },
    buffers,
  );
  writer.begin(context.sessionId);
  const reader = new RecordRingReader(buffers, context, new EventStore(1));
  const store = new EventStore(capacity * 4);
  const read: TelemetryEvent[] = [];
  /** Posts what the writer holds, hands it to the reader, and reads what can be read. */
  const deliver = (): TelemetryEvent[] => {
    writer.post();
    for (const objects of posted.objects.splice(0)) reader.learn(objects);
    for (const chunk of posted.spills.splice(0)) reader.spill(chunk);
    const before = read.length;
    reader.drain(
      (record) => read.push(record),
      () => true,
    );
    return read.slice(before);
  };
  const expected = (indices: readonly number[]) => indices.map((index) => store.materialize(index, context));
  return { writer, reader, store, posted, deliver, expected };
}

function push(
  store: EventStore,
  eventType: string,
  extra: JsonObject | null,
  phase: object | null = null,
  onBase: JsonObject = base,
  context: string | null = null,
): number {
  const flags = phase === null ? 0 : eventType === "phase_enter" ? PHASE_ENTER : PHASE_EXIT;
  return store.push(
    BigInt(store.written + 1),
    eventType,
    context,
    group,
    reading({ allocated: 10 + store.written, reserved: 20 }),
    store.written,
    onBase,
    extra,
    phase as never,
    store.written,
    flags,
  );
}

describe("the record ring", () => {
  it("rebuilds on the reader's side, record for record, what the tracker stored", () => {
    const r = ring();
    const indices = [
      push(
        r.store,
        "sample",
        { usage_percent: 50, fragmentation: 0.25 },
        null,
        base,
        "Collected telemetry sample.",
      ),
      push(r.store, "sample", { huge: 2n ** 64n, nested: { a: [1, "x"] } } as never, null, base, "Sample"),
      push(r.store, "phase_enter", { tensors: 4, bytes: 1024 }, scope),
      push(r.store, "phase_exit", null, scope),
      // Scope ids of other forms, and paths that join into one phase path.
      push(r.store, "phase_enter", null, { ...scope, scopeId: "run:7:3", parentScopeId: "other:2" }),
      push(r.store, "phase_enter", null, {
        ...scope,
        name: "train / forward",
        path: ["train / forward"],
        scopeId: "s:01",
        parentScopeId: null,
      }),
      // Attributes that are not all numbers, and more numbers than a slot holds.
      push(r.store, "phase_exit", Object.fromEntries([..."abcdefghij"].map((k, i) => [k, i])), {
        ...scope,
        attributes: { lr: 0.5, micro_batches: [1, 2] },
      }),
    ];
    for (const index of indices) r.writer.write(r.store, index);
    expect(r.deliver()).toEqual(r.expected(indices));
  });

  it("posts each object once: a later step of the same phases costs the ring no object", () => {
    const r = ring();
    const step = (sequence: number) => {
      const next = { ...scope, scopeId: `s:${sequence}`, sequence, attributes: { step: sequence } };
      return [
        push(r.store, "phase_enter", { tensors: sequence }, next),
        push(r.store, "phase_exit", { tensors: 1 }, next),
      ];
    };
    const first = step(10);
    for (const index of first) r.writer.write(r.store, index);
    expect(r.writer.waitingObjects).toBeGreaterThan(0);
    expect(r.deliver()).toEqual(r.expected(first));
    const second = step(20);
    for (const index of second) r.writer.write(r.store, index);
    expect(r.writer.waitingObjects).toBe(0);
    // The records wait to be published (the pipeline's timer or the next 64 records do it).
    expect(r.writer.holding).toBe(true);
    expect(r.deliver()).toEqual(r.expected(second));
  });

  it("reads nothing until the objects a record needs have arrived", () => {
    const r = ring();
    const index = push(r.store, "sample", null, null, base, "Collected telemetry sample.");
    r.writer.write(r.store, index);
    const read: TelemetryEvent[] = [];
    r.reader.drain(
      (record) => read.push(record),
      () => true,
    );
    expect(read).toEqual([]);
    expect(r.deliver()).toEqual(r.expected([index]));
  });

  it("shows the worker records every 64 writes, and the rest at post()", () => {
    const r = ring(256);
    const first = push(r.store, "sample", null);
    r.writer.write(r.store, first);
    expect(r.deliver()).toEqual(r.expected([first]));
    const read: TelemetryEvent[] = [];
    const drain = () =>
      r.reader.drain(
        (record) => read.push(record),
        () => true,
      );
    const more = Array.from({ length: 70 }, () => push(r.store, "sample", null));
    for (const index of more.slice(0, 63)) r.writer.write(r.store, index);
    drain();
    expect(read).toEqual([]);
    r.writer.write(r.store, more[63] as number);
    drain();
    expect(read).toEqual(r.expected(more.slice(0, 64)));
    for (const index of more.slice(64)) r.writer.write(r.store, index);
    expect(r.deliver()).toEqual(r.expected(more.slice(64)));
  });

  it("reads on past 2^31 records, where the int32 head and tail wrap, spilling and refilling in order", () => {
    const r = ring(8, 2 ** 31 - 5);
    const first = Array.from({ length: 20 }, () => push(r.store, "sample", null));
    for (const index of first) r.writer.write(r.store, index);
    expect(r.deliver()).toEqual(r.expected(first));
    const second = Array.from({ length: 30 }, () => push(r.store, "sample", null));
    for (const index of second) r.writer.write(r.store, index);
    expect(r.deliver()).toEqual(r.expected(second));
  });

  it("refuses a capacity that is not a power of two (slots are taken by mask)", () => {
    expect(() => ringBuffers(100)).toThrow(/power of two/);
  });

  it("spills a burst beyond the ring into chunks and reads ring and chunks in order", () => {
    const r = ring(8);
    const first = Array.from({ length: 20 }, () => push(r.store, "sample", null));
    for (const index of first) r.writer.write(r.store, index);
    // The ring holds 8; the other 12 wait in a chunk.
    expect(r.writer.holding).toBe(true);
    const read = r.deliver();
    expect(read).toEqual(r.expected(first));
    // The ring is free again: records go there, after a chunk still unread.
    const second = Array.from({ length: 12 }, () => push(r.store, "sample", null));
    for (const index of second.slice(0, 10)) r.writer.write(r.store, index);
    r.writer.post();
    for (const index of second.slice(10)) r.writer.write(r.store, index);
    expect(r.deliver()).toEqual(r.expected(second));
  });

  it("posts an object again after it went unused for a window (the reader forgets it), and rebuilds it alike", () => {
    const r = ring(256);
    const rare = { ...base, collector_health_status: "degraded" };
    const indices = [push(r.store, "sample", null, null, rare)];
    for (const index of indices) r.writer.write(r.store, index);
    r.deliver();
    for (let i = 0; i <= REUSE_WINDOW; i += 128) {
      for (let j = 0; j < 128; j++) r.writer.write(r.store, push(r.store, "sample", null));
      r.deliver();
    }
    const again = push(r.store, "sample", null, null, rare);
    r.writer.write(r.store, again);
    expect(r.writer.holding).toBe(true);
    expect(r.deliver()).toEqual(r.expected([again]));
  });
});
