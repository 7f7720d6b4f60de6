#!/usr/bin/env node
// Smoke test of @stormlog/adapter-cuda against a real NVIDIA driver.
//
//   pnpm --filter @stormlog/adapter-cuda build && node packages/adapter-cuda/scripts/gpu-smoke.mjs
//   # or, for a machine without node_modules: pack a self-contained folder first
//   node packages/adapter-cuda/scripts/pack-gpu-smoke.mjs   # -> tmp/gpu-smoke/ (about 3 MB)
//   node tmp/gpu-smoke/gpu-smoke.mjs [--device 0] [--chunk-mib 512] [--chunks 4]
//
// It measures the real NVML call latency, the main-thread cost of a worker-thread sample, then
// samples every 100 ms while a child process (koffi + the CUDA driver API, no toolkit needed)
// allocates --chunks x --chunk-mib of device memory, frees it and exits. It prints the readings
// and checks them; with $OUT set it also writes $OUT/gpu-smoke.json. Exit code 0 when all checks pass.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const index = args.indexOf(`--${name}`);
  return index >= 0 && args[index + 1] !== undefined ? Number(args[index + 1]) : fallback;
};
const deviceIndex = option("device", 0);
const chunkMiB = option("chunk-mib", 512);
const chunks = option("chunks", 4);
const MiB = 1024 * 1024;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

if (args.includes("--allocate")) {
  await allocate();
  process.exit(0);
}

const adapterUrl = existsSync(join(here, "adapter.mjs"))
  ? pathToFileURL(join(here, "adapter.mjs")).href
  : pathToFileURL(join(here, "../dist/index.js")).href;
if (!existsSync(fileURLToPath(adapterUrl))) {
  console.error(
    "build the adapter first: pnpm --filter @stormlog/adapter-cuda build (or run pack-gpu-smoke.mjs)",
  );
  process.exit(2);
}
const { nvmlCollector, nvidiaSmiCollector } = await import(adapterUrl);

const report = { checks: [], timeline: [], events: [] };
/** A failed soft check prints WARN and does not fail the run (environment-dependent facts). */
const check = (name, ok, detail, soft = false) => {
  report.checks.push({ name, ok: ok || soft, passed: ok, detail });
  console.log(`${ok ? "PASS" : soft ? "WARN" : "FAIL"}  ${name}${detail ? `: ${detail}` : ""}`);
};
const mib = (bytes) => (typeof bytes === "number" ? (bytes / MiB).toFixed(1) : "-");
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};

// 1. Availability and identity.
const probe = nvmlCollector({ deviceIndex, thread: "main", processSampleEveryN: 1 });
const availability = probe.availability();
report.availability = availability;
if (!availability.available) {
  console.log(`NVML unavailable: ${availability.reason}`);
  finish(false);
}
report.device = probe.device;
console.log(
  `device ${deviceIndex}: ${probe.device.name} ${probe.device.uuid} (physical ${probe.device.physicalIndex}), driver ${probe.device.driverVersion}, ${probe.device.libraryPath}`,
);

// 2. Real NVML latency on the calling thread (thread: "main"), memory + process list.
const first = probe.sample();
check("first reading is full", first.kind === "full", JSON.stringify(first.reading));
report.firstSample = first;
check(
  "nvmlDeviceGetMemoryInfo_v2 in use",
  first.metadata?.nvml_memory_api === "v2",
  String(first.metadata?.nvml_memory_api),
);
const memoryOnly = nvmlCollector({ deviceIndex, thread: "main", processSampleEveryN: 0 });
const timings = { memory: [], memoryAndProcesses: [] };
for (let i = 0; i < 300; i += 1) {
  const start = performance.now();
  memoryOnly.sample();
  timings.memory.push((performance.now() - start) * 1000);
}
for (let i = 0; i < 50; i += 1) {
  const start = performance.now();
  probe.sample();
  timings.memoryAndProcesses.push((performance.now() - start) * 1000);
}
report.nvmlLatencyUs = {
  memory: median(timings.memory),
  memoryAndProcesses: median(timings.memoryAndProcesses),
};
console.log(
  `NVML on the calling thread: memory query ${median(timings.memory).toFixed(1)} us, memory + process list ${median(timings.memoryAndProcesses).toFixed(1)} us (medians)`,
);
await memoryOnly.close();
await probe.close();

