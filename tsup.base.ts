import { defineConfig, type Options } from "tsup";

/** The one build shape of every package: ESM + CJS + types for Node 20. */
export function packageBuild(entry: Record<string, string> = { index: "src/index.ts" }, extra: Options = {}) {
  return defineConfig({
    entry,
    format: ["esm", "cjs"],
    dts: true,
    clean: true,
    sourcemap: true,
    target: "node20",
    platform: "node",
    splitting: false,
    ...extra,
  });
}
