/**
 * @stormlog/sink: the append-only JSONL telemetry sink of the Python Stormlog (segments, manifest,
 * rollover, retention, recovery), written off the hot path, and the loaders that read sinks and
 * telemetry files back, streaming.
 *
 * Named exports only: each one is a promise to users. What only Stormlog's own packages need is in
 * `@stormlog/sink/internal` (no semver promise); `test/public-api.json` lists the runtime names.
 */

// Writing: the sink, its options, and what it reports (diagnostics, recovery, segments).

export type { SinkSegment } from "./directory/manifest.js";
export type { RecoveryReport } from "./directory/recovery.js";
export type { FsyncPolicy, SinkLogger, TelemetrySinkOptions } from "./writer/config.js";
export { type SinkDiagnostics, type StartSessionOptions, TelemetrySink } from "./writer/writer.js";

// Several processes: one writer per directory, and a directory of its own per process.

export { type ProcessSinkIdentity, sinkDirectoryForProcess } from "./directory/layout.js";
export {
  type LockedDirectoryPolicy,
  SinkDirectoryLockedError,
  type WriterLockOwner,
} from "./directory/writer-lock.js";

// Reading: sinks, roots of sinks, JSONL and JSON files, as the reference's loaders read them.

export {
  iterateTelemetryEvents,
  type LoadedSession,
  loadTelemetryEvents,
  loadTelemetrySessions,
  type OpenedSession,
  openTelemetrySession,
  type ReadOptions,
  type SessionInfo,
  summarizeTelemetrySessions,
} from "./reader/reader.js";

// OOM flight recorder dumps, which the loaders read as their events.

export { describeOOMDump, type OOMDumpInfo, readOOMDumpSync } from "./reader/oom-dump.js";

// Rollups: the reference's `rollups.json`, built incrementally.

export {
  buildTelemetryRollups,
  type RollupCoverage,
  type RollupOptions,
  type RollupSegmentCacheMode,
  type SegmentTallySource,
  writeTelemetryRollups,
} from "./rollups/rollups.js";

// Errors: a session that is not there, unreadable input, a record of another session.

export {
  SessionNotFoundError,
  SinkSessionMismatchError,
  TelemetryInputAccessError,
  TelemetrySourceError,
} from "./errors.js";
