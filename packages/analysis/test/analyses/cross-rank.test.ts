import type { JsonObject, TelemetryEvent, TelemetryRecordV3 } from "@stormlog/core";
import { PhaseReplayIndex } from "@stormlog/phases";
import { describe, expect, it } from "vitest";
import { mergeCrossRankTimelines, summarizeCrossRankAnalysis } from "../../src/index.js";
import { summarizeCrossRankEvents } from "../oracles/cross-rank-events.js";
import {
  canonical,
  goldenCases,
  loadEvents,
  loadExpected,
  sortedByTimestamp,
} from "../support/golden-helpers.js";

describe("summarizeCrossRankAnalysis agrees with the Python reference (golden cases)", () => {
  const cases = goldenCases("cross-rank");

  it("has the golden cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(24);
  });

  it.each(cases)("%s", (name) => {
    const events = loadEvents("cross-rank", name);
    const expected = loadExpected("cross-rank", name) as JsonObject;
    // As the golden README says: all events of the file, sorted by timestamp_ns, with a replay index.
    const result = summarizeCrossRankAnalysis(sortedByTimestamp(events), {
      phaseResolver: PhaseReplayIndex.fromEvents(events),
    });
    expect(canonical(result)).toEqual(canonical(expected));
    // The event-by-event oracle that generated jobs are checked against holds on the golden cases too.
    const oracle = summarizeCrossRankEvents(sortedByTimestamp(events), {
      phaseResolver: PhaseReplayIndex.fromEvents(events),
    });
    expect(canonical(oracle)).toEqual(canonical(expected));
    // Key order of the reference's structure (rank-keyed maps aside: JS orders integer keys).
    expect(Object.keys(result)).toEqual(Object.keys(expected));
    const suspects = expected.first_cause_suspects as JsonObject[];
    result.first_cause_suspects.forEach((suspect, index) => {
      expect(Object.keys(suspect)).toEqual(Object.keys(suspects[index]!));
      const payload = suspects[index]!.phase_attribution;
      if (payload && typeof payload === "object")
        expect(Object.keys(suspect.phase_attribution ?? {})).toEqual(Object.keys(payload));
    });
    // Timestamps are exact bigints, not rounded doubles.
    if (result.cluster_onset_timestamp_ns !== null)
      expect(typeof result.cluster_onset_timestamp_ns).toBe("bigint");
  });

  it("covers suspects with unique and ambiguous phase attribution", () => {
    const resolutions = new Set<string>();
    for (const name of cases) {
      const expected = loadExpected("cross-rank", name) as JsonObject;
      for (const suspect of expected.first_cause_suspects as JsonObject[]) {
        const payload = suspect.phase_attribution as JsonObject | null;
        resolutions.add(payload ? String(payload.phase_resolution) : "none");
      }
    }
    expect([...resolutions].sort()).toEqual(["ambiguous", "none", "unique"]);
  });
});

// Builders for the reference's tests/test_distributed_analysis.py scenarios.
const BASE_NS = 1_700_000_000_000_000_000n;
const INTERVAL_NS = 100_000_000n;
const MiB = 1024 ** 2;

function sample(
  rank: number,
  timestampNs: bigint,
  deviceUsed: number,
  extra: Partial<TelemetryRecordV3> = {},
): TelemetryEvent {
  return {
    schema_version: 3,
    session_id: `session-rank${rank}`,
    timestamp_ns: timestampNs,
    event_type: "sample",
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 100,
    pid: 1000 + rank,
    host: "node-0",
    job_id: "job-1",
    rank,
    local_rank: rank,
    world_size: 4,
    device_id: rank,
    allocator_allocated_bytes: deviceUsed,
    allocator_reserved_bytes: deviceUsed,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: deviceUsed,
    device_free_bytes: null,
    device_total_bytes: 80 * 1024 * MiB,
    context: null,
    metadata: {},
    ...extra,
  };
}

/**
 * The reference's `_build_cross_rank_fixture(world_size=4)`: rank clock offsets 0/20/40/10 ms, every
 * rank jumps by 1 GiB at sample 5 except rank 2, which jumps one sample earlier.
 */
function crossRankFixture(
  worldSize = 4,
  spikeSample: (rank: number) => number = (rank) => (rank === 2 ? 4 : 5),
) {
  const offsets = [0n, 20_000_000n, 40_000_000n, 10_000_000n];
  const events: TelemetryEvent[] = [];
  for (let rank = 0; rank < worldSize; rank++) {
    for (let i = 0; i < 10; i++) {
      const used = 2 * 1024 * MiB + (i >= spikeSample(rank) ? 1024 * MiB : 0);
      events.push(
        sample(rank, BASE_NS + offsets[rank % 4]! + BigInt(i) * INTERVAL_NS, used, { world_size: worldSize }),
      );
    }
  }
  return sortedByTimestamp(events);
}

