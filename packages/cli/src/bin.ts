#!/usr/bin/env node
import { main } from "./index.js";
import { whenOutputFlushed } from "./io.js";

/**
 * Commands whose work is over once `main` resolves (they read inputs and write files and output):
 * when they succeed and their output is flushed, the process ends at once instead of tearing its heap
 * down page by page (30-50 ms of a cold `stormlog analyze`). `track`, `export` and `diagnose` (which
 * may hand records to W&B's SDK) end as usual, as does any command that failed: an analysis that
 * stopped early may still be writing its index's files. These commands write their output through the
 * CLI's streams only (`io.ts`), which know what there is to flush.
 */
const ENDS_AT_ONCE: ReadonlySet<string | undefined> = new Set(["analyze", "query", "report", "sessions"]);

const argv = process.argv.slice(2);
main(argv).then(
  (code) => {
    if (code !== 0 || !ENDS_AT_ONCE.has(argv[0])) {
      process.exitCode = code;
      return;
    }
    // Written out first; 'exit' listeners still run.
    whenOutputFlushed(() => process.exit(code));
  },
  (error: unknown) => {
    process.stderr.write(`stormlog: internal error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
