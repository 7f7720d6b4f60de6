import type {
  DistributedIdentity,
  JsonObject,
  MemoryReading,
  SessionSummary,
  TelemetryEvent,
} from "@stormlog/core";
import { describeError } from "../describe-error.js";
import type { TrackerLogger } from "../options/tracker-options.js";
import type { RecordLog } from "../records/record-log.js";
import type { DeviceGroup } from "../sampling/device-group.js";
import type { OOMFlightRecorder } from "./oom.js";

/** Options of `captureOOM()` / `handleError()`. */
export interface OOMCaptureOptions {
  /** What was running (default `runtime`). */
  readonly context?: string;
  /** Extra fields for the dump's `custom_metadata`. */
  readonly metadata?: JsonObject;
}

/** What an OOM dump describes besides the error: the tracker's state when it happened. */
export interface OOMDumpState {
  readonly group: DeviceGroup;
  readonly reading: MemoryReading | null;
  /** `getStatisticsJson()` now. */
  readonly statistics: JsonObject;
  readonly samplingIntervalMs: number;
  readonly session: SessionSummary | null;
  readonly identity: DistributedIdentity;
  /** Where the last records come from (the recorder's ring). */
  readonly records: RecordLog;
}

/**
 * Writes the flight recorder's bundle for an OOM (`reason`): the tracker's state as the reference's
 * `custom_metadata` and the last `bufferSize` records. Returns its path, or null (logged) when it
 * could not be written.
 */
export function dumpOOM(
  recorder: OOMFlightRecorder,
  reason: string,
  error: unknown,
  options: OOMCaptureOptions,
  state: OOMDumpState,
  logger: TrackerLogger,
): string | null {
  const { group, reading, session, identity } = state;
  const custom: JsonObject = {
    tracker_stats: state.statistics,
    collector_capabilities: { ...group.capabilities },
    total_memory_bytes: group.totalMemory,
    sampling_interval_s: state.samplingIntervalMs / 1000,
    session_id: session?.session_id ?? null,
    job_id: identity.job_id,
    rank: identity.rank,
    local_rank: identity.local_rank,
    world_size: identity.world_size,
    ...(options.metadata ?? {}),
    sample_allocated_bytes: reading?.allocator_allocated_bytes ?? null,
    sample_reserved_bytes: reading?.allocator_reserved_bytes ?? null,
    sample_used_bytes: reading?.device_used_bytes ?? null,
    sample_free_bytes: reading?.device_free_bytes ?? null,
    sample_total_bytes: reading?.device_total_bytes ?? null,
    sample_device_id: group.deviceId,
  };
  const { store, context } = state.records;
  const written = store.written;
  const records: TelemetryEvent[] = [];
  if (context !== null) {
    for (let index = Math.max(0, written - recorder.options.bufferSize); index < written; index++) {
      records.push(store.materialize(index, context));
    }
  }
  try {
    const path = recorder.dump(
      {
        reason,
        error,
        context: options.context ?? "runtime",
        backend: group.capabilities.backend,
        metadata: custom,
        session,
      },
      records,
    );
    logger.warn(`OOM flight recorder dump saved to: ${path}`);
    return path;
  } catch (dumpError) {
    logger.warn(`the OOM flight recorder could not write its dump: ${describeError(dumpError)}`);
    return null;
  }
}
