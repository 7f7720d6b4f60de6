/**
 * TEST ORACLE: the distributed diagnostics over events, as the reference TUI's
 * `build_distributed_model` computes them record by record. The package computes them from the
 * dataset only (`src/diagnostics.ts`: `buildDistributedDiagnostics` turns events into the dataset
 * first, `diagnoseTelemetry` reads the indexed one); this version checks both on golden and
 * generated jobs.
 *
 * Readings are the samples and, merged in by time, the phase records whose counters were read at
 * the boundary (`metadata.phase_counters: "boundary_read"`). Anomaly candidates: alert events,
 * readings whose |gap| / device total reaches 5 %, hidden-memory gap findings, collective
 * attributions when given, and phases the analysis report judges leaking.
 */
import type { TelemetryEvent } from "@stormlog/core";
import {
  counterValue,
  type ExactCounterField,
  exactQuotient,
  isSampleEventType,
} from "@stormlog/core/internal";
import { PhaseReplayIndex, type PhaseResolver, summarizePhaseAttribution } from "@stormlog/phases";
import type { SessionInfo } from "@stormlog/sink";
import {
  type AnomalyIndicator,
  type CollectiveAttributionLike,
  DIAGNOSTICS_GAP_RATIO_THRESHOLD,
  type DiagnoseTelemetryOptions,
  type DiagnosticsAnomaly,
  type DiagnosticsOptions,
  type DiagnosticsSeverity,
  type DistributedDiagnostics,
  loadDistributedEvents,
  parseRankFilter,
  type RankDiagnosticsRow,
  type RankTimeline,
  summarizePhaseAttributionPayload,
} from "../../src/analyses/diagnostics.js";
import { isBoundaryReading, LeakAnomalies } from "../../src/analyses/diagnostics-phases.js";
import { analyzeGaps, type GapFinding } from "../../src/analyses/gap.js";
import { TimeRangeError } from "../../src/errors.js";
import { DatasetLoader, planDataset } from "../../src/input/dataset.js";
import { aggregateEvents } from "../../src/input/scan.js";
import { inMemorySegment, type SessionSelection } from "../../src/input/sessions.js";

const SEVERITY_ORDER: Readonly<Record<string, number>> = { info: 1, warning: 2, critical: 3 };
// A Map, as the reference's dict: an event type named like an Object.prototype member is no alert.
const ALERT_SEVERITY: ReadonlyMap<string, DiagnosticsSeverity> = new Map([
  ["warning", "warning"],
  ["critical", "critical"],
  ["error", "critical"],
]);

function hasAllocatorCounters(event: TelemetryEvent): boolean {
  return (
    event.allocator_allocated_bytes !== null &&
    event.allocator_reserved_bytes !== null &&
    event.device_used_bytes !== null
  );
}

/**
 * A reading's counter as the reference holds it: a Python int, exact past 2^53 for samples (the
 * dataset keeps no exact values of phase records, whose readings are ours, not the reference's).
 */
