import { packageBuild } from "../../tsup.base.js";

// The sink worker is an entry of its own: `OffThreadSink` starts `sink-worker.js` (or `.cjs`) from
// next to itself. `shims` gives the CJS bundle an `import.meta.url` to find it with.
export default packageBuild({ index: "src/index.ts", "sink-worker": "src/sink-worker.ts" }, { shims: true });
