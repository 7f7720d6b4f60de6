import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import { describeNvmlReturn, NVML_SUCCESS } from "./nvml-codes.js";
import type { NvmlBinding, NvmlBindingModule } from "./nvml-types.js";

// Shared-memory layout of the worker protocol; mirrored in nvml-worker.cjs.
// Header ints: [doorbell, shutdown, ready, unused]; then SLOT_INTS per slot.
const HEADER_INTS = 4;
const READY = 2;
/** How long the first request may wait for the worker to start (load koffi, nvmlInit). */
const STARTUP_ALLOWANCE_MS = 15_000;
const MAX_SLOTS = 64;
const SLOT_INTS = 7;
const SLOT_DOUBLES = 11;
const UUID_BYTES = 96;
const REQUEST = 0;
const RESPONSE = 1;
const KIND = 2;
const REGISTERED = 3;
const PID = 4;
/** How often the worker polls the slot's device for its peak between requests (ms; 0: never). */
const POLL_MS = 5;
/** Takes of the slot's peak so far: polling pauses while it stays the same (no tracker asks). */
const TAKES = 6;
/** Per slot, as integers: [highest used since the last take, used at the latest poll]; -1: none yet. */
const PEAK_INTS = 2;

/** Raw outcome of one worker request (the first three are written by the worker). */
export const SlotStatus = {
  Ok: 0,
  NoDevice: 1,
  LoadFailed: 2,
  WorkerGone: 3,
  TimedOut: 4,
  Busy: 5,
} as const;
/** One of {@link SlotStatus}. */
export type SlotStatus = (typeof SlotStatus)[keyof typeof SlotStatus];

/** What the worker read for a slot: status, then NVML return codes and values (NaN = not read). */
export interface SlotReading {
  status: SlotStatus;
  memoryRet: number;
  /** [version, total, free, used, reserved] */
  memory: [number, number, number, number, number];
  processRet: number;
  /** [count, own, all] */
  processes: [number, number, number];
}

const require = createRequire(import.meta.url);

/**
 * Loads koffi lazily: it is an optional peer dependency (28 MB of prebuilt binaries), and a machine without
 * it, or without a prebuilt binary for its platform, still gets the nvidia-smi collector.
 */
function loadKoffi(): unknown {
  return require("koffi");
}

/** Whether koffi is installed where this package can require it (resolved, not loaded). */
export function koffiInstalled(): boolean {
  try {
    require.resolve("koffi");
    return true;
  } catch {
    return false;
  }
}

function loadBindingModule(): NvmlBindingModule {
  return require("./nvml-binding.cjs") as NvmlBindingModule;
}

/**
 * One loaded NVML library, shared by every collector that uses the same path: initialised once,
 * with one sampling worker thread whose request slots the collectors share.
 */
export class NvmlLibrary {
  readonly binding: NvmlBinding;
  readonly path: string;
  private refs = 0;
  private worker: Worker | undefined;
  private workerError: string | undefined;
  private readonly shared: SharedArrayBuffer;
  private readonly control: Int32Array;
  private readonly results: Float64Array;
  private readonly uuids: Uint8Array;
  private readonly peaks: BigInt64Array;
  private readonly slotUsed: boolean[] = new Array(MAX_SLOTS).fill(false);
  private pending = 0;

  private constructor(path: string, binding: NvmlBinding) {
    this.path = path;
    this.binding = binding;
    const controlBytes = (HEADER_INTS + MAX_SLOTS * SLOT_INTS) * 4;
    const resultBytes = MAX_SLOTS * SLOT_DOUBLES * 8;
    // Float64Array needs an 8-byte aligned offset.
    const controlPadded = Math.ceil(controlBytes / 8) * 8;
    const uuidBytes = MAX_SLOTS * UUID_BYTES;
    this.shared = new SharedArrayBuffer(controlPadded + resultBytes + uuidBytes + MAX_SLOTS * PEAK_INTS * 8);
    this.control = new Int32Array(this.shared, 0, controlPadded / 4);
    this.results = new Float64Array(this.shared, controlPadded, MAX_SLOTS * SLOT_DOUBLES);
    this.uuids = new Uint8Array(this.shared, controlPadded + resultBytes, uuidBytes);
    // 64 * 96 bytes of UUIDs keep the offset 8-byte aligned.
    this.peaks = new BigInt64Array(
      this.shared,
      controlPadded + resultBytes + uuidBytes,
      MAX_SLOTS * PEAK_INTS,
    );
  }

  private static readonly open = new Map<string, NvmlLibrary>();

