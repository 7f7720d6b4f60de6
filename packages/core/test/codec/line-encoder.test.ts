import { describe, expect, it } from "vitest";
import {
  encodeTelemetryRecord,
  type JsonObject,
  type JsonValue,
  type TelemetryRecordV3,
  type TelemetryRecordV4,
} from "../../src/index.js";
import { markFloat, TelemetryLineEncoder } from "../../src/internal.js";

/** A deterministic pseudo-random generator, so a failure reproduces. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

type Random = () => number;
const pick = <T>(next: Random, items: readonly T[]): T => items[Math.floor(next() * items.length)]!;

/** Integers where digit writing can go wrong: zero, powers of ten and two, the 2^53 edge. */
const EDGE_INTS = [
  0,
  1,
  9,
  10,
  99,
  100,
  999_999_999,
  1_000_000_000,
  1_000_000_001,
  2 ** 31 - 1,
  2 ** 31,
  2 ** 32,
  1_073_741_824,
  25_769_803_776,
  10 ** 15,
  2 ** 53 - 1,
  Number.MAX_SAFE_INTEGER,
];

function nonNegativeInt(next: Random): number {
  const roll = next();
  if (roll < 0.3) return pick(next, EDGE_INTS);
  if (roll < 0.6) return Math.floor(next() * 2 ** 31);
  return Math.floor(next() * 2 ** 53);
}

function anyInt(next: Random): number {
  const value = nonNegativeInt(next);
  return next() < 0.3 ? -value : value;
}

/** Strings that need Python's escapes: quotes, controls, DEL, non-ASCII, astral characters. */
const STRINGS = [
  "cuda",
  "",
  "héllo wörld",
  'quote " and \\ backslash',
  "tab\tnew\nline\r\b\f",
  "emoji 🙂",
  "\u007f\u0000\u001f",
  "日本語",
  "phase / forward",
  "Collected telemetry sample.",
];

function timestamp(next: Random): bigint | number {
  const roll = next();
  if (roll < 0.1) return pick(next, EDGE_INTS);
  if (roll < 0.2)
    return pick(next, [0n, 4_294_967_295n, 4_294_967_296n, 2n ** 63n, 2n ** 64n - 1n, 2n ** 64n, 10n ** 25n]);
  return 1_765_000_512_105_815_000n + BigInt(Math.floor(next() * 2 ** 50));
}

/** The `phase_scope` object of a phase boundary, as the phase recorder builds it. */
function phaseScope(next: Random, sequence: number): JsonObject {
  const depth = Math.floor(next() * 4);
  const path = Array.from({ length: depth + 1 }, () => pick(next, STRINGS));
  const scope: JsonObject = {
    action: next() < 0.5 ? "enter" : "exit",
    name: path[path.length - 1]!,
    path,
    depth,
    scope_id: `scope-${Math.floor(next() * 1000)}`,
    parent_scope_id: depth === 0 ? null : `scope-${Math.floor(next() * 1000)}`,
    thread_id: Math.floor(next() * 5),
    thread_name: next() < 0.5 ? "main" : "async-1",
    sequence,
  };
  if (next() < 0.3)
    scope.attributes = { epoch: Math.floor(next() * 10), lr: next(), tag: pick(next, STRINGS) };
  return scope;
}

/** The health keys every tracker record carries. */
function healthMetadata(next: Random): JsonObject {
  return {
    backend: "cuda",
    collector_consecutive_failures: next() < 0.9 ? 0 : Math.floor(next() * 5),
    collector_health_status: next() < 0.9 ? "healthy" : "degraded",
    collector_last_error: next() < 0.9 ? null : pick(next, STRINGS),
    collector_next_retry_epoch_s: null,
    collector_partial_fields: next() < 0.9 ? [] : ["device_free_bytes"],
    collectors_health:
      next() < 0.9
        ? { "stormlog.cpu_tracker": "healthy", "stormlog.cuda_tracker": "healthy" }
        : { "stormlog.cuda_tracker": pick(next, ["degraded", "failed"]), "stormlog.cpu_tracker": "healthy" },
    sampling_source: "torch.cuda.memory_stats",
    supports_device_free: true,
    supports_device_total: true,
    telemetry_partial: false,
  };
}

