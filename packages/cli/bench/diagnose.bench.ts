// What `stormlog diagnose` and `stormlog export --format perfetto` cost once the events are loaded:
// the Diagnostics model and the Perfetto trace of the reference TUI's tested bound (64 ranks x 2000
// samples, with phases and alerts), and the trace's serialization.
// Run: node --conditions=@stormlog/source --import tsx packages/cli/bench/diagnose.bench.ts
import { buildDistributedDiagnostics, buildPerfettoTrace, perfettoTraceChunks } from "@stormlog/analysis";
import type { JsonObject, TelemetryEvent } from "@stormlog/core";
import { bench, do_not_optimize, run, summary } from "mitata";

const RANKS = 64;
const SAMPLES = 2000;
const BASE = 1_760_000_000_000_000_000n;
const GIB = 1024 ** 3;

function record(
  rank: number,
  i: number,
  eventType: string,
  metadata: JsonObject = {},
  context: string | null = null,
): TelemetryEvent {
  const used = GIB + ((i * 7919 + rank * 104729) % 4096) * 65536 + (rank === 5 ? i * 4096 : 0);
  return {
    schema_version: 3,
    session_id: `session-${rank}`,
    timestamp_ns: BASE + BigInt(i) * 10_000_000n + BigInt(rank) * 1000n,
    event_type: eventType,
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 10,
    pid: 4000 + rank,
    host: `node-${rank >> 3}`,
    job_id: "bench",
    rank,
    local_rank: rank & 7,
    world_size: RANKS,
    device_id: rank & 7,
    allocator_allocated_bytes: used - 64 * 1024 * 1024,
    allocator_reserved_bytes: used - 32 * 1024 * 1024,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: used,
    device_free_bytes: 80 * GIB - used,
    device_total_bytes: 80 * GIB,
    context,
    metadata,
  } as TelemetryEvent;
}

function scope(
  rank: number,
  i: number,
  action: "enter" | "exit",
  path: string[],
  seq: number,
): TelemetryEvent {
  return record(rank, i, `phase_${action}`, {
    phase_scope: {
      action,
      depth: path.length,
      name: path[path.length - 1]!,
      parent_scope_id: null,
      path,
      scope_id: `session-${rank}:${seq}`,
      sequence: seq,
      thread_id: 1,
      thread_name: "MainThread",
    },
  });
}

const events: TelemetryEvent[] = [];
for (let rank = 0; rank < RANKS; rank++) {
  let seq = 0;
  for (let i = 0; i < SAMPLES; i++) {
    if (i % 100 === 0) {
      seq++;
      events.push(scope(rank, i, "enter", ["train", "forward"], seq));
    }
    events.push(record(rank, i, "sample"));
    if (i % 100 === 99) events.push(scope(rank, i, "exit", ["train", "forward"], seq));
    if (i === 1000 + rank)
      events.push(record(rank, i, "warning", { usage_percent: 85.5 }, "WARNING: usage 85.5%"));
  }
}
events.sort((a, b) => (a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0));
const trace = buildPerfettoTrace(events);

summary(() => {
  bench(`diagnose/model ${RANKS}x${SAMPLES}`, () => do_not_optimize(buildDistributedDiagnostics(events)));
  bench(`export/perfetto-build ${RANKS}x${SAMPLES}`, () => do_not_optimize(buildPerfettoTrace(events)));
  bench(`export/perfetto-serialize ${RANKS}x${SAMPLES}`, () => {
    let bytes = 0;
    for (const chunk of perfettoTraceChunks(trace)) bytes += chunk.length;
    return do_not_optimize(bytes);
  });
});

await run();
