import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject, type TelemetryEvent } from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { BASE_NS, GiB, MiB, MS, Timeline } from "../../../sink/test/support/telemetry-fixtures.js";
import { encodeAggregateParts } from "../../src/index/index-format.js";
import { type ScannedSegment, scanSegments } from "../../src/index/piece-scan.js";
import { pieceRanges } from "../../src/input/pieces.js";

/**
 * A four-rank job as one file's records, with a record of each kind the scan keeps apart: alerts,
 * health transitions, lifecycle records, a sample with phase attribution hints, one with live
 * tensors by birth phase, one of type "Sample", a counter past 2^53, phase records whose metadata
 * holds a float (the exact path), and rank 0 restarted as a second session. Rank 1 leaks, rank 2's
 * hidden gap drifts, rank 3 spikes first.
 */
export function pieceJobEvents(steps = 24): TelemetryEvent[] {
  const events: TelemetryEvent[] = [];
  for (const rank of [0, 1, 2, 3]) events.push(...rankEvents(rank, `p-r${rank}`, steps, BASE_NS));
  // Rank 0 again, later: a restart (the rank group keeps the first session, with a note).
  events.push(...rankEvents(0, "p-r0-restart", 4, BASE_NS + BigInt(steps) * 100n * MS));
  return events;
}

function rankEvents(rank: number, sessionId: string, steps: number, start: bigint): TelemetryEvent[] {
  const t = new Timeline(
    {
      rank,
      local_rank: rank,
      world_size: 4,
      job_id: "job-p",
      session_id: sessionId,
      pid: 200 + rank,
      host: `node-${rank % 2}`,
      device_id: rank,
      device_total_bytes: 16 * GiB,
    },
    start + BigInt(rank) * MS,
  );
  t.tensors = 40;
  t.event("start", { context: "Tracking started.", metadata: { backend: "tensorflow" } });
  for (let step = 0; step < steps; step++) {
    t.sample();
    t.enter("train").enter("forward");
    t.allocated += 64 * MiB;
    t.tensors += 10;
    t.sample();
    if (rank === 1) {
      t.allocated += 8192;
      t.tensors += 1;
    }
    t.exit().enter("backward");
    t.allocated -= 64 * MiB;
    t.tensors -= 10;
    t.sample().exit().exit();
    if (rank === 2) t.gap += 4 * MiB * step;
    if (rank === 3 && step === steps / 2) t.gap += 3 * GiB;
    if (rank === 0 && step === 3)
      t.event("warning", {
        context: "memory high",
        metadata: { oom_reason: "device_full", origin_thread_id: 1 },
      });
    if (rank === 0 && step === 5) t.event("critical", { context: "memory very high" });
    if (rank === 1 && step === 4)
      t.event("collector_degraded", {
        context: "collector failed",
        metadata: { collector_last_error: "NVML timeout", collector_health_status: "degraded" },
      });
    if (rank === 1 && step === 6)
      t.event("collector_recovered", { metadata: { collector_health_status: "healthy" } });
    if (rank === 2 && step === 7) {
      // Phase attribution hints: the general path keeps them.
      t.sample();
      const hinted = t.events[t.events.length - 1]!;
      hinted.metadata = { ...hinted.metadata, origin_thread_id: 1, origin_phase_scope_id: `${sessionId}:2` };
    }
    if (rank === 2 && step >= 2) {
      // Live tensors by birth phase (the tfjs adapter's attribution), growing in `train / forward`.
      t.sample();
      const sampled = t.events[t.events.length - 1]!;
      sampled.metadata = {
        ...sampled.metadata,
        tfjs_live_by_phase: {
          "train / forward": {
            tensors: step,
            bytes: step * 4096,
            largest: [{ dtype: "float32", shape: [32, 32], bytes: 4096, count: step }],
          },
        },
      };
    }
    if (rank === 3 && step === 9) {
      t.sample();
      t.events[t.events.length - 1]!.event_type = "Sample";
    }
    if (rank === 3 && step === 10) {
      t.sample();
      // Written exactly (the lossless encoder writes a bigint's digits); typed as a number.
      (t.events[t.events.length - 1]! as unknown as JsonObject).allocator_allocated_bytes = 2n ** 53n + 5n;
    }
  }
  if (rank === 0) {
    // Phase records whose metadata holds a float: the scan's exact path.
    for (const event of t.events) {
      if (!event.event_type.startsWith("phase_")) continue;
      const attributes: JsonObject = { lr: 1 };
      markFloat(attributes, "lr");
      (event.metadata.phase_scope as JsonObject).attributes = attributes;
    }
  }
  t.event("stop", { context: "Tracking stopped." });
  return t.events;
}

/** The events as one file's text (canonical lines), and where each line starts. */
export function pieceJobText(events: readonly TelemetryEvent[]): { text: string; lineStarts: number[] } {
  const lines = events.map((event) => `${encodeTelemetryRecord(event)}\n`);
  const lineStarts: number[] = [];
  let at = 0;
  for (const line of lines) {
    lineStarts.push(at);
    at += Buffer.byteLength(line);
  }
  return { text: lines.join(""), lineStarts };
}

/** The events in time order (ties in storage order): ranks interleaved, as a merged log has them. */
export function interleaved(events: readonly TelemetryEvent[]): TelemetryEvent[] {
  return events
    .map((event, i) => ({ event, i }))
    .sort((a, b) =>
      a.event.timestamp_ns < b.event.timestamp_ns
        ? -1
        : a.event.timestamp_ns > b.event.timestamp_ns
          ? 1
          : a.i - b.i,
    )
    .map(({ event }) => event);
}

/**
 * Scans `path` in pieces of `pieceBytes` with `scanSegments`, each piece's aggregate to a file of
 * its own in `dir` (made here), nothing kept in memory: the segment, and the files in piece order.
 */
export async function scanIntoFiles(
  path: string,
  dir: string,
  pieceBytes: number,
): Promise<{ segment: ScannedSegment; files: string[] }> {
  const size = statSync(path).size;
  const ranges = pieceRanges(path, size, pieceBytes);
  mkdirSync(dir);
  const files = ranges.map((_, k) => join(dir, `piece-${k}.agg`));
  const { segments } = await scanSegments(
    [
      {
        segment: { path, hint: null, defaultSessionId: "x" },
        size,
        ranges,
        files,
        stamps: ranges.map((_, k) => `stamp ${k}`),
      },
    ],
    {
      encode: (aggregate, stamp) => encodeAggregateParts(aggregate, stamp),
      later: async (file, parts) => {
        writeFileSync(file, Buffer.concat(parts));
        return true;
      },
    },
    0,
    () => undefined,
    { buf: null },
  );
  return { segment: segments[0]!, files };
}
