import { type JsonObject, stringifyJson, type TelemetryEvent } from "@stormlog/core";
import { PhaseReplayIndex } from "@stormlog/phases";
import { describe, expect, it } from "vitest";
import { analyzeGaps, DEFAULT_GAP_THRESHOLDS, GAP_REMEDIATION, type GapFinding } from "../../src/index.js";
import { canonical, goldenCases, loadEvents, loadExpected } from "../support/golden-helpers.js";

/** Decimal places the reference rounds each float to (`max_gap_bytes` is not rounded: compare exactly). */
const ROUNDED_PLACES: Record<string, number> = {
  confidence: 3,
  max_zscore: 3,
  mean_gap_bytes: 1,
  std_gap_bytes: 1,
  slope_bytes_per_sec: 1,
  r_squared: 4,
  p_value: 6,
  gap_start_bytes: 1,
  gap_end_bytes: 1,
  avg_fragmentation_ratio: 4,
  max_fragmentation_ratio: 4,
  avg_gap_bytes: 1,
};

/** Within one unit of the last rounded place, as the golden README allows. */
function expectClose(key: string, actual: unknown, expected: unknown): void {
  const places = ROUNDED_PLACES[key];
  if (places === undefined) {
    expect(canonical(actual), key).toEqual(canonical(expected));
    return;
  }
  expect(typeof actual, key).toBe("number");
  const unit = 10 ** -places;
  expect(
    Math.abs((actual as number) - Number(expected)),
    `${key}: ${actual} vs ${expected}`,
  ).toBeLessThanOrEqual(unit * 1.000001);
}

describe("analyzeGaps agrees with the Python reference (golden cases)", () => {
  const cases = goldenCases("gap");

  it("has the golden cases, with every classification", () => {
    expect(cases.length).toBeGreaterThanOrEqual(24);
    const seen = new Set<string>();
    for (const name of cases) {
      for (const item of (loadExpected("gap", name) as JsonObject).gap_analysis as JsonObject[])
        seen.add(String(item.classification));
    }
    expect([...seen].sort()).toEqual(["fragmentation_like", "persistent_drift", "transient_spike"]);
  });

  it.each(cases)("%s", (name) => {
    const events = loadEvents("gap", name);
    const expected = (loadExpected("gap", name) as JsonObject).gap_analysis as JsonObject[];
    const findings = analyzeGaps(events, { phaseResolver: PhaseReplayIndex.fromEvents(events) });
    expect(findings.map((f) => [f.classification, f.severity])).toEqual(
      expected.map((e) => [e.classification, e.severity]),
    );
    findings.forEach((found, index) => {
      const want = expected[index]!;
      expectClose("confidence", found.confidence, want.confidence);
      const evidence = want.evidence as JsonObject;
      expect(Object.keys(found.evidence)).toEqual(Object.keys(evidence));
      for (const key of Object.keys(evidence))
        expectClose(key, (found.evidence as Record<string, unknown>)[key], evidence[key]);
      expect(found.evidence_timestamp_ns).toBe(BigInt(want.evidence_timestamp_ns as number | bigint));
      expect(found.phase_attribution).toEqual(want.phase_attribution);
      if (found.phase_attribution)
        expect(Object.keys(found.phase_attribution)).toEqual(
          Object.keys(want.phase_attribution as JsonObject),
        );
    });
  });
});

const BASE_NS = 1_700_000_000_000_000_000n;
const INTERVAL_NS = 100_000_000n;
const GiB = 1024 ** 3;
const TOTAL = 16 * GiB;

/** The reference's `build_gap_event` (tests/gap_test_helpers.py): 16 GiB device, 100 ms apart. */
function gapEvent(index: number, deviceUsed: number, reserved: number, allocated = reserved): TelemetryEvent {
  return {
    schema_version: 3,
    session_id: "gap-session",
    timestamp_ns: BASE_NS + BigInt(index) * INTERVAL_NS,
    event_type: "sample",
    collector: "stormlog.cuda_tracker",
    sampling_interval_ms: 100,
    pid: 1,
    host: "h",
    job_id: null,
    rank: 0,
    local_rank: 0,
    world_size: 1,
    device_id: 0,
    allocator_allocated_bytes: allocated,
    allocator_reserved_bytes: reserved,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: deviceUsed,
    device_free_bytes: null,
    device_total_bytes: TOTAL,
    context: null,
    metadata: {},
  };
}