describe("summarizeCrossRankAnalysis (reference scenarios)", () => {
  it("names the rank that spiked one sample early, with high confidence and a one-interval lead", () => {
    const result = summarizeCrossRankAnalysis(crossRankFixture());
    expect(result.participating_ranks).toEqual([0, 1, 2, 3]);
    expect(result.alignment_offsets_ns).toEqual({
      "0": 0n,
      "1": 20_000_000n,
      "2": 40_000_000n,
      "3": 10_000_000n,
    });
    // Suspects are all candidates at or before the onset (the second-earliest spike): rank 2 leads.
    expect(result.first_cause_suspects.map((s) => [s.rank, s.confidence])).toEqual([
      [2, "high"],
      [0, "low"],
      [1, "low"],
      [3, "low"],
    ]);
    expect(result.cluster_onset_timestamp_ns).toBe(BASE_NS + 5n * INTERVAL_NS);
    const [suspect] = result.first_cause_suspects;
    expect(suspect?.rank).toBe(2);
    expect(suspect?.confidence).toBe("high");
    expect(suspect?.lead_over_cluster_onset_ns).toBe(INTERVAL_NS);
    expect(suspect?.first_spike_timestamp_ns).toBe(BASE_NS + 40_000_000n + 4n * INTERVAL_NS);
    expect(suspect?.aligned_first_spike_timestamp_ns).toBe(BASE_NS + 4n * INTERVAL_NS);
    expect(suspect?.phase_attribution).toBeNull();
    expect(result.notes).toEqual([]);
  });

  it("reports missing ranks and lowers confidence", () => {
    const events = crossRankFixture().filter((event) => event.rank !== 3);
    const result = summarizeCrossRankAnalysis(events);
    expect(result.world_size).toBe(4);
    expect(result.missing_ranks).toEqual([3]);
    expect(result.notes).toContain("Missing rank data for ranks: 3.");
    expect(result.first_cause_suspects[0]?.confidence).toBe("low");
  });

  it("needs two ranks", () => {
    const result = summarizeCrossRankAnalysis(crossRankFixture(1));
    expect(result.first_cause_suspects).toEqual([]);
    expect(result.notes).toEqual(["At least two ranks are required for cross-rank first-cause analysis."]);
  });

  it("says when nothing spiked, and when only one rank did", () => {
    const flat = summarizeCrossRankAnalysis(crossRankFixture(4, () => 99));
    expect(flat.cluster_onset_timestamp_ns).toBeNull();
    expect(flat.notes).toEqual(["No qualifying cross-rank spikes were detected."]);
    const one = summarizeCrossRankAnalysis(crossRankFixture(4, (rank) => (rank === 1 ? 3 : 99)));
    expect(one.first_cause_suspects.map((suspect) => [suspect.rank, suspect.confidence])).toEqual([
      [1, "low"],
    ]);
    expect(one.first_cause_suspects[0]?.lead_over_cluster_onset_ns).toBe(0n);
    expect(one.notes).toEqual(["Only one rank produced a qualifying spike; confidence is limited."]);
  });

  it("breaks ties by the larger delta, then the lower rank", () => {
    const events = crossRankFixture(4, () => 5).map((event) =>
      event.rank === 3 && event.device_used_bytes! > 2 * 1024 * MiB
        ? { ...event, device_used_bytes: 5 * 1024 * MiB }
        : event,
    );
    const result = summarizeCrossRankAnalysis(events);
    expect(result.first_cause_suspects.map((suspect) => suspect.rank)).toEqual([3, 0, 1, 2]);
    expect(result.first_cause_suspects.map((suspect) => suspect.confidence)).toEqual([
      "medium",
      "medium",
      "medium",
      "medium",
    ]);
  });

  it("ignores non-sample events and keeps the most common job_id", () => {
    const events = crossRankFixture();
    const extra = [
      { ...events[0]!, event_type: "warning" },
      sample(7, BASE_NS, 1, { job_id: "other-job" }),
      { ...events[1]!, event_type: "SAMPLE" }, // casefolded: still a sample
    ];
    const result = summarizeCrossRankAnalysis(sortedByTimestamp([...events, ...extra]));
    expect(result.job_id).toBe("job-1");
    expect(result.participating_ranks).toEqual([0, 1, 2, 3]);
    expect(result.notes).toEqual([
      "Ignored non-sample events during cross-rank analysis.",
      "Multiple job_id values were observed; filtering to the most common value.",
    ]);
  });

  it("fires at the threshold crossing of a ramp, not at its start", () => {
    // Rank 0 ramps by 40 MiB per sample from sample 2: crosses 64 MiB at sample 3.
    const events = crossRankFixture(2, () => 99).map((event) => {
      if (event.rank !== 0) return event;
      const i = Number((event.timestamp_ns - BASE_NS) / INTERVAL_NS);
      return { ...event, device_used_bytes: 100 * MiB + Math.max(0, i - 1) * 40 * MiB };
    });
    const [suspect] = summarizeCrossRankAnalysis(events).first_cause_suspects;
    expect(suspect?.first_spike_timestamp_ns).toBe(BASE_NS + 3n * INTERVAL_NS);
    expect(suspect?.spike_window_samples).toBe(2);
    expect(suspect?.peak_delta_bytes).toBe(80 * MiB);
  });

  it("attributes suspects to the phase active on their rank", () => {
    const events = crossRankFixture();
    const phase = (
      rank: number,
      action: "enter" | "exit",
      timestampNs: bigint,
      sequence: number,
    ): TelemetryEvent => ({
      ...sample(rank, timestampNs, 0),
      event_type: `phase_${action}`,
      metadata: {
        phase_scope: {
          action,
          name: "forward",
          path: ["train", "forward"],
          depth: 2,
          scope_id: `session-rank${rank}:1`,
          parent_scope_id: null,
          thread_id: 1,
          thread_name: "MainThread",
          sequence,
        },
      },
    });
    const withPhases = [
      ...events,
      phase(2, "enter", BASE_NS + 40_000_000n + 3n * INTERVAL_NS, 1),
      phase(2, "exit", BASE_NS + 40_000_000n + 6n * INTERVAL_NS, 2),
    ];
    const result = summarizeCrossRankAnalysis(sortedByTimestamp(withPhases), {
      phaseResolver: PhaseReplayIndex.fromEvents(withPhases),
    });
    expect(result.first_cause_suspects[0]?.phase_attribution).toEqual({
      phase_resolution: "unique",
      phase_paths: ["train / forward"],
      phase_source: "heuristic",
      phase_path: "train / forward",
      scope_id: "session-rank2:1",
      thread_id: 1,
      thread_name: "MainThread",
    });
    expect(result.notes).toEqual(["Ignored non-sample events during cross-rank analysis."]);
  });

  it("handles no events and no samples as the reference does", () => {
    expect(summarizeCrossRankAnalysis([]).notes).toEqual([
      "No telemetry events were provided.",
      "No sample telemetry events were available for distributed analysis.",
    ]);
    const onlyWarnings = crossRankFixture().map((event) => ({ ...event, event_type: "warning" }));
    const result = summarizeCrossRankAnalysis(onlyWarnings);
    expect(result.world_size).toBe(0);
    expect(result.notes).toEqual([
      "Ignored non-sample events during cross-rank analysis.",
      "No sample telemetry events were available for distributed analysis.",
    ]);
  });

  it("drops v4 samples without device-used memory, with a note", () => {
    const events = crossRankFixture().map((event, index) =>
      index === 0 ? { ...event, schema_version: 4 as const, device_used_bytes: null } : event,
    );
    const result = summarizeCrossRankAnalysis(events as TelemetryEvent[]);
    expect(result.notes).toContain("Ignored samples without device-used memory during cross-rank analysis.");
    expect(Object.values(result.rank_sample_counts).reduce((a, b) => a + b, 0)).toBe(39);
  });
});

