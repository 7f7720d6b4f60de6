import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { SampleResult } from "@stormlog/core";
import { describeCollectorContract } from "@stormlog/core/testing";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type NvmlCollector, type NvmlCollectorOptions, nvmlCollector } from "../src/index.js";
import { buildStub, type StubControl, stubControl } from "./stub/build.js";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const UUID0 = "GPU-5a0b0000-0000-4000-8000-000000000000";
const UUID1 = "GPU-5a0b0000-0000-4000-8000-000000000001";
const MEMORY_V2 = "nvmlDeviceGetMemoryInfo_v2";
const PROCESSES_V3 = "nvmlDeviceGetComputeRunningProcesses_v3";

let stubPath: string;
let stub: StubControl;
const open: NvmlCollector[] = [];

beforeAll(() => {
  stubPath = buildStub("full");
  stub = stubControl(stubPath);
});

beforeEach(() => {
  stub.reset(2);
});

afterEach(async () => {
  await Promise.all(open.splice(0).map((collector) => collector.close()));
});

/** A collector on the stub, closed after the test. Reads no CUDA_VISIBLE_DEVICES unless given. */
function collector(options: NvmlCollectorOptions = {}): NvmlCollector {
  const created = nvmlCollector({ libraryPath: stubPath, env: {}, ...options });
  open.push(created);
  return created;
}

async function full(result: SampleResult | Promise<SampleResult>) {
  const settled = await result;
  if (settled.kind !== "full") throw new Error(`expected a full sample, got ${JSON.stringify(settled)}`);
  return settled;
}

describeCollectorContract(
  "NVML against the stub libnvidia-ml.so.1",
  () => nvmlCollector({ libraryPath: buildStub("full"), env: {} }),
  { describe, it },
);
describeCollectorContract(
  "NVML with no library",
  () => nvmlCollector({ libraryPath: "/nonexistent/libnvidia-ml.so.1", env: {} }),
  { describe, it, available: false, kinds: ["failure"] },
);

