import {
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  InvalidConfigError,
  type JsonObject,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryCounterField,
  type MemoryReading,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { findExecutable, findLibraryFile } from "./driver-files.js";
import { KoffiMissingError } from "./errors.js";
import { describeNvmlReturn, NVML_SUCCESS } from "./nvml-codes.js";
import { firstLine, koffiInstalled, NvmlLibrary, type SlotReading, SlotStatus } from "./nvml-library.js";
import type { NvmlBinding, NvmlDeviceHandle } from "./nvml-types.js";
import {
  logicalIndexOf,
  type PhysicalDevice,
  parseCudaVisibleDevices,
  resolveLogicalDevice,
} from "./visible-devices.js";

/** The telemetry `collector` of NVML readings. */
export const NVML_COLLECTOR_NAME = "stormlog.cuda_tracker";

/** The environment variable that points the adapter at a libnvidia-ml. */
export const NVML_LIBRARY_ENV = "STORMLOG_NVML_LIBRARY";

/** Options of {@link nvmlCollector}. */
export interface NvmlCollectorOptions {
  /** Path of libnvidia-ml. Default: `$STORMLOG_NVML_LIBRARY`, else the platform's usual names. */
  readonly libraryPath?: string;
  /**
   * The device as the process's CUDA code numbers it (logical index, mapped through
   * `CUDA_VISIBLE_DEVICES`). Default 0. Ignored when `uuid` is given.
   */
  readonly deviceIndex?: number;
  /** The device by UUID (`GPU-...`, a unique prefix of one, or a MIG instance's `MIG-...`). */
  readonly uuid?: string;
  /** Telemetry `device_id`. Default: the logical index (what tfjs/onnxruntime call the device). */
  readonly deviceId?: number;
  /**
   * Read this process's own usage (nvmlDeviceGetComputeRunningProcesses, much slower than the
   * memory query) on every Nth sample. Default 10; 0 never.
   */
  readonly processSampleEveryN?: number;
  /** Whose usage the process query reports. Default `process.pid`; another pid watches a sidecar. */
  readonly pid?: number;
  /** `"worker"` (default): NVML runs on a worker thread and `sample()` returns a Promise. `"main"`: synchronous calls. */
  readonly thread?: "worker" | "main";
  /** How long `sample()` waits for the worker before it reports a failure. Default 5000 ms. */
  readonly timeoutMs?: number;
  /**
   * How often the worker polls the device's used memory between samples for `takeHighWater()`
   * (the peak inside a synchronous step that samples miss), once the tracker first asks for it.
   * Default 10 ms (one memory query each, off the main thread); 0 never. Only with `thread: "worker"`.
   */
  readonly peakPollMs?: number;
  /** Environment to read `CUDA_VISIBLE_DEVICES` and `STORMLOG_NVML_LIBRARY` from. Default `process.env`. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Telemetry `collector`. Default `stormlog.cuda_tracker`. */
  readonly name?: string;
}

/** The NVML collector. Device memory goes to device_used/free/total; it has no allocator counters. */
export interface NvmlCollector extends MemoryCollector {
  /** Device identity once resolved (undefined while NVML is unavailable). */
  readonly device: NvmlDeviceInfo | undefined;
  /**
   * The device's used memory at its highest since the previous call, as the worker polled it every
   * `peakPollMs`, where above the polled values at both ends of the window; else null. The first
   * call starts polling. Used memory is the whole device's: another process's peak counts too.
   */
  takeHighWater(): MemoryReading | null;
  close(): Promise<void>;
}

/** Identity of the device a collector reads. */
export interface NvmlDeviceInfo {
  readonly name: string;
  readonly uuid: string;
  /** NVML's (PCI order) index; undefined for a MIG instance. */
  readonly physicalIndex: number | undefined;
  readonly libraryPath: string;
  readonly driverVersion: string | undefined;
}

/** Default library names tried in order, per platform. */
export function defaultNvmlLibraryPaths(platform: NodeJS.Platform = process.platform): string[] {
  if (platform === "win32") return ["nvml.dll", "C:\\Windows\\System32\\nvml.dll"];
  if (platform === "linux") {
    return [
      "libnvidia-ml.so.1",
      "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
      "/usr/lib64/libnvidia-ml.so.1",
      "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
      // WSL2 exposes the Windows driver's NVML here.
      "/usr/lib/wsl/lib/libnvidia-ml.so.1",
    ];
  }
  return [];
}

const DEVICE_FIELDS: readonly MemoryCounterField[] = [
  "device_total_bytes",
  "device_free_bytes",
  "device_used_bytes",
];

/**
 * Device memory through NVML (FFI with koffi): `nvmlInit` once per library, the device handle
 * cached, `nvmlDeviceGetMemoryInfo_v2` (used and reserved; the v1 call on drivers without it)
 * for total/free/used, the device name and UUID, and, every `processSampleEveryN` samples, this
 * process's own usage. NVML calls run on a worker thread, so `sample()` returns a Promise and the
 * main thread only posts the request (about 10 us). Without NVML (no driver, no GPU, CPU-only CI)
 * the collector is unavailable and says why in one line. NVML errors become failed or partial
 * samples, never zeros. koffi is an optional peer dependency: where it is not installed but a driver is,
 * the reason is a {@link KoffiMissingError}'s message (`npm i koffi`), and failed samples carry that error.
 *
 * @example
 * const gpu = nvmlCollector({ deviceIndex: 0 });
 * if (gpu.availability().available) console.log(await gpu.sample());
 * await gpu.close();
 */
export function nvmlCollector(options: NvmlCollectorOptions = {}): NvmlCollector {
  const env = options.env ?? process.env;
  const everyN = options.processSampleEveryN ?? 10;
  if (!Number.isInteger(everyN) || everyN < 0) {
    throw new InvalidConfigError("processSampleEveryN", `expected an integer >= 0, got ${String(everyN)}`);
  }
  const logical = options.deviceIndex ?? 0;
  if (!Number.isInteger(logical) || logical < 0) {
    throw new InvalidConfigError("deviceIndex", `expected an integer >= 0, got ${String(logical)}`);
  }
  const timeoutMs = options.timeoutMs ?? 5000;
  if (!(timeoutMs > 0))
    throw new InvalidConfigError("timeoutMs", `expected a positive number, got ${timeoutMs}`);
  if (options.thread !== undefined && options.thread !== "worker" && options.thread !== "main") {
    throw new InvalidConfigError("thread", `expected "worker" or "main", got ${String(options.thread)}`);
  }
  const peakPollMs = options.peakPollMs ?? 10;
  if (!Number.isInteger(peakPollMs) || peakPollMs < 0 || peakPollMs > 60_000) {
    throw new InvalidConfigError(
      "peakPollMs",
      `expected whole milliseconds from 0 (never) to 60000, got ${String(peakPollMs)}`,
    );
  }
  const name = options.name ?? NVML_COLLECTOR_NAME;
  const capabilities: MemoryCapabilities = {
    ...noCapabilities("cuda", name, "nvml"),
    supports_device_used: true,
    supports_device_free: true,
    supports_device_total: true,
  };

  const opened = openDevice(options, env, logical);
  let closed = false;
  if (!opened.ok) {
    return {
      specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
      name,
      deviceId: options.deviceId ?? logical,
      capabilities,
      device: undefined,
      availability: () => ({ available: false, reason: opened.reason }),
      sample: () =>
        opened.cause === undefined
          ? { kind: "failure", error: opened.reason }
          : { kind: "failure", error: opened.reason, cause: opened.cause },
      takeHighWater: () => null,
      close: async () => {
        closed = true;
      },
    };
  }

  const { library, handle, device } = opened;
  const deviceId = options.deviceId ?? opened.logicalIndex;
  const thread = options.thread ?? "worker";
  const pid = options.pid ?? process.pid;
  const slot = thread === "worker" ? library.registerSlot(device.uuid, pid) : -1;
  const memory = new Float64Array(5);
  const processes = new Float64Array(3);
  let sampleCount = 0;
  let lastProcess: { at: number; metadata: JsonObject } | undefined;
  /** The used memory polled last at the previous take: where the current window began (-1: none). */
  let windowStart = -1;
  let polling = false;

  const identity = (): JsonObject => ({
    nvml_device_name: device.name,
    nvml_device_uuid: device.uuid,
    nvml_physical_index: device.physicalIndex ?? null,
  });

  const toResult = (reading: SlotReading, withProcesses: boolean): SampleResult => {
    switch (reading.status) {
      case SlotStatus.NoDevice:
        return {
          kind: "failure",
          error: `NVML no longer finds device ${device.uuid}: ${library.describe(reading.memoryRet)}`,
        };
      case SlotStatus.LoadFailed:
        return { kind: "failure", error: `the NVML worker could not use ${library.path}` };
      case SlotStatus.WorkerGone:
        return { kind: "failure", error: library.workerFailure ?? "the NVML worker is gone" };
      case SlotStatus.TimedOut:
        return {
          kind: "failure",
          error: `NVML did not answer within ${timeoutMs} ms (driver busy or hung); later samples fail until it does`,
        };
      case SlotStatus.Busy:
        return {
          kind: "failure",
          error: "NVML is still busy with the previous request (driver busy or hung)",
        };
    }
    if (reading.memoryRet !== NVML_SUCCESS) {
      return {
        kind: "failure",
        error: `nvmlDeviceGetMemoryInfo failed for ${device.uuid}: ${library.describe(reading.memoryRet)}`,
      };
    }
    const [version, total, free, used, reserved] = reading.memory;
    const metadata = identity();
    metadata.nvml_memory_api = version === 2 ? "v2" : "v1";
    if (version === 2) {
      if (!Number.isNaN(reserved)) metadata.nvml_reserved_bytes = reserved;
    } else {
      // v1 counts the driver's reserved memory as used (about 0.5-1 GB more than nvidia-smi shows).
      metadata.nvml_used_includes_reserved = true;
    }
    if (withProcesses) {
      const [count, own, all] = reading.processes;
      const fresh: JsonObject = {};
      if (reading.processRet === NVML_SUCCESS) {
        fresh.nvml_process_count = count;
        // -1: this pid is not listed (no CUDA context yet, or another PID namespace); NaN: NVML cannot tell.
        fresh.nvml_process_used_bytes = own < 0 || Number.isNaN(own) ? null : own;
        fresh.nvml_processes_used_bytes = Number.isNaN(all) ? null : all;
        if (own < 0) fresh.nvml_process_listed = false;
      } else {
        fresh.nvml_process_error = library.describe(reading.processRet);
      }
      lastProcess = { at: Date.now(), metadata: fresh };
    }
    if (lastProcess) {
      Object.assign(metadata, lastProcess.metadata);
      metadata.nvml_process_sample_age_ms = withProcesses ? 0 : Date.now() - lastProcess.at;
    }
    const values: Record<string, number> = {
      device_total_bytes: total,
      device_free_bytes: free,
      device_used_bytes: used,
    };
    const result: MemoryReading = {};
    const missing: MemoryCounterField[] = [];
    for (const field of DEVICE_FIELDS) {
      const value = values[field]!;
      if (Number.isSafeInteger(value) && value >= 0) result[field] = value;
      else missing.push(field);
    }
    if (missing.length === DEVICE_FIELDS.length) {
      return {
        kind: "failure",
        error: `NVML reports no memory figure for ${device.uuid} (all "not available")`,
      };
    }
    if (missing.length > 0) {
      return {
        kind: "partial",
        reading: result,
        missing,
        reason: `NVML reports ${missing.join(", ")} as not available`,
        metadata,
      };
    }
    return { kind: "full", reading: result, metadata };
  };

  const readOnMain = (withProcesses: boolean): SlotReading => {
    const memoryRet = library.binding.memory(handle, memory);
    const processRet = withProcesses ? library.binding.processes(handle, pid, processes) : Number.NaN;
    return {
      status: SlotStatus.Ok,
      memoryRet,
      memory: [memory[0]!, memory[1]!, memory[2]!, memory[3]!, memory[4]!],
      processRet,
      processes: [processes[0]!, processes[1]!, processes[2]!],
    };
  };

  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name,
    deviceId,
    capabilities,
    device,
    availability(): CollectorAvailability {
      return closed ? { available: false, reason: "the NVML collector was closed" } : { available: true };
    },
    sample(): SampleResult | Promise<SampleResult> {
      if (closed) return { kind: "failure", error: "the NVML collector was closed" };
      const withProcesses = everyN > 0 && sampleCount % everyN === 0;
      sampleCount += 1;
      try {
        if (thread === "main") return toResult(readOnMain(withProcesses), withProcesses);
        return library.request(slot, withProcesses, timeoutMs).then(
          (reading) => toResult(reading, withProcesses),
          (error: unknown) => ({
            kind: "failure",
            error: `NVML sampling failed: ${firstLine(error)}`,
            cause: error,
          }),
        );
      } catch (error) {
        return { kind: "failure", error: `NVML sampling failed: ${firstLine(error)}`, cause: error };
      }
    },
    takeHighWater(): MemoryReading | null {
      if (closed || slot < 0 || peakPollMs === 0) return null;
      // Taken at every phase boundary: the worker is told once.
      if (!polling) {
        library.startPolling(slot, peakPollMs);
        polling = true;
      }
      const peak = library.takePeak(slot);
      if (peak === null) return null;
      const start = windowStart;
      windowStart = peak.latest;
      return start >= 0 && peak.highest > start && peak.highest > peak.latest
        ? { device_used_bytes: peak.highest }
        : null;
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      if (slot >= 0) library.unregisterSlot(slot);
      await library.release();
    },
  };
}

