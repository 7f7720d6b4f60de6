import { describe, expect, it } from "vitest";
import { decodeTelemetryLine, encodeTelemetryRecord } from "../../src/codec/codec.js";
import type { JsonObject } from "../../src/codec/json.js";
import { parseJson } from "../../src/codec/json-codec.js";
import { TelemetryValidationError } from "../../src/runtime/errors.js";
import {
  inferMemoryCapabilities,
  type NormalizeOptions,
  normalizeTelemetryRecord,
} from "../../src/schema/legacy.js";
import type { TelemetryEvent } from "../../src/schema/schema.js";
import { stableLegacySessionId } from "../../src/schema/session.js";
import { validateTelemetryRecord } from "../../src/schema/validate.js";
import { fromBits, python, pythonLegacyId } from "../python-fixtures.js";

/** The reference test suite's `_make_valid_event()`, as a v2 record dict. */
function validV2(): JsonObject {
  return {
    schema_version: 2,
    timestamp_ns: 1_700_000_000_000_000_000n,
    event_type: "sample",
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 100,
    pid: 1234,
    host: "host-a",
    job_id: "job-123",
    rank: 1,
    local_rank: 1,
    world_size: 8,
    device_id: 0,
    allocator_allocated_bytes: 1024,
    allocator_reserved_bytes: 2048,
    allocator_active_bytes: 512,
    allocator_inactive_bytes: 1536,
    allocator_change_bytes: 256,
    device_used_bytes: 2048,
    device_free_bytes: 4096,
    device_total_bytes: 6144,
    context: "unit",
    metadata: { origin: "test" },
  };
}

function record(text: string): JsonObject {
  return parseJson(text) as JsonObject;
}

function rejection(run: () => unknown): TelemetryValidationError {
  try {
    run();
  } catch (error) {
    if (TelemetryValidationError.isInstance(error)) return error;
    throw error;
  }
  throw new Error("expected a TelemetryValidationError");
}

const normalize = (value: JsonObject, options?: NormalizeOptions): TelemetryEvent =>
  normalizeTelemetryRecord(value, options);

