import { defineConfig, type Options } from "tsup";
import { packageBuild } from "../../tsup.base.js";

/** How the executable's CommonJS files are built: for Node 20, fewer bytes to read at every start (identifiers kept, so stack traces stay readable). */
const executableFiles = {
  format: ["cjs"],
  dts: false,
  sourcemap: true,
  target: "node20",
  platform: "node",
  splitting: false,
  minifyWhitespace: true,
  minifySyntax: true,
} satisfies Options;

export default [
  // The library entry: ESM + CJS + types, its @stormlog dependencies imported as usual.
  packageBuild({ index: "src/index.ts" }, { clean: ["index.*"] }),
  // The executable: one CommonJS bundle of the CLI and the packages it runs (one file to read and to
  // keep compiled in V8's code cache; see src/launch.ts), and the small launcher that runs it. The
  // NVML adapter stays a dependency: it finds its worker file and native library next to itself.
  defineConfig({
    // The analysis's scan and judge workers and the tracker's leak-judge worker beside the bundle:
    // the bundled analysis and tracker start them from there.
    entry: {
      bin: "src/bin.ts",
      launch: "src/launch.ts",
      "scan-worker": "../analysis/src/index/scan-worker.ts",
      "judge-worker": "../analysis/src/analyses/judge-worker.ts",
      "leak-judge-worker": "../tracker/src/alerts/leak-judge-worker.ts",
    },
    ...executableFiles,
    clean: ["bin.*", "launch.*", "scan-worker.*", "judge-worker.*", "leak-judge-worker.*"],
    // Their `internal` entries too: the bundle must not require them at run time.
    noExternal: [/^@stormlog\/(core|phases|sink|tracker|analysis|parquet)(\/internal)?$/],
    // Optional peers, required where they are installed, never bundled: DuckDB (for `query`, a native addon)
    // and OpenTelemetry's SDK (for `track --prometheus-port`), also when built from the repository root.
    external: ["@duckdb/node-api", /^@opentelemetry\//],
    // The tracker's ESM finds its sink worker from `import.meta.url`; the CLI writes its sink on the
    // main thread, but the bundled code must still compile to CommonJS without an empty `import.meta`.
    shims: true,
    // The launcher runs the bundle from a `vm.Script`, which cannot serve `import()`: lazy imports
    // (`track`'s child_process and NVML adapter) become `require` calls.
    esbuildOptions(options) {
      options.supported = { ...options.supported, "dynamic-import": false };
    },
  }),
  // The stored answer the launcher prints before it loads the bundle (src/stored-answer.ts): built
  // from the packages' sources, whose modules declare no side effects, so that it carries only what
  // it uses of them (the index's stored results, not the analysis).
  defineConfig({
    entry: { "stored-answer": "src/stored-answer.ts" },
    ...executableFiles,
    clean: ["stored-answer.*"],
    noExternal: [/^@stormlog\//],
    esbuildOptions(options) {
      options.conditions = ["@stormlog/source"];
    },
  }),
];