type Opened =
  | {
      readonly ok: true;
      readonly library: NvmlLibrary;
      readonly handle: NvmlDeviceHandle;
      readonly device: NvmlDeviceInfo;
      readonly logicalIndex: number;
    }
  | { readonly ok: false; readonly reason: string; readonly cause?: KoffiMissingError };

function openDevice(
  options: NvmlCollectorOptions,
  env: Readonly<Record<string, string | undefined>>,
  logical: number,
): Opened {
  const fromEnv = env[NVML_LIBRARY_ENV];
  const candidates =
    options.libraryPath !== undefined
      ? [options.libraryPath]
      : fromEnv !== undefined && fromEnv !== ""
        ? [fromEnv]
        : defaultNvmlLibraryPaths();
  if (candidates.length === 0) {
    return { ok: false, reason: `NVML unavailable: no NVIDIA driver library on ${process.platform}` };
  }
  if (!koffiInstalled()) {
    // Without koffi no library can be opened: tell a machine with a driver how to read it.
    const smi = findExecutable("nvidia-smi", env.PATH);
    const found = findLibraryFile(candidates, env) ?? smi;
    if (found !== undefined) {
      const cause = new KoffiMissingError(found, smi !== undefined);
      return { ok: false, reason: cause.message, cause };
    }
    return {
      ok: false,
      reason: `NVML unavailable (tried ${candidates.join(", ")}; set ${NVML_LIBRARY_ENV} or libraryPath): no NVIDIA driver library found, and koffi, needed to read one, is not installed (npm i koffi)`,
    };
  }
  let library: NvmlLibrary | undefined;
  let lastError = "";
  for (const path of candidates) {
    try {
      library = NvmlLibrary.acquire(path);
      break;
    } catch (error) {
      lastError = firstLine(error);
    }
  }
  if (!library) {
    return {
      ok: false,
      reason: `NVML unavailable (tried ${candidates.join(", ")}; set ${NVML_LIBRARY_ENV} or libraryPath): ${lastError}`,
    };
  }
  const found = findDevice(library.binding, options, env, logical);
  if (!found.ok) {
    void library.release();
    return { ok: false, reason: `NVML device unavailable: ${found.reason}` };
  }
  const nameResult = library.binding.name(found.handle);
  const uuidResult = library.binding.uuid(found.handle);
  const indexResult = library.binding.deviceIndex(found.handle);
  const driver = library.binding.driverVersion();
  const uuid = uuidResult.ret === NVML_SUCCESS ? uuidResult.value : found.uuid;
  return {
    ok: true,
    library,
    handle: found.handle,
    logicalIndex: found.logicalIndex,
    device: {
      name: nameResult.ret === NVML_SUCCESS ? nameResult.value : "unknown",
      uuid,
      physicalIndex: indexResult.ret === NVML_SUCCESS ? indexResult.index : undefined,
      libraryPath: library.path,
      driverVersion: driver.ret === NVML_SUCCESS ? driver.value : undefined,
    },
  };
}

