import { packageBuild } from "../../tsup.base.js";

// The scan worker is an entry of its own: a big segment's pieces are scanned on it too
// (src/index/piece-scan.ts starts `scan-worker.js`, or `.cjs`, from next to `dist/index.*`; in the
// source, `scan-worker.ts` sits beside `piece-scan.ts`). `shims` gives the CJS bundle an
// `import.meta.url` to find it with. `internal` (what `@stormlog/parquet` reads) shares the index's
// modules through `splitting`, so a program loading both gets one copy of each.
export default packageBuild(
  { index: "src/index.ts", internal: "src/internal.ts", "scan-worker": "src/index/scan-worker.ts" },
  { shims: true, splitting: true },
);