describe("legacy records (ported from test_telemetry_v2.py)", () => {
  it("converts a gpumemprof record", () => {
    const event = normalize(
      {
        timestamp: 1700000000.25,
        event_type: "allocation",
        memory_allocated: 10_000,
        memory_reserved: 15_000,
        memory_change: 512,
        device_id: 0,
        context: "alloc",
        metadata_usage_percent: 75.5,
      },
      { defaultCollector: "stormlog.cuda_tracker", defaultSamplingIntervalMs: 100 },
    );
    expect(event.schema_version).toBe(3);
    expect(event.session_id).toBe(pythonLegacyId(["1700000000.25", "unknown", -1]));
    // int(1700000000.25 * 1e9) in doubles, exactly as Python computes it.
    expect(event.timestamp_ns).toBe(1_700_000_000_249_999_872n);
    expect(event.collector).toBe("stormlog.cuda_tracker");
    expect(event.allocator_allocated_bytes).toBe(10_000);
    expect(event.allocator_reserved_bytes).toBe(15_000);
    expect(event.allocator_change_bytes).toBe(512);
    expect(event.sampling_interval_ms).toBe(100);
    expect(event.context).toBe("alloc");
    expect(event.metadata).toEqual({ usage_percent: 75.5 });
  });

  it("converts a CPU record with defaults", () => {
    const event = normalize(
      record(
        '{"timestamp": 1700000001.0, "event_type": "allocation", "memory_allocated": 8192, "memory_change": 1024, "context": "cpu"}',
      ),
      { defaultCollector: "stormlog.cpu_tracker", defaultSamplingIntervalMs: 200 },
    );
    expect(event).toMatchObject({
      collector: "stormlog.cpu_tracker",
      device_id: -1,
      allocator_allocated_bytes: 8192,
      allocator_reserved_bytes: 8192,
      device_used_bytes: 8192,
      device_total_bytes: null,
      device_free_bytes: null,
      pid: -1,
      host: "unknown",
      job_id: null,
      rank: 0,
      local_rank: 0,
      world_size: 1,
      sampling_interval_ms: 200,
    });
    // The float token keeps its ".0" in the synthetic id, as Python's str(1700000001.0) does.
    expect(event.session_id).toBe(pythonLegacyId(["1700000001.0", "unknown", -1]));
  });

  it("maps a backend named in metadata to its collector", () => {
    const event = normalize(
      {
        timestamp: 1700000001.0,
        event_type: "sample",
        memory_allocated: 4096,
        memory_reserved: 8192,
        memory_change: 0,
        metadata: { backend: "mps" },
      },
      { defaultCollector: "legacy.unknown", defaultSamplingIntervalMs: 100 },
    );
    expect(event.collector).toBe("stormlog.mps_tracker");
    expect(event.metadata).toEqual({ backend: "mps" });
  });

  it("converts a TensorFlow record with defaults", () => {
    const event = normalize(
      { timestamp: 1700000002.5, type: "sample", memory_mb: 2.0, device: "/GPU:0" },
      { defaultCollector: "legacy.unknown", defaultSamplingIntervalMs: 500 },
    );
    expect(event).toMatchObject({
      collector: "stormlog.tensorflow.memory_tracker",
      event_type: "sample",
      device_id: 0,
      allocator_allocated_bytes: 2 * 1024 * 1024,
      device_used_bytes: 2 * 1024 * 1024,
      sampling_interval_ms: 500,
    });
    expect(event.session_id).toBe(pythonLegacyId(["1700000002.5", "unknown", -1]));
  });

  it("accepts a null total memory", () => {
    const event = normalize(
      {
        timestamp: 1700000004.0,
        event_type: "allocation",
        memory_allocated: 1024,
        memory_reserved: 2048,
        memory_change: 256,
        device_id: 0,
        total_memory: null,
      },
      { defaultCollector: "stormlog.cuda_tracker", defaultSamplingIntervalMs: 100 },
    );
    expect(event.schema_version).toBe(3);
    expect(event.device_total_bytes).toBeNull();
    expect(event.device_free_bytes).toBeNull();
  });

  it("can be disabled", () => {
    const error = rejection(() =>
      normalize({ timestamp: 1.0, memory_allocated: 1 }, { permissiveLegacy: false }),
    );
    expect(error.message).toMatch(/Legacy record conversion is disabled/);
  });
});

