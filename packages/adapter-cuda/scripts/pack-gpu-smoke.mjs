#!/usr/bin/env node
// Packs a self-contained folder for running gpu-smoke.mjs on a machine without node_modules
// (e.g. a lent GPU machine with no network): tmp/gpu-smoke/ holds the adapter bundled with
// @stormlog/core, the NVML binding and worker, koffi's Linux binaries, and the smoke script.
//   node packages/adapter-cuda/scripts/pack-gpu-smoke.mjs && node tmp/gpu-smoke/gpu-smoke.mjs
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "tsup";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const root = resolve(pkg, "../..");
const out = join(root, "tmp/gpu-smoke");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

await build({
  entry: { adapter: join(pkg, "src/index.ts") },
  format: ["esm"],
  outDir: out,
  outExtension: () => ({ js: ".mjs" }),
  platform: "node",
  target: "node20",
  dts: false,
  sourcemap: false,
  clean: false,
  config: false,
  silent: true,
  noExternal: [/^@stormlog\//],
  external: ["koffi", "./nvml-binding.cjs", "./nvml-worker.cjs"],
  esbuildOptions(options) {
    options.conditions = ["@stormlog/source", "import", "node"];
  },
});
for (const file of ["nvml-binding.cjs", "nvml-worker.cjs"])
  copyFileSync(join(pkg, "src", file), join(out, file));
copyFileSync(join(here, "gpu-smoke.mjs"), join(out, "gpu-smoke.mjs"));

const koffiDir = dirname(createRequire(join(pkg, "package.json")).resolve("koffi/package.json"));
const koffiOut = join(out, "node_modules/koffi");
for (const file of ["package.json", "index.js", "LICENSE.txt"]) {
  mkdirSync(koffiOut, { recursive: true });
  copyFileSync(join(koffiDir, file), join(koffiOut, file));
}
for (const triplet of ["linux_x64", "linux_arm64"]) {
  mkdirSync(join(koffiOut, "build/koffi", triplet), { recursive: true });
  copyFileSync(
    join(koffiDir, "build/koffi", triplet, "koffi.node"),
    join(koffiOut, "build/koffi", triplet, "koffi.node"),
  );
}
console.log(`packed ${out}: run node tmp/gpu-smoke/gpu-smoke.mjs (carry tmp/gpu-smoke to the GPU machine)`);
