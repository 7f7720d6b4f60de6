import type { TelemetryEvent } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { BASE_NS, GiB, MiB, MS, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { analyzeEvents, formatReportText } from "../../src/index.js";

const scope = (action: "enter" | "exit", path: string[], scopeId: string, sequence: number, thread = 1) => ({
  phase_scope: {
    action,
    name: path[path.length - 1]!,
    path,
    depth: path.length,
    scope_id: scopeId,
    parent_scope_id: null,
    thread_id: thread,
    thread_name: `thread-${thread}`,
    sequence,
  },
});

/** Events at `BASE_NS + ms`. */
const at = (ms: number): bigint => BASE_NS + BigInt(ms) * MS;

function phases(): TelemetryEvent[] {
  const events: TelemetryEvent[] = [];
  const sample = (ms: number, allocated: number, extra: Partial<Parameters<typeof record>[2]> = {}) =>
    events.push(
      record("sample", at(ms), {
        allocator_allocated_bytes: allocated,
        allocator_reserved_bytes: 4 * GiB,
        device_used_bytes: 5 * GiB,
        ...extra,
      }),
    );
  const boundary = (
    kind: "phase_enter" | "phase_exit",
    ms: number,
    path: string[],
    id: string,
    sequence: number,
    allocated: number,
    tensors?: number,
  ) =>
    events.push(
      record(kind, at(ms), {
        allocator_allocated_bytes: allocated,
        metadata: {
          ...scope(kind === "phase_enter" ? "enter" : "exit", path, id, sequence),
          ...(tensors === undefined ? {} : { tfjs_num_tensors: tensors }),
        },
      }),
    );
  boundary("phase_enter", 0, ["train"], "s:1", 1, 1 * GiB);
  // Three forward occurrences: 100 ms, 200 ms, 150 ms; the second peaks at 3 GiB (a sample at its exit instant counts).
  boundary("phase_enter", 10, ["train", "forward"], "s:2", 2, 1 * GiB, 10);
  sample(50, 2 * GiB);
  boundary("phase_exit", 110, ["train", "forward"], "s:2", 3, 1 * GiB + 100, 12);
  sample(115, 9 * GiB); // between occurrences: not inside any forward
  boundary("phase_enter", 120, ["train", "forward"], "s:4", 4, 1 * GiB + 100, 12);
  boundary("phase_exit", 320, ["train", "forward"], "s:4", 5, 1 * GiB + 300, 15);
  sample(320, 3 * GiB);
  boundary("phase_enter", 330, ["train", "forward"], "s:6", 6, 1 * GiB + 300, 15);
  sample(400, 1.5 * GiB);
  boundary("phase_exit", 480, ["train", "forward"], "s:6", 7, 1 * GiB + 250, 14);
  // Never closed: ends at the rank's last event (the sample at 600 ms).
  boundary("phase_enter", 500, ["train", "eval"], "s:8", 8, 1 * GiB);
  sample(600, 1 * GiB);
  return events;
}

describe("phase statistics", () => {
  const report = analyzeEvents(phases());
  const byPath = new Map(report.phases.map((phase) => [phase.phase_path, phase]));

  it("lists every nested path, parents first", () => {
    expect(report.phases.map((phase) => phase.phase_path)).toEqual([
      "train",
      "train / eval",
      "train / forward",
    ]);
    expect(byPath.get("train / forward")).toMatchObject({
      path: ["train", "forward"],
      depth: 2,
      occurrences: 3,
      ranks: [0],
    });
  });

  it("has exact durations: total, mean (rounded), max", () => {
    expect(byPath.get("train / forward")!.duration).toEqual({
      total_ns: 450n * MS,
      mean_ns: 150n * MS,
      max_ns: 200n * MS,
    });
  });

  it("finds the peak inside (inclusive ends, samples between occurrences left out) and the worst occurrence", () => {
    const forward = byPath.get("train / forward")!;
    expect(forward.peak_allocated_bytes).toEqual({ value: 3 * GiB, timestamp_ns: at(320), rank: 0 });
    expect(forward.worst_occurrence).toMatchObject({
      scope_id: "s:4",
      start_ns: at(120),
      end_ns: at(320),
      duration_ns: 200n * MS,
      peak_allocated_bytes: 3 * GiB,
    });
    // `train` holds every sample.
    expect(byPath.get("train")!.peak_allocated_bytes?.value).toBe(9 * GiB);
  });

  it("gives the net change per occurrence in bytes and tensors", () => {
    const forward = byPath.get("train / forward")!;
    expect(forward.net_allocated_bytes).toEqual({
      mean: 250 / 3,
      median: 100,
      min: -50,
      max: 200,
      total: 250,
      positive_count: 2,
      count: 3,
    });
    expect(forward.net_tensors).toMatchObject({ median: 2, min: -1, max: 3, total: 4, count: 3 });
  });

  it("ends a phase never closed at its rank's last event, and leaves it out of net changes", () => {
    const evaluation = byPath.get("train / eval")!;
    expect(evaluation).toMatchObject({ occurrences: 1, synthetic_end_count: 1, net_allocated_bytes: null });
    expect(evaluation.duration.max_ns).toBe(100n * MS);
    expect(evaluation.worst_occurrence?.synthetic_end).toBe(true);
  });

  it("reads tensor counts from the samples when boundary records carry none", () => {
    const events = phases().map((event) => {
      if (!event.event_type.startsWith("phase")) return event;
      const { tfjs_num_tensors: _t, ...metadata } = event.metadata;
      return { ...event, metadata };
    });
    // Samples carry tfjs_num_tensors; each boundary takes the last one at or before it.
    let samples = 0;
    const withTensors = events.map((event) => {
      if (event.event_type !== "sample") return event;
      samples++;
      return { ...event, metadata: { tfjs_num_tensors: 100 + 5 * samples } };
    });
    const forward = analyzeEvents(withTensors).phases.find(
      (phase) => phase.phase_path === "train / forward",
    )!;
    // Occurrences: [no sample before -> absent], [115 ms: 110, 320 ms: 115], [320 ms: 115, 400 ms: 120].
    expect(forward.net_tensors).toMatchObject({ count: 2, total: 10 });
  });
});

describe("session summary", () => {
  const events: TelemetryEvent[] = [];
  for (const rank of [0, 1]) {
    const id = { rank, world_size: 2, session_id: "s", device_id: rank };
    events.push(record("start", at(0), { ...id, allocator_allocated_bytes: 0 }));
    for (let i = 1; i <= 10; i++) {
      const used = (rank === 1 && i === 7 ? 20 : 4 + i) * GiB;
      events.push(
        record("sample", at(i * 100), {
          ...id,
          allocator_allocated_bytes: (1 + i * 0.1) * GiB,
          allocator_reserved_bytes: 3 * GiB + i * MiB,
          device_used_bytes: used,
        }),
      );
    }
  }
  events.push(
    record("warning", at(150), {
      rank: 1,
      world_size: 2,
      session_id: "s",
      context: "WARNING: Memory usage at 80%",
    }),
  );
  events.push(record("critical", at(160), { rank: 1, world_size: 2, session_id: "s", context: "CRITICAL" }));
  events.push(
    record("collector_degraded", at(200), {
      rank: 0,
      world_size: 2,
      session_id: "s",
      metadata: { collector_last_error: "boom" },
    }),
  );
  events.push(record("collector_recovered", at(450), { rank: 0, world_size: 2, session_id: "s" }));
  events.push(
    record("collector_degraded", at(900), {
      rank: 1,
      world_size: 2,
      session_id: "s",
      metadata: { collector_health_status: "unhealthy" },
    }),
  );
  const report = analyzeEvents(events);

  it("counts events, samples, ranks and time", () => {
    expect(report.summary).toMatchObject({
      event_count: 27,
      sample_count: 20,
      ranks: [0, 1],
      first_timestamp_ns: at(0),
      last_timestamp_ns: at(1000),
      duration_ns: 1000n * MS,
      duration_s: 1,
      event_type_counts: {
        collector_degraded: 2,
        collector_recovered: 1,
        critical: 1,
        sample: 20,
        start: 2,
        warning: 1,
      },
      alerts_by_type: { warning: 1, critical: 1 },
    });
  });

  it("gives each peak with its value, time, rank, device and collector", () => {
    expect(report.summary.peaks.device_used_bytes).toEqual({
      value: 20 * GiB,
      timestamp_ns: at(700),
      rank: 1,
      device_id: 1,
      session_id: "s",
      collector: "stormlog.test",
    });
    expect(report.summary.peaks.allocator_reserved_bytes).toMatchObject({
      value: 3 * GiB + 10 * MiB,
      timestamp_ns: at(1000),
      rank: 0,
    });
  });

  it("measures collector-health transitions and time degraded (an open episode lasts to the rank's last event)", () => {
    expect(report.summary.collector_health).toEqual({
      transition_count: 3,
      degraded_count: 2,
      recovered_count: 1,
      degraded_time_ns: 250n * MS + 100n * MS,
      last_status: "unhealthy",
    });
    expect(report.collector_health.transitions.map((t) => [t.rank, t.status, t.error])).toEqual([
      [0, "degraded", "boom"],
      [0, "healthy", null],
      [1, "unhealthy", null],
    ]);
    expect(report.collector_health.per_rank).toEqual([
      { rank: 0, session_id: "s", degraded_time_ns: 250n * MS, transition_count: 2 },
      { rank: 1, session_id: "s", degraded_time_ns: 100n * MS, transition_count: 1 },
    ]);
  });

  it("lists alerts in time order with counts by severity", () => {
    expect(report.alerts).toMatchObject({
      total_count: 2,
      severity_counts: { warning: 1, critical: 1 },
      truncated: false,
    });
    expect(report.alerts.items.map((alert) => [alert.event_type, alert.rank, alert.timestamp_ns])).toEqual([
      ["warning", 1, at(150)],
      ["critical", 1, at(160)],
    ]);
  });

  it("gives per-rank changes and the hidden gap", () => {
    const rank1 = report.summary.per_rank[1]!;
    expect(rank1).toMatchObject({
      rank: 1,
      sample_count: 10,
      event_count: 14,
      reserved_delta_bytes: 9 * MiB,
      device_used_delta_bytes: 9 * GiB,
      peak_device_used_bytes: 20 * GiB,
      hidden_gap_latest_bytes: 14 * GiB - 3 * GiB - 10 * MiB,
      hidden_gap_peak_abs_bytes: 20 * GiB - 3 * GiB - 7 * MiB,
      alert_count: 2,
    });
    expect(report.summary.per_rank[0]!.allocated_delta_bytes).toBeCloseTo(0.9 * GiB, 0);
  });

  it("includes the cross-rank analysis only with more than one rank", () => {
    expect(report.cross_rank_analysis?.participating_ranks).toEqual([0, 1]);
    expect(analyzeEvents(events.filter((event) => event.rank === 0)).cross_rank_analysis).toBeNull();
  });
});

describe("a parent phase's peak", () => {
  /** `train` around `forward` and `backward`; the highest reading is backward's exit, no sample inside. */
  function step(offsetMs: number, id: number, threadOf = 1): TelemetryEvent[] {
    const boundary = (
      kind: "phase_enter" | "phase_exit",
      ms: number,
      path: string[],
      n: number,
      allocated: number,
    ) =>
      record(kind, at(offsetMs + ms), {
        allocator_allocated_bytes: allocated,
        metadata: scope(kind === "phase_enter" ? "enter" : "exit", path, `s:${id + n}`, id + n, threadOf),
      });
    return [
      boundary("phase_enter", 0, ["train"], 0, 1 * GiB),
      boundary("phase_enter", 1, ["train", "forward"], 1, 1 * GiB),
      boundary("phase_exit", 5, ["train", "forward"], 1, 2 * GiB),
      boundary("phase_enter", 6, ["train", "backward"], 2, 2 * GiB),
      boundary("phase_exit", 9, ["train", "backward"], 2, 3 * GiB),
      boundary("phase_exit", 10, ["train"], 0, 1 * GiB),
    ];
  }

  it("says why phases with too few occurrences are not judged, one line per reason", () => {
    const text = formatReportText(analyzeEvents([...step(0, 0), ...step(20, 10)]));
    expect(text).toContain(
      "  Not judged: train, train / backward, train / forward (2 closed occurrences on a rank; 6 needed)",
    );
    expect(formatReportText(analyzeEvents(step(0, 0)))).toContain(
      "(1 closed occurrence on a rank; 6 needed)",
    );
  });

  it("includes the peaks of the phases nested in it", () => {
    const report = analyzeEvents([...step(0, 0), ...step(20, 10)]);
    const peak = (path: string) => report.phases.find((p) => p.phase_path === path)?.peak_allocated_bytes;
    expect(peak("train / backward")?.value).toBe(3 * GiB);
    expect(peak("train")).toMatchObject({ value: 3 * GiB, timestamp_ns: at(9) });
  });

  it("does not take a peak from a phase of another thread that overlaps it", () => {
    const other = step(0, 100, 2).filter(
      (event) => (event.metadata.phase_scope as { depth: number }).depth === 2,
    );
    const mine = step(0, 0).filter(
      (event) => (event.metadata.phase_scope as { name: string }).name !== "backward",
    );
    const report = analyzeEvents(
      [...mine, ...other].sort((a, b) => (a.timestamp_ns < b.timestamp_ns ? -1 : 1)),
    );
    const train = report.phases.find((p) => p.phase_path === "train");
    expect(train?.peak_allocated_bytes?.value).toBe(2 * GiB);
  });
});
