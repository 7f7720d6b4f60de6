import type { PhaseHost, PhaseScope } from "@stormlog/core";
import { bench, group, run, summary } from "mitata";
import * as ort from "onnxruntime-node";
import { instrumentSession } from "../src/index.js";
import { tinyMatMulAddModel } from "../test/support/model.js";

// What instrumentSession adds to one run() (phase bookkeeping, input shapes and signature),
// measured with a host whose phases cost nothing, on a tiny model (the run itself ~20-50 us).
const scope: PhaseScope = {
  scopeId: "bench:1",
  name: "run",
  path: ["run"],
  phasePath: "run",
  closed: false,
  close() {},
  [Symbol.dispose]() {},
};
const host: PhaseHost = {
  phase: ((_name: string, fn?: unknown) => (typeof fn === "function" ? fn() : scope)) as PhaseHost["phase"],
  enterPhase: () => scope,
};

const model = tinyMatMulAddModel();
const plain = await ort.InferenceSession.create(model);
const instrumented = instrumentSession(await ort.InferenceSession.create(model), host, { name: "tiny" });
const feeds = { x: new ort.Tensor("float32", new Float32Array(8), [2, 4]) };

group("onnxruntime session", () => {
  summary(() => {
    bench("onnx/run plain", async () => await plain.run(feeds));
    bench("onnx/run instrumented", async () => await instrumented.run(feeds));
  });
});

await run();
await plain.release();
await instrumented.release();