describe("legacy field mapping", () => {
  it("truncates timestamp seconds to nanoseconds as Python's int(float(t) * 1e9)", () => {
    for (const [bits, expected] of python.legacy_timestamp_ns) {
      const event = normalize({ timestamp: fromBits(bits), memory_allocated: 1 });
      expect(event.timestamp_ns).toBe(BigInt(expected));
    }
  });

  it("converts memory_mb to bytes as Python's int(float(mb) * 1024**2)", () => {
    for (const [bits, expected] of python.legacy_memory_mb) {
      const event = normalize({ timestamp_ns: 1, memory_mb: fromBits(bits) });
      expect(event.allocator_allocated_bytes).toBe(Number(expected));
    }
  });

  it("prefers timestamp_ns and keeps every digit", () => {
    const event = normalize(
      record('{"timestamp_ns": 1700000000000000001, "timestamp": 5.0, "host": "host-a", "pid": 1234}'),
    );
    expect(event.timestamp_ns).toBe(1_700_000_000_000_000_001n);
    expect(event.session_id).toBe(stableLegacySessionId(["1700000000000000001", "host-a", 1234]));
  });

  it("uses the reference's synthetic id for a record with host and pid", () => {
    const event = normalize(record('{"timestamp_ns": 1700000000000000000, "host": "host-a", "pid": 1234}'));
    expect(event.session_id).toBe(pythonLegacyId(["1700000000000000000", "host-a", 1234]));
  });

  it("rejects a record without a usable timestamp", () => {
    expect(rejection(() => normalize({ memory_allocated: 1 })).message).toMatch(/missing a valid timestamp/);
    expect(rejection(() => normalize({ timestamp: "1700000000" })).field).toBe("timestamp");
    expect(rejection(() => normalize({ timestamp: true })).message).toMatch(/missing a valid timestamp/);
    expect(rejection(() => normalize({ timestamp_ns: 1.5 })).field).toBe("timestamp_ns");
    expect(rejection(() => normalize({ timestamp: Number.NaN })).field).toBe("timestamp");
  });

  it("reads the device from device_id, then the device string, then the record kind", () => {
    const device = (extra: JsonObject) => normalize({ timestamp_ns: 1, ...extra }).device_id;
    expect(device({ device_id: 3, device: "cpu" })).toBe(3);
    expect(device({ device: "CPU:0" })).toBe(-1);
    expect(device({ device: "cuda:1" })).toBe(1);
    expect(device({ device: "/GPU:2" })).toBe(2);
    expect(device({ device: "/gpu" })).toBe(0);
    expect(device({ device: "tpu:x" })).toBe(-1);
    expect(device({ device: "tpu:x", memory_mb: 1 })).toBe(0);
    expect(device({})).toBe(-1);
  });

  it("maps counters with first-match-wins and derives free memory", () => {
    const event = normalize({
      timestamp_ns: 1,
      allocator_allocated_bytes: 10,
      memory_allocated: 99,
      memory_reserved: 20,
      allocator_active_bytes: 5,
      allocator_inactive_bytes: null,
      device_used_bytes: 30,
      metadata: { total_bytes: 100 },
    });
    expect(event).toMatchObject({
      allocator_allocated_bytes: 10,
      allocator_reserved_bytes: 20,
      allocator_active_bytes: 5,
      allocator_inactive_bytes: null,
      allocator_change_bytes: 0,
      device_used_bytes: 30,
      device_total_bytes: 100,
      device_free_bytes: 70,
    });
    expect(normalize({ timestamp_ns: 1, device_used_bytes: 7 }).allocator_allocated_bytes).toBe(7);
    expect(normalize({ timestamp_ns: 1, device_total: 8, memory_allocated: 2 }).device_free_bytes).toBe(6);
    expect(rejection(() => normalize({ timestamp_ns: 1, memory_allocated: 9, total_memory: 8 })).field).toBe(
      "device_used_bytes",
    );
  });

  it("takes pid and host from the record, then metadata", () => {
    const event = normalize({ timestamp_ns: 1, metadata: { pid: 42, host: "meta-host" } });
    expect(event).toMatchObject({ pid: 42, host: "meta-host" });
    expect(event.metadata).toEqual({ pid: 42, host: "meta-host" });
    // The synthetic id looks at the record only (host "unknown", pid -1), as the reference does.
    expect(event.session_id).toBe(stableLegacySessionId([1, "unknown", -1]));
    expect(rejection(() => normalize({ timestamp_ns: 1, host: "" })).field).toBe("host");
  });

  it("picks the collector: explicit, backend, memory_mb, memory_allocated, default", () => {
    const collector = (extra: JsonObject, options?: NormalizeOptions) =>
      normalize({ timestamp_ns: 1, ...extra }, options).collector;
    expect(collector({ collector: "custom", backend: "cuda" })).toBe("custom");
    expect(collector({ collector: " ", backend: " ROCm " })).toBe("stormlog.rocm_tracker");
    expect(collector({ backend: "cpu", metadata: { backend: "mps" } })).toBe("stormlog.cpu_tracker");
    // A record key wins over metadata even when null, as record.get("backend", ...) does.
    expect(collector({ backend: null, metadata: { backend: "mps" }, memory_allocated: 1 })).toBe(
      "stormlog.cpu_tracker",
    );
    expect(collector({ backend: "tpu", memory_mb: 1 })).toBe("stormlog.tensorflow.memory_tracker");
    expect(collector({ memory_allocated: 1, device_id: 0 })).toBe("stormlog.cuda_tracker");
    expect(collector({}, { defaultCollector: "legacy.csv" })).toBe("legacy.csv");
    expect(collector({})).toBe("legacy.unknown");
  });

  it("merges metadata_ keys, takes identity from metadata and strips it", () => {
    const event = normalize({
      timestamp_ns: 1,
      metadata: { job_id: "meta-job", rank: 1, world_size: 2, session_id: "meta-session", keep: true },
      metadata_local_rank: 1,
      metadata_keep: "overridden",
    });
    expect(event).toMatchObject({
      job_id: "meta-job",
      rank: 1,
      local_rank: 1,
      world_size: 2,
      session_id: "meta-session",
    });
    expect(event.metadata).toEqual({ keep: "overridden" });
    expect(rejection(() => normalize({ timestamp_ns: 1, metadata: [] })).message).toMatch(
      /metadata must be an object when provided/,
    );
    expect(rejection(() => normalize({ timestamp_ns: 1, metadata: { rank: 2, world_size: 2 } })).field).toBe(
      "rank",
    );
  });

  it("resolves the session: record, metadata, default, synthetic", () => {
    const base = { timestamp_ns: 1 };
    expect(normalize({ ...base, session_id: "own", metadata: { session_id: "meta" } }).session_id).toBe(
      "own",
    );
    expect(
      normalize({ ...base, metadata: { session_id: "meta" } }, { defaultSessionId: "file" }).session_id,
    ).toBe("meta");
    expect(normalize({ ...base, session_id: "  " }, { defaultSessionId: "file" }).session_id).toBe("file");
    expect(normalize(base).session_id).toBe(stableLegacySessionId([1, "unknown", -1]));
  });

  it("maps event type and context from their legacy names", () => {
    expect(normalize({ timestamp_ns: 1, type: "peak", message: "hi" })).toMatchObject({
      event_type: "peak",
      context: "hi",
    });
    expect(normalize({ timestamp_ns: 1, context: "" }).context).toBe("");
    expect(rejection(() => normalize({ timestamp_ns: 1, event_type: null })).field).toBe("event_type");
    expect(rejection(() => normalize({ timestamp_ns: 1, context: 5 })).field).toBe("context");
  });

  it("rejects integral float tokens in integer fields unless lenient", () => {
    const text = '{"timestamp": 1.0, "memory_allocated": 1024.0}';
    expect(rejection(() => normalize(record(text))).message).toMatch(/memory_allocated must be an integer/);
    const notes: string[] = [];
    const event = normalize(record(text), { strict: false, onNote: (note) => notes.push(note) });
    expect(event.allocator_allocated_bytes).toBe(1024);
    expect(notes).toEqual([expect.stringContaining("memory_allocated")]);
  });

  it("names the source location in errors", () => {
    const error = rejection(() =>
      normalize({ memory_allocated: 1 }, { location: { file: "old.json", line: 3 } }),
    );
    expect(error.message).toMatch(/old\.json:3/);
    expect(error.location).toEqual({ file: "old.json", line: 3 });
  });

  it("upgrades to v4 with inferred capabilities on request", () => {
    const event = normalize(
      { timestamp: 1700000000.25, memory_allocated: 10, memory_reserved: 20, device_id: 0 },
      { upgradeTo: 4 },
    );
    expect(event.schema_version).toBe(4);
    expect(event.metadata.memory_capabilities).toEqual({
      backend: "cuda",
      telemetry_collector: "stormlog.cuda_tracker",
      sampling_source: "legacy",
      supports_allocator_allocated: true,
      supports_allocator_reserved: true,
      supports_allocator_active: false,
      supports_allocator_inactive: false,
      supports_device_used: true,
      supports_device_free: false,
      supports_device_total: false,
      supports_native_allocator_history: false,
      supports_fragmentation_analysis: true,
      supports_allocator_attribution: true,
      supports_bounded_profiling: false,
    });
  });
});