describe("nvmlCollector against the stub", () => {
  it("reads used/free/total through nvmlDeviceGetMemoryInfo_v2 with reserved, name and UUID in metadata", async () => {
    const gpu = collector();
    expect(gpu.availability()).toEqual({ available: true });
    expect(gpu.deviceId).toBe(0);
    expect(gpu.capabilities).toMatchObject({
      backend: "cuda",
      telemetry_collector: "stormlog.cuda_tracker",
      sampling_source: "nvml",
      supports_allocator_allocated: false,
      supports_allocator_reserved: false,
      supports_device_used: true,
      supports_device_free: true,
      supports_device_total: true,
    });
    expect(gpu.device).toMatchObject({
      name: "Stub GPU 0",
      uuid: UUID0,
      physicalIndex: 0,
      driverVersion: "999.99-stub",
    });
    stub.setMemory(0, 80 * GiB, 10 * GiB, 512 * MiB);
    const result = await full(gpu.sample());
    expect(result.reading).toEqual({
      device_total_bytes: 80 * GiB,
      device_used_bytes: 10 * GiB,
      device_free_bytes: 80 * GiB - 10 * GiB - 512 * MiB,
    });
    expect(result.metadata).toMatchObject({
      nvml_device_name: "Stub GPU 0",
      nvml_device_uuid: UUID0,
      nvml_physical_index: 0,
      nvml_memory_api: "v2",
      nvml_reserved_bytes: 512 * MiB,
    });
    expect(result.metadata).not.toHaveProperty("nvml_used_includes_reserved");
    stub.setMemory(0, 80 * GiB, 20 * GiB, 512 * MiB);
    expect((await full(gpu.sample())).reading.device_used_bytes).toBe(20 * GiB);
  });

  it("calls NVML on a worker thread, and sample() returns a Promise", async () => {
    const gpu = collector();
    const pending = gpu.sample();
    expect(pending).toBeInstanceOf(Promise);
    await full(pending);
    expect(stub.lastOnMain(MEMORY_V2)).toBe(0);
    expect(stub.lastOnMain(PROCESSES_V3)).toBe(0);
  });

  it("calls NVML synchronously on the main thread when asked to", async () => {
    const gpu = collector({ thread: "main" });
    const result = gpu.sample();
    expect(result).not.toBeInstanceOf(Promise);
    await full(result);
    expect(stub.lastOnMain(MEMORY_V2)).toBe(1);
  });

  it("initialises NVML once per library and thread and caches device handles", async () => {
    const first = collector({ deviceIndex: 0 });
    const second = collector({ deviceIndex: 1 });
    await full(first.sample());
    await full(second.sample());
    // One nvmlInit on the main thread, one in the sampling worker.
    expect(stub.calls("nvmlInit_v2")).toBe(2);
    const lookups = stub.calls("nvmlDeviceGetHandleByUUID");
    const memoryCalls = stub.calls(MEMORY_V2);
    for (let i = 0; i < 10; i += 1) {
      await full(first.sample());
      await full(second.sample());
    }
    expect(stub.calls("nvmlDeviceGetHandleByUUID")).toBe(lookups);
    expect(stub.calls(MEMORY_V2)).toBe(memoryCalls + 20);
    expect(stub.calls("nvmlInit_v2")).toBe(2);
    expect((await full(second.sample())).metadata?.nvml_device_uuid).toBe(UUID1);
  });

  it("shuts NVML down when the last collector of a library closes", async () => {
    const first = collector();
    const second = collector({ deviceIndex: 1 });
    await full(first.sample());
    expect(stub.initCount()).toBe(2);
    await first.close();
    expect(stub.initCount()).toBe(2);
    await second.close();
    expect(stub.initCount()).toBe(0);
    expect(await second.sample()).toMatchObject({ kind: "failure" });
  });

  it("falls back to v1 for good when _v2 answers NVML_ERROR_FUNCTION_NOT_FOUND", async () => {
    const gpu = collector();
    stub.setMemory(0, 16 * GiB, 2 * GiB, 300 * MiB);
    stub.setV2NotFound(true);
    const result = await full(gpu.sample());
    // v1's used includes the driver's reserved memory.
    expect(result.reading.device_used_bytes).toBe(2 * GiB + 300 * MiB);
    expect(result.metadata).toMatchObject({ nvml_memory_api: "v1", nvml_used_includes_reserved: true });
    expect(result.metadata).not.toHaveProperty("nvml_reserved_bytes");
    const v2Calls = stub.calls(MEMORY_V2);
    stub.setV2NotFound(false);
    await full(gpu.sample());
    expect(stub.calls(MEMORY_V2)).toBe(v2Calls);
  });

  it("turns a failing NVML call into a failure, then recovers", async () => {
    const gpu = collector();
    stub.fail(MEMORY_V2, 999, 1);
    const failed = await gpu.sample();
    expect(failed).toMatchObject({ kind: "failure" });
    if (failed.kind === "failure") {
      expect(failed.error).toMatch(
        /nvmlDeviceGetMemoryInfo failed for GPU-.*NVML_ERROR_UNKNOWN \(999\): Unknown Error/,
      );
    }
    await full(gpu.sample());
  });

  it("reports a vanished device (NVML_ERROR_GPU_IS_LOST) as failures until it is back", async () => {
    const gpu = collector();
    await full(gpu.sample());
    stub.setLost(0, true);
    for (let i = 0; i < 2; i += 1) {
      const result = await gpu.sample();
      expect(result).toMatchObject({ kind: "failure" });
      if (result.kind === "failure")
        expect(result.error).toMatch(/NVML_ERROR_GPU_IS_LOST \(15\): GPU is lost/);
    }
    stub.setLost(0, false);
    await full(gpu.sample());
  });

  it("reports fields NVML marks not available as missing in a partial sample, never as zero", async () => {
    const gpu = collector();
    stub.setNotAvailable(0, 4 | 8);
    const result = await gpu.sample();
    expect(result).toMatchObject({ kind: "partial", missing: ["device_used_bytes"] });
    if (result.kind === "partial") {
      expect(result.reading).not.toHaveProperty("device_used_bytes");
      expect(result.reading.device_total_bytes).toBe(16 * GiB);
      expect(result.metadata).not.toHaveProperty("nvml_reserved_bytes");
    }
    stub.setNotAvailable(0, 1 | 2 | 4);
    expect(await gpu.sample()).toMatchObject({ kind: "failure" });
  });

  it("reads this process's usage every Nth sample and keeps the last value with its age", async () => {
    stub.addProcess(0, 4242, 3 * GiB);
    stub.addProcess(0, process.pid, 1 * GiB);
    const gpu = collector({ processSampleEveryN: 3 });
    const metadata = [];
    for (let i = 0; i < 5; i += 1) metadata.push((await full(gpu.sample())).metadata!);
    expect(stub.calls(PROCESSES_V3)).toBe(2);
    expect(metadata[0]).toMatchObject({
      nvml_process_count: 2,
      nvml_process_used_bytes: 1 * GiB,
      nvml_processes_used_bytes: 4 * GiB,
      nvml_process_sample_age_ms: 0,
    });
    expect(metadata[1]!.nvml_process_used_bytes).toBe(1 * GiB);
    expect(metadata[1]!.nvml_process_sample_age_ms).toBeGreaterThanOrEqual(0);
    expect(metadata[3]!.nvml_process_sample_age_ms).toBe(0);
  });

  it("grows its buffer when NVML answers NVML_ERROR_INSUFFICIENT_SIZE", async () => {
    for (let pid = 1; pid <= 150; pid += 1) stub.addProcess(0, 100_000 + pid, MiB);
    stub.addProcess(0, process.pid, 7 * MiB);
    const gpu = collector();
    const result = await full(gpu.sample());
    expect(result.metadata).toMatchObject({ nvml_process_count: 151, nvml_process_used_bytes: 7 * MiB });
    expect(stub.calls(PROCESSES_V3)).toBe(2);
  });

  it("says when this process is not in the list (no CUDA context, other PID namespace)", async () => {
    stub.addProcess(0, 4242, GiB);
    const result = await full(collector().sample());
    expect(result.metadata).toMatchObject({ nvml_process_used_bytes: null, nvml_process_listed: false });
  });

  it("reads another process's usage when given its pid (a sidecar or child), on either thread", async () => {
    stub.addProcess(0, 4242, 3 * GiB);
    stub.addProcess(0, process.pid, GiB);
    for (const thread of ["worker", "main"] as const) {
      const result = await full(collector({ pid: 4242, thread }).sample());
      expect(result.metadata).toMatchObject({
        nvml_process_used_bytes: 3 * GiB,
        nvml_processes_used_bytes: 4 * GiB,
      });
    }
  });

  it("keeps the memory reading when the process query fails", async () => {
    stub.fail(PROCESSES_V3, 3, 1);
    const result = await full(collector().sample());
    expect(result.metadata?.nvml_process_error).toMatch(/NVML_ERROR_NOT_SUPPORTED \(3\)/);
    expect(result.reading.device_total_bytes).toBe(16 * GiB);
  });

  it("never queries processes when processSampleEveryN is 0", async () => {
    const gpu = collector({ processSampleEveryN: 0 });
    await full(gpu.sample());
    expect(stub.calls(PROCESSES_V3)).toBe(0);
    expect((await full(gpu.sample())).metadata).not.toHaveProperty("nvml_process_count");
  });

  it("fails a sample that takes longer than timeoutMs, then reports busy until NVML answers", async () => {
    const gpu = collector({ timeoutMs: 50 });
    await full(gpu.sample());
    stub.setDelayUs(400_000);
    const slow = await gpu.sample();
    expect(slow).toMatchObject({ kind: "failure" });
    if (slow.kind === "failure") expect(slow.error).toMatch(/did not answer within 50 ms/);
    const busy = await gpu.sample();
    expect(busy).toMatchObject({ kind: "failure" });
    if (busy.kind === "failure") expect(busy.error).toMatch(/still busy/);
    stub.setDelayUs(0);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await full(gpu.sample());
  });
});

