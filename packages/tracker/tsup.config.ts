import { packageBuild } from "../../tsup.base.js";

// The sink worker and the leak-judge worker are entries of their own: `startWorkerBeside` starts
// `<name>.js` (or `.cjs`) from next to `dist/index.js` (or `.cjs`) once built; in the source each
// `.ts` sits beside the module that starts it. `shims` gives the CJS bundle an `import.meta.url`.
export default packageBuild(
  {
    index: "src/index.ts",
    "sink-worker": "src/pipeline/sink-worker.ts",
    "leak-judge-worker": "src/alerts/leak-judge-worker.ts",
  },
  { shims: true },
);
