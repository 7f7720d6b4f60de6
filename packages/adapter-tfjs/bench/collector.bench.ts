import * as tf from "@tensorflow/tfjs";
import { bench, group, run, summary } from "mitata";
import { tfjsCollector } from "../src/index.js";

// Cost of one tfjs reading on the calling thread (goal: <= 1 us), with 1000 live tensors.
await tf.setBackend("cpu");
const cpuTensors = Array.from({ length: 1000 }, () => tf.zeros([4]));
const cpu = tfjsCollector(tf);

const nodeShaped = tfjsCollector({
  getBackend: () => "tensorflow",
  backend: () => ({ isUsingGpuDevice: false }),
  memory: () => ({
    unreliable: true,
    reasons: ["The reported memory is an upper bound."],
    numBytes: 16000,
    numTensors: 1000,
    numDataBuffers: 1000,
  }),
});

group("tfjs collector", () => {
  summary(() => {
    bench("tfjs/readSync cpu (1000 tensors)", () => cpu.readSync());
    bench("tfjs/baseline tf.memory() cpu", () => tf.memory());
    bench("tfjs/readSync tensorflow-shaped", () => nodeShaped.readSync());
  });
});

await run();

tf.dispose(cpuTensors);
