import { join } from "node:path";
import type { JsonObject, TelemetryEvent } from "@stormlog/core";
import { createSessionSummary, stableLegacySessionId } from "@stormlog/core/internal";
import { type SessionInfo, SessionNotFoundError } from "@stormlog/sink";
import { describe, expect, it } from "vitest";
import {
  buildDistributedDiagnostics,
  diagnosticsFoundRisk,
  findDistributedRankGroups,
  loadDistributedEvents,
  parseRankFilter,
  selectDistributedSession,
} from "../../src/index.js";
import { buildDiagnosticsFromEvents } from "../oracles/diagnostics-events.js";

const BASE = 1_700_000_000_000_000_000n;
const MS = 1_000_000n;
const GIB = 1024 ** 3;

function event(init: Partial<TelemetryEvent> & { t: number }): TelemetryEvent {
  const { t, ...rest } = init;
  return {
    schema_version: 3,
    session_id: "s",
    timestamp_ns: BASE + BigInt(t) * 100n * MS,
    event_type: "sample",
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 100,
    pid: 1,
    host: "h",
    job_id: "job",
    rank: 0,
    local_rank: 0,
    world_size: 1,
    device_id: 0,
    allocator_allocated_bytes: GIB,
    allocator_reserved_bytes: GIB,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: GIB,
    device_free_bytes: null,
    device_total_bytes: 16 * GIB,
    context: null,
    metadata: {},
    ...rest,
  } as TelemetryEvent;
}

function phase(action: "enter" | "exit", t: number, path: string[], seq: number, rank = 0): TelemetryEvent {
  const metadata: JsonObject = {
    phase_scope: {
      action,
      depth: path.length,
      name: path[path.length - 1]!,
      parent_scope_id: null,
      path,
      scope_id: `s:${path.join("/")}`,
      sequence: seq,
      thread_id: 1,
      thread_name: "MainThread",
    },
  };
  return event({ t, rank, event_type: `phase_${action}`, metadata, world_size: 3 });
}

/** `buildDistributedDiagnostics` (events, then the dataset), checked against the event oracle. */
function checked(...args: Parameters<typeof buildDistributedDiagnostics>) {
  const result = buildDistributedDiagnostics(...args);
  expect(result).toEqual(buildDiagnosticsFromEvents(...args));
  return result;
}

