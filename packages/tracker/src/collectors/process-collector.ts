import { closeSync, openSync, readSync } from "node:fs";
import { getHeapStatistics } from "node:v8";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  CPU_TRACKER_COLLECTOR,
  InvalidConfigError,
  type JsonObject,
  type MemoryCapabilities,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";
import { describeError } from "../describe-error.js";

/** The telemetry `collector` of host-memory readings, as the reference's CPU mode writes it. */
export const PROCESS_COLLECTOR_NAME = CPU_TRACKER_COLLECTOR;

/** Options of {@link processCollector}. */
export interface ProcessCollectorOptions {
  /**
   * Read `/proc/self/statm` through a kept-open descriptor (Linux). Default: true where it exists.
   * False uses `process.memoryUsage.rss()` (about 4x slower) everywhere.
   */
  readonly procfs?: boolean;
  /** Page size in bytes for `/proc/self/statm`. Default: detected once against `process.memoryUsage.rss()`. */
  readonly pageSize?: number;
  /**
   * Read `process.memoryUsage()` (the only source of `arrayBuffers`, ~9 us) on every Nth sample.
   * V8 heap used/total and external memory come from the cheaper `v8.getHeapStatistics()` on every sample.
   * Default 20; 0 never.
   */
  readonly arrayBuffersEveryN?: number;
  /** The path read instead of `/proc/self/statm` (tests). */
  readonly statmPath?: string;
}

/** The process collector: a {@link MemoryCollector} whose `sample()` is synchronous. */
export interface ProcessCollector extends MemoryCollector {
  sample(): SampleResult;
  /** RSS alone, read for the boundaries of phases that ask for readings (no V8 statistics, no metadata). */
  readOnDemand(): SampleResult;
  close(): void;
}

/** Page sizes a Linux kernel may use; detection snaps to the nearest. */
const PAGE_SIZES = [4096, 16384, 65536] as const;
const DEFAULT_PAGE_SIZE = 4096;

/**
 * The Node process's host memory: resident set size as allocated and reserved (the reference's CPU
 * mode: `stormlog.cpu_tracker`, device -1), with the V8 heap, external memory and array buffers in
 * metadata. On Linux RSS comes from a kept-open `/proc/self/statm` read into a reused buffer
 * (about 2 us); elsewhere from `process.memoryUsage.rss()`. `readOnDemand()` reads RSS alone the same
 * way, for the boundaries of phases opened with `{ readings: true }`.
 *
 * @example
 * const collector = processCollector();
 * const result = collector.sample(); // { kind: "full", reading: { allocator_allocated_bytes: ... } }
 */
export function processCollector(options: ProcessCollectorOptions = {}): ProcessCollector {
  const everyN = options.arrayBuffersEveryN ?? 20;
  if (!Number.isInteger(everyN) || everyN < 0) {
    throw new InvalidConfigError("arrayBuffersEveryN", `expected an integer >= 0, got ${String(everyN)}`);
  }
  if (options.pageSize !== undefined && (!Number.isInteger(options.pageSize) || options.pageSize <= 0)) {
    throw new InvalidConfigError("pageSize", `expected a positive integer, got ${String(options.pageSize)}`);
  }

  const statmPath = options.statmPath ?? "/proc/self/statm";
  const buffer = Buffer.alloc(256);
  let fd = options.procfs === false ? -1 : tryOpen(statmPath);
  let pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
  if (fd >= 0 && options.pageSize === undefined) {
    const pages = readResidentPages(fd, buffer);
    if (pages === undefined) {
      closeQuietly(fd);
      fd = -1;
    } else {
      pageSize = detectPageSize(pages, process.memoryUsage.rss());
    }
  }
  const source = () => (fd >= 0 ? "procfs_statm" : "process.memoryUsage");
  const capabilities: MemoryCapabilities = {
    ...noCapabilities("cpu", PROCESS_COLLECTOR_NAME, source()),
    supports_allocator_allocated: true,
    supports_allocator_reserved: true,
  };

  let sampleCount = 0;
  let closed = false;

  const readRss = (): number => {
    if (fd >= 0) {
      const pages = readResidentPages(fd, buffer);
      if (pages !== undefined) return pages * pageSize;
      // The descriptor went bad (closed by someone else, odd procfs): use the portable read from now on.
      closeQuietly(fd);
      fd = -1;
    }
    return process.memoryUsage.rss();
  };

  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: PROCESS_COLLECTOR_NAME,
    deviceId: -1,
    capabilities,
    availability(): CollectorAvailability {
      return closed ? { available: false, reason: "the process collector was closed" } : { available: true };
    },
    sample(): SampleResult {
      if (closed) return { kind: "failure", error: "the process collector was closed" };
      try {
        const rss = readRss();
        const heap = getHeapStatistics();
        const metadata: JsonObject = {
          rss_bytes: rss,
          rss_source: source(),
          v8_heap_used_bytes: heap.used_heap_size,
          v8_heap_total_bytes: heap.total_heap_size,
          v8_external_bytes: heap.external_memory,
        };
        sampleCount += 1;
        if (everyN > 0 && (sampleCount - 1) % everyN === 0) {
          metadata.v8_array_buffers_bytes = process.memoryUsage().arrayBuffers;
        }
        return {
          kind: "full",
          reading: { allocator_allocated_bytes: rss, allocator_reserved_bytes: rss },
          metadata,
        };
      } catch (error) {
        return {
          kind: "failure",
          error: `could not read process memory: ${describeError(error)}`,
          cause: error,
        };
      }
    },
    readOnDemand(): SampleResult {
      if (closed) return { kind: "failure", error: "the process collector was closed" };
      try {
        const rss = readRss();
        return { kind: "full", reading: { allocator_allocated_bytes: rss, allocator_reserved_bytes: rss } };
      } catch (error) {
        return {
          kind: "failure",
          error: `could not read process memory: ${describeError(error)}`,
          cause: error,
        };
      }
    },
    close(): void {
      if (closed) return;
      closed = true;
      if (fd >= 0) closeQuietly(fd);
      fd = -1;
    },
  };
}

/**
 * The page size that makes `residentPages` pages closest to `rssBytes`, among the sizes Linux uses.
 * Both numbers describe the same resident set, read a moment apart.
 */
export function detectPageSize(residentPages: number, rssBytes: number): number {
  if (!(residentPages > 0) || !(rssBytes > 0)) return DEFAULT_PAGE_SIZE;
  const ratio = rssBytes / residentPages;
  let best: number = DEFAULT_PAGE_SIZE;
  for (const size of PAGE_SIZES) {
    if (Math.abs(Math.log(ratio / size)) < Math.abs(Math.log(ratio / best))) best = size;
  }
  return best;
}

function tryOpen(path: string): number {
  try {
    return openSync(path, "r");
  } catch {
    return -1;
  }
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Already closed: nothing to release.
  }
}

/**
 * The second field of statm (resident pages), parsed from bytes so no string is allocated.
 * `pread` at offset 0 makes procfs regenerate the line on every call.
 */
function readResidentPages(fd: number, buffer: Buffer): number | undefined {
  let length: number;
  try {
    length = readSync(fd, buffer, 0, buffer.length, 0);
  } catch {
    return undefined;
  }
  let i = 0;
  while (i < length && buffer[i] !== 0x20) i += 1;
  i += 1;
  let value = 0;
  let digits = 0;
  for (; i < length; i += 1) {
    const c = buffer[i]!;
    if (c < 0x30 || c > 0x39) break;
    value = value * 10 + (c - 0x30);
    digits += 1;
  }
  return digits > 0 ? value : undefined;
}
