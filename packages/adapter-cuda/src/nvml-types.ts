/** Opaque NVML device handle (a koffi pointer). */
export type NvmlDeviceHandle = unknown;

/** The NVML calls nvml-binding.cjs binds (see that file). Return codes are NVML's `nvmlReturn_t`. */
export interface NvmlBinding {
  readonly path: string;
  /** 2 when nvmlDeviceGetMemoryInfo_v2 is in use, 1 for the v1 call, 0 for neither. */
  readonly memoryApi: number;
  /** Version of nvmlDeviceGetComputeRunningProcesses bound (3, 2, 1), 0 for none. */
  readonly processApi: number;
  init(): number;
  shutdown(): number;
  errorString(code: number): string;
  driverVersion(): { ret: number; value: string };
  deviceCount(): { ret: number; count: number };
  handleByIndex(index: number): { ret: number; handle: NvmlDeviceHandle };
  handleByUuid(uuid: string): { ret: number; handle: NvmlDeviceHandle };
  deviceIndex(handle: NvmlDeviceHandle): { ret: number; index: number };
  name(handle: NvmlDeviceHandle): { ret: number; value: string };
  uuid(handle: NvmlDeviceHandle): { ret: number; value: string };
  /** out: [version, total, free, used, reserved]; NaN where NVML reports "not available". */
  memory(handle: NvmlDeviceHandle, out: Float64Array): number;
  /** out: [count, own pid's used bytes (-1 not listed), all processes' used bytes]. */
  processes(handle: NvmlDeviceHandle, pid: number, out: Float64Array): number;
}

/** The module nvml-binding.cjs exports. */
export interface NvmlBindingModule {
  openNvml(koffi: unknown, libraryPath: string): NvmlBinding;
  readonly NVML_SUCCESS: number;
}
