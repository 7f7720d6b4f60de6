import { packageBuild } from "../../tsup.base.js";

// The sink worker is an entry of its own: `OffThreadSink` starts `sink-worker.js` (or `.cjs`) from
// next to itself, `dist/index.js` (or `.cjs`) once built; in the source, `sink-worker.ts` sits beside
// `off-thread-sink.ts` in `src/pipeline/`. `shims` gives the CJS bundle an `import.meta.url` to find it with.
export default packageBuild(
  { index: "src/index.ts", "sink-worker": "src/pipeline/sink-worker.ts" },
  { shims: true },
);
