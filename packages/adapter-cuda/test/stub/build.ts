import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import koffi from "koffi";

const SOURCE = join(import.meta.dirname, "nvml_stub.c");

/** Stub builds: the full NVML surface, without nvmlDeviceGetMemoryInfo_v2, without the _v3 process call. */
export type StubVariant = "full" | "no-memory-v2" | "no-processes-v3";

const DEFINES: Record<StubVariant, string[]> = {
  full: [],
  "no-memory-v2": ["-DSTUB_NO_MEMORY_V2"],
  "no-processes-v3": ["-DSTUB_NO_PROCESSES_V3"],
};

/**
 * Compiles the stub with gcc into `<tmp>/stormlog-nvml-stub-<hash>/<variant>/libnvidia-ml.so.1`
 * (cached by source hash) and returns the library path.
 */
export function buildStub(variant: StubVariant = "full"): string {
  const source = readFileSync(SOURCE);
  const hash = createHash("sha256").update(source).update(variant).digest("hex").slice(0, 16);
  const dir = join(tmpdir(), `stormlog-nvml-stub-${hash}`, variant);
  const library = join(dir, "libnvidia-ml.so.1");
  if (existsSync(library)) return library;
  mkdirSync(dir, { recursive: true });
  const partial = `${library}.${process.pid}.tmp`;
  try {
    execFileSync(
      "gcc",
      ["-shared", "-fPIC", "-O2", "-Wall", ...DEFINES[variant], "-o", partial, SOURCE, "-lpthread"],
      {
        stdio: "pipe",
      },
    );
  } catch (error) {
    const detail = (error as { stderr?: Buffer }).stderr?.toString().trim() || (error as Error).message;
    throw new Error(`building the NVML stub needs gcc (e.g. apt-get install gcc): ${detail}`);
  }
  renameSync(partial, library);
  return library;
}

/** The stub's control functions, bound in this process (the collector's library is the same instance). */
export interface StubControl {
  reset(devices: number): void;
  setMemory(device: number, total: number, used: number, reserved: number): void;
  setUuid(device: number, uuid: string): void;
  setLost(device: number, lost: boolean): void;
  /** Bits 1 total, 2 free, 4 used, 8 reserved read as NVML_VALUE_NOT_AVAILABLE. */
  setNotAvailable(device: number, mask: number): void;
  addProcess(device: number, pid: number, usedBytes: number): void;
  clearProcesses(device: number): void;
  fail(fn: string, code: number, times: number): void;
  setV2NotFound(on: boolean): void;
  setDelayUs(us: number): void;
  initCount(): number;
  calls(fn: string): number;
  /** 1 main thread, 0 another thread, -1 never called. */
  lastOnMain(fn: string): number;
}

const controls = new Map<string, StubControl>();

export function stubControl(path: string): StubControl {
  const cached = controls.get(path);
  if (cached) return cached;
  const lib = koffi.load(path);
  const reset = lib.func("void stub_reset(int count)");
  const setMemory = lib.func(
    "int stub_set_memory(int dev, unsigned long long total, unsigned long long used, unsigned long long reserved)",
  );
  const setUuid = lib.func("int stub_set_uuid(int dev, const char *uuid)");
  const setLost = lib.func("int stub_set_lost(int dev, int lost)");
  const setNotAvailable = lib.func("int stub_set_not_available(int dev, int mask)");
  const addProcess = lib.func("int stub_add_process(int dev, unsigned int pid, unsigned long long used)");
  const fail = lib.func("void stub_fail(const char *fn, int code, int times)");
  const setV2NotFound = lib.func("void stub_set_v2_not_found(int on)");
  const setDelayUs = lib.func("void stub_set_delay_us(unsigned int us)");
  const initCount = lib.func("int stub_init_count()");
  const calls = lib.func("long stub_calls(const char *fn)");
  const lastOnMain = lib.func("int stub_last_on_main(const char *fn)");
  const control: StubControl = {
    reset: (devices) => reset(devices),
    setMemory: (device, total, used, reserved) => setMemory(device, total, used, reserved),
    setUuid: (device, uuid) => setUuid(device, uuid),
    setLost: (device, lost) => setLost(device, lost ? 1 : 0),
    setNotAvailable: (device, mask) => setNotAvailable(device, mask),
    addProcess: (device, pid, usedBytes) => addProcess(device, pid, usedBytes),
    clearProcesses: (device) => addProcess(device, 0, 0),
    fail: (fn, code, times) => fail(fn, code, times),
    setV2NotFound: (on) => setV2NotFound(on ? 1 : 0),
    setDelayUs: (us) => setDelayUs(us),
    initCount: () => initCount() as number,
    calls: (fn) => Number(calls(fn)),
    lastOnMain: (fn) => lastOnMain(fn) as number,
  };
  controls.set(path, control);
  return control;
}