describe("buildDistributedDiagnostics", () => {
  it("lists expected ranks up to the world size, with missing ones and per-rank deltas and gaps", () => {
    const events = [
      event({ t: 0, rank: 0, world_size: 3, allocator_allocated_bytes: GIB, device_used_bytes: GIB + 100 }),
      event({
        t: 1,
        rank: 0,
        world_size: 3,
        allocator_allocated_bytes: 2 * GIB,
        device_used_bytes: GIB - 300,
      }),
      event({ t: 0, rank: 1, world_size: 3, allocator_reserved_bytes: 3 * GIB, device_used_bytes: 3 * GIB }),
      event({ t: 2, rank: 1, world_size: 3, allocator_reserved_bytes: 2 * GIB, device_used_bytes: 2 * GIB }),
    ];
    const model = checked(events);
    expect(model.expected_ranks).toEqual([0, 1, 2]);
    expect(model.present_ranks).toEqual([0, 1]);
    expect(model.missing_ranks).toEqual([2]);
    const [rank0, rank1, rank2] = model.rows;
    expect(rank0).toMatchObject({
      availability: "present",
      samples: 2,
      allocated_delta_bytes: GIB,
      reserved_delta_bytes: 0,
      device_used_delta_bytes: -400,
      hidden_gap_latest_bytes: -300,
      hidden_gap_peak_abs_bytes: 300,
      has_anomaly: false,
    });
    expect(rank1).toMatchObject({ reserved_delta_bytes: -GIB, hidden_gap_latest_bytes: 0 });
    expect(rank2).toMatchObject({ availability: "missing", samples: 0, allocated_delta_bytes: null });
    expect(model.indicators).toEqual([]);
    expect(diagnosticsFoundRisk(model)).toBe(false);
  });

  it("names the earliest and the most severe anomaly, with their phase", () => {
    const events = [
      phase("enter", 0, ["train"], 1, 1),
      phase("enter", 1, ["train", "forward"], 2, 1),
      event({ t: 2, rank: 1, world_size: 3 }),
      event({ t: 3, rank: 1, world_size: 3, event_type: "warning", context: "WARNING: usage 85%" }),
      phase("exit", 4, ["train", "forward"], 3, 1),
      phase("exit", 5, ["train"], 4, 1),
      event({ t: 2, rank: 0, world_size: 3 }),
      event({ t: 6, rank: 0, world_size: 3, event_type: "critical", context: "CRITICAL: usage 97%" }),
      event({ t: 7, rank: 2, world_size: 3, event_type: "error", context: "OOM" }),
    ];
    const model = checked(events);
    const [earliest, mostSevere] = model.indicators;
    expect(earliest).toMatchObject({
      kind: "earliest",
      rank: 1,
      severity: "warning",
      signal: "alert:warning",
      phase_path: "train / forward",
      details: "WARNING: usage 85% Phase: train / forward.",
      timestamp_ns: BASE + 300n * MS,
    });
    // critical (rank 0) and error (rank 2) are both critical: the earlier one wins.
    expect(mostSevere).toMatchObject({
      kind: "most_severe",
      rank: 0,
      severity: "critical",
      signal: "alert:critical",
    });
    expect(model.rows[1]).toMatchObject({
      has_anomaly: true,
      first_anomaly_signal: "alert:warning",
      first_anomaly_phase_path: "train / forward",
    });
    expect(model.rows[2]).toMatchObject({
      availability: "present",
      samples: 0,
      first_anomaly_signal: "alert:error",
    });
    expect(diagnosticsFoundRisk(model)).toBe(true);
  });

  it("flags samples whose hidden gap reaches 5% of the device, and gap findings", () => {
    const total = 1000 * 1024 * 1024;
    // Device used drifts away from the allocator: a persistent_drift finding and ratio breaches.
    const events = Array.from({ length: 8 }, (_, i) =>
      event({
        t: i,
        device_total_bytes: total,
        allocator_reserved_bytes: 100 * 1024 * 1024,
        allocator_allocated_bytes: 90 * 1024 * 1024,
        device_used_bytes: 100 * 1024 * 1024 + i * 20 * 1024 * 1024,
      }),
    );
    const model = checked(events);
    const signals = model.anomalies.map((anomaly) => anomaly.signal);
    expect(signals).toContain("gap:persistent_drift");
    const breaches = model.anomalies.filter((anomaly) => anomaly.signal === "gap_ratio_breach");
    // 20 MiB * i / 1000 MiB >= 5% from i = 3 on.
    expect(breaches.map((anomaly) => anomaly.timestamp_ns)).toEqual(
      [3, 4, 5, 6, 7].map((i) => BASE + BigInt(i) * 100n * MS),
    );
    expect(breaches[0]!.details).toBe("gap ratio 6.0% exceeded threshold");
    expect(model.rows[0]!.first_anomaly_signal).toBe("gap_ratio_breach");
    expect(model.rows[0]!.hidden_gap_peak_abs_bytes).toBe(140 * 1024 * 1024);
  });

  it("grades collective attributions by confidence", () => {
    const events = [event({ t: 5, rank: 0, world_size: 2 }), event({ t: 5, rank: 1, world_size: 2 })];
    const model = checked(events, {
      collectiveAttributions: [
        {
          rank: 0,
          interval_start_ns: BASE,
          classification: "collective_confident",
          confidence: 0.85,
          reason_codes: ["b", "a", "a"],
        },
        {
          rank: 1,
          interval_start_ns: BASE + 900n * MS,
          classification: "collective_suspect",
          confidence: 0.3,
          reason_codes: [],
        },
      ],
    });
    const [first, second] = model.anomalies;
    // The interval starts before the rank's first sample: the sample's time is used.
    expect(first).toMatchObject({
      severity: "critical",
      timestamp_ns: BASE + 500n * MS,
      reason_codes: ["a", "b"],
    });
    expect(first!.details).toBe(
      "Communication-attributed hidden-memory spike (confidence 0.85; reasons: a, b).",
    );
    expect(second).toMatchObject({ severity: "info", timestamp_ns: BASE + 900n * MS });
    expect(model.indicators[1]).toMatchObject({ rank: 0, confidence: 0.85 });
  });

  it("keeps only selected ranks and says when events are missing", () => {
    const events = [0, 1, 2, 3].map((rank) => event({ t: rank, rank, world_size: 4 }));
    const model = checked(events, { selectedRanks: new Set([1, 3]) });
    expect(model.rows.map((row) => row.rank)).toEqual([1, 3]);
    expect(checked([]).warnings).toEqual(["No telemetry events loaded."]);
    const inconsistent = checked([event({ t: 0, world_size: 2 }), event({ t: 1, rank: 1, world_size: 3 })]);
    expect(inconsistent.warnings).toContain(
      "Inconsistent world_size values detected; using max observed world_size.",
    );
    expect(inconsistent.expected_ranks).toEqual([0, 1, 2]);
  });

  it("fills per-rank timelines only when asked", () => {
    const events = [event({ t: 0 }), event({ t: 1, device_used_bytes: GIB + 5 })];
    expect(checked(events).per_rank_timelines.size).toBe(0);
    const timeline = checked(events, { includeTimelines: true }).per_rank_timelines.get(0);
    expect(timeline?.gap).toEqual([0, 5]);
  });
});

