import { StormlogError } from "@stormlog/core";

const KOFFI_MISSING_MARKER = Symbol.for("stormlog.error.koffi_missing");

/**
 * The machine has an NVIDIA driver (an NVML library or `nvidia-smi` was found) but koffi, the FFI module
 * NVML is read through, is not installed: it is an optional peer dependency, so that installs without a
 * GPU stay small. The NVML collector reports it as its unavailability reason and as its failures' `cause`.
 */
export class KoffiMissingError extends StormlogError {
  readonly [KOFFI_MISSING_MARKER] = true;
  override readonly name = "KoffiMissingError";
  /** What showed the driver: the NVML library's path, or the `nvidia-smi` executable's. */
  readonly found: string;
  /** Whether `nvidia-smi` is on PATH, so that `nvidiaSmiCollector()` can read the GPU meanwhile. */
  readonly nvidiaSmi: boolean;

  constructor(found: string, nvidiaSmi: boolean) {
    // The remedy comes first: callers (the CLI) may cut long reasons.
    super(
      `NVML unavailable: koffi is not installed; install it (npm i koffi) to read this GPU through NVML (found ${found})` +
        (nvidiaSmi ? "; meanwhile nvidiaSmiCollector() reads it through nvidia-smi, more slowly" : ""),
    );
    this.found = found;
    this.nvidiaSmi = nvidiaSmi;
  }

  static override isInstance(error: unknown): error is KoffiMissingError {
    return StormlogError.hasMarker(error, KOFFI_MISSING_MARKER);
  }
}
