/**
 * @stormlog/adapter-cuda: device memory of NVIDIA GPUs through NVML (koffi FFI, sampled on a
 * worker thread), `CUDA_VISIBLE_DEVICES` mapping, and an `nvidia-smi` collector as the slow
 * fallback. Depends on `@stormlog/core` only; koffi is an optional peer dependency, required only when
 * NVML is opened.
 */
export { KoffiMissingError } from "./errors.js";
export {
  NVIDIA_SMI_ARGS,
  type NvidiaSmiCollectorOptions,
  type NvidiaSmiRow,
  nvidiaSmiCollector,
  parseNvidiaSmiOutput,
} from "./nvidia-smi.js";
export {
  defaultNvmlLibraryPaths,
  NVML_COLLECTOR_NAME,
  NVML_LIBRARY_ENV,
  type NvmlCollector,
  type NvmlCollectorOptions,
  type NvmlDeviceInfo,
  nvmlCollector,
} from "./nvml.js";
export { describeNvmlReturn, NVML_RETURN_CODES } from "./nvml-codes.js";
export {
  logicalIndexOf,
  type PhysicalDevice,
  parseCudaVisibleDevices,
  type ResolvedDevice,
  resolveLogicalDevice,
  type VisibleDeviceEntry,
} from "./visible-devices.js";
