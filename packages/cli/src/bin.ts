#!/usr/bin/env node
import { main } from "./index.js";

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`stormlog: internal error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
