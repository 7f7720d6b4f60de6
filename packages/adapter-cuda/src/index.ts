/**
 * @stormlog/adapter-cuda: device memory of NVIDIA GPUs through NVML (koffi FFI, sampled on a
 * worker thread), `CUDA_VISIBLE_DEVICES` mapping, and an `nvidia-smi` collector as the slow
 * fallback. Depends on `@stormlog/core` only; koffi is an optional peer dependency, required only when
 * NVML is opened.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 */

// The NVML collector: device memory, and this process's share of it.

export {
  NVML_COLLECTOR_NAME,
  type NvmlCollector,
  type NvmlCollectorOptions,
  type NvmlDeviceInfo,
  nvmlCollector,
} from "./nvml.js";

// The slow fallback, through `nvidia-smi` (no koffi needed).

export { type NvidiaSmiCollectorOptions, nvidiaSmiCollector } from "./nvidia-smi.js";

// Errors: a driver found, but koffi not installed to read it.

export { KoffiMissingError } from "./errors.js";
