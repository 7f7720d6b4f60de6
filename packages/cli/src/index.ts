/**
 * @stormlog/cli: the `stormlog` command (`analyze`, `sessions`, `diagnose`, `track`, `export`).
 * `main(argv, io)` runs it in-process with injectable streams, for tests and embedding.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 * The commands themselves are reached through `main`, not exported.
 */

// Running the CLI in-process: `main` and the streams, environment and signals it may be given.

export type { CliIo, CliSignal, CliStream } from "./io.js";
export { main } from "./main.js";
export { VERSION } from "./version.js";

// The collector `stormlog track` samples a child process tree with, for programs that start their own.

export {
  type ChildProcessCollector,
  type ChildProcessCollectorOptions,
  childProcessCollector,
} from "./child-collector.js";