describe("analyzeGaps classifiers", () => {
  it("finds a transient spike and points at its largest sample", () => {
    const events = Array.from({ length: 30 }, (_, i) =>
      gapEvent(i, 4 * GiB + (i === 17 ? 3 * GiB : 0), 3 * GiB),
    );
    const [spike, ...rest] = analyzeGaps(events);
    expect(rest).toEqual([]);
    expect(spike?.classification).toBe("transient_spike");
    expect(spike?.severity).toBe("critical");
    expect(spike?.evidence).toMatchObject({ spike_count: 1, max_gap_bytes: 4 * GiB });
    expect(spike?.evidence_timestamp_ns).toBe(BASE_NS + 17n * INTERVAL_NS);
    // Expected values from the reference's formulas run with NumPy on the same series.
    expect(spike?.evidence).toEqual({
      spike_count: 1,
      max_gap_bytes: 4294967296,
      max_zscore: 5.295,
      mean_gap_bytes: 1181116006.4,
      std_gap_bytes: 588112617.9,
    });
    expect(spike?.confidence).toBe(0.882);
    expect(spike?.remediation).toEqual([...GAP_REMEDIATION.transient_spike]);
    expect(spike?.description).toContain("4.00 GB");
    expect(spike?.phase_attribution).toBeNull();
  });

  it("finds a persistent drift with SciPy's statistics", () => {
    const MiB = 1024 ** 2;
    // Expected values from scipy.stats.linregress on the same series.
    const steady = Array.from({ length: 20 }, (_, i) =>
      gapEvent(i, 2 * GiB + i * 64 * MiB + (i % 3) * MiB, GiB),
    );
    const strong = analyzeGaps(steady).find((f) => f.classification === "persistent_drift");
    expect(strong?.severity).toBe("critical");
    expect(strong?.evidence_timestamp_ns).toBe(BASE_NS + 19n * INTERVAL_NS);
    expect(strong?.evidence).toEqual({
      slope_bytes_per_sec: 671143828.2,
      r_squared: 1,
      p_value: 0,
      gap_start_bytes: 1073741824,
      gap_end_bytes: 2349858816,
    });
    expect(strong?.confidence).toBe(1);

    const noisy = Array.from({ length: 12 }, (_, i) =>
      gapEvent(i, 2 * GiB + i * 4 * MiB + (((i * 7) % 5) - 2) * 8 * MiB, GiB),
    );
    const weak = analyzeGaps(noisy).find((f) => f.classification === "persistent_drift");
    expect(weak?.severity).toBe("warning");
    expect(weak?.confidence).toBe(0.608);
    expect(weak?.evidence).toEqual({
      slope_bytes_per_sec: 42529655.9,
      r_squared: 0.6084,
      p_value: 0.002768,
      gap_start_bytes: 1056964608,
      gap_end_bytes: 1119879168,
    });
    expect(weak?.description).toMatch(/grows steadily by about 40\.\d\d MB\/s \(R²=0\.61\)/);
  });

  it("finds fragmentation, clamping allocated-above-reserved samples at zero", () => {
    const events = Array.from({ length: 10 }, (_, i) =>
      gapEvent(i, 8 * GiB, 6 * GiB, i === 0 ? 7 * GiB : 2 * GiB),
    );
    const [found] = analyzeGaps(events);
    expect(found?.classification).toBe("fragmentation_like");
    expect(found?.severity).toBe("critical");
    expect(found?.evidence).toEqual({
      avg_fragmentation_ratio: 0.6,
      max_fragmentation_ratio: 0.6667,
      avg_gap_bytes: 2 * GiB,
      sample_count: 10,
    });
    expect(found?.evidence_timestamp_ns).toBe(BASE_NS + INTERVAL_NS);
    expect(found?.confidence).toBe(1);
  });

  it("needs three usable samples and a gap of 5% of the device", () => {
    expect(analyzeGaps([gapEvent(0, 8 * GiB, GiB), gapEvent(1, 9 * GiB, GiB)])).toEqual([]);
    const small = Array.from({ length: 30 }, (_, i) => gapEvent(i, GiB + (i === 5 ? 0.7 * GiB : 0), GiB));
    expect(analyzeGaps(small)).toEqual([]);
    expect(
      analyzeGaps(small, { thresholds: { gapRatioThreshold: 0.01 } }).map((f) => f.classification),
    ).toEqual(["transient_spike"]);
    const noTotal = Array.from({ length: 30 }, (_, i) => ({
      ...gapEvent(i, 8 * GiB, GiB),
      device_total_bytes: null,
    }));
    expect(analyzeGaps(noTotal)).toEqual([]);
    const notSamples = Array.from({ length: 30 }, (_, i) => ({
      ...gapEvent(i, 8 * GiB + i, GiB),
      event_type: "warning",
    }));
    expect(analyzeGaps(notSamples)).toEqual([]);
    expect(() => analyzeGaps([], { thresholds: { gapSpikeZscore: Number.NaN } })).toThrow(/gapSpikeZscore/);
    expect(DEFAULT_GAP_THRESHOLDS.gapDriftRSquared).toBe(0.6);
  });

  it("keeps the classifier order between findings of equal severity and confidence", () => {
    // A fragmented allocator (critical, confidence 1) and one spike (critical, confidence 1).
    const events = Array.from({ length: 40 }, (_, i) =>
      gapEvent(i, 6 * GiB + (i === 30 ? 1.5 * GiB : 0), 5 * GiB, 2 * GiB),
    );
    const findings = analyzeGaps(events);
    expect(findings.map((f) => [f.classification, f.severity, f.confidence])).toEqual([
      ["transient_spike", "critical", 1],
      ["fragmentation_like", "critical", 1],
    ]);
  });

  it("serialises evidence floats as Python does", () => {
    const events = Array.from({ length: 30 }, (_, i) =>
      gapEvent(i, 4 * GiB + (i === 17 ? 3 * GiB : 0), 3 * GiB),
    );
    const [spike] = analyzeGaps(events) as [GapFinding];
    const json = stringifyJson(spike.evidence as unknown as JsonObject);
    expect(json).toBe(
      '{"spike_count": 1, "max_gap_bytes": 4294967296.0, "max_zscore": 5.295, "mean_gap_bytes": 1181116006.4, "std_gap_bytes": 588112617.9}',
    );
  });
});
