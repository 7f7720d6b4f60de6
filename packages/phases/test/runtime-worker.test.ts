import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import type { PhaseScopePayload } from "../src/index.js";

const script = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "worker-phases.ts");

describe("phases in a worker thread", () => {
  it("use the worker's threadId and name as thread_id / thread_name", async () => {
    // Module hooks of the parent do not reach a worker on Node 20: register tsx inside it.
    const boot = `import("tsx/esm/api").then(({ register }) => { register(); return import(${JSON.stringify(
      pathToFileURL(script).href,
    )}); })`;
    const worker = new Worker(boot, { eval: true, execArgv: ["--conditions=@stormlog/source"] });
    const workerThreadId = worker.threadId;
    const payloads = await new Promise<PhaseScopePayload[]>((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    await worker.terminate();
    expect(payloads).toHaveLength(4);
    expect(workerThreadId).toBeGreaterThan(0);
    for (const payload of payloads) {
      expect(payload.thread_id).toBe(workerThreadId);
      expect(payload.thread_name).toBe(`worker-${workerThreadId}`);
    }
    expect(payloads.map((p) => p.path.join(" / "))).toEqual([
      "train",
      "train / forward",
      "train / forward",
      "train",
    ]);
  });
});
