import { createRequire } from "node:module";

// Built-ins resolve the same from any base path; "/" works in the ESM and the CommonJS build alike.
const requireBuiltin = createRequire("/");
let crypto: typeof import("node:crypto") | undefined;
let workerThreads: typeof import("node:worker_threads") | undefined;

/**
 * `node:crypto`, loaded on first use: Node takes ~4-7 ms to load it, which a CLI command that never
 * hashes or draws a random id (a warm `stormlog analyze`) should not pay at start-up.
 */
export function nodeCrypto(): typeof import("node:crypto") {
  crypto ??= requireBuiltin("node:crypto") as typeof import("node:crypto");
  return crypto;
}

/** `node:worker_threads` (and the stream modules it loads), on first use, for the same reason. */
export function nodeWorkerThreads(): typeof import("node:worker_threads") {
  workerThreads ??= requireBuiltin("node:worker_threads") as typeof import("node:worker_threads");
  return workerThreads;
}