describe("nvmlCollector device selection", () => {
  it("maps a logical index through CUDA_VISIBLE_DEVICES indices", async () => {
    const gpu = collector({ env: { CUDA_VISIBLE_DEVICES: "1,0" } });
    expect(gpu.deviceId).toBe(0);
    expect(gpu.device).toMatchObject({ uuid: UUID1, physicalIndex: 1 });
    expect((await full(gpu.sample())).metadata).toMatchObject({
      nvml_device_uuid: UUID1,
      nvml_physical_index: 1,
    });
    expect(collector({ deviceIndex: 1, env: { CUDA_VISIBLE_DEVICES: "1,0" } }).device?.uuid).toBe(UUID0);
  });

  it("maps CUDA_VISIBLE_DEVICES UUIDs and unique UUID prefixes", () => {
    expect(collector({ env: { CUDA_VISIBLE_DEVICES: UUID1 } }).device?.physicalIndex).toBe(1);
    expect(collector({ env: { CUDA_VISIBLE_DEVICES: UUID1.slice(0, -1).concat("1") } }).device?.uuid).toBe(
      UUID1,
    );
    stub.setUuid(1, "GPU-ffff0000-0000-4000-8000-000000000001");
    const prefixed = collector({ env: { CUDA_VISIBLE_DEVICES: "GPU-ffff" } });
    expect(prefixed.device?.physicalIndex).toBe(1);
  });

  it("is unavailable with a one-line reason for an ambiguous prefix or an empty list", () => {
    const ambiguous = collector({ env: { CUDA_VISIBLE_DEVICES: "GPU-5a0b" } });
    expect(ambiguous.availability()).toMatchObject({
      available: false,
      reason: expect.stringMatching(/prefix of 2/),
    });
    const none = collector({ env: { CUDA_VISIBLE_DEVICES: "" } });
    expect(none.availability()).toMatchObject({
      available: false,
      reason: expect.stringMatching(/makes 0 device\(s\) visible/),
    });
  });

  it("reads a MIG instance named by its UUID, which has no physical index", async () => {
    const mig = "MIG-11112222-3333-4444-5555-666677778888";
    stub.setUuid(1, mig);
    const gpu = collector({ env: { CUDA_VISIBLE_DEVICES: mig } });
    expect(gpu.availability()).toEqual({ available: true });
    expect(gpu.device).toMatchObject({ uuid: mig, physicalIndex: undefined });
    expect((await full(gpu.sample())).metadata).toMatchObject({
      nvml_device_uuid: mig,
      nvml_physical_index: null,
    });
  });

  it("selects by uuid, with the logical index as device id", () => {
    expect(collector({ uuid: UUID1 }).deviceId).toBe(1);
    expect(collector({ uuid: UUID1, env: { CUDA_VISIBLE_DEVICES: `${UUID1},0` } }).deviceId).toBe(0);
    expect(collector({ uuid: UUID1, deviceId: 7 }).deviceId).toBe(7);
    expect(collector({ uuid: "GPU-nope" }).availability()).toMatchObject({ available: false });
  });

  it("finds the library through STORMLOG_NVML_LIBRARY", () => {
    const gpu = nvmlCollector({ env: { STORMLOG_NVML_LIBRARY: stubPath } });
    open.push(gpu);
    expect(gpu.availability()).toEqual({ available: true });
    expect(gpu.device?.libraryPath).toBe(stubPath);
  });
});