describe("mergeCrossRankTimelines", () => {
  it("aligns every rank on its first sample and orders by (aligned, rank, timestamp)", () => {
    const merged = mergeCrossRankTimelines(crossRankFixture());
    expect(merged.merged_points).toHaveLength(40);
    expect(merged.merged_points.slice(0, 4).map((point) => [point.rank, point.aligned_timestamp_ns])).toEqual(
      [
        [0, BASE_NS],
        [1, BASE_NS],
        [2, BASE_NS],
        [3, BASE_NS],
      ],
    );
    expect(merged.merged_points[5]?.timestamp_ns).toBe(BASE_NS + 20_000_000n + INTERVAL_NS);
    expect([...merged.rank_sample_counts.keys()]).toEqual([0, 3, 1, 2]); // first-appearance order
    expect(merged.alignment_offsets_ns.get(2)).toBe(40_000_000n);
  });

  it("notes ranks whose clocks are far from the anchor", () => {
    const events = crossRankFixture().map((event) =>
      event.rank === 1 ? { ...event, timestamp_ns: event.timestamp_ns + 10n ** 9n } : event,
    );
    expect(mergeCrossRankTimelines(sortedByTimestamp(events)).notes).toEqual([
      "Rank 1 starts 1020000000 ns from the anchor; first-sample alignment may be approximate.",
    ]);
  });
});