type Found =
  | {
      readonly ok: true;
      readonly handle: NvmlDeviceHandle;
      readonly uuid: string;
      readonly logicalIndex: number;
    }
  | { readonly ok: false; readonly reason: string };

function findDevice(
  nvml: NvmlBinding,
  options: NvmlCollectorOptions,
  env: Readonly<Record<string, string | undefined>>,
  logical: number,
): Found {
  const physical: PhysicalDevice[] = [];
  const count = nvml.deviceCount();
  if (count.ret !== NVML_SUCCESS) {
    return { ok: false, reason: `nvmlDeviceGetCount failed: ${describeNvmlReturn(count.ret)}` };
  }
  for (let index = 0; index < count.count; index += 1) {
    const handle = nvml.handleByIndex(index);
    if (handle.ret !== NVML_SUCCESS) continue;
    const uuid = nvml.uuid(handle.handle);
    if (uuid.ret === NVML_SUCCESS) physical.push({ index, uuid: uuid.value });
  }
  const entries = parseCudaVisibleDevices(env.CUDA_VISIBLE_DEVICES);

  let uuid: string;
  if (options.uuid !== undefined) {
    const wanted = options.uuid.trim();
    const prefixed = /^MIG-/i.test(wanted)
      ? undefined
      : physical.filter((device) => device.uuid.toLowerCase().startsWith(wanted.toLowerCase()));
    if (prefixed !== undefined && prefixed.length > 1) {
      return { ok: false, reason: `uuid ${wanted} is a prefix of ${prefixed.length} devices` };
    }
    uuid = prefixed?.length === 1 ? prefixed[0]!.uuid : wanted;
  } else {
    const resolved = resolveLogicalDevice(logical, entries, physical);
    if (!resolved.ok) return { ok: false, reason: resolved.reason };
    uuid = resolved.uuid;
  }
  const handle = nvml.handleByUuid(uuid);
  if (handle.ret !== NVML_SUCCESS) {
    return { ok: false, reason: `no device ${uuid}: ${describeNvmlReturn(handle.ret)}` };
  }
  const logicalIndex =
    options.uuid !== undefined
      ? (logicalIndexOf(uuid, entries, physical) ?? physical.find((d) => d.uuid === uuid)?.index ?? 0)
      : logical;
  return { ok: true, handle: handle.handle, uuid, logicalIndex };
}
