import { existsSync, readdirSync, readFileSync } from "node:fs";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  CPU_TRACKER_COLLECTOR,
  type JsonObject,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryReading,
  noCapabilities,
  type SampleResult,
} from "@stormlog/core";

/** The telemetry `collector` of host-memory readings (the reference's CPU mode), here for another process. */
export const CHILD_COLLECTOR_NAME = CPU_TRACKER_COLLECTOR;

/** Options of {@link childProcessCollector}. */
export interface ChildProcessCollectorOptions {
  /** Where procfs is mounted (default `/proc`; tests point it elsewhere). */
  readonly procRoot?: string;
  /** Add the resident memory of the process's descendants (default true): `npm run x` runs x in a grandchild. */
  readonly descendants?: boolean;
  /**
   * Settles once the process's exit has been handled (the tracker stopped). A sample that finds the
   * process gone waits for it before failing, so a tracker stopped meanwhile discards that sample
   * instead of recording a spurious collector failure for a process that simply finished.
   */
  readonly exited?: Promise<unknown>;
}

/** A collector of another process's resident memory; `attach(pid)` before the tracker starts. */
export interface ChildProcessCollector extends MemoryCollector {
  /** Starts reading this process (and its descendants). */
  attach(pid: number): void;
  /** The attached pid, or null. */
  readonly pid: number | null;
  /** The root process's peak resident set (`VmHWM`) at the last successful sample, in bytes. */
  readonly peakRssBytes: number | null;
  sample(): SampleResult | Promise<SampleResult>;
  /**
   * The root's peak resident set (`VmHWM`, kept by the kernel) when it rose between the last two
   * samples above both of theirs: a spike no sample saw. Only while the root is the whole tree (its
   * peak is then the tree's); VmHWM is the process's lifetime peak, so a spike below an earlier one
   * is not seen. Null otherwise.
   */
  takeHighWater(): MemoryReading | null;
  close(): void;
}

interface StatusFigures {
  readonly rss: number;
  readonly hwm: number | null;
}

/** `VmRSS` and `VmHWM` of `/proc/<pid>/status` in bytes; undefined when the process is gone (or a zombie). */
function readStatus(root: string, pid: number): StatusFigures | undefined {
  let text: string;
  try {
    text = readFileSync(`${root}/${pid}/status`, "latin1");
  } catch {
    return undefined;
  }
  const rss = /^VmRSS:\s+(\d+) kB/m.exec(text);
  if (rss === null) return undefined;
  const hwm = /^VmHWM:\s+(\d+) kB/m.exec(text);
  return { rss: Number(rss[1]) * 1024, hwm: hwm === null ? null : Number(hwm[1]) * 1024 };
}

/** Direct children of `pid` through `/proc/<pid>/task/<tid>/children`; null when the kernel lacks the file. */
function childrenOf(root: string, pid: number): number[] | null {
  let tasks: string[];
  try {
    tasks = readdirSync(`${root}/${pid}/task`);
  } catch {
    return [];
  }
  const out: number[] = [];
  let supported = false;
  for (const task of tasks) {
    let text: string;
    try {
      text = readFileSync(`${root}/${pid}/task/${task}/children`, "latin1");
    } catch {
      continue;
    }
    supported = true;
    for (const token of text.split(" ")) {
      const child = Number.parseInt(token, 10);
      if (Number.isSafeInteger(child) && child > 0) out.push(child);
    }
  }
  return supported || tasks.length === 0 ? out : null;
}

/**
 * The resident memory of a foreign process (the command `stormlog track` runs), read from Linux
 * procfs: `VmRSS` of the process plus, by default, of its descendants, as allocated and reserved
 * (the reference's CPU mode, device -1), with the root's peak (`VmHWM`) and the process count in
 * metadata. A process that exited gives a failed sample, never zeros. Unavailable without procfs.
 */
export function childProcessCollector(options: ChildProcessCollectorOptions = {}): ChildProcessCollector {
  const root = options.procRoot ?? "/proc";
  const descendants = options.descendants ?? true;
  const capabilities: MemoryCapabilities = {
    ...noCapabilities("cpu", CHILD_COLLECTOR_NAME, "procfs_status"),
    supports_allocator_allocated: true,
    supports_allocator_reserved: true,
  };
  let pid: number | null = null;
  let peak: number | null = null;
  /** The last sample's root peak, tree total and process count; the window's start at the last take. */
  let lastHwm: number | null = null;
  let lastTotal: number | null = null;
  let lastCount = 0;
  let windowStart: { readonly peak: number | null; readonly total: number | null } | null = null;
  let closed = false;
  let treeSupported = descendants;

  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: CHILD_COLLECTOR_NAME,
    deviceId: -1,
    capabilities,
    get pid() {
      return pid;
    },
    get peakRssBytes() {
      return peak;
    },
    attach(target: number) {
      pid = target;
    },
    availability(): CollectorAvailability {
      if (closed) return { available: false, reason: "the child process collector was closed" };
      if (pid === null) return { available: false, reason: "no process attached (call attach(pid) first)" };
      if (!existsSync(`${root}/${pid}/status`)) {
        return {
          available: false,
          reason: existsSync(root)
            ? `process ${pid} is not running`
            : `${root} is missing: reading another process's memory needs Linux procfs`,
        };
      }
      return { available: true };
    },
    sample(): SampleResult | Promise<SampleResult> {
      if (closed) return { kind: "failure", error: "the child process collector was closed" };
      if (pid === null) return { kind: "failure", error: "no process attached" };
      const own = readStatus(root, pid);
      if (own === undefined) {
        const gone: SampleResult = { kind: "failure", error: `process ${pid} has exited` };
        if (options.exited === undefined) return gone;
        // One more turn of the event loop after the exit is handled, then fail.
        return options.exited.then(
          () => new Promise<SampleResult>((done) => setTimeout(() => done(gone), 0)),
          () => gone,
        );
      }
      let total = own.rss;
      let count = 1;
      if (treeSupported) {
        const seen = new Set<number>([pid]);
        const queue = [pid];
        while (queue.length > 0) {
          const parent = queue.pop()!;
          const children = childrenOf(root, parent);
          if (children === null) {
            // No `children` files in this kernel: the root process alone from now on.
            treeSupported = false;
            total = own.rss;
            count = 1;
            break;
          }
          for (const child of children) {
            if (seen.has(child)) continue;
            seen.add(child);
            const figures = readStatus(root, child);
            if (figures === undefined) continue;
            total += figures.rss;
            count++;
            queue.push(child);
          }
        }
      }
      if (own.hwm !== null) peak = own.hwm;
      lastHwm = own.hwm;
      lastTotal = total;
      lastCount = count;
      const metadata: JsonObject = {
        tracked_pid: pid,
        rss_bytes: total,
        rss_scope: treeSupported ? "process_tree" : "process",
        process_count: count,
        rss_source: "procfs_status",
      };
      if (own.hwm !== null) metadata.root_rss_peak_bytes = own.hwm;
      return {
        kind: "full",
        reading: { allocator_allocated_bytes: total, allocator_reserved_bytes: total },
        metadata,
      };
    },
    takeHighWater(): MemoryReading | null {
      const start = windowStart;
      const hwm = lastHwm;
      windowStart = { peak: hwm, total: lastTotal };
      if (closed || start === null || hwm === null || lastTotal === null || lastCount !== 1) return null;
      if (start.peak === null || start.total === null || hwm <= start.peak) return null;
      return hwm > start.total && hwm > lastTotal
        ? { allocator_allocated_bytes: hwm, allocator_reserved_bytes: hwm }
        : null;
    },
    close() {
      closed = true;
    },
  };
}
