import { InvalidConfigError, type JsonObject, type PhaseHost } from "@stormlog/core";
import type { TfKernelInfo, TfProfileInfo, TfProfiler } from "./types.js";

/** Options of {@link profilePhase}. */
export interface ProfilePhaseOptions {
  /** Attributes of the phase. */
  readonly metadata?: JsonObject;
  /** Kernels listed one by one, in execution order; the rest are only counted in `by_kernel`. Default 200. */
  readonly maxKernels?: number;
  /** Name of the zero-length child phase that carries the kernel detail. Default `tf.profile`. */
  readonly detailPhase?: string;
}

/** What one kernel added, in snake_case for telemetry. */
export interface KernelMemoryDetail extends JsonObject {
  name: string;
  bytes_added: number;
  total_bytes_snapshot: number;
  tensors_added: number;
  total_tensors_snapshot: number;
  output_shapes: number[][];
}

/** Totals per kernel name. */
export interface KernelTotals extends JsonObject {
  count: number;
  bytes_added: number;
  tensors_added: number;
  max_total_bytes_snapshot: number;
}

/** The memory side of a `tf.profile()` run, as recorded in phase metadata. */
export interface KernelProfileSummary extends JsonObject {
  new_bytes: number;
  new_tensors: number;
  /** Highest `totalBytesSnapshot` after any kernel; null when no kernel ran. */
  peak_bytes: number | null;
  kernel_count: number;
  kernels: KernelMemoryDetail[];
  /** Kernels left out of `kernels` by `maxKernels`. */
  kernels_truncated: number;
  by_kernel: Record<string, KernelTotals>;
}

/** The function's result and the kernel summary. */
export interface ProfiledPhase<T> {
  readonly result: T;
  readonly profile: KernelProfileSummary;
}

/**
 * Runs `fn` inside the phase `name` under `tf.profile()` and records, per kernel, the bytes and
 * tensors it added (`bytesAdded`, `totalBytesSnapshot`, `tensorsAdded`) as attributes of a
 * zero-length child phase (`<name> / tf.profile`) that closes just before the phase does.
 *
 * Opt-in debugging only: `tf.profile` times every kernel and, on backends without a kernel timer,
 * downloads each output with `dataSync()`, which serialises GPU work. Measured on the cpu backend
 * it costs a few microseconds per kernel (see the README). Profiles do not nest.
 *
 * @example
 * const { result, profile } = await profilePhase(tf, tracker, "forward", () => model.predict(x));
 */
export async function profilePhase<T>(
  tf: TfProfiler,
  host: PhaseHost,
  name: string,
  fn: () => T | Promise<T>,
  options: ProfilePhaseOptions = {},
): Promise<ProfiledPhase<T>> {
  const maxKernels = options.maxKernels ?? 200;
  if (!Number.isInteger(maxKernels) || maxKernels < 0) {
    throw new InvalidConfigError("maxKernels", `expected an integer >= 0, got ${String(maxKernels)}`);
  }
  const attributes: JsonObject = { ...options.metadata, tfjs_profile: true };
  const scope = host.enterPhase(name, { metadata: attributes });
  try {
    let result: T | undefined;
    const info = await tf.profile(async () => {
      result = await fn();
      return result;
    });
    const profile = summarizeProfile(info, maxKernels);
    host.phase(options.detailPhase ?? "tf.profile", () => undefined, { metadata: { tfjs_kernels: profile } });
    return { result: result as T, profile };
  } finally {
    scope.close();
  }
}

/** The memory side of a `tf.profile()` result, in telemetry's snake_case. */
export function summarizeProfile(info: TfProfileInfo, maxKernels = 200): KernelProfileSummary {
  const kernels: KernelMemoryDetail[] = [];
  const byKernel: Record<string, KernelTotals> = {};
  let peak: number | null = null;
  for (const kernel of info.kernels) {
    if (kernels.length < maxKernels) kernels.push(detail(kernel));
    const totals = byKernel[kernel.name] ?? {
      count: 0,
      bytes_added: 0,
      tensors_added: 0,
      max_total_bytes_snapshot: 0,
    };
    totals.count += 1;
    totals.bytes_added += kernel.bytesAdded;
    totals.tensors_added += kernel.tensorsAdded;
    totals.max_total_bytes_snapshot = Math.max(totals.max_total_bytes_snapshot, kernel.totalBytesSnapshot);
    byKernel[kernel.name] = totals;
    // tfjs reports -Infinity as the peak of an empty profile; compute it here instead.
    peak = peak === null ? kernel.totalBytesSnapshot : Math.max(peak, kernel.totalBytesSnapshot);
  }
  return {
    new_bytes: info.newBytes,
    new_tensors: info.newTensors,
    peak_bytes: peak,
    kernel_count: info.kernels.length,
    kernels,
    kernels_truncated: info.kernels.length - kernels.length,
    by_kernel: byKernel,
  };
}

function detail(kernel: TfKernelInfo): KernelMemoryDetail {
  return {
    name: kernel.name,
    bytes_added: kernel.bytesAdded,
    total_bytes_snapshot: kernel.totalBytesSnapshot,
    tensors_added: kernel.tensorsAdded,
    total_tensors_snapshot: kernel.totalTensorsSnapshot,
    output_shapes: (kernel.outputShapes ?? []).map((shape) => [...shape]),
  };
}
