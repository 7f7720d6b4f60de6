import { encodeTelemetryRecord, type JsonObject, type TelemetryEvent } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import {
  QUIET_READS_BEFORE_IDLE,
  REUSE_WINDOW,
  RecordRingReader,
  RecordRingWriter,
  type RingObject,
  RingWatch,
  ringBuffers,
  type SpillChunk,
  VALUE_CELLS,
} from "../../src/pipeline/record-ring.js";
import { EventStore, PHASE_ENTER, PHASE_EXIT, type RecordContext } from "../../src/records/store.js";
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
function ring(capacity = 64, startAt = 0, maxBacklog = Number.POSITIVE_INFINITY) {
  const buffers = ringBuffers(capacity);
  // A ring that has already carried `startAt` records (head and tail as the int32 cells hold them).
  const control = new Int32Array(buffers.control);
  control[0] = startAt | 0;
  control[1] = startAt | 0;
  const posted: { objects: RingObject[][]; spills: SpillChunk[] } = { objects: [], spills: [] };
  const writer = new RecordRingWriter(
    { objects: (objects) => posted.objects.push(objects), spill: (chunk) => posted.spills.push(chunk) },
    buffers,
    maxBacklog,
  );
  writer.begin(context.sessionId);
  const reader = new RecordRingReader(buffers, context, new EventStore(1));
  const store = new EventStore(capacity * 4);
  const read: TelemetryEvent[] = [];
  /** Posts what the writer holds, hands it to the reader, and reads what can be read. */
  const deliver = (): TelemetryEvent[] => {
    writer.post();
    // Copied, as postMessage copies them: the reader never shares an object with the tracker.
    for (const objects of posted.objects.splice(0)) reader.learn(structuredClone(objects));
    for (const chunk of posted.spills.splice(0)) reader.spill(chunk);
    const before = read.length;
    reader.drain(
      (record) => read.push(record),
      () => true,
    );
    return read.slice(before);
  };
  const expected = (indices: readonly number[]) => indices.map((index) => store.materialize(index, context));
  return { writer, reader, store, posted, read, deliver, expected };
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

  it("drops and counts the records beyond its backlog bound while the reader is behind, and takes more once it caught up", () => {
    const r = ring(8, 0, 16);
    const burst = Array.from({ length: 40 }, () => push(r.store, "sample", null));
    for (const index of burst) r.writer.write(r.store, index);
    // 8 in the ring, 8 in a chunk: the reader is 16 behind, so the other 24 are dropped.
    expect(r.writer.droppedRecords).toBe(24);
    expect(r.deliver()).toEqual(r.expected(burst.slice(0, 16)));
    expect(r.reader.takeDropped()).toBe(24);
    // Counted once.
    expect(r.reader.takeDropped()).toBe(0);
    // Behind again: a `stop` record, and one written as not droppable (a session's last), still go out.
    const behind = Array.from({ length: 17 }, () => push(r.store, "sample", null));
    for (const index of behind) r.writer.write(r.store, index);
    expect(r.writer.droppedRecords).toBe(25);
    const last = [push(r.store, "sample", null), push(r.store, "stop", null)];
    r.writer.write(r.store, last[0] as number, true, false);
    r.writer.write(r.store, last[1] as number);
    expect(r.writer.droppedRecords).toBe(25);
    expect(r.deliver()).toEqual(r.expected([...behind.slice(0, 16), ...last]));
    expect(r.reader.takeDropped()).toBe(1);
    // Caught up: the next burst up to the bound is taken whole, in order, after the one before.
    const next = Array.from({ length: 16 }, () => push(r.store, "sample", null));
    for (const index of next) r.writer.write(r.store, index);
    expect(r.writer.droppedRecords).toBe(25);
    expect(r.deliver()).toEqual(r.expected(next));
    expect(r.reader.takeDropped()).toBe(0);
  });

  it("refuses a backlog bound smaller than the ring", () => {
    expect(
      () => new RecordRingWriter({ objects: () => undefined, spill: () => undefined }, ringBuffers(8), 4),
    ).toThrow(/must hold the ring/);
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

/** The records as text, key order included (`toEqual` ignores it), bigints marked. */
function exactly(records: readonly TelemetryEvent[]): string[] {
  return records.map((record) =>
    JSON.stringify(record, (_key, value) => (typeof value === "bigint" ? `${value}n` : value)),
  );
}

/** Rebuilt record for record, key order included, and the sink's lines byte for byte. */
function expectSame(read: readonly TelemetryEvent[], expected: readonly TelemetryEvent[]): void {
  expect(read).toEqual(expected);
  expect(exactly(read)).toEqual(exactly(expected));
  expect(read.map(encodeTelemetryRecord)).toEqual(expected.map(encodeTelemetryRecord));
}

/** Posts what the writer holds and returns the values of the objects posted (left for `deliver`). */
function postedValues(r: ReturnType<typeof ring>): unknown[] {
  r.writer.post();
  return r.posted.objects.flat().map(([, value]) => value);
}

/** A tfjs sample's detail: the backend, counts, a flag and the live tensors by birth phase. */
function tfjsSample(live: JsonObject, tensors = 20, backend = "cpu", unreliable = false): JsonObject {
  return {
    tfjs_backend: backend,
    tfjs_num_tensors: tensors,
    tfjs_num_data_buffers: tensors,
    tfjs_unreliable: unreliable,
    tfjs_num_bytes: tensors * 64,
    tfjs_live_by_phase: live,
    tfjs_attribution: "birth_phase",
  };
}

function livePhases(tensors: number): JsonObject {
  return {
    "train / forward": {
      tensors,
      bytes: tensors * 64,
      largest: [{ dtype: "float32", shape: [4, 4], bytes: 64, count: tensors }],
    },
  };
}

describe("the record ring's detail of mixed values", () => {
  it("rebuilds strings, booleans, null, nested objects and arrays key for key, in order", () => {
    const r = ring();
    const live = livePhases(3);
    const detail = tfjsSample(live);
    const indices = [
      push(r.store, "sample", detail, null, base, "Collected telemetry sample."),
      // Integer-like keys come first in any object; -0 and NaN are kept by the cell.
      push(r.store, "sample", { b: 1, "2": "x", a: true, "1": null, z: -0, n: Number.NaN, list: [1, "y"] }),
      // A `__proto__` key of the object's own (as JSON.parse makes it), not its prototype.
      push(r.store, "sample", JSON.parse('{"__proto__": 5, "name": "p"}') as JsonObject),
      // Detail and attributes in one slot, the attributes' values after the detail's.
      push(
        r.store,
        "phase_enter",
        { tfjs_num_tensors: 4, tfjs_backend: "cpu" },
        {
          ...scope,
          attributes: { model: "mlp", warmup: true, note: null, step: 3, sizes: [8, 16] },
        },
      ),
      push(
        r.store,
        "phase_exit",
        { tfjs_num_tensors: 5, tfjs_backend: "cpu" },
        {
          ...scope,
          attributes: { model: "mlp", warmup: false, note: null, step: 3, sizes: [8, 16] },
        },
      ),
      push(r.store, "sample", { empty: {}, none: [] }),
      push(r.store, "sample", {}),
    ];
    for (const index of indices) r.writer.write(r.store, index);
    const values = postedValues(r);
    // Nothing was posted whole: the detail's texts and its nested object went by themselves.
    expect(values).not.toContain(detail);
    expect(values).toContain(live);
    expect(values).toContain("cpu");
    expect(values.filter((value) => value === "cpu")).toHaveLength(1);
    expectSame(r.deliver(), r.expected(indices));
  });

  it("copies a phase's attributes that hold an object, which the loop may change in place between phases", () => {
    const r = ring();
    // One object, changed in place before the next phase: each record keeps what it had.
    const shared: JsonObject = { lr: 0.1 };
    const attributes = { step: 1, optimizer: shared };
    const first = push(r.store, "phase_enter", null, { ...scope, attributes: { ...attributes } });
    r.writer.write(r.store, first);
    // As it was written (the stored record shares the object the loop changes next).
    const expectedFirst = structuredClone(r.expected([first]));
    r.deliver();
    shared.lr = 0.05;
    const second = push(r.store, "phase_enter", null, { ...scope, attributes: { ...attributes, step: 2 } });
    r.writer.write(r.store, second);
    const delivered = r.deliver();
    expect(delivered).toHaveLength(1);
    const read = delivered[0] as TelemetryEvent;
    expect((read.metadata.phase_scope as { attributes?: JsonObject }).attributes).toEqual({
      step: 2,
      optimizer: { lr: 0.05 },
    });
    expectSame(r.read.slice(0, 1), expectedFirst);
  });

  it("gives the same keys with values of other types a key list of their own", () => {
    const r = ring();
    const indices = [{ x: 1 }, { x: "one" }, { x: null }, { x: true }, { x: [1] }, { x: 1 }].map((extra) =>
      push(r.store, "sample", extra),
    );
    for (const index of indices) r.writer.write(r.store, index);
    expectSame(r.deliver(), r.expected(indices));
  });

  it("tells apart key lists that would join alike (keys holding the separator)", () => {
    const r = ring();
    const indices = [
      push(r.store, "sample", { "a\u0000b": 1, c: 2 }),
      push(r.store, "sample", { a: 1, "b\u0000c": 2 }),
      push(r.store, "sample", { "a\u0000b": 3, c: 4 }),
    ];
    for (const index of indices) r.writer.write(r.store, index);
    expectSame(r.deliver(), r.expected(indices));
  });

  it("posts nothing for a steady sample, and only what changed otherwise", () => {
    const r = ring();
    const live = livePhases(3);
    const first = push(r.store, "sample", tfjsSample(live, 20));
    r.writer.write(r.store, first);
    expect(r.deliver()).toEqual(r.expected([first]));

    // New counts and a new detail object, the same live-tensor object: nothing new to the worker.
    const steady = [
      push(r.store, "sample", tfjsSample(live, 21)),
      push(r.store, "sample", tfjsSample(live, 22)),
    ];
    for (const index of steady) r.writer.write(r.store, index);
    expect(r.writer.waitingObjects).toBe(0);
    expect(postedValues(r)).toEqual([]);
    expectSame(r.deliver(), r.expected(steady));

    // A flag that flips is a cell too.
    const flipped = push(r.store, "sample", tfjsSample(live, 22, "cpu", true));
    r.writer.write(r.store, flipped);
    expect(postedValues(r)).toEqual([]);
    expectSame(r.deliver(), r.expected([flipped]));

    // A changed live-tensor object is posted, and it alone.
    const changed = livePhases(4);
    const next = push(r.store, "sample", tfjsSample(changed, 23));
    r.writer.write(r.store, next);
    // Published but not yet posted: the record waits for the object it names.
    r.writer.publish();
    r.reader.drain(
      () => expect.unreachable("read before its object was posted"),
      () => true,
    );
    const values = postedValues(r);
    expect(values).toHaveLength(1);
    expect(values[0]).toBe(changed);
    expectSame(r.deliver(), r.expected([next]));

    // A new backend name: its text alone.
    const moved = push(r.store, "sample", tfjsSample(changed, 23, "webgl"));
    r.writer.write(r.store, moved);
    expect(postedValues(r)).toEqual(["webgl"]);
    expectSame(r.deliver(), r.expected([moved]));
  });

  it("posts the objects of 1000 steady samples with the first one", () => {
    const r = ring(256);
    const live = livePhases(3);
    const posts: number[] = [];
    for (let i = 0; i < 1000; i++) {
      const detail = tfjsSample(live, 20 + (i % 7), "cpu", i % 2 === 0);
      r.writer.write(r.store, push(r.store, "sample", detail, null, base, "Collected telemetry sample."));
      if (i === 0 || i % 100 === 99) {
        posts.push(postedValues(r).length);
        r.deliver();
      }
    }
    // The group, base, event type and context; the key list, the texts "cpu" and "birth_phase", the live tensors.
    expect(posts).toEqual([8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it("keeps the texts and objects named in cells while they are used, and posts them again once forgotten", () => {
    const r = ring(256);
    const live = livePhases(3);
    const used = (tensors: number) => push(r.store, "sample", tfjsSample(live, tensors));
    // Used in every record for more than a window: the reader must not forget them meanwhile.
    let last: number[] = [];
    for (let i = 0; i <= REUSE_WINDOW + 4096; i += 128) {
      last = Array.from({ length: 128 }, (_, j) => used(j));
      for (const index of last) r.writer.write(r.store, index);
      const values = postedValues(r);
      if (i > 0) expect(values).toEqual([]);
      r.deliver();
    }
    expectSame(r.read.slice(-128), r.expected(last));
    // Then unused for a window: both sides forget them, and they are posted again.
    for (let i = 0; i <= REUSE_WINDOW; i += 128) {
      for (let j = 0; j < 128; j++) r.writer.write(r.store, push(r.store, "sample", null));
      r.deliver();
    }
    const again = used(7);
    r.writer.write(r.store, again);
    const values = postedValues(r);
    expect(values).toContain(live);
    expect(values).toContain("cpu");
    expect(values).toContain("birth_phase");
    expectSame(r.deliver(), r.expected([again]));
  });

  it("writes spilled records with the same encoding", () => {
    const r = ring(8);
    const lives = [livePhases(1), livePhases(2)];
    const details: JsonObject[] = [];
    const indices = Array.from({ length: 30 }, (_, i) => {
      const detail = tfjsSample(lives[i % 2] as JsonObject, i, i < 15 ? "cpu" : "wasm", i % 3 === 0);
      details.push(detail);
      return push(r.store, "sample", detail);
    });
    for (const index of indices) r.writer.write(r.store, index);
    const values = postedValues(r);
    expect(r.posted.spills.length).toBeGreaterThan(0);
    for (const detail of details) expect(values).not.toContain(detail);
    // The two live-tensor objects, two backend names and `birth_phase`, besides the key list.
    expect(values.filter((value) => lives.includes(value as JsonObject))).toHaveLength(2);
    expectSame(r.deliver(), r.expected(indices));
  });

  it("posts whole what the cells cannot hold, and no part of it besides", () => {
    const r = ring();
    const keys = (count: number, from = 0) => Array.from({ length: count }, (_, i) => `k${from + i}`);
    const tooMany = Object.fromEntries(keys(VALUE_CELLS + 1).map((key) => [key, `text-${key}`]));
    const bigint = { label: "text-big", huge: 2n ** 64n } as never as JsonObject;
    const undefinedValue = { label: "text-undefined", missing: undefined } as never as JsonObject;
    const detail = Object.fromEntries(keys(VALUE_CELLS - 2).map((key, i) => [key, i]));
    // Three attributes after the detail's values: one more than the slot's cells.
    const attributes = { label: "text-attributes", g: 7, h: 8 };
    const indices = [
      push(r.store, "sample", tooMany),
      push(r.store, "sample", bigint),
      push(r.store, "sample", undefinedValue),
      push(r.store, "phase_enter", detail, { ...scope, attributes }),
    ];
    for (const index of indices) r.writer.write(r.store, index);
    const values = postedValues(r);
    for (const whole of [tooMany, bigint, undefinedValue, attributes]) expect(values).toContain(whole);
    expect(values).not.toContain(detail);
    expect(values.filter((value) => typeof value === "string" && value.startsWith("text-"))).toEqual([]);
    expectSame(r.deliver(), r.expected(indices));
  });
});

describe("the worker's waits on the ring (RingWatch)", () => {
  /** "read" when `wait` ends within `ms`, else "still waiting". */
  const within = (wait: Promise<void>, ms: number) =>
    Promise.race([
      wait.then(() => "read" as const),
      new Promise<"still waiting">((resolve) => setTimeout(() => resolve("still waiting"), ms)),
    ]);
  /** A ring whose worker side waits `readIntervalMs` (a minute when idle); `publish` writes a record and publishes it without a wake. */
  const watched = (readIntervalMs: number) => {
    const buffers = ringBuffers(64);
    const writer = new RecordRingWriter({ objects: () => undefined, spill: () => undefined }, buffers);
    writer.begin(context.sessionId);
    const store = new EventStore(256);
    const publish = () => {
      writer.write(store, push(store, "sample", null));
      writer.publish(false);
    };
    return { watch: new RingWatch(buffers, readIntervalMs, 60_000), publish };
  };

  it("lets a publication without a wake wait for the next read while records come", async () => {
    const { watch, publish } = watched(1_000);
    for (let round = 0; round < 3; round++) {
      const waiting = watch.wait();
      publish();
      // No system call from the training thread: the worker finds the records at its next read.
      expect(await within(waiting, 200)).toBe("still waiting");
      await waiting;
    }
  });

  it("goes idle after reads that found nothing, and is woken by the next publication of any kind", async () => {
    const { watch, publish } = watched(1);
    // Quiet reads until the worker sleeps its idle interval (a minute here).
    for (let i = 0; i < QUIET_READS_BEFORE_IDLE; i++) await watch.wait();
    const idle = watch.wait();
    expect(await within(idle, 100)).toBe("still waiting");
    publish();
    expect(await within(idle, 5_000)).toBe("read");
    // Records came: back to the read interval.
    expect(await within(watch.wait(), 5_000)).toBe("read");
  });
});
