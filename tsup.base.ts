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
    // With code splitting, tsup turns the shared chunks into CommonJS with sucrase, which rewrites
    // every `?.` and `??` into calls of helpers that allocate an array and closures each time (a
    // CommonJS user's phases, sink writes and analyses paid for them: 1 GB of garbage analysing a
    // 1.1 GB job). With tree shaking, rollup writes those chunks and keeps the syntax as it is.
    ...(extra.splitting === true ? { treeshake: true } : {}),
    ...extra,
  });
}