function metadataValue(next: Random): JsonValue {
  const roll = next();
  if (roll < 0.15) return pick(next, STRINGS);
  if (roll < 0.3) return anyInt(next);
  if (roll < 0.4) return pick(next, [0.5, 1e21, -0, 1.5e-7, 2 ** 60, Number.NaN, Number.POSITIVE_INFINITY]);
  if (roll < 0.5) return pick(next, [true, false, null]);
  if (roll < 0.6) return [];
  if (roll < 0.7) return [1, "a", { b: null, a: [2.5] }];
  if (roll < 0.8) return { z: 1, a: pick(next, STRINGS), m: { y: [], x: -3 } };
  if (roll < 0.9) return BigInt(anyInt(next)) * 1000n;
  return pick(next, STRINGS);
}

/** Metadata of one of several shapes (a tracker alternates a few), with the odd value changed. */
function metadata(next: Random, sequence: number): JsonObject {
  const roll = next();
  if (roll < 0.4) return healthMetadata(next);
  if (roll < 0.65) {
    // A phase boundary as the tracker writes it: the scope, the health keys, then where counters came from.
    return {
      phase_scope: phaseScope(next, sequence),
      ...healthMetadata(next),
      phase_counters: next() < 0.5 ? "boundary_read" : "last_sample",
    };
  }
  if (roll < 0.7) return {};
  if (roll < 0.75) return { phase_scope: phaseScope(next, sequence) };
  const keys = ["a", "b", "ü-key", 'key "quoted"', "z", "10", "2", "usage_percent", "fragmentation"];
  const result: JsonObject = {};
  const count = 1 + Math.floor(next() * 6);
  for (let i = 0; i < count; i++) result[pick(next, keys)] = metadataValue(next);
  if (next() < 0.3) {
    // Float-marked values, as decoded records and the tracker's percentages carry.
    result.usage_percent = pick(next, [85, 0, 100, 42.5]);
    markFloat(result, "usage_percent");
  }
  if (next() < 0.05) result["astral 🙂 key"] = 1;
  return result;
}

function nullable<T>(next: Random, value: T): T | null {
  return next() < 0.2 ? null : value;
}

function record(next: Random, sequence: number): TelemetryRecordV3 {
  const worldSize = 1 + Math.floor(next() * 8);
  return {
    schema_version: 3,
    session_id: next() < 0.9 ? "session-a" : pick(next, STRINGS),
    timestamp_ns: timestamp(next) as bigint,
    event_type: pick(next, ["sample", "sample", "phase_enter", "phase_exit", "oom", "é"]),
    collector: next() < 0.9 ? "stormlog.cuda_tracker" : pick(next, STRINGS),
    sampling_interval_ms: pick(next, [100, 0, 1000]),
    pid: pick(next, [4242, -1, 2 ** 31 + 5]),
    host: next() < 0.9 ? "trainer-a" : pick(next, STRINGS),
    job_id: next() < 0.8 ? "job-1" : nullable(next, pick(next, STRINGS)),
    rank: Math.floor(next() * worldSize),
    local_rank: Math.floor(next() * worldSize),
    world_size: worldSize,
    device_id: pick(next, [0, 1, -1, 7]),
    allocator_allocated_bytes: nonNegativeInt(next),
    allocator_reserved_bytes: nonNegativeInt(next),
    allocator_active_bytes: nullable(next, nonNegativeInt(next)),
    allocator_inactive_bytes: nullable(next, next() < 0.7 ? 1000 : nonNegativeInt(next)),
    allocator_change_bytes: next() < 0.6 ? 0 : anyInt(next),
    device_used_bytes: nonNegativeInt(next),
    device_free_bytes: nullable(next, nonNegativeInt(next)),
    device_total_bytes: nullable(next, next() < 0.7 ? 25_769_803_776 : nonNegativeInt(next)),
    context: next() < 0.7 ? "Collected telemetry sample." : nullable(next, pick(next, STRINGS)),
    metadata: metadata(next, sequence),
  };
}