describe("versioned records (ported from test_telemetry_v2.py)", () => {
  it("upgrades v2 to v3, resolving the session", () => {
    const event = normalize(validV2(), { defaultSessionId: "file-session" });
    expect(event.schema_version).toBe(3);
    expect(event.session_id).toBe("file-session");
    expect(event.timestamp_ns).toBe(1_700_000_000_000_000_000n);
    expect(Object.keys(event)).toEqual([
      "schema_version",
      "session_id",
      "timestamp_ns",
      "event_type",
      "collector",
      "sampling_interval_ms",
      "pid",
      "host",
      "job_id",
      "rank",
      "local_rank",
      "world_size",
      "device_id",
      "allocator_allocated_bytes",
      "allocator_reserved_bytes",
      "allocator_active_bytes",
      "allocator_inactive_bytes",
      "allocator_change_bytes",
      "device_used_bytes",
      "device_free_bytes",
      "device_total_bytes",
      "context",
      "metadata",
    ]);
    const synthetic = normalize(validV2());
    expect(synthetic.session_id).toBe(pythonLegacyId(["1700000000000000000", "host-a", 1234]));
  });

  it("upgrades a decoded v2 line", () => {
    const line = encodeTelemetryRecord(validateTelemetryRecord(validV2()));
    const event = normalize(decodeTelemetryLine(line) as unknown as JsonObject, {
      defaultSessionId: "segment",
    });
    expect(normalizeTelemetryRecord(decodeTelemetryLine(line), { defaultSessionId: "segment" })).toEqual(
      event,
    );
    expect(event).toMatchObject({
      schema_version: 3,
      session_id: "segment",
      timestamp_ns: 1_700_000_000_000_000_000n,
    });
  });

  it("takes the session from metadata and leaves the metadata key in place", () => {
    const event = normalize(
      { ...validV2(), metadata: { session_id: "meta-session" } },
      { defaultSessionId: "file" },
    );
    expect(event.session_id).toBe("meta-session");
    expect(event.metadata).toEqual({ session_id: "meta-session" });
  });

  it("fills a missing local rank with the rank, as the reference's loaders do", () => {
    const input: JsonObject = { ...validV2(), rank: 3 };
    delete input.local_rank;
    expect(normalize(input)).toMatchObject({ rank: 3, local_rank: 3, world_size: 8 });
  });

  it("rejects an invalid rank", () => {
    const error = rejection(() => normalize({ ...validV2(), rank: 8 }));
    expect(error.message).toMatch(/rank must be < world_size/);
    expect(error.field).toBe("rank");
  });

  it("keeps metadata identity keys opaque", () => {
    const input = validV2();
    delete input.job_id;
    delete input.rank;
    delete input.local_rank;
    delete input.world_size;
    input.metadata = {
      job_id: "meta-job",
      rank: "metadata-rank",
      local_rank: "metadata-local-rank",
      world_size: "metadata-world-size",
      origin: "test",
    };
    const event = normalize(input);
    expect(event).toMatchObject({ job_id: null, rank: 0, local_rank: 0, world_size: 1 });
    expect(event.metadata).toEqual(input.metadata);
    const v4 = normalize(input, { upgradeTo: 4 });
    expect(v4.metadata).toMatchObject(input.metadata as JsonObject);
    expect((v4.metadata.memory_capabilities as JsonObject).supports_allocator_allocated).toBe(true);
  });

  it("rejects a missing required nullable field", () => {
    const input = validV2();
    delete input.context;
    expect(rejection(() => normalize(input)).message).toMatch(/Missing required telemetry fields/);
  });

  it("rejects an unknown field", () => {
    expect(rejection(() => normalize({ ...validV2(), unknown_counter: 42 })).message).toMatch(
      /Unknown telemetry fields: unknown_counter/,
    );
  });

  it("requires an integer schema_version, with no legacy fallback", () => {
    const legacy = { timestamp: 1700000001.0, event_type: "allocation", memory_allocated: 8_192 };
    for (const version of ["2", true, null, 2.5]) {
      const error = rejection(() => normalize({ ...legacy, schema_version: version }));
      expect(error.message).toMatch(/schema_version must be an integer/);
      expect(error.field).toBe("schema_version");
    }
    expect(rejection(() => normalize(record('{"schema_version": 3.0, "timestamp": 1}'))).message).toMatch(
      /schema_version must be an integer/,
    );
  });

  it("rejects unsupported schema versions", () => {
    const legacy = { timestamp: 1700000001.0, event_type: "allocation", memory_allocated: 8_192 };
    for (const version of [0, 1, 5, -3]) {
      expect(
        rejection(() => normalize({ ...legacy, schema_version: version }, { permissiveLegacy: true }))
          .message,
      ).toMatch(new RegExp(`Unsupported schema_version: ${version}`));
    }
    // A v3 header on a legacy body is not converted: it fails validation instead.
    expect(rejection(() => normalize({ ...legacy, schema_version: 3 })).message).toMatch(
      /(Missing required|Unknown) telemetry fields/,
    );
  });

  it("repairs a blank session id of a v3 record like the reference", () => {
    const v3 = { ...validV2(), schema_version: 3, session_id: " " };
    expect(normalize(v3, { defaultSessionId: "fallback" }).session_id).toBe("fallback");
    const missing = { ...validV2(), schema_version: 3 };
    expect(normalize(missing, { defaultSessionId: "fallback" }).session_id).toBe("fallback");
  });

  it("round-trips a phase boundary record, keeping its metadata", () => {
    const phaseScope = {
      action: "enter",
      name: "step",
      path: ["train", "step"],
      depth: 2,
      scope_id: "session-phase:2",
      parent_scope_id: "session-phase:1",
      thread_id: 88,
      thread_name: "MainThread",
      sequence: 2,
      attributes: { epoch: 3 },
    };
    const input = {
      ...validV2(),
      schema_version: 3,
      session_id: "session-phase",
      timestamp_ns: 1_700_000_000_000_000_100n,
      event_type: "phase_enter",
      allocator_change_bytes: 0,
      context: "Phase entered: train / step",
      metadata: { phase_scope: phaseScope },
    };
    const event = normalize(input);
    expect(event).toMatchObject({
      schema_version: 3,
      session_id: "session-phase",
      event_type: "phase_enter",
    });
    expect(event.metadata).toEqual({ phase_scope: phaseScope });
    expect(normalize(event as unknown as JsonObject)).toEqual(event);
  });

  it("keeps v4 records as v4 and validates their capabilities", () => {
    const capabilities = {
      backend: "future",
      telemetry_collector: "stormlog.future_tracker",
      sampling_source: "future.device_memory",
      supports_allocator_allocated: false,
      supports_allocator_reserved: false,
      supports_allocator_active: false,
      supports_allocator_inactive: false,
      supports_device_used: true,
      supports_device_free: true,
      supports_device_total: true,
      supports_native_allocator_history: false,
      supports_fragmentation_analysis: false,
      supports_allocator_attribution: false,
      supports_bounded_profiling: false,
    };
    const v4 = {
      schema_version: 4,
      session_id: "device-only",
      timestamp_ns: 1,
      event_type: "sample",
      collector: "stormlog.future_tracker",
      sampling_interval_ms: 100,
      pid: 1,
      host: "host",
      device_id: 0,
      allocator_allocated_bytes: null,
      allocator_reserved_bytes: null,
      allocator_active_bytes: null,
      allocator_inactive_bytes: null,
      allocator_change_bytes: null,
      device_used_bytes: 3,
      device_free_bytes: 1,
      device_total_bytes: 4,
      context: null,
      metadata: { memory_capabilities: capabilities },
    };
    const event = normalize(v4);
    expect(event.schema_version).toBe(4);
    expect(event.allocator_allocated_bytes).toBeNull();
    expect(event.metadata).toEqual({ memory_capabilities: capabilities });

    const unsupported = {
      ...v4,
      metadata: { memory_capabilities: { ...capabilities, supports_device_used: false } },
    };
    expect(rejection(() => normalize(unsupported)).message).toMatch(/device_used_bytes'? must be null/);
    const unknownFlag = { ...v4, metadata: { memory_capabilities: { ...capabilities, future_flag: true } } };
    expect(rejection(() => normalize(unknownFlag)).field).toBe("metadata.memory_capabilities");
    const malformed = { ...v4, metadata: { memory_capabilities: { backend: "cuda" } } };
    expect(rejection(() => normalize(malformed)).field).toBe("metadata.memory_capabilities");
  });

  it("infers capabilities of a v4 record that lacks them, as the newer reference does", () => {
    const event = normalize({
      ...validV2(),
      schema_version: 4,
      session_id: "s",
      metadata: { backend: "rocm" },
    });
    expect(event.schema_version).toBe(4);
    expect(event.metadata.memory_capabilities).toEqual(
      inferMemoryCapabilities(validV2(), { backend: "rocm" }),
    );
    expect((event.metadata.memory_capabilities as JsonObject).backend).toBe("rocm");
  });

  it("rejects non-object metadata before anything else", () => {
    expect(rejection(() => normalize({ ...validV2(), rank: 8, metadata: [] })).message).toMatch(
      /metadata must be an object/,
    );
  });
});
