// NVML through koffi, shared by the main thread (initialisation, device identity, the "main"
// sampling mode) and the sampling worker (nvml-worker.cjs). Plain CommonJS so a worker thread can
// load it without a TypeScript loader. Its shape is described by `NvmlBinding` in nvml-types.ts.
"use strict";

const NVML_SUCCESS = 0;
const NVML_ERROR_INSUFFICIENT_SIZE = 7;
const NVML_ERROR_FUNCTION_NOT_FOUND = 13;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
/** `sizeof(nvmlMemory_v2_t) | (2 << 24)`: the struct version NVML checks. */
const NVML_MEMORY_V2_VERSION = (40 | (2 << 24)) >>> 0;
/** `nvmlProcessInfo_v2_t` (used by the _v3 and _v2 calls): pid, pad, usedGpuMemory, gpuInstanceId, computeInstanceId. */
const PROCESS_INFO_V2_SIZE = 24;
/** `nvmlProcessInfo_v1_t`: pid, pad, usedGpuMemory. */
const PROCESS_INFO_V1_SIZE = 16;
const STRING_LENGTH = 96;
const TWO_32 = 4294967296;

/** Declares `signature`, or returns undefined when the library lacks the symbol. */
function optional(lib, signature) {
  try {
    return lib.func(signature);
  } catch {
    return undefined;
  }
}

/** A u64 at `offset`, as a number; NaN for NVML_VALUE_NOT_AVAILABLE (all bits set). */
function u64(view, offset) {
  const lo = view.getUint32(offset, true);
  const hi = view.getUint32(offset + 4, true);
  if (lo === 0xffffffff && hi === 0xffffffff) return Number.NaN;
  return hi * TWO_32 + lo;
}

function cString(buffer) {
  const end = buffer.indexOf(0);
  return buffer.toString("utf8", 0, end < 0 ? buffer.length : end);
}

/**
 * Loads NVML from `libraryPath` with `koffi` and binds the calls Stormlog makes.
 * Throws when the library cannot be loaded or lacks nvmlInit.
 */
