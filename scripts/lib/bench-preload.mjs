// Preloaded by scripts/bench.mjs into every benchmark process: routes `import ... from "mitata"` through a shim
// that makes `run()` quiet and records its results for the harness (see bench-loader.mjs).
import { register } from "node:module";

register("./bench-loader.mjs", import.meta.url);
