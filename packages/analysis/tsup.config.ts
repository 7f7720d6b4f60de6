import { packageBuild } from "../../tsup.base.js";

// The scan worker and the leak judge's worker are entries of their own: a big segment's pieces are
// scanned on the one, a big selection's ranks judged on the other (src/index/piece-scan.ts and
// src/analyses/leak-judges.ts start `scan-worker.js` and `judge-worker.js`, or `.cjs`, from next to
// `dist/index.*`; in the source, each `.ts` sits beside the module that starts it). `shims` gives the CJS bundle an
// `import.meta.url` to find it with. `internal` (what `@stormlog/parquet` reads) shares the index's
// modules through `splitting`, so a program loading both gets one copy of each.
export default packageBuild(
  {
    index: "src/index.ts",
    internal: "src/internal.ts",
    "scan-worker": "src/index/scan-worker.ts",
    "judge-worker": "src/analyses/judge-worker.ts",
  },
  { shims: true, splitting: true },
);