function openNvml(koffi, libraryPath) {
  const lib = koffi.load(libraryPath);
  const initV2 = optional(lib, "int nvmlInit_v2()");
  const initV1 = initV2 ? undefined : optional(lib, "int nvmlInit()");
  const init = initV2 || initV1;
  if (!init) throw new Error(`${libraryPath} has no nvmlInit_v2 or nvmlInit: is it NVML?`);
  const shutdown = optional(lib, "int nvmlShutdown()");
  const errorString = optional(lib, "const char *nvmlErrorString(int result)");
  const driverVersion = optional(
    lib,
    "int nvmlSystemGetDriverVersion(_Out_ uint8_t *version, unsigned int length)",
  );
  const getCount =
    optional(lib, "int nvmlDeviceGetCount_v2(_Out_ unsigned int *count)") ||
    optional(lib, "int nvmlDeviceGetCount(_Out_ unsigned int *count)");
  const byIndex =
    optional(lib, "int nvmlDeviceGetHandleByIndex_v2(unsigned int index, _Out_ void **device)") ||
    optional(lib, "int nvmlDeviceGetHandleByIndex(unsigned int index, _Out_ void **device)");
  const byUuid = optional(lib, "int nvmlDeviceGetHandleByUUID(const char *uuid, _Out_ void **device)");
  const getIndex = optional(lib, "int nvmlDeviceGetIndex(void *device, _Out_ unsigned int *index)");
  const getName = optional(
    lib,
    "int nvmlDeviceGetName(void *device, _Out_ uint8_t *name, unsigned int length)",
  );
  const getUuid = optional(
    lib,
    "int nvmlDeviceGetUUID(void *device, _Out_ uint8_t *uuid, unsigned int length)",
  );
  const memoryV2 = optional(lib, "int nvmlDeviceGetMemoryInfo_v2(void *device, void *memory)");
  const memoryV1 = optional(lib, "int nvmlDeviceGetMemoryInfo(void *device, void *memory)");
  let processCall = optional(
    lib,
    "int nvmlDeviceGetComputeRunningProcesses_v3(void *device, void *count, void *infos)",
  );
  let processApi = processCall ? 3 : 0;
  if (!processCall) {
    processCall = optional(
      lib,
      "int nvmlDeviceGetComputeRunningProcesses_v2(void *device, void *count, void *infos)",
    );
    processApi = processCall ? 2 : 0;
  }
  if (!processCall) {
    processCall = optional(
      lib,
      "int nvmlDeviceGetComputeRunningProcesses(void *device, void *count, void *infos)",
    );
    processApi = processCall ? 1 : 0;
  }

  // Reused buffers: no allocation per reading.
  const memoryBuffer = Buffer.alloc(40);
  const memoryView = new DataView(memoryBuffer.buffer, memoryBuffer.byteOffset, memoryBuffer.byteLength);
  const countBuffer = Buffer.alloc(4);
  let processBuffer = Buffer.alloc(64 * PROCESS_INFO_V2_SIZE);
  const handleOut = [null];
  const uintOut = [0];
  const stringBuffer = Buffer.alloc(STRING_LENGTH);
  // Once _v2 answers "not found" or rejects the struct version, the driver is older: use v1 from then on.
  let useMemoryV2 = memoryV2 !== undefined;

  const handleResult = (ret) => ({ ret, handle: ret === NVML_SUCCESS ? handleOut[0] : null });
  const stringCall = (fn, handle) => {
    if (!fn) return { ret: NVML_ERROR_FUNCTION_NOT_FOUND, value: "" };
    stringBuffer.fill(0);
    const ret = fn(handle, stringBuffer, STRING_LENGTH);
    return { ret, value: ret === NVML_SUCCESS ? cString(stringBuffer) : "" };
  };

  return {
    path: libraryPath,
    get memoryApi() {
      return useMemoryV2 ? 2 : memoryV1 ? 1 : 0;
    },
    processApi,
    init: () => init(),
    shutdown: () => (shutdown ? shutdown() : NVML_SUCCESS),
    errorString: (code) => (errorString ? String(errorString(code) ?? "") : ""),
    driverVersion: () => {
      if (!driverVersion) return { ret: NVML_ERROR_FUNCTION_NOT_FOUND, value: "" };
      stringBuffer.fill(0);
      const ret = driverVersion(stringBuffer, STRING_LENGTH);
      return { ret, value: ret === NVML_SUCCESS ? cString(stringBuffer) : "" };
    },
    deviceCount: () => {
      if (!getCount) return { ret: NVML_ERROR_FUNCTION_NOT_FOUND, count: 0 };
      const ret = getCount(uintOut);
      return { ret, count: ret === NVML_SUCCESS ? uintOut[0] : 0 };
    },
    handleByIndex: (index) =>
      byIndex
        ? handleResult(byIndex(index, handleOut))
        : { ret: NVML_ERROR_FUNCTION_NOT_FOUND, handle: null },
    handleByUuid: (uuid) =>
      byUuid ? handleResult(byUuid(uuid, handleOut)) : { ret: NVML_ERROR_FUNCTION_NOT_FOUND, handle: null },
    deviceIndex: (handle) => {
      if (!getIndex) return { ret: NVML_ERROR_FUNCTION_NOT_FOUND, index: -1 };
      const ret = getIndex(handle, uintOut);
      return { ret, index: ret === NVML_SUCCESS ? uintOut[0] : -1 };
    },
    name: (handle) => stringCall(getName, handle),
    uuid: (handle) => stringCall(getUuid, handle),
    /**
     * Memory of `handle` into out[0..5]: version (2 or 1), total, free, used, reserved (NaN for v1).
     * A value NVML reports as not available is NaN. Returns the NVML return code.
     */
    memory: (handle, out) => {
      if (useMemoryV2) {
        memoryView.setUint32(0, NVML_MEMORY_V2_VERSION, true);
        const ret = memoryV2(handle, memoryBuffer);
        if (ret === NVML_SUCCESS) {
          out[0] = 2;
          out[1] = u64(memoryView, 8);
          out[4] = u64(memoryView, 16);
          out[2] = u64(memoryView, 24);
          out[3] = u64(memoryView, 32);
          return ret;
        }
        if (
          (ret !== NVML_ERROR_FUNCTION_NOT_FOUND && ret !== NVML_ERROR_ARGUMENT_VERSION_MISMATCH) ||
          !memoryV1
        ) {
          return ret;
        }
        useMemoryV2 = false;
      }
      if (!memoryV1) return NVML_ERROR_FUNCTION_NOT_FOUND;
      const ret = memoryV1(handle, memoryBuffer);
      if (ret === NVML_SUCCESS) {
        out[0] = 1;
        out[1] = u64(memoryView, 0);
        out[2] = u64(memoryView, 8);
        out[3] = u64(memoryView, 16);
        out[4] = Number.NaN;
      }
      return ret;
    },
    /**
     * Compute processes of `handle` into out[0..2]: how many, `pid`'s used bytes (-1 when `pid`
     * is not listed, NaN when NVML cannot tell), and the sum over all processes (NaN when any is
     * unknown). Grows its buffer and retries on NVML_ERROR_INSUFFICIENT_SIZE.
     */
    processes: (handle, pid, out) => {
      if (!processCall) return NVML_ERROR_FUNCTION_NOT_FOUND;
      const size = processApi === 1 ? PROCESS_INFO_V1_SIZE : PROCESS_INFO_V2_SIZE;
      let ret = NVML_ERROR_INSUFFICIENT_SIZE;
      for (let attempt = 0; attempt < 4 && ret === NVML_ERROR_INSUFFICIENT_SIZE; attempt += 1) {
        const capacity = Math.floor(processBuffer.length / size);
        countBuffer.writeUInt32LE(capacity, 0);
        ret = processCall(handle, countBuffer, processBuffer);
        if (ret === NVML_ERROR_INSUFFICIENT_SIZE) {
          // The list can grow between calls: leave headroom.
          const needed = countBuffer.readUInt32LE(0) + 8;
          processBuffer = Buffer.alloc(Math.max(needed, capacity * 2) * size);
        }
      }
      if (ret !== NVML_SUCCESS) return ret;
      const count = countBuffer.readUInt32LE(0);
      const view = new DataView(processBuffer.buffer, processBuffer.byteOffset, processBuffer.byteLength);
      let own = -1;
      let total = 0;
      for (let i = 0; i < count; i += 1) {
        const base = i * size;
        const used = u64(view, base + 8);
        total += used;
        if (view.getUint32(base, true) === pid) own = own < 0 ? used : own + used;
      }
      out[0] = count;
      out[1] = own;
      out[2] = total;
      return ret;
    },
  };
}

module.exports = { openNvml, NVML_SUCCESS, NVML_MEMORY_V2_VERSION };