  /**
   * The library at `path`, loaded and initialised (or the one already open). Throws an Error whose
   * message is one line saying why not.
   */
  static acquire(path: string): NvmlLibrary {
    let library = NvmlLibrary.open.get(path);
    if (!library) {
      let koffi: unknown;
      try {
        koffi = loadKoffi();
      } catch (error) {
        throw new Error(`the koffi FFI module did not load (${firstLine(error)})`);
      }
      let binding: NvmlBinding;
      try {
        binding = loadBindingModule().openNvml(koffi, path);
      } catch (error) {
        throw new Error(`cannot load ${path}: ${firstLine(error)}`);
      }
      const ret = binding.init();
      if (ret !== NVML_SUCCESS) {
        throw new Error(`nvmlInit failed in ${path}: ${describeNvmlReturn(ret, binding.errorString(ret))}`);
      }
      library = new NvmlLibrary(path, binding);
      NvmlLibrary.open.set(path, library);
    }
    library.refs += 1;
    return library;
  }

  /** Drops one reference; the last one stops the worker and calls nvmlShutdown. */
  async release(): Promise<void> {
    this.refs -= 1;
    if (this.refs > 0) return;
    NvmlLibrary.open.delete(this.path);
    const worker = this.worker;
    this.worker = undefined;
    if (worker) {
      const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
      // Keep Node alive until the thread is gone: `await close()` must not end the process early.
      worker.ref();
      Atomics.store(this.control, 1, 1);
      this.ring();
      // A worker stuck in the driver does not hold up close().
      const timer = setTimeout(() => void worker.terminate(), 2000);
      timer.unref();
      await exited;
      clearTimeout(timer);
    }
    this.binding.shutdown();
  }

  describe(code: number): string {
    return describeNvmlReturn(code, this.binding.errorString(code));
  }

  /** A request slot for the device with this UUID (the worker resolves its handle); `pid` is whose usage to read. */
  registerSlot(uuid: string, pid: number): number {
    const slot = this.slotUsed.indexOf(false);
    if (slot < 0) throw new Error(`more than ${MAX_SLOTS} NVML collectors on one library`);
    this.slotUsed[slot] = true;
    const bytes = Buffer.from(uuid, "utf8").subarray(0, UUID_BYTES - 1);
    this.uuids.fill(0, slot * UUID_BYTES, (slot + 1) * UUID_BYTES);
    this.uuids.set(bytes, slot * UUID_BYTES);
    const base = HEADER_INTS + slot * SLOT_INTS;
    Atomics.store(this.control, base + REQUEST, 0);
    Atomics.store(this.control, base + RESPONSE, 0);
    Atomics.store(this.control, base + PID, pid);
    Atomics.store(this.control, base + POLL_MS, 0);
    Atomics.store(this.peaks, slot * PEAK_INTS, -1n);
    Atomics.store(this.peaks, slot * PEAK_INTS + 1, -1n);
    Atomics.store(this.control, base + REGISTERED, 1);
    // Start the thread now so its startup overlaps with the application's.
    this.ensureWorker();
    return slot;
  }

  unregisterSlot(slot: number): void {
    Atomics.store(this.control, HEADER_INTS + slot * SLOT_INTS + POLL_MS, 0);
    Atomics.store(this.control, HEADER_INTS + slot * SLOT_INTS + REGISTERED, 0);
    this.slotUsed[slot] = false;
  }

  /**
   * Has the worker poll the slot's device every `intervalMs` between requests, keeping the highest
   * used memory it sees for `takePeak()`. Polling costs one memory query each time, off this thread.
   */
  startPolling(slot: number, intervalMs: number): void {
    const base = HEADER_INTS + slot * SLOT_INTS;
    if (this.workerError !== undefined || Atomics.load(this.control, base + POLL_MS) === intervalMs) return;
    Atomics.store(this.control, base + POLL_MS, intervalMs);
    this.ensureWorker();
    this.ring();
  }

  /**
   * The highest used memory the worker polled since the last call, and the latest it polled, then a
   * new window from the latest; null until it has polled.
   */
  takePeak(slot: number): { readonly highest: number; readonly latest: number } | null {
    Atomics.add(this.control, HEADER_INTS + slot * SLOT_INTS + TAKES, 1);
    // The highest first, reset to "none": a poll landing between the two reads then counts in the
    // new window, never as a peak of this one above its own latest.
    const highest = Atomics.exchange(this.peaks, slot * PEAK_INTS, -1n);
    const latest = Atomics.load(this.peaks, slot * PEAK_INTS + 1);
    if (latest < 0n || highest < 0n) return null;
    return { highest: Number(highest), latest: Number(latest) };
  }

