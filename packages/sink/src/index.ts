/**
 * @stormlog/sink: the append-only JSONL telemetry sink of the Python Stormlog (segments, manifest,
 * rollover, retention, recovery), written off the hot path, and the loaders that read sinks and
 * telemetry files back, streaming.
 */
export * from "./config.js";
export * from "./errors.js";
export * from "./exit-hooks.js";
export * from "./input.js";
export * from "./layout.js";
export * from "./manifest.js";
export * from "./oom-dump.js";
export * from "./reader.js";
export type { RecoveryReport } from "./recovery.js";
export { recoverSinkDirectory } from "./recovery.js";
export * from "./rollups.js";
export * from "./writer.js";
export {
  type LockedDirectoryPolicy,
  SinkDirectoryLockedError,
  WRITER_LOCK_FILENAME,
  type WriterLockOwner,
} from "./writer-lock.js";