describe("nvmlCollector without NVML", () => {
  it("is unavailable with a one-line reason naming the library path tried", async () => {
    const gpu = collector({ libraryPath: "/nonexistent/libnvidia-ml.so.1" });
    const availability = gpu.availability();
    expect(availability.available).toBe(false);
    if (!availability.available) {
      expect(availability.reason).toContain("/nonexistent/libnvidia-ml.so.1");
      expect(availability.reason).toContain("STORMLOG_NVML_LIBRARY");
      expect(availability.reason).not.toContain("\n");
    }
    expect(await gpu.sample()).toMatchObject({ kind: "failure" });
  });

  it("rejects a library that is not NVML", () => {
    const gpu = collector({ libraryPath: "libm.so.6" });
    expect(gpu.availability()).toMatchObject({ available: false, reason: expect.stringMatching(/nvmlInit/) });
  });

  it("is unavailable when nvmlInit fails (driver not loaded)", () => {
    stub.fail("nvmlInit_v2", 9, 1);
    const gpu = collector();
    expect(gpu.availability()).toMatchObject({
      available: false,
      reason: expect.stringMatching(/NVML_ERROR_DRIVER_NOT_LOADED \(9\)/),
    });
  });

  it("rejects invalid options", () => {
    expect(() => nvmlCollector({ processSampleEveryN: -1 })).toThrow(/processSampleEveryN/);
    expect(() => nvmlCollector({ deviceIndex: 1.5 })).toThrow(/deviceIndex/);
    expect(() => nvmlCollector({ timeoutMs: 0 })).toThrow(/timeoutMs/);
    expect(() => nvmlCollector({ peakPollMs: -1 })).toThrow(/peakPollMs/);
    expect(() => nvmlCollector({ peakPollMs: 2.5 })).toThrow(/peakPollMs/);
  });
});