function counter(event: TelemetryEvent, field: ExactCounterField): number | bigint | null {
  return isSampleEventType(event.event_type, "strip-lower") ? counterValue(event, field) : event[field];
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** Python's int, when the value is an integer (null for a float with a fraction). */
function pythonInt(value: number | bigint): bigint | null {
  if (typeof value === "bigint") return value;
  return Number.isInteger(value) ? BigInt(value) : null;
}

/** An integer result as the diagnostics give it: a bigint only past 2^53. */
function integerResult(value: bigint): number | bigint {
  return value < -MAX_SAFE || value > MAX_SAFE ? value : Number(value);
}

/**
 * Python's `b - a`, exact with an exact int past 2^53 (a bigint); doubles otherwise, which below
 * 2^53 are exact too (past it, a phase record's nearest doubles are all there is).
 */
function minus(b: number | bigint, a: number | bigint): number | bigint {
  if (typeof a === "number" && typeof b === "number") return b - a;
  const x = pythonInt(a);
  const y = pythonInt(b);
  return x === null || y === null ? Number(b) - Number(a) : integerResult(y - x);
}

/** Python's `abs(value)`. */
function absolute(value: number | bigint): number | bigint {
  if (typeof value === "number") return Math.abs(value);
  return integerResult(value < 0n ? -value : value);
}

/** Python's `a / b`: with an exact int past 2^53, the exact quotient rounded once. */
function divide(a: number | bigint, b: number | bigint): number {
  if (typeof a === "number" && typeof b === "number") return a / b;
  const x = pythonInt(a);
  const y = pythonInt(b);
  return x === null || y === null ? Number(a) / Number(b) : exactQuotient(x, y);
}

function delta(first: number | bigint | null, last: number | bigint | null): number | bigint | null {
  return first !== null && last !== null ? minus(last, first) : null;
}

/** `device_used - allocator_reserved` of a reading, null without both. */
function gapOf(event: TelemetryEvent): number | bigint | null {
  const used = counter(event, "device_used_bytes");
  const reserved = counter(event, "allocator_reserved_bytes");
  return used === null || reserved === null ? null : minus(used, reserved);
}

function phaseOf(resolver: PhaseResolver | null, event: TelemetryEvent): string | null {
  if (resolver === null) return null;
  return summarizePhaseAttribution(resolver.resolveForEvent(event));
}

/** A sample's phase, or a boundary reading's by its time alone (the index keeps no hints of phase records). */
function readingPhase(resolver: PhaseResolver | null, event: TelemetryEvent): string | null {
  if (resolver === null || isSampleEventType(event.event_type, "strip-lower"))
    return phaseOf(resolver, event);
  const { session_id, timestamp_ns, rank, event_type } = event;
  return summarizePhaseAttribution(
    resolver.resolveForEvent({ session_id, timestamp_ns, rank, event_type, metadata: {} }),
  );
}

/** Python's `f"{ratio:.1%}"`. */
function percent(ratio: number): string {
  return `${(ratio * 100).toFixed(1)}%`;
}

/** The later of two instants (bigints, which `Math.max` does not take). */
function later(a: bigint, b: bigint): bigint {
  if (a > b) return a;
  return b;
}

function collectiveSeverity(confidence: number): DiagnosticsSeverity {
  if (confidence >= 0.8) return "critical";
  if (confidence >= 0.6) return "warning";
  return "info";
}

function round3(value: number): number {
  return Math.round(value * 1000) / 1000;
}

/** An alert event as an anomaly candidate. */
function alertAnomaly(
  rank: number,
  severity: DiagnosticsSeverity,
  timestampNs: bigint,
  eventType: string,
  context: string | null,
  phasePath: string | null,
): DiagnosticsAnomaly {
  return {
    rank,
    severity,
    timestamp_ns: timestampNs,
    signal: `alert:${eventType}`,
    details: context || "Alert event",
    confidence: null,
    reason_codes: [],
    phase_path: phasePath,
  };
}

/** A reading whose hidden gap is over DIAGNOSTICS_GAP_RATIO_THRESHOLD of the device. */
function gapBreachAnomaly(
  rank: number,
  timestampNs: bigint,
  ratio: number,
  phasePath: string | null,
): DiagnosticsAnomaly {
  return {
    rank,
    severity: "warning",
    timestamp_ns: timestampNs,
    signal: "gap_ratio_breach",
    details: `gap ratio ${percent(ratio)} exceeded threshold`,
    confidence: null,
    reason_codes: [],
    phase_path: phasePath,
  };
}

/** A hidden-memory finding; Python's `evidence_timestamp_ns or fallback`: 0 falls back too. */
function gapFindingAnomaly(rank: number, finding: GapFinding, fallbackNs: bigint): DiagnosticsAnomaly {
  const evidenceNs = finding.evidence_timestamp_ns;
  return {
    rank,
    severity: finding.severity,
    timestamp_ns: evidenceNs !== null && evidenceNs !== 0n ? evidenceNs : fallbackNs,
    signal: `gap:${finding.classification}`,
    details: finding.description,
    confidence: null,
    reason_codes: [],
    phase_path: summarizePhaseAttributionPayload(finding.phase_attribution),
  };
}

function rankCandidates(
  rank: number,
  rankEvents: readonly TelemetryEvent[],
  rankSamples: readonly TelemetryEvent[],
  rankReadings: readonly TelemetryEvent[],
  collective: readonly CollectiveAttributionLike[],
  resolver: PhaseResolver | null,
): DiagnosticsAnomaly[] {
  const candidates: DiagnosticsAnomaly[] = [];
  for (const event of rankEvents) {
    const severity = ALERT_SEVERITY.get(event.event_type);
    if (severity === undefined) continue;
    candidates.push(
      alertAnomaly(
        rank,
        severity,
        event.timestamp_ns,
        event.event_type,
        event.context,
        phaseOf(resolver, event),
      ),
    );
  }

  let firstBreachNs: bigint | null = null;
  for (const event of rankReadings) {
    const total = counter(event, "device_total_bytes");
    const gap = gapOf(event);
    if (!total || total <= 0 || gap === null) continue;
    const ratio = divide(absolute(gap), total);
    if (ratio < DIAGNOSTICS_GAP_RATIO_THRESHOLD) continue;
    firstBreachNs ??= event.timestamp_ns;
    candidates.push(gapBreachAnomaly(rank, event.timestamp_ns, ratio, readingPhase(resolver, event)));
  }

  const firstNs = (rankSamples[0] ?? rankEvents[0])!.timestamp_ns;
  const findings = analyzeGaps(rankEvents.filter(hasAllocatorCounters), { phaseResolver: resolver });
  for (const finding of findings) candidates.push(gapFindingAnomaly(rank, finding, firstBreachNs ?? firstNs));

  collectiveCandidates(candidates, rank, collective, firstNs);
  return candidates;
}

function collectiveCandidates(
  candidates: DiagnosticsAnomaly[],
  rank: number,
  collective: readonly CollectiveAttributionLike[],
  firstNs: bigint,
): void {
  for (const attribution of collective) {
    const confidence = round3(attribution.confidence);
    const reasons = [...new Set(attribution.reason_codes)].sort();
    const reasonSummary = reasons.length > 0 ? reasons.join(", ") : "no reason codes";
    candidates.push({
      rank,
      severity: collectiveSeverity(confidence),
      timestamp_ns: later(attribution.interval_start_ns, firstNs),
      signal: `collective:${attribution.classification}`,
      details:
        "Communication-attributed hidden-memory spike " +
        `(confidence ${confidence.toFixed(2)}; reasons: ${reasonSummary}).`,
      confidence,
      reason_codes: reasons,
      phase_path: summarizePhaseAttributionPayload(attribution.phase_attribution),
    });
  }
}

/** The first candidate with the smallest key (Python's `min`, which keeps the first of equals). */
function minBy<T>(items: readonly T[], compare: (a: T, b: T) => number): T | undefined {
  let best: T | undefined;
  for (const item of items) if (best === undefined || compare(item, best) < 0) best = item;
  return best;
}

function byTime(a: DiagnosticsAnomaly, b: DiagnosticsAnomaly): number {
  return a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0;
}

function indicator(kind: AnomalyIndicator["kind"], candidate: DiagnosticsAnomaly): AnomalyIndicator {
  return {
    kind,
    rank: candidate.rank,
    severity: candidate.severity,
    timestamp_ns: candidate.timestamp_ns,
    signal: candidate.signal,
    details: candidate.phase_path
      ? `${candidate.details} Phase: ${candidate.phase_path}.`
      : candidate.details,
    confidence: candidate.confidence,
    reason_codes: [...candidate.reason_codes],
    phase_path: candidate.phase_path,
  };
}

/** `earliest` then `most_severe`, or none. */
function indicatorsOf(anomalies: readonly DiagnosticsAnomaly[]): AnomalyIndicator[] {
  const earliest = minBy(anomalies, byTime);
  const mostSevere = minBy(
    anomalies,
    (a, b) => (SEVERITY_ORDER[b.severity] ?? 0) - (SEVERITY_ORDER[a.severity] ?? 0) || byTime(a, b),
  );
  if (earliest === undefined || mostSevere === undefined) return [];
  return [indicator("earliest", earliest), indicator("most_severe", mostSevere)];
}

function timeline(readings: readonly TelemetryEvent[]): RankTimeline {
  const complete = readings.filter(hasAllocatorCounters);
  if (complete.length > 0) {
    return {
      timestamps_ns: complete.map((event) => event.timestamp_ns),
      allocated: complete.map((event) => event.allocator_allocated_bytes!),
      reserved: complete.map((event) => event.allocator_reserved_bytes!),
      gap: complete.map((event) => event.device_used_bytes! - event.allocator_reserved_bytes!),
    };
  }
  const device = readings.filter((event) => event.device_used_bytes !== null);
  return {
    timestamps_ns: device.map((event) => event.timestamp_ns),
    device_used: device.map((event) => event.device_used_bytes!),
  };
}

/**
 * `buildDistributedDiagnostics`, event by event: the Diagnostics view of a job's events (all ranks
 * of one session, or a merged rank group), as the reference TUI's `build_distributed_model`:
 * expected ranks are those present plus `0 .. max(world_size) - 1`; each present rank gets its
 * deltas, hidden gap and first anomaly; the indicators name the earliest and the most severe
 * anomaly (critical > warning > info, then time).
 */
export function buildDiagnosticsFromEvents(
  events: readonly TelemetryEvent[],
  options: DiagnosticsOptions = {},
): DistributedDiagnostics {
  if (events.length === 0) {
    return {
      rows: [],
      indicators: [],
      expected_ranks: [],
      present_ranks: [],
      missing_ranks: [],
      per_rank_timelines: new Map(),
      warnings: ["No telemetry events loaded."],
      anomalies: [],
    };
  }
  const resolver =
    options.phaseResolver === undefined ? PhaseReplayIndex.fromEvents(events) : options.phaseResolver;
  const sorted = [...events].sort((a, b) =>
    a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0,
  );
  const grouped = new Map<number, TelemetryEvent[]>();
  const samples = new Map<number, TelemetryEvent[]>();
  // Samples and boundary readings, in time order.
  const readings = new Map<number, TelemetryEvent[]>();
  const worldSizes = new Set<number>();
  const push = (map: Map<number, TelemetryEvent[]>, event: TelemetryEvent): void => {
    const list = map.get(event.rank);
    if (list === undefined) map.set(event.rank, [event]);
    else list.push(event);
  };
  for (const event of sorted) {
    push(grouped, event);
    if (isSampleEventType(event.event_type, "strip-lower")) {
      push(samples, event);
      push(readings, event);
    } else if (isBoundaryReading(event)) push(readings, event);
    if (event.world_size > 0) worldSizes.add(event.world_size);
  }
  const presentAll = [...grouped.keys()].sort((a, b) => a - b);
  const expectedWorldSize = worldSizes.size > 0 ? Math.max(...worldSizes) : presentAll.length;
  const expectedSet = new Set(presentAll);
  for (let rank = 0; rank < expectedWorldSize; rank++) expectedSet.add(rank);
  const expectedAll = [...expectedSet].sort((a, b) => a - b);

  const warnings: string[] = [];
  if (worldSizes.size > 1) {
    warnings.push("Inconsistent world_size values detected; using max observed world_size.");
  }
  let anyAllocator = false;
  for (const list of samples.values()) {
    if (
      list.some(
        (event) => event.allocator_allocated_bytes !== null && event.allocator_reserved_bytes !== null,
      )
    ) {
      anyAllocator = true;
      break;
    }
  }
  if (samples.size > 0 && !anyAllocator) {
    warnings.push("Allocator-native diagnostics are unavailable; showing device memory usage only.");
  }

  const selected = options.selectedRanks ?? null;
  const keep = (rank: number) => selected === null || selected.has(rank);
  const expected = expectedAll.filter(keep);
  const present = presentAll.filter(keep);
  const presentSet = new Set(present);
  const missing = expected.filter((rank) => !presentSet.has(rank));

  const collectiveByRank = new Map<number, CollectiveAttributionLike[]>();
  for (const attribution of options.collectiveAttributions ?? []) {
    let list = collectiveByRank.get(attribution.rank);
    if (list === undefined) {
      list = [];
      collectiveByRank.set(attribution.rank, list);
    }
    list.push(attribution);
  }

  // The leak verdicts of the diagnosed ranks, as the analysis report reaches them.
  const leaks = leakAnomaliesOfEvents(events.filter((event) => presentSet.has(event.rank)));

  const rows: RankDiagnosticsRow[] = [];
  const anomalies: DiagnosticsAnomaly[] = [];
  const timelines = new Map<number, RankTimeline>();
  for (const rank of expected) {
    const rankEvents = grouped.get(rank) ?? [];
    if (rankEvents.length === 0) {
      rows.push(missingRow(rank));
      continue;
    }
    const rankSamples = samples.get(rank) ?? [];
    const rankReadings = readings.get(rank) ?? [];
    const first = rankReadings[0];
    const last = rankReadings[rankReadings.length - 1];
    let gapLatest: number | bigint | null = null;
    let gapPeak: number | bigint | null = null;
    for (const event of rankReadings) {
      const gap = gapOf(event);
      if (gap === null) continue;
      gapLatest = gap;
      if (gapPeak === null || absolute(gap) > gapPeak) gapPeak = absolute(gap);
    }
    const candidates = rankCandidates(
      rank,
      rankEvents,
      rankSamples,
      rankReadings,
      collectiveByRank.get(rank) ?? [],
      resolver,
    );
    for (const leak of leaks.get(rank) ?? []) candidates.push(leak);
    const earliest = minBy(candidates, byTime);
    rows.push({
      rank,
      availability: "present",
      samples: rankSamples.length,
      boundary_readings: rankReadings.length - rankSamples.length,
      allocated_delta_bytes:
        first && last
          ? delta(counter(first, "allocator_allocated_bytes"), counter(last, "allocator_allocated_bytes"))
          : null,
      reserved_delta_bytes:
        first && last
          ? delta(counter(first, "allocator_reserved_bytes"), counter(last, "allocator_reserved_bytes"))
          : null,
      device_used_delta_bytes:
        first && last ? delta(counter(first, "device_used_bytes"), counter(last, "device_used_bytes")) : null,
      hidden_gap_latest_bytes: gapLatest,
      hidden_gap_peak_abs_bytes: gapPeak,
      has_anomaly: candidates.length > 0,
      first_anomaly_timestamp_ns: earliest?.timestamp_ns ?? null,
      first_anomaly_signal: earliest?.signal ?? null,
      first_anomaly_phase_path: earliest?.phase_path ?? null,
    });
    for (const candidate of candidates) anomalies.push(candidate);
    if (options.includeTimelines) timelines.set(rank, timeline(rankReadings));
  }

  const indicators = indicatorsOf(anomalies);
  return {
    rows,
    indicators,
    expected_ranks: expected,
    present_ranks: present,
    missing_ranks: missing,
    per_rank_timelines: timelines,
    warnings,
    anomalies,
  };
}

/**
 * The leak anomalies of events in memory (the diagnosed ranks' events): each session's rank becomes
 * the series `analyzeEvents` makes of it. A rank whose records span more than the columns' time
 * range (`TimeRangeError`) leaves them out, as the events then cannot be indexed either.
 */
function leakAnomaliesOfEvents(events: readonly TelemetryEvent[]): Map<number, DiagnosticsAnomaly[]> {
  const leaks = new LeakAnomalies();
  if (events.length === 0) return new Map();
  try {
    const segment = inMemorySegment("<events>", null, aggregateEvents(events));
    const plan = planDataset([segment], [...new Set(events.map((event) => event.session_id))]);
    const loader = new DatasetLoader(plan);
    for (const { series } of plan.ranks)
      for (const seriesPlan of series) leaks.addSeries(loader.load(seriesPlan));
  } catch (error) {
    if (error instanceof TimeRangeError) return new Map();
    throw error;
  }
  return leaks.finish();
}

function missingRow(rank: number): RankDiagnosticsRow {
  return {
    rank,
    availability: "missing",
    samples: 0,
    boundary_readings: 0,
    allocated_delta_bytes: null,
    reserved_delta_bytes: null,
    device_used_delta_bytes: null,
    hidden_gap_latest_bytes: null,
    hidden_gap_peak_abs_bytes: null,
    has_anomaly: false,
    first_anomaly_timestamp_ns: null,
    first_anomaly_signal: null,
    first_anomaly_phase_path: null,
  };
}

/**
 * What `stormlog diagnose` computes, record by record: the view's events loaded
 * (`loadDistributedEvents`), the rank filter over the ranks present and those below the largest
 * world size, then the oracle.
 */
export async function diagnoseFromEvents(
  path: string,
  options: DiagnoseTelemetryOptions = {},
): Promise<{
  selection: SessionSelection;
  sessions: SessionInfo[];
  diagnostics: DistributedDiagnostics;
  firstTimestampNs: bigint | null;
}> {
  const { selection, sessions, events } = await loadDistributedEvents(
    path,
    options.sessionId === undefined ? {} : { sessionId: options.sessionId },
  );
  let selectedRanks: Set<number> | null = null;
  if (options.ranks !== undefined) {
    const available = new Set<number>();
    let worldSize = 0;
    for (const event of events) {
      available.add(event.rank);
      if (event.world_size > worldSize) worldSize = event.world_size;
    }
    for (let rank = 0; rank < worldSize; rank++) available.add(rank);
    selectedRanks = parseRankFilter(options.ranks, available);
  }
  const diagnostics = buildDiagnosticsFromEvents(events, {
    selectedRanks,
    ...(options.includeTimelines ? { includeTimelines: true } : {}),
  });
  return { selection, sessions, diagnostics, firstTimestampNs: events[0]?.timestamp_ns ?? null };
}