// 3. Worker-thread sampling: wall time and main-thread CPU per reading.
const worker = nvmlCollector({ deviceIndex, processSampleEveryN: 0 });
await worker.sample();
const walls = [];
const cpu0 = mainThreadCpuNs();
for (let i = 0; i < 500; i += 1) {
  const start = performance.now();
  const result = await worker.sample();
  walls.push((performance.now() - start) * 1000);
  if (result.kind !== "full") {
    check("worker readings are full", false, JSON.stringify(result));
    break;
  }
}
const cpuPerSample = cpu0 === undefined ? undefined : (mainThreadCpuNs() - cpu0) / 500 / 1000;
report.workerSample = { wallMedianUs: median(walls), mainThreadCpuUs: cpuPerSample };
console.log(
  `worker sample: ${median(walls).toFixed(1)} us wall (median), main-thread CPU ${cpuPerSample?.toFixed(1) ?? "?"} us per reading`,
);
await worker.close();

// 4. Timeline while a child allocates and frees device memory.
const child = spawn(
  process.execPath,
  [
    fileURLToPath(import.meta.url),
    "--allocate",
    "--device",
    String(deviceIndex),
    "--chunk-mib",
    String(chunkMiB),
    "--chunks",
    String(chunks),
  ],
  {
    stdio: ["ignore", "pipe", "inherit"],
  },
);
const watch = nvmlCollector({ deviceIndex, pid: child.pid, processSampleEveryN: 1 });
const started = Date.now();
let childDone = false;
let buffered = "";
child.stdout.on("data", (data) => {
  buffered += data;
  let newline = buffered.indexOf("\n");
  while (newline >= 0) {
    const line = buffered.slice(0, newline);
    buffered = buffered.slice(newline + 1);
    try {
      const event = { t: Date.now() - started, ...JSON.parse(line) };
      report.events.push(event);
      console.log(`  [${event.t} ms] child: ${line}`);
    } catch {
      console.log(`  child: ${line}`);
    }
    newline = buffered.indexOf("\n");
  }
});
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
exited.then(() => {
  childDone = true;
});
let smiAtPeak;
for (;;) {
  const result = await watch.sample();
  const t = Date.now() - started;
  report.timeline.push({
    t,
    kind: result.kind,
    reading: result.reading,
    metadata: result.metadata,
    error: result.error,
  });
  const last = report.events.at(-1);
  if (
    smiAtPeak === undefined &&
    last?.event === "allocated" &&
    last.total_bytes === chunks * chunkMiB * MiB
  ) {
    smiAtPeak = {
      nvml: result.reading?.device_used_bytes,
      smi: await nvidiaSmiCollector({ deviceIndex }).sample(),
    };
  }
  if (childDone && t > (last?.t ?? 0) + 600) break;
  if (t > 120_000) break;
  await sleep(100);
}
const childCode = await exited;
await watch.close();
check("allocating child exited cleanly", childCode === 0, `exit code ${childCode}`);

console.log("\n   t ms   used MiB   free MiB  total MiB  reserved MiB  child MiB");
for (const row of report.timeline) {
  console.log(
    `${String(row.t).padStart(7)} ${mib(row.reading?.device_used_bytes).padStart(10)} ${mib(row.reading?.device_free_bytes).padStart(10)} ${mib(row.reading?.device_total_bytes).padStart(10)} ${mib(row.metadata?.nvml_reserved_bytes).padStart(13)} ${mib(row.metadata?.nvml_process_used_bytes ?? undefined).padStart(10)}${row.kind === "full" ? "" : `  ${row.kind}: ${row.error ?? ""}`}`,
  );
}

const used = report.timeline.filter((r) => r.kind === "full").map((r) => r.reading.device_used_bytes);
const baseline = used[0];
const peak = Math.max(...used);
const end = used.at(-1);
const allocated = chunks * chunkMiB * MiB;
const peakChild = Math.max(0, ...report.timeline.map((r) => r.metadata?.nvml_process_used_bytes ?? 0));
report.summary = { baseline, peak, end, allocated, peakChild };
check(
  "every timeline reading is full",
  report.timeline.every((r) => r.kind === "full"),
);
check(
  "device used rises by at least the allocation",
  peak - baseline >= allocated * 0.95,
  `baseline ${mib(baseline)} MiB, peak ${mib(peak)} MiB, allocated ${mib(allocated)} MiB`,
);
// In a container NVML lists host PIDs, so the child's own pid may not match: a warning, not a failure.
const listed = report.timeline.some(
  (r) => r.metadata?.nvml_process_listed !== false && r.metadata?.nvml_process_used_bytes != null,
);
check(
  "the child's own usage is visible through the process list",
  peakChild >= allocated * 0.95,
  listed ? `peak child usage ${mib(peakChild)} MiB` : "child pid not listed by NVML (PID namespace?)",
  !listed,
);
check(
  "device used returns near the baseline after the child exits",
  Math.abs(end - baseline) < 64 * MiB,
  `end ${mib(end)} MiB vs baseline ${mib(baseline)} MiB`,
);
const firstFull = report.timeline.find((r) => r.kind === "full");
if (firstFull) {
  const { device_used_bytes: u, device_free_bytes: f, device_total_bytes: tot } = firstFull.reading;
  const reserved = firstFull.metadata?.nvml_reserved_bytes ?? 0;
  check(
    "v2 accounting: used + free + reserved = total",
    Math.abs(u + f + reserved - tot) <= MiB,
    `${mib(u)} + ${mib(f)} + ${mib(reserved)} vs ${mib(tot)} MiB`,
  );
}
if (smiAtPeak) {
  report.nvidiaSmiAtPeak = smiAtPeak;
  const smiUsed = smiAtPeak.smi.reading?.device_used_bytes;
  check(
    "nvidia-smi agrees with NVML at the peak (within 64 MiB)",
    typeof smiUsed === "number" && Math.abs(smiUsed - smiAtPeak.nvml) <= 64 * MiB,
    `nvml ${mib(smiAtPeak.nvml)} MiB, nvidia-smi ${mib(smiUsed)} MiB`,
  );
}