  /**
   * Asks the worker to read a slot's device (memory, and the process list when `withProcesses`)
   * and resolves with what it read. The main thread only writes the request and awaits the answer.
   */
  request(slot: number, withProcesses: boolean, timeoutMs: number): Promise<SlotReading> {
    const base = HEADER_INTS + slot * SLOT_INTS;
    const previous = Atomics.load(this.control, base + REQUEST);
    if (Atomics.load(this.control, base + RESPONSE) !== previous) {
      return Promise.resolve(this.statusOnly(SlotStatus.Busy));
    }
    if (this.workerError !== undefined) return Promise.resolve(this.statusOnly(SlotStatus.WorkerGone));
    this.ensureWorker();
    const request = previous + 1;
    Atomics.store(this.control, base + KIND, withProcesses ? 2 : 1);
    Atomics.store(this.control, base + REQUEST, request);
    this.ring();
    const ready = Atomics.load(this.control, READY) === 1;
    const wait = Atomics.waitAsync(
      this.control,
      base + RESPONSE,
      previous,
      ready ? timeoutMs : Math.max(timeoutMs, STARTUP_ALLOWANCE_MS),
    );
    if (!wait.async) return Promise.resolve(this.read(slot));
    this.hold();
    return wait.value.then((outcome) => {
      this.unhold();
      if (outcome === "timed-out") return this.statusOnly(SlotStatus.TimedOut);
      return this.read(slot);
    });
  }

  /** Why the worker is gone, when it is. */
  get workerFailure(): string | undefined {
    return this.workerError;
  }

  private ring(): void {
    Atomics.add(this.control, 0, 1);
    Atomics.notify(this.control, 0);
  }

  // The worker is unref'd so it never keeps the process alive, except while a request waits:
  // a pending Atomics.waitAsync alone would let Node exit under an `await`.
  private hold(): void {
    if (this.pending++ === 0) this.worker?.ref();
  }

  private unhold(): void {
    if (--this.pending === 0) this.worker?.unref();
  }

  private ensureWorker(): void {
    if (this.worker) return;
    const worker = new Worker(new URL("./nvml-worker.cjs", import.meta.url), {
      workerData: {
        buffer: this.shared,
        libraryPath: this.path,
        headerInts: HEADER_INTS,
        maxSlots: MAX_SLOTS,
        slotInts: SLOT_INTS,
        slotDoubles: SLOT_DOUBLES,
        uuidBytes: UUID_BYTES,
        peakInts: PEAK_INTS,
      },
      // Plain Node suffices (the worker is CommonJS); the parent's flags (--eval, loaders) would break or slow it.
      execArgv: [],
      // The sampler needs little: keep its heap small.
      resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 },
    });
    worker.unref();
    const fail = (reason: string) => {
      if (this.worker !== worker) return;
      this.workerError = reason;
      this.worker = undefined;
      // Wake every waiter: their slot reads WorkerGone.
      for (let slot = 0; slot < MAX_SLOTS; slot += 1) {
        const base = HEADER_INTS + slot * SLOT_INTS;
        const request = Atomics.load(this.control, base + REQUEST);
        if (Atomics.load(this.control, base + RESPONSE) !== request) {
          this.results[slot * SLOT_DOUBLES] = SlotStatus.WorkerGone;
          Atomics.store(this.control, base + RESPONSE, request);
          Atomics.notify(this.control, base + RESPONSE);
        }
      }
    };
    worker.on("error", (error) => fail(`the NVML worker failed: ${firstLine(error)}`));
    worker.on("exit", (code) => fail(`the NVML worker exited with code ${code}`));
    this.worker = worker;
  }

  private read(slot: number): SlotReading {
    const r = this.results;
    const o = slot * SLOT_DOUBLES;
    return {
      status: r[o] as SlotStatus,
      memoryRet: r[o + 1]!,
      memory: [r[o + 2]!, r[o + 3]!, r[o + 4]!, r[o + 5]!, r[o + 6]!],
      processRet: r[o + 7]!,
      processes: [r[o + 8]!, r[o + 9]!, r[o + 10]!],
    };
  }

  private statusOnly(status: SlotStatus): SlotReading {
    const nan = Number.NaN;
    return {
      status,
      memoryRet: nan,
      memory: [nan, nan, nan, nan, nan],
      processRet: nan,
      processes: [nan, nan, nan],
    };
  }
}

/** The first line of an error's message. */
export function firstLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.split("\n", 1)[0]!.trim();
}