function info(
  id: string,
  rank: number,
  options: { jobId?: string | null; worldSize?: number; events?: number } = {},
): SessionInfo {
  return {
    summary: createSessionSummary({
      source: "test",
      status: "completed",
      sessionId: id,
      startedAtNs: BASE + BigInt(rank),
      endedAtNs: BASE + 1000n + BigInt(rank),
      host: "h",
      pid: 10 + rank,
      jobId: options.jobId === undefined ? "job" : options.jobId,
      rank,
      localRank: rank,
      worldSize: options.worldSize ?? 4,
    }),
    eventCount: options.events ?? 5,
    firstTimestampNs: BASE,
    lastTimestampNs: BASE + 1n,
    sources: [],
    warnings: [],
  };
}

describe("selectDistributedSession", () => {
  it("merges per-rank sessions of one job under the reference's synthetic id", () => {
    const sessions = [info("r1", 1), info("r0", 0), info("other", 0, { jobId: null, worldSize: 1 })];
    const selection = selectDistributedSession(sessions);
    expect(selection.rankGroup).not.toBeNull();
    expect(selection.memberSessionIds).toEqual(["r0", "r1"]);
    expect(selection.summary?.session_id).toBe(
      stableLegacySessionId(["distributed.rank_group", "job", 4, "r0", "r1"]),
    );
    expect(selection.summary).toMatchObject({
      status: "completed",
      job_id: "job",
      rank: 0,
      world_size: 4,
      pid: -1,
      source: "stormlog.diagnostics.distributed",
      ended_at_ns: BASE + 1001n,
    });
    // A member or an unrelated session can still be chosen by id.
    expect(selectDistributedSession(sessions, "other").memberSessionIds).toEqual(["other"]);
    expect(selectDistributedSession(sessions, selection.summary!.session_id).rankGroup).not.toBeNull();
    expect(() => selectDistributedSession(sessions, "nope")).toThrow(SessionNotFoundError);
  });

  it("keeps the first session of a restarted rank and leaves the others out", () => {
    const selection = selectDistributedSession([info("r1", 1), info("r0-new", 0), info("r0-old", 0)]);
    expect(selection.memberSessionIds).toEqual(["r0-new", "r1"]);
    expect(selection.rankGroup?.skipped.map((session) => session.summary.session_id)).toEqual(["r0-old"]);
    expect(findDistributedRankGroups([info("r1", 1), info("r0-new", 0), info("r0-old", 0)])).toEqual([
      selection.rankGroup,
    ]);
  });

  it("does not merge one rank, single sessions, more sessions than ranks, or empty sessions", () => {
    expect(selectDistributedSession([info("a", 0), info("b", 0)]).rankGroup).toBeNull();
    expect(selectDistributedSession([info("a", 0)]).rankGroup).toBeNull();
    const three = [
      info("a", 0, { worldSize: 2 }),
      info("b", 1, { worldSize: 2 }),
      info("c", 2, { worldSize: 2 }),
    ];
    expect(selectDistributedSession(three).rankGroup).toBeNull();
    const empty = selectDistributedSession([info("a", 0, { events: 0 }), info("b", 1)]);
    expect(empty.rankGroup).toBeNull();
    expect(empty.summary?.session_id).toBe("b");
  });

  it("reads a rank group's events from a file, sorted by time", async () => {
    const path = join(import.meta.dirname, "../../../../fixtures/golden/cross-rank/case-11-0012/input.jsonl");
    const { selection, sessions, events } = await loadDistributedEvents(path);
    expect(selection.rankGroup).not.toBeNull();
    expect(new Set(events.map((e) => e.session_id))).toEqual(new Set(selection.memberSessionIds));
    expect(selection.memberSessionIds).toHaveLength(4);
    expect(events.length).toBe(sessions.reduce((sum, session) => sum + session.eventCount, 0));
    for (let i = 1; i < events.length; i++)
      expect(events[i - 1]!.timestamp_ns <= events[i]!.timestamp_ns).toBe(true);
  });
});

describe("parseRankFilter", () => {
  const available = [0, 1, 2, 3, 4, 5, 6, 7];
  it("reads all, lists and ranges, kept to available ranks", () => {
    expect(parseRankFilter("all", available)).toEqual(new Set(available));
    expect(parseRankFilter("*", available)).toEqual(new Set(available));
    expect(parseRankFilter(" 0, 2,4-6 ,9", available)).toEqual(new Set([0, 2, 4, 5, 6]));
  });
  it("rejects malformed tokens", () => {
    expect(() => parseRankFilter("1-x", available)).toThrow(/invalid rank/);
    expect(() => parseRankFilter("5-2", available)).toThrow(/start>end/);
  });
});