/** A v4 record: counters may be null. */
function recordV4(next: Random, sequence: number): TelemetryRecordV4 {
  const base = record(next, sequence);
  return {
    ...base,
    schema_version: 4,
    allocator_allocated_bytes: nullable(next, base.allocator_allocated_bytes),
    allocator_reserved_bytes: nullable(next, base.allocator_reserved_bytes),
    allocator_change_bytes: nullable(next, base.allocator_change_bytes),
    device_used_bytes: nullable(next, base.device_used_bytes),
  } as TelemetryRecordV4;
}

/** Encodes through `encodeInto` at a random offset of a shared buffer and reads the line back. */
function viaBuffer(
  encoder: TelemetryLineEncoder,
  buffer: Buffer,
  offset: number,
  event: TelemetryRecordV3 | TelemetryRecordV4,
) {
  const end = encoder.encodeInto(event, buffer, offset);
  return end < 0 ? undefined : buffer.toString("latin1", offset, end);
}

describe("TelemetryLineEncoder.encodeInto", () => {
  it("writes core's bytes for many generated records (fixed seed)", () => {
    const next = random(20_261_122);
    const encoder = new TelemetryLineEncoder();
    const buffer = Buffer.alloc(256 << 10);
    let fast = 0;
    let previous: TelemetryRecordV3 | TelemetryRecordV4 = record(next, 0);
    for (let i = 0; i < 6000; i++) {
      // Half the records repeat the previous one but for the counters (what the caches see).
      const event: TelemetryRecordV3 | TelemetryRecordV4 =
        next() < 0.5
          ? {
              ...previous,
              timestamp_ns: (typeof previous.timestamp_ns === "bigint" ? previous.timestamp_ns : 0n) + 100n,
              allocator_allocated_bytes: nonNegativeInt(next),
              device_used_bytes: nonNegativeInt(next),
            }
          : next() < 0.15
            ? recordV4(next, i)
            : record(next, i);
      const expected = encodeTelemetryRecord(event);
      const line = viaBuffer(encoder, buffer, Math.floor(next() * 1024), event);
      if (line !== undefined) {
        fast++;
        expect(line).toBe(expected);
      }
      expect(encoder.encode(event)).toBe(expected);
      previous = event;
    }
    // Most records take the byte path; the rest (astral keys, undefined values) take core's.
    expect(fast).toBeGreaterThan(5000);
  });

  it("writes a tracker's alternating samples and phase boundaries through the byte path", () => {
    const next = random(7);
    const encoder = new TelemetryLineEncoder();
    const buffer = Buffer.alloc(64 << 10);
    const health = healthMetadata(() => 0);
    for (let i = 0; i < 500; i++) {
      const base = record(next, i);
      const phase = i % 3 !== 0;
      const event: TelemetryRecordV3 = {
        ...base,
        event_type: phase ? (i % 3 === 1 ? "phase_enter" : "phase_exit") : "sample",
        context: phase ? "Phase entered: train / step" : "Collected telemetry sample.",
        metadata: phase
          ? { phase_scope: phaseScope(next, i), ...health, phase_counters: "last_sample" }
          : { ...health },
      };
      const end = encoder.encodeInto(event, buffer, 0);
      expect(end).toBeGreaterThan(0);
      expect(buffer.toString("latin1", 0, end)).toBe(encodeTelemetryRecord(event));
    }
  });

  it("stays correct across many contexts and collectors (a step's phase paths, then more than it keeps)", () => {
    const next = random(11);
    const encoder = new TelemetryLineEncoder();
    const buffer = Buffer.alloc(64 << 10);
    const paths = [
      "train",
      "train / load_batch",
      "train / forward",
      "train / backward",
      "train / optimizer_step",
    ];
    for (let i = 0; i < 3000; i++) {
      const base = record(next, i);
      // Cycles of 10 phase contexts, then a flood of distinct ones (past the cache's bound), and a
      // collector change every 700 records.
      const context =
        i < 1500 ? `Phase ${i % 2 ? "exited" : "entered"}: ${paths[(i >> 1) % paths.length]}` : `alert ${i}`;
      const event: TelemetryRecordV3 = {
        ...base,
        context,
        collector: `collector-${Math.floor(i / 700)}`,
        metadata: healthMetadata(() => 0),
      };
      const end = encoder.encodeInto(event, buffer, 0);
      expect(end).toBeGreaterThan(0);
      expect(buffer.toString("latin1", 0, end)).toBe(encodeTelemetryRecord(event));
    }
  });

  it("returns -1 when the buffer lacks room, and stays correct afterwards", () => {
    const next = random(3);
    const encoder = new TelemetryLineEncoder();
    const event = record(next, 1);
    event.metadata = { big: "x".repeat(5000), ...healthMetadata(next) };
    expect(encoder.encodeInto(event, Buffer.alloc(2000), 0)).toBe(-1);
    expect(encoder.encodeInto(event, Buffer.alloc(8000), 7000)).toBe(-1);
    const buffer = Buffer.alloc(16 << 10);
    for (let i = 0; i < 3; i++) {
      const end = encoder.encodeInto(event, buffer, 100);
      expect(buffer.toString("latin1", 100, end)).toBe(encodeTelemetryRecord(event));
    }
  });

  it("notices values changed in place between records, nested or not", () => {
    const encoder = new TelemetryLineEncoder();
    const event = record(random(5), 1);
    const scope = phaseScope(random(6), 1);
    const health = healthMetadata(() => 0);
    event.metadata = { phase_scope: scope, ...health };
    const buffer = Buffer.alloc(16 << 10);
    const encodeBoth = () => {
      const end = encoder.encodeInto(event, buffer, 0);
      expect(buffer.toString("latin1", 0, end)).toBe(encodeTelemetryRecord(event));
    };
    encodeBoth();
    encodeBoth();
    scope.sequence = 99;
    (scope.path as string[]).push("more");
    encodeBoth();
    event.metadata.backend = "rocm";
    encodeBoth();
    (event.metadata.collector_partial_fields as string[]).push("device_total_bytes");
    encodeBoth();
    event.metadata.collector_next_retry_epoch_s = 1_765_000_600;
    markFloat(event.metadata, "collector_next_retry_epoch_s");
    encodeBoth();
    expect(encoder.encode(event)).toContain('"collector_next_retry_epoch_s": 1765000600.0');
  });

  it("compares small nested objects and arrays by value, never by identity", () => {
    const encoder = new TelemetryLineEncoder();
    const event = record(random(11), 1);
    const scope = phaseScope(random(12), 1);
    const health: JsonObject = { "stormlog.tfjs_tracker": "healthy", "stormlog.cpu_tracker": "healthy" };
    const reasons = ["upper bound"];
    event.metadata = { phase_scope: scope, collectors_health: health, reasons, n: 1 };
    const buffer = Buffer.alloc(16 << 10);
    const lines: string[] = [];
    const encodeBoth = () => {
      const end = encoder.encodeInto(event, buffer, 0);
      const line = buffer.toString("latin1", 0, end);
      expect(line).toBe(encodeTelemetryRecord(event));
      lines.push(line);
    };
    // Each edit lands after the bytes of the unchanged value were kept (the value repeated once).
    const edits: (() => void)[] = [
      () => undefined,
      () => {
        health["stormlog.tfjs_tracker"] = "degraded";
      },
      () => {
        health["a new collector"] = "failed";
      },
      () => {
        delete health["stormlog.cpu_tracker"];
      },
      () => {
        health.ratio = 2;
      },
      () => markFloat(health, "ratio"),
      () => {
        event.metadata.collectors_health = { ...health };
      },
      () => {
        (event.metadata.collectors_health as JsonObject).nested = { deeper: true };
      },
      () => {
        reasons[0] = "another reason";
      },
      () => {
        reasons.push("a second reason");
      },
      () => {
        reasons.push(3 as unknown as string);
      },
      () => markFloat(reasons, 2),
      () => {
        event.metadata.n = 1;
        markFloat(event.metadata, "n");
      },
    ];
    for (const edit of edits) {
      edit();
      encodeBoth();
      encodeBoth();
      scope.sequence = (scope.sequence as number) + 1;
      encodeBoth();
    }
    expect(new Set(lines).size).toBeGreaterThan(edits.length);
  });

  it("stays exact while the kept bytes outgrow one arena (64 KB) and move to the next", () => {
    const encoder = new TelemetryLineEncoder();
    const event = record(random(14), 1);
    const buffer = Buffer.alloc(16 << 10);
    let kept = 0;
    for (let i = 0; i < 3000; i++) {
      // A long value that holds for three records (kept on the third), then changes.
      const label = `${"label-".repeat(20)}${Math.floor(i / 3)}`;
      event.metadata = { label, step: i, backend: "tfjs-cpu" };
      const end = encoder.encodeInto(event, buffer, 0);
      expect(buffer.toString("latin1", 0, end)).toBe(encodeTelemetryRecord(event));
      if (i % 3 === 2) kept += label.length + 12;
    }
    expect(kept).toBeGreaterThan(2 * 64 * 1024);
  });

  it("writes phase attributes and flat objects exactly as core, whatever their keys and scalars", () => {
    const encoder = new TelemetryLineEncoder();
    const next = random(13);
    const keys = ["step", "epoch", "ü", 'a "quoted" key', "Z", "10", "2", "", "tab\tkey", "\u007f"];
    const scalars: JsonValue[] = [
      0,
      -0,
      7,
      -3,
      2 ** 53 - 1,
      2 ** 60,
      0.5,
      1e21,
      1.5e-7,
      Number.NaN,
      -Infinity,
      true,
      false,
      null,
      "",
      "é",
      'x"y',
      "tab\t",
    ];
    const buffer = Buffer.alloc(16 << 10);
    for (let i = 0; i < 400; i++) {
      const attributes: JsonObject = {};
      const count = Math.floor(next() * 6);
      for (let k = 0; k < count; k++) attributes[pick(next, keys)] = pick(next, scalars);
      if (next() < 0.1) attributes.nested = { b: 1, a: [2] };
      const scope = { ...phaseScope(next, i), attributes };
      const event = record(next, i);
      event.metadata = { phase_scope: scope, labels: { ...attributes } };
      const end = encoder.encodeInto(event, buffer, 0);
      expect(buffer.toString("latin1", 0, end)).toBe(encodeTelemetryRecord(event));
    }
  });

  it("keeps more key sets than it remembers correct (older sets are learnt again)", () => {
    const encoder = new TelemetryLineEncoder();
    const event = record(random(9), 1);
    const buffer = Buffer.alloc(16 << 10);
    for (let round = 0; round < 3; round++) {
      for (let shape = 0; shape < 12; shape++) {
        event.metadata = Object.fromEntries(
          Array.from({ length: shape + 1 }, (_, k) => [`k${k}`, k * round]),
        );
        const end = encoder.encodeInto(event, buffer, 0);
        expect(buffer.toString("latin1", 0, end)).toBe(encodeTelemetryRecord(event));
      }
    }
  });

  it("leaves records core must write itself to core", () => {
    const encoder = new TelemetryLineEncoder();
    const buffer = Buffer.alloc(16 << 10);
    const base = record(random(11), 1);
    const cases: TelemetryRecordV3[] = [
      { ...base, metadata: { "astral 🙂": 1, a: 2 } },
      { ...base, metadata: { a: undefined } as unknown as JsonObject },
      { ...base, allocator_allocated_bytes: 2 ** 60 },
      { ...base, timestamp_ns: (2 ** 60) as unknown as bigint },
    ];
    for (const event of cases) {
      expect(encoder.encodeInto(event, buffer, 0)).toBe(-1);
      expect(encoder.encode(event)).toBe(encodeTelemetryRecord(event));
    }
  });
});
