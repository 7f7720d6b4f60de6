/**
 * @stormlog/core: the telemetry schema (v2/v3/v4) shared with the Python Stormlog, its validation,
 * the lossless JSONL codec and the versioned collector contract every adapter implements.
 * Depends on nothing else of Stormlog's.
 *
 * Named exports only: each one is a promise to users. What only Stormlog's own packages need is in
 * `@stormlog/core/internal` (no semver promise); `test/public-api.json` lists the runtime names.
 */

// Schema: the records a sink holds, as the Python reference defines them.

export {
  ALERT_EVENT_TYPES,
  DEFAULT_SCHEMA_VERSION,
  type DistributedIdentity,
  KNOWN_EVENT_TYPES,
  MEMORY_COUNTER_FIELDS,
  type MemoryCounterField,
  type SchemaVersion,
  SUPPORTED_SCHEMA_VERSIONS,
  TELEMETRY_V3_FIELDS,
  type TelemetryEvent,
  type TelemetryField,
  type TelemetryRecord,
  type TelemetryRecordV2,
  type TelemetryRecordV3,
  type TelemetryRecordV4,
} from "./schema/schema.js";

// Reading and writing telemetry lines, losslessly (timestamps beyond 2^53 stay exact).

export { type DecodeOptions, decodeTelemetryLine, encodeTelemetryRecord } from "./codec/codec.js";
export {
  type DecodedLine,
  decodeTelemetryJsonl,
  type JsonlReadOptions,
  readTelemetryJsonl,
  type TelemetryJsonlOptions,
  type TruncatedTail,
} from "./codec/jsonl.js";

// Validation, and records of any Stormlog version converted to v3/v4.

export { type NormalizeOptions, normalizeTelemetryRecord } from "./schema/legacy.js";
export { type ValidateOptions, validateTelemetryRecord } from "./schema/validate.js";

// Lossless JSON for other documents (manifests, reports): bigint for long integers, `85.0` kept.

export type { JsonObject, JsonPrimitive, JsonValue } from "./codec/json.js";
export { parseJson, type StringifyOptions, stringifyJson } from "./codec/json-codec.js";

// Errors: every Stormlog error is a `StormlogError`; test with `isInstance`, not `instanceof`.

export {
  InvalidConfigError,
  JsonlDecodeError,
  type SourceLocation,
  StormlogError,
  TelemetryValidationError,
} from "./runtime/errors.js";

// Collector contract: what a memory backend implements for the tracker.

export {
  CAPABILITY_FOR_COUNTER,
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  CPU_TRACKER_COLLECTOR,
  type FullSample,
  HOST_DEVICE_ID,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryReading,
  noCapabilities,
  type PartialSample,
  type PhaseContextLike,
  type SampleFailure,
  type SampleResult,
} from "./collector/collector.js";

// Phase host contract: what adapters take to open phases, without depending on the tracker.

export type { PhaseHost, PhaseOptions, PhaseScope } from "./collector/phase-host.js";

// Distributed identity: job, rank and world size from options, metadata or the launcher's environment.

export {
  type DistributedIdentityInput,
  type DistributedIdentitySources,
  resolveDistributedIdentity,
} from "./schema/identity.js";

// Sessions: the summary a sink's ledger keeps, and the reference's order for choosing one.

export {
  compareSessionsForSelection,
  SESSION_STATUSES,
  type SessionOrderKey,
  type SessionStatus,
  type SessionSummary,
  selectDefaultLoadedSession,
  selectDefaultSession,
  sortSessions,
} from "./schema/session.js";

// Time: injectable clock and timers (tests pass fakes in the sink's and the tracker's options).

export {
  type Clock,
  type Scheduler,
  systemClock,
  systemScheduler,
  type TimerHandle,
} from "./runtime/clock.js";

// Formatting: byte counts as the reference prints them.

export { formatBytes } from "./text/format.js";