describe("nvmlCollector's high-water mark (the worker polls between samples)", () => {
  /** Spins on this thread, as a synchronous step does, until the worker has polled `polls` more times. */
  function spinUntilPolled(polls: number): void {
    const target = stub.calls(MEMORY_V2) + polls;
    const deadline = Date.now() + 10_000;
    while (stub.calls(MEMORY_V2) < target) {
      if (Date.now() > deadline) throw new Error("the NVML worker did not poll within 10 s");
    }
  }

  it("sees the device fill up and come back inside one synchronous step", () => {
    stub.setMemory(0, 16 * GiB, 2 * GiB, 0);
    const gpu = collector({ peakPollMs: 1 });
    // The first take starts polling; the window after the first poll is the first that can hold a peak.
    expect(gpu.takeHighWater()).toBeNull();
    spinUntilPolled(2);
    expect(gpu.takeHighWater()).toBeNull();
    stub.setMemory(0, 16 * GiB, 9 * GiB, 0);
    spinUntilPolled(2);
    stub.setMemory(0, 16 * GiB, 3 * GiB, 0);
    spinUntilPolled(2);
    expect(gpu.takeHighWater()).toEqual({ device_used_bytes: 9 * GiB });
    // A new window from 3 GiB: nothing went above it.
    expect(gpu.takeHighWater()).toBeNull();
    expect(stub.lastOnMain(MEMORY_V2)).toBe(0);
  });

  it("reports no peak where a window's end shows the top (memory that stays)", () => {
    stub.setMemory(0, 16 * GiB, 2 * GiB, 0);
    const gpu = collector({ peakPollMs: 1 });
    gpu.takeHighWater();
    spinUntilPolled(2);
    gpu.takeHighWater();
    stub.setMemory(0, 16 * GiB, 7 * GiB, 0);
    spinUntilPolled(2);
    expect(gpu.takeHighWater()).toBeNull();
  });

  it("pauses polling while nobody takes its mark (a stopped tracker), and polls again when one does", async () => {
    const gpu = collector({ peakPollMs: 1 });
    gpu.takeHighWater();
    spinUntilPolled(2);
    // Nobody asks for 5 s: polling pauses.
    await new Promise((resolve) => setTimeout(resolve, 5600));
    const paused = stub.calls(MEMORY_V2);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(stub.calls(MEMORY_V2)).toBe(paused);
    gpu.takeHighWater();
    spinUntilPolled(2);
  }, 20_000);

  it("never polls with peakPollMs 0 or on the main thread", async () => {
    const off = collector({ peakPollMs: 0 });
    const main = collector({ thread: "main" });
    const before = stub.calls(MEMORY_V2);
    expect(off.takeHighWater()).toBeNull();
    expect(main.takeHighWater()).toBeNull();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(stub.calls(MEMORY_V2)).toBe(before);
  });
});

describe("nvmlCollector v1-only driver (no nvmlDeviceGetMemoryInfo_v2 symbol)", () => {
  it("uses nvmlDeviceGetMemoryInfo and says used includes reserved", async () => {
    const path = buildStub("no-memory-v2");
    const old = stubControl(path);
    old.reset(1);
    old.setMemory(0, 8 * GiB, GiB, 256 * MiB);
    const gpu = nvmlCollector({ libraryPath: path, env: {} });
    open.push(gpu);
    const result = await full(gpu.sample());
    expect(result.reading).toEqual({
      device_total_bytes: 8 * GiB,
      device_used_bytes: GiB + 256 * MiB,
      device_free_bytes: 8 * GiB - GiB - 256 * MiB,
    });
    expect(result.metadata).toMatchObject({ nvml_memory_api: "v1", nvml_used_includes_reserved: true });
  });
});

describe("nvmlCollector on a driver without the _v3 process call", () => {
  it("uses nvmlDeviceGetComputeRunningProcesses_v2", async () => {
    const path = buildStub("no-processes-v3");
    const older = stubControl(path);
    older.reset(1);
    older.addProcess(0, process.pid, 5 * MiB);
    const gpu = nvmlCollector({ libraryPath: path, env: {} });
    open.push(gpu);
    expect((await full(gpu.sample())).metadata?.nvml_process_used_bytes).toBe(5 * MiB);
    expect(older.calls("nvmlDeviceGetComputeRunningProcesses_v2")).toBe(1);
  });
});

describe("nvmlCollector in a script", () => {
  it("keeps Node alive while a sample is pending and lets it exit after close()", () => {
    const script = `
      const { nvmlCollector } = await import(${JSON.stringify(pathToFileURL(join(import.meta.dirname, "../src/index.ts")).href)});
      const gpu = nvmlCollector({ libraryPath: ${JSON.stringify(stubPath)}, env: {} });
      const result = await gpu.sample();
      console.log(JSON.stringify({ kind: result.kind, used: result.reading?.device_used_bytes }));
      await gpu.close();
    `;
    const child = spawnSync(
      process.execPath,
      ["--conditions=@stormlog/source", "--import", "tsx", "--input-type=module", "--eval", script],
      { cwd: join(import.meta.dirname, ".."), encoding: "utf8", timeout: 20_000 },
    );
    expect(child.stderr).toBe("");
    expect(child.status).toBe(0);
    expect(JSON.parse(child.stdout.trim())).toEqual({ kind: "full", used: GiB });
  });
});
