import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { setWasmPaths } from "@tensorflow/tfjs-backend-wasm";
import { bench, group, run } from "mitata";
import { tfjsCollector } from "../src/index.js";

// Cost of one tfjs reading on the wasm backend (tf.memory() plus the heap size), 1000 live tensors.
const require = createRequire(import.meta.url);
setWasmPaths(`${join(dirname(require.resolve("@tensorflow/tfjs-backend-wasm/package.json")), "dist")}/`);
await tf.setBackend("wasm");
const tensors = Array.from({ length: 1000 }, () => tf.zeros([4]));
const wasm = tfjsCollector(tf);

group("tfjs collector (wasm)", () => {
  bench("tfjs/readSync wasm (1000 tensors)", () => wasm.readSync());
});

await run();
tf.dispose(tensors);
