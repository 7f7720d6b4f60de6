// Realistic telemetry records for tests, benchmarks and the crash script: a v3 `sample` as the
// reference's tracker writes it (§3.7), with the collector-health metadata every tracker event carries.
import type { TelemetryRecordV3 } from "@stormlog/core";

/** 2025-12-06T05:55:12Z, in the range of the golden sinks. */
export const BASE_NS = 1_765_000_512_105_815_000n;
const GIB = 1024 ** 3;

/**
 * The `seq`-th sample of a session, 100 ms apart, with `metadata.seq` to check order and loss
 * (`withSeq: false` leaves it out: a tracker's metadata is otherwise the same from sample to sample).
 */
export function sampleRecord(
  sessionId: string,
  seq: number,
  options: { rank?: number; worldSize?: number; eventType?: string; pid?: number; withSeq?: boolean } = {},
): TelemetryRecordV3 {
  const allocated = GIB + ((seq * 7919) % 4096) * 65_536;
  return {
    schema_version: 3,
    session_id: sessionId,
    timestamp_ns: BASE_NS + BigInt(seq) * 100_000_000n,
    event_type: options.eventType ?? "sample",
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 100,
    pid: options.pid ?? 4242,
    host: "trainer-a",
    job_id: "job-sink",
    rank: options.rank ?? 0,
    local_rank: 0,
    world_size: options.worldSize ?? 1,
    device_id: 0,
    allocator_allocated_bytes: allocated,
    allocator_reserved_bytes: allocated + 67_108_864,
    allocator_active_bytes: null,
    allocator_inactive_bytes: 1000,
    allocator_change_bytes: 0,
    device_used_bytes: allocated + 1_073_741_824,
    device_free_bytes: 24 * GIB - (allocated + 1_073_741_824),
    device_total_bytes: 24 * GIB,
    context: "Collected telemetry sample.",
    metadata: {
      backend: "cuda",
      collector_consecutive_failures: 0,
      collector_health_status: "healthy",
      collector_last_error: null,
      collector_next_retry_epoch_s: null,
      collector_partial_fields: [],
      sampling_source: "torch.cuda.memory_stats",
      ...(options.withSeq === false ? {} : { seq }),
      supports_device_free: true,
      supports_device_total: true,
      telemetry_partial: false,
    },
  };
}
