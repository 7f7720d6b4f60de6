/**
 * @stormlog/sink/internal: for Stormlog's own packages; no semver promise. The input resolution and
 * line decoding the analysis reads with, the pieces the tracker builds its off-thread sink from, and
 * the file-system error wording the CLI prints. Users import `@stormlog/sink`.
 */

// Inputs as the loaders resolve them: parts, segments, and one event line decoded.

export { MANIFEST_FILENAME, SEGMENT_SUFFIX, serializeManifest } from "./directory/manifest.js";
export {
  decodeTelemetryEventLine,
  type LineDecodeOptions,
  type ResolvedTelemetryInput,
  removedWhileRead,
  resolveInputPath,
  resolveTelemetryInput,
  segmentShortfall,
  type TelemetryInputKind,
  type TelemetryInputPart,
  type TelemetryInputSegment,
} from "./reader/input.js";

// One writing process per directory: the lock other writers of our directories take (Parquet exports).

export { claimSinkDirectory, WRITER_LOCK_FILENAME, type WriterLock } from "./directory/writer-lock.js";

// File-system errors: typed while reading input, and worded with what to do.

export { describeFileSystemError, fileSystemErrorCode, readingInput } from "./errors.js";
export { readRegularFile, readRegularFileSync } from "./reader/regular-file.js";

// The tracker's sink on a worker thread: options checked once, the running summary, the shared exit hooks.

export { consoleSinkLogger, type ResolvedSinkConfig, resolveSinkConfig } from "./writer/config.js";
export { type ExitParticipant, registerExitParticipant } from "./writer/exit-hooks.js";
export { runningSessionSummary } from "./writer/writer.js";