// 5. CUDA_VISIBLE_DEVICES by UUID selects the same device.
const byUuid = nvmlCollector({
  env: { ...process.env, CUDA_VISIBLE_DEVICES: report.device.uuid },
  thread: "main",
});
check(
  "CUDA_VISIBLE_DEVICES=<uuid> maps to the same device",
  byUuid.device?.uuid === report.device.uuid,
  byUuid.device?.uuid,
);
await byUuid.close();

finish(report.checks.every((c) => c.ok));

function finish(ok) {
  if (process.env.OUT) {
    writeFileSync(join(process.env.OUT, "gpu-smoke.json"), JSON.stringify(report, null, 2));
  }
  console.log(ok ? "\ngpu-smoke: all checks passed" : "\ngpu-smoke: some checks failed");
  process.exit(ok ? 0 : 1);
}

function mainThreadCpuNs() {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]);
  } catch {
    return undefined;
  }
}

/** Child: allocate device memory through the CUDA driver API (libcuda ships with the driver). */
async function allocate() {
  const require = createRequire(import.meta.url);
  let koffi;
  try {
    koffi = require("koffi");
  } catch {
    koffi = createRequire(join(here, "../package.json"))("koffi");
  }
  const lib = koffi.load(process.platform === "win32" ? "nvcuda.dll" : "libcuda.so.1");
  const cuInit = lib.func("int cuInit(unsigned int flags)");
  const cuDeviceGet = lib.func("int cuDeviceGet(_Out_ int *device, int ordinal)");
  const cuRetain = lib.func("int cuDevicePrimaryCtxRetain(_Out_ void **ctx, int device)");
  const cuSetCurrent = lib.func("int cuCtxSetCurrent(void *ctx)");
  const cuMemAlloc = lib.func("int cuMemAlloc_v2(_Out_ uint64_t *ptr, size_t bytes)");
  const cuMemset = lib.func("int cuMemsetD8_v2(uint64_t ptr, uint8_t value, size_t count)");
  const cuMemFree = lib.func("int cuMemFree_v2(uint64_t ptr)");
  const cuMemGetInfo = lib.func("int cuMemGetInfo_v2(_Out_ size_t *free, _Out_ size_t *total)");
  const cuSync = lib.func("int cuCtxSynchronize()");
  const ok = (ret, what) => {
    if (ret !== 0) throw new Error(`${what} failed with CUresult ${ret}`);
  };
  const emit = (event) => console.log(JSON.stringify(event));
  const info = () => {
    const free = [0];
    const total = [0];
    ok(cuMemGetInfo(free, total), "cuMemGetInfo");
    return { cu_free: Number(free[0]), cu_total: Number(total[0]) };
  };
  ok(cuInit(0), "cuInit");
  const device = [0];
  ok(cuDeviceGet(device, deviceIndex), "cuDeviceGet");
  const ctx = [null];
  ok(cuRetain(ctx, device[0]), "cuDevicePrimaryCtxRetain");
  ok(cuSetCurrent(ctx[0]), "cuCtxSetCurrent");
  emit({ event: "context", pid: process.pid, ...info() });
  await sleep(800);
  const pointers = [];
  for (let i = 0; i < chunks; i += 1) {
    const ptr = [0n];
    ok(cuMemAlloc(ptr, chunkMiB * MiB), "cuMemAlloc");
    ok(cuMemset(ptr[0], 1, chunkMiB * MiB), "cuMemsetD8");
    ok(cuSync(), "cuCtxSynchronize");
    pointers.push(ptr[0]);
    emit({ event: "allocated", total_bytes: pointers.length * chunkMiB * MiB, ...info() });
    await sleep(600);
  }
  await sleep(600);
  for (const ptr of pointers) ok(cuMemFree(ptr), "cuMemFree");
  emit({ event: "freed", ...info() });
  await sleep(800);
  emit({ event: "exit" });
}
