import { readFileSync } from "node:fs";
import { bench, group, run, summary } from "mitata";
import { nvmlCollector } from "../src/index.js";
import { buildStub, stubControl } from "../test/stub/build.js";

// Cost of NVML readings against the stub library (compiled with gcc on first use).
// Goal: <= 20 us per device on the calling thread, NVML itself off the main thread.
const libraryPath = buildStub("full");
stubControl(libraryPath).reset(4);

const worker = nvmlCollector({ libraryPath, env: {}, processSampleEveryN: 0 });
const withProcesses = nvmlCollector({ libraryPath, env: {}, processSampleEveryN: 1, deviceIndex: 1 });
const onMain = nvmlCollector({ libraryPath, env: {}, processSampleEveryN: 0, thread: "main" });
const four = [0, 1, 2, 3].map((deviceIndex) =>
  nvmlCollector({ libraryPath, env: {}, deviceIndex, processSampleEveryN: 0 }),
);
await worker.sample();
await withProcesses.sample();
await Promise.all(four.map((c) => c.sample()));

group("nvml collector (stub)", () => {
  summary(() => {
    bench("nvml/sample worker round trip (wall, 1 device)", async () => await worker.sample());
    bench(
      "nvml/sample worker round trip (wall, memory + processes)",
      async () => await withProcesses.sample(),
    );
    bench("nvml/sample worker round trip (wall, 4 devices at once)", async () => {
      await Promise.all(four.map((c) => c.sample()));
    });
    bench("nvml/sample thread=main (synchronous koffi call)", () => onMain.sample());
  });
});

await run();

/** CPU time of the main thread only (Linux schedstat: ns on CPU). */
function mainThreadCpuNs(): number {
  return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]);
}
async function mainThreadCost(label: string, devices: number, fn: () => Promise<unknown>, iterations = 5000) {
  for (let i = 0; i < 200; i += 1) await fn();
  const start = mainThreadCpuNs();
  for (let i = 0; i < iterations; i += 1) await fn();
  const perCall = (mainThreadCpuNs() - start) / iterations;
  console.log(
    `${label}: main-thread CPU ${(perCall / 1000).toFixed(1)} us per reading, ${(perCall / devices / 1000).toFixed(1)} us per device`,
  );
}
try {
  await mainThreadCost("nvml worker, 1 device", 1, () => Promise.resolve(worker.sample()));
  await mainThreadCost("nvml worker, 4 devices at once", 4, () => Promise.all(four.map((c) => c.sample())));
} catch {
  // schedstat is Linux-only; the wall-clock figures above stand alone.
}

await Promise.all([worker, withProcesses, onMain, ...four].map((c) => c.close()));
