import { execFile } from "node:child_process";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  InvalidConfigError,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryCounterField,
  type MemoryReading,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { findExecutable } from "./driver-files.js";
import { NVML_COLLECTOR_NAME } from "./nvml.js";
import { firstLine } from "./nvml-library.js";
import { parseCudaVisibleDevices, resolveLogicalDevice } from "./visible-devices.js";

/** The query the collector runs (values in MiB). */
export const NVIDIA_SMI_ARGS = [
  "--query-gpu=index,uuid,memory.used,memory.total,memory.free",
  "--format=csv,noheader,nounits",
] as const;

const MIB = 1024 * 1024;

/** Options of {@link nvidiaSmiCollector}. */
export interface NvidiaSmiCollectorOptions {
  /** Logical device index (mapped through `CUDA_VISIBLE_DEVICES`). Default 0. */
  readonly deviceIndex?: number;
  /** The executable. Default `nvidia-smi` from PATH. */
  readonly command?: string;
  /** Kill a query that takes longer. Default 10000 ms. */
  readonly timeoutMs?: number;
  /** Telemetry `device_id`. Default: the logical index. */
  readonly deviceId?: number;
  /** Environment for `CUDA_VISIBLE_DEVICES` and PATH. Default `process.env`. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Telemetry `collector`. Default `stormlog.cuda_tracker`. */
  readonly name?: string;
}

/** One row of the query. */
export interface NvidiaSmiRow {
  readonly index: number;
  readonly uuid: string;
  /** Bytes, or undefined where nvidia-smi printed `[N/A]` or `[Not Supported]`. */
  readonly used: number | undefined;
  readonly total: number | undefined;
  readonly free: number | undefined;
}

/** Parses `index, uuid, memory.used, memory.total, memory.free` rows (MiB, no units). */
export function parseNvidiaSmiOutput(stdout: string): NvidiaSmiRow[] {
  const rows: NvidiaSmiRow[] = [];
  for (const line of stdout.split(/\r?\n/)) {
    if (line.trim() === "") continue;
    const [index, uuid, used, total, free] = line.split(",").map((cell) => cell.trim());
    if (index === undefined || !/^\d+$/.test(index)) continue;
    rows.push({
      index: Number(index),
      uuid: uuid ?? "",
      used: mib(used),
      total: mib(total),
      free: mib(free),
    });
  }
  return rows;
}

function mib(cell: string | undefined): number | undefined {
  if (cell === undefined || !/^\d+(\.\d+)?$/.test(cell)) return undefined;
  return Math.round(Number(cell) * MIB);
}

/**
 * The slow fallback: device memory from `nvidia-smi --query-gpu` (10 ms to over half a second per
 * reading: sample every few seconds at most). Readings are MiB-granular. Use it where NVML cannot
 * be loaded through FFI but the nvidia-smi tool works.
 *
 * @example
 * const gpu = nvidiaSmiCollector({ deviceIndex: 0 });
 * if (gpu.availability().available) console.log(await gpu.sample());
 */
export function nvidiaSmiCollector(options: NvidiaSmiCollectorOptions = {}): MemoryCollector {
  const env = options.env ?? process.env;
  const logical = options.deviceIndex ?? 0;
  if (!Number.isInteger(logical) || logical < 0) {
    throw new InvalidConfigError("deviceIndex", `expected an integer >= 0, got ${String(logical)}`);
  }
  const timeoutMs = options.timeoutMs ?? 10_000;
  const command = options.command ?? "nvidia-smi";
  const name = options.name ?? NVML_COLLECTOR_NAME;
  const capabilities: MemoryCapabilities = {
    ...noCapabilities("cuda", name, "nvidia-smi"),
    supports_device_used: true,
    supports_device_free: true,
    supports_device_total: true,
  };
  let closed = false;
  let inFlight: Promise<SampleResult> | undefined;

  const query = (): Promise<SampleResult> =>
    new Promise((resolve) => {
      execFile(
        command,
        [...NVIDIA_SMI_ARGS],
        { timeout: timeoutMs, env: env as NodeJS.ProcessEnv, windowsHide: true },
        (error, stdout, stderr) => {
          if (error) {
            const detail = firstLine(String(stderr).trim() || String(stdout).trim() || error.message);
            resolve({ kind: "failure", error: `${command} failed: ${detail}`, cause: error });
            return;
          }
          resolve(toResult(parseNvidiaSmiOutput(String(stdout))));
        },
      );
    });

  const toResult = (rows: NvidiaSmiRow[]): SampleResult => {
    const resolved = resolveLogicalDevice(
      logical,
      parseCudaVisibleDevices(env.CUDA_VISIBLE_DEVICES),
      rows.map((row) => ({ index: row.index, uuid: row.uuid })),
    );
    if (!resolved.ok) return { kind: "failure", error: `nvidia-smi: ${resolved.reason}` };
    const row = rows.find((candidate) => candidate.uuid === resolved.uuid);
    if (!row) return { kind: "failure", error: `nvidia-smi lists no device ${resolved.uuid}` };
    const values: Partial<Record<MemoryCounterField, number | undefined>> = {
      device_used_bytes: row.used,
      device_total_bytes: row.total,
      device_free_bytes: row.free,
    };
    const reading: MemoryReading = {};
    const missing: MemoryCounterField[] = [];
    for (const [field, value] of Object.entries(values) as [MemoryCounterField, number | undefined][]) {
      if (value === undefined) missing.push(field);
      else reading[field] = value;
    }
    const metadata = { nvml_device_uuid: row.uuid, nvml_physical_index: row.index, nvidia_smi_unit: "MiB" };
    if (missing.length === 3)
      return { kind: "failure", error: `nvidia-smi reports no memory figure for ${row.uuid}` };
    if (missing.length > 0) {
      return {
        kind: "partial",
        reading,
        missing,
        reason: `nvidia-smi reports ${missing.join(", ")} as N/A`,
        metadata,
      };
    }
    return { kind: "full", reading, metadata };
  };

  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name,
    deviceId: options.deviceId ?? logical,
    capabilities,
    availability(): CollectorAvailability {
      if (closed) return { available: false, reason: "the nvidia-smi collector was closed" };
      return findExecutable(command, env.PATH) !== undefined
        ? { available: true }
        : { available: false, reason: `${command} not found (no NVIDIA driver tools on PATH)` };
    },
    sample(): SampleResult | Promise<SampleResult> {
      if (closed) return { kind: "failure", error: "the nvidia-smi collector was closed" };
      // One query at a time: a slow nvidia-smi answers every caller that asked meanwhile.
      if (!inFlight) {
        inFlight = query().finally(() => {
          inFlight = undefined;
        });
      }
      return inFlight;
    },
    close(): void {
      closed = true;
    },
  };
}
