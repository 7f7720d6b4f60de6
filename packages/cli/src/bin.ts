#!/usr/bin/env node
import { main } from "./index.js";

// `stormlog export ... | head` closes the pipe early: stop quietly, as other Unix tools do.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0);
  throw error;
});

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`stormlog: internal error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
