/**
 * Distributed diagnostics: the Python reference TUI's Diagnostics tab as data
 * (`stormlog/tui/distributed_diagnostics.py::build_distributed_model`): per rank its availability,
 * samples, allocator change, hidden gap and first anomaly, and the two first-cause indicators
 * (`earliest`, `most_severe`). Anomaly candidates are the reference's: alert events
 * (`alert:<type>`), samples whose |gap| / device total reaches 5 % (`gap_ratio_breach`), hidden-memory
 * gap findings (`gap:<class>`), when given, collective-communication attributions
 * (`collective:<class>`), and phases the analysis report judges leaking (`leak:<phase path>`).
 *
 * Readings are the samples and, merged in by time, the phase records whose counters were read at
 * the boundary (`metadata.phase_counters: "boundary_read"`, see `diagnostics-phases.ts`): a leak that
 * shows only at phase boundaries shows in the deltas, the hidden gap and the timeline. Without such
 * records (the Python Stormlog's phase records repeat the last sample) the readings are the samples,
 * as in the reference.
 */
import {
  InvalidConfigError,
  type JsonObject,
  type JsonValue,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import {
  type ExactCounterField,
  type ExactCounters,
  exactQuotient,
  isSampleEventType,
} from "@stormlog/core/internal";
import {
  type PhaseAttributionPayload,
  type PhaseEventLike,
  type PhaseReplayIndex,
  type PhaseResolver,
  summarizePhaseAttribution,
  summarizePhaseResolution,
} from "@stormlog/phases";
import { loadTelemetrySessions, type ReadOptions, type SessionInfo } from "@stormlog/sink";
import { type ResolvedTelemetryInput, resolveTelemetryInput } from "@stormlog/sink/internal";
import { SegmentIndex, segmentIndexOptions } from "../index/index-cache.js";
import { readStoredObject } from "../index/report-cache.js";
import { INDEX_DIRNAME } from "../index/stored-results.js";
import {
  type DatasetPlan,
  exactAt,
  loadRanks,
  type MergedRank,
  mergeRankSeries,
  originAt,
  planDataset,
  type RankSeries,
  sampleTimeAsNumber,
  seriesForRule,
} from "../input/dataset.js";
import { aggregateEvents } from "../input/scan.js";
import {
  chooseView,
  findRankGroups,
  inMemorySegment,
  inputSessions,
  loadedListings,
  type RankGroupSession,
  rankGroupSession,
  type SegmentData,
  type SessionListing,
  type SessionSelection,
  selectSession,
  sessionInfo,
} from "../input/sessions.js";
import { type InputLocation, snapshotInput } from "../input/snapshot.js";
import { segmentWarnings } from "../report/report.js";
import type { IndexUsage } from "../report/types.js";
import { scratchDoubles } from "../scratch.js";
import { PACKAGE_VERSION } from "../version.js";
import { LeakAnomalies, type ReadingColumns, readingColumns } from "./diagnostics-phases.js";
import { analyzeGapColumns, type GapFinding } from "./gap.js";
import { sampleRecord } from "./gap-accumulator.js";
import { buildPhaseIndex } from "./phase-stats.js";

/** The largest world_size whose ranks diagnostics list one by one (2^20; larger jobs do not exist yet). */
const MAX_LISTED_WORLD_SIZE = 1 << 20;

/** A sample whose |device used - allocator reserved| / device total reaches this is a gap anomaly. */
export const DIAGNOSTICS_GAP_RATIO_THRESHOLD = 0.05;

/** Severity of an anomaly, in increasing order. */
export type DiagnosticsSeverity = "info" | "warning" | "critical";

const SEVERITY_ORDER: Readonly<Record<string, number>> = { info: 1, warning: 2, critical: 3 };
const ALERT_SEVERITY: Readonly<Record<string, DiagnosticsSeverity>> = {
  warning: "warning",
  critical: "critical",
  error: "critical",
};

/** One rank's line of the diagnostics table (`RankDiagnosticsRow`). */
export interface RankDiagnosticsRow {
  rank: number;
  /** `missing` for a rank below the job's world size that wrote nothing. */
  availability: "present" | "missing";
  samples: number;
  /** Phase records with counters read at the boundary, counted among the readings besides the samples. */
  boundary_readings: number;
  /**
   * Last minus first reading (null without readings or without the counter). Like the gap values,
   * computed with the exact integers of counters past 2^53, as the reference does: a `bigint` only
   * when the result itself is past 2^53.
   */
  allocated_delta_bytes: number | bigint | null;
  reserved_delta_bytes: number | bigint | null;
  device_used_delta_bytes: number | bigint | null;
  /** `device_used - allocator_reserved` of the rank's last reading that has both. */
  hidden_gap_latest_bytes: number | bigint | null;
  /** Largest |gap| over the rank's readings. */
  hidden_gap_peak_abs_bytes: number | bigint | null;
  has_anomaly: boolean;
  first_anomaly_timestamp_ns: bigint | null;
  first_anomaly_signal: string | null;
  first_anomaly_phase_path: string | null;
}

/** A first-cause indicator (`AnomalyIndicator`): the earliest anomaly, or the most severe one. */
export interface AnomalyIndicator extends DiagnosticsAnomaly {
  kind: "earliest" | "most_severe";
}

/** Per-rank series for plotting (only with `includeTimelines`; counters past 2^53 as their nearest doubles). */
export interface RankTimeline {
  timestamps_ns: bigint[];
  allocated?: number[];
  reserved?: number[];
  gap?: number[];
  /** Instead of the allocator series, when no sample has allocator counters. */
  device_used?: number[];
}

/** The Diagnostics view (`DistributedDiagnosticsModel`). */
export interface DistributedDiagnostics {
  rows: RankDiagnosticsRow[];
  /** Empty when nothing was found; else `earliest` then `most_severe`. */
  indicators: AnomalyIndicator[];
  expected_ranks: number[];
  present_ranks: number[];
  missing_ranks: number[];
  /** Keyed by rank; empty unless `includeTimelines`. */
  per_rank_timelines: Map<number, RankTimeline>;
  warnings: string[];
  /** Every anomaly candidate, rank by rank, in the reference's order (for `--format json`). */
  anomalies: DiagnosticsAnomaly[];
}

/** One anomaly candidate. */
export interface DiagnosticsAnomaly {
  rank: number;
  severity: DiagnosticsSeverity;
  timestamp_ns: bigint;
  /** `alert:<type>`, `gap_ratio_breach`, `gap:<class>`, `collective:<class>` or `leak:<phase path>`. */
  signal: string;
  details: string;
  confidence: number | null;
  reason_codes: string[];
  phase_path: string | null;
}

/**
 * A collective-communication attribution (the reference's `CollectiveAttributionResult`), for
 * callers that compute them; the diagnostics use the fields below.
 */
export interface CollectiveAttributionLike {
  readonly rank: number;
  readonly interval_start_ns: bigint;
  readonly classification: string;
  readonly confidence: number;
  readonly reason_codes: readonly string[];
  readonly phase_attribution?: PhaseAttributionPayload | null;
}

/** Options of `buildDistributedDiagnostics`. */
export interface DiagnosticsOptions {
  /** Phase attribution of anomalies. Default: a `PhaseReplayIndex` built from the events; `null` disables it. */
  readonly phaseResolver?: PhaseResolver | null;
  /** Only these ranks (the TUI's rank filter). Default: all. */
  readonly selectedRanks?: ReadonlySet<number> | null;
  /** Collective attributions of the same events, when available (they add `collective:<class>` anomalies). */
  readonly collectiveAttributions?: readonly CollectiveAttributionLike[];
  /** Fill `per_rank_timelines` (default false: it holds every sample). */
  readonly includeTimelines?: boolean;
}

/** An exact integer result: a `bigint` only past 2^53. */
function integerResult(value: bigint): number | bigint {
  return value >= -MAX_SAFE && value <= MAX_SAFE ? Number(value) : value;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A counter of a reading: the exact integer of its sample's counter past 2^53, else the column's value; null for NaN. */
function counterAt(
  column: number,
  exact: ExactCounters | undefined,
  field: ExactCounterField,
): number | bigint | null {
  if (Number.isNaN(column)) return null;
  return exact?.[field] ?? column;
}

/** A double that holds an integer as a bigint (null for a fraction: Python mixes int and float as floats). */
function asInteger(value: number | bigint): bigint | null {
  if (typeof value === "bigint") return value;
  return Number.isInteger(value) ? BigInt(value) : null;
}

/** `b - a` as Python computes it: exactly when one is an integer past 2^53 and the other an integer. */
function minus(b: number | bigint, a: number | bigint): number | bigint {
  if (typeof a === "number" && typeof b === "number") return b - a;
  const x = asInteger(a);
  const y = asInteger(b);
  return x === null || y === null ? Number(b) - Number(a) : integerResult(y - x);
}

function delta(first: number | bigint | null, last: number | bigint | null): number | bigint | null {
  return first !== null && last !== null ? minus(last, first) : null;
}

function magnitude(value: number | bigint): number | bigint {
  if (typeof value === "number") return Math.abs(value);
  return value < 0n ? -value : value;
}

/** `abs(gap) / total` as Python computes it: the exact quotient of integers, rounded once. */
function gapRatio(gap: number | bigint, total: number | bigint): number {
  if (typeof gap === "number" && typeof total === "number") return Math.abs(gap) / total;
  const x = asInteger(gap);
  const y = asInteger(total);
  if (x === null || y === null) return Math.abs(Number(gap)) / Number(total);
  return exactQuotient(x < 0n ? -x : x, y);
}

/** One line for a phase attribution payload (`summarize_phase_attribution` on the payload form). */
export function summarizePhaseAttributionPayload(
  payload: PhaseAttributionPayload | null | undefined,
): string | null {
  if (!payload) return null;
  if (payload.phase_summary !== undefined) {
    const { phase_path: path, source } = payload.phase_summary;
    return source === "heuristic" ? `(likely) ${path}` : path;
  }
  return summarizePhaseResolution(payload.phase_resolution, payload.phase_path ?? null, payload.phase_paths);
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

/** The view when there is nothing to diagnose. */
function noEvents(): DistributedDiagnostics {
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

/** Events as a dataset of their own (storage order: array order), every session a member. */
function datasetOfEvents(source: string, events: readonly TelemetryEvent[]): DatasetPlan {
  const aggregate = aggregateEvents(events);
  return planDataset([inMemorySegment(source, null, aggregate)], [...aggregate.sessions.keys()]);
}

/**
 * Builds the Diagnostics view of a job's events (all ranks of one session, or a merged rank
 * group), as the reference TUI's `build_distributed_model`: expected ranks are those present plus
 * `0 .. max(world_size) - 1`; each present rank gets its deltas, hidden gap and first anomaly; the
 * indicators name the earliest and the most severe anomaly (critical > warning > info, then time).
 * The events become the dataset the diagnostics read (as `diagnoseTelemetry` reads a sink's); a
 * phase resolver sees each record's time, session, rank, type and phase attribution hints. A rank
 * whose records span 2^53 ns or more throws `TimeRangeError`, as `analyzeEvents` does.
 */
export function buildDistributedDiagnostics(
  events: readonly TelemetryEvent[],
  options: DiagnosticsOptions = {},
): DistributedDiagnostics {
  if (events.length === 0) return noEvents();
  const selected = options.selectedRanks ?? null;
  return diagnoseDataset(datasetOfEvents("<events>", events), {
    selectRanks: selected === null ? null : () => selected,
    includeTimelines: options.includeTimelines === true,
    collectiveAttributions: options.collectiveAttributions ?? [],
    phaseResolver: options.phaseResolver,
  }).diagnostics;
}

/**
 * True when the diagnostics found a memory risk: any warning or critical anomaly (alerts, gap
 * breaches, gap findings, confident collective attributions). `stormlog diagnose` exits 2 then.
 */
export function diagnosticsFoundRisk(diagnostics: DistributedDiagnostics): boolean {
  return diagnostics.anomalies.some((anomaly) => anomaly.severity !== "info");
}

/**
 * The rank groups of the input (per-rank sessions of one job, merged views that can be selected by
 * id), as the reference TUI's `load_distributed_artifacts` finds them: the sessions with events that
 * share a non-null `job_id` and a `world_size > 1`, at least two distinct ranks, at most
 * `world_size`; when a rank has several sessions (a restarted process) the first in session order
 * is kept and the others are `skipped`. `sessions` in the reference's order (as the reader lists them).
 * With `concurrent`, also the sessions without a job id whose ranks ran at the same time. Each
 * session is taken as its summary's rank (the reference's rule): the analyses, which know the ranks
 * each session's records carry, group by those (`listTelemetrySessions` lists their groups).
 */
export function findDistributedRankGroups(
  sessions: readonly SessionInfo[],
  options: { readonly concurrent?: boolean } = {},
): RankGroupSession[] {
  const listings = listingsOf(sessions);
  return findRankGroups(listings, options.concurrent === true ? listings : []).map(rankGroupSession);
}

/**
 * Chooses the view, as the reference TUI does, each session taken as its summary's rank: `sessionId`
 * (a session's or a rank group's id; unknown ids throw `SessionNotFoundError`), else the rank group
 * whose best member comes first (see `findDistributedRankGroups`), else the first session with events.
 * The analyses, knowing each session's records' ranks, choose by those (`chooseView`).
 */
export function selectDistributedSession(
  sessions: readonly SessionInfo[],
  sessionId?: string,
  source = "the input",
): SessionSelection {
  const byReference = listingsOf(sessions);
  return selectSession(byReference, findRankGroups(byReference), sessionId, source);
}

function listingsOf(sessions: readonly SessionInfo[]): SessionListing[] {
  return sessions.map((session) => ({ ...session, ranks: [session.summary.rank] }));
}

/** Options of `loadDistributedEvents`. */
export interface LoadDistributedOptions extends ReadOptions {
  /** A session's or a rank group's id (see `selectDistributedSession`). */
  readonly sessionId?: string;
}

function compareEventTime(a: TelemetryEvent, b: TelemetryEvent): number {
  return a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0;
}

/**
 * Reads the events of the view `selectDistributedSession` chooses, sorted by `timestamp_ns`
 * (stable; members in rank order). One pass over the input; memory grows with it (every session's
 * events are held until the view is chosen).
 */
export async function loadDistributedEvents(
  path: string,
  options: LoadDistributedOptions = {},
): Promise<{ selection: SessionSelection; sessions: SessionInfo[]; events: TelemetryEvent[] }> {
  const { sessionId, ...readOptions } = options;
  const loaded = await loadTelemetrySessions(path, readOptions);
  const listings = loadedListings(loaded);
  const selection = chooseView(listings, sessionId, path);
  const byId = new Map(loaded.map((session) => [session.summary.session_id, session.events]));
  const lists = selection.memberSessionIds.map((id) => byId.get(id) ?? []);
  byId.clear();
  loaded.length = 0;
  // Each session is already sorted: one list needs nothing, several are runs that sort merges cheaply.
  const events = lists.length === 1 ? lists[0]! : lists.flat().sort(compareEventTime);
  return { selection, sessions: listings.map(sessionInfo), events };
}

/**
 * The TUI's rank filter (`parse_rank_filter`): `all`, `*` or empty selects every available rank;
 * otherwise a comma-separated list of ranks and inclusive ranges (`0,2,4-7`), kept to the
 * available ones. Throws `InvalidConfigError` for a malformed token.
 */
export function parseRankFilter(expression: string, availableRanks: Iterable<number>): Set<number> {
  const available = new Set(availableRanks);
  if (available.size === 0) return new Set();
  const text = (expression ?? "").trim().toLowerCase();
  if (text === "" || text === "all" || text === "*") return available;
  const selected = new Set<number>();
  const integer = (token: string, chunk: string): number => {
    if (!/^\s*[+-]?\d+\s*$/.test(token)) {
      throw new InvalidConfigError(
        "ranks",
        `invalid rank ${JSON.stringify(chunk)}: use ranks and ranges like 0,2,4-7`,
      );
    }
    return Number.parseInt(token, 10);
  };
  for (const token of text.split(",")) {
    const chunk = token.trim();
    if (chunk === "") continue;
    const dash = chunk.indexOf("-", 1);
    if (dash > 0) {
      const start = integer(chunk.slice(0, dash), chunk);
      const end = integer(chunk.slice(dash + 1), chunk);
      if (start > end) {
        throw new InvalidConfigError("ranks", `invalid rank range (start>end): ${JSON.stringify(chunk)}`);
      }
      for (const rank of available) if (rank >= start && rank <= end) selected.add(rank);
    } else {
      const rank = integer(chunk, chunk);
      if (available.has(rank)) selected.add(rank);
    }
  }
  return selected;
}

/** Options of `diagnoseTelemetry`. */
export interface DiagnoseTelemetryOptions {
  /** A session's or a rank group's id (see `selectDistributedSession`). */
  readonly sessionId?: string;
  /** A rank filter (`parseRankFilter`) over the ranks present and those below the largest world size. */
  readonly ranks?: string;
  /** Fill `per_rank_timelines` (default false: it holds every sample). */
  readonly includeTimelines?: boolean;
  /** Use and maintain the index beside the sink, as `analyzeTelemetry` does (default true). */
  readonly index?: boolean;
  /** Where indexes go when the input's location is not writable (see `AnalyzeOptions.cacheDir`). */
  readonly cacheDir?: string;
  /** Told about progress while segments are scanned. */
  readonly onProgress?: (progress: { phase: string; done: number; total: number }) => void;
}

/** What `diagnoseTelemetry` found. */
export interface DiagnoseTelemetryResult {
  selection: SessionSelection;
  /** Every session of the input, in the reference's order. */
  sessions: SessionInfo[];
  diagnostics: DistributedDiagnostics;
  /** The view's earliest event (null when it has none). */
  firstTimestampNs: bigint | null;
  /** How the index was used (null for JSON documents, which are read whole). */
  index: IndexUsage | null;
}

/**
 * `loadDistributedEvents` + `buildDistributedDiagnostics` (with `selectedRanks` from `ranks`), in one
 * pass over the indexed dataset: one rank's samples (typed columns) in memory at a time, the index
 * built or reused as `analyzeTelemetry` does, and the finished result stored in it, so that an
 * unchanged sink is diagnosed again without reading it. A JSON document is read whole.
 */
export async function diagnoseTelemetry(
  path: string,
  options: DiagnoseTelemetryOptions = {},
): Promise<DiagnoseTelemetryResult> {
  const { location, reused } = SegmentIndex.locateReusable(path, segmentIndexOptions(options));
  return (await diagnoseLocated(path, options, location, reused)).result;
}

/** Options of `renderTelemetryDiagnosis`. */
export interface RenderDiagnosisOptions<T extends JsonValue> extends DiagnoseTelemetryOptions {
  /** Names the rendering (what it shows, in which version): renderings are stored under it. */
  readonly renderKey: string;
  /** What is returned and stored for a result: JSON (a text, an exit code...). */
  readonly render: (result: DiagnoseTelemetryResult) => T;
}

/**
 * `render(diagnoseTelemetry(path))`. The rendering of a result that was itself read from the index
 * is stored there too, under `renderKey`, so that the next rendering of the unchanged input reads
 * it instead of the result (`stormlog diagnose` keeps its table and exit code this way).
 */
export async function renderTelemetryDiagnosis<T extends JsonValue>(
  path: string,
  options: RenderDiagnosisOptions<T>,
): Promise<T> {
  const view = JSON.stringify([
    "diagnose-render",
    PACKAGE_VERSION,
    options.renderKey,
    options.sessionId ?? null,
    options.ranks ?? null,
    options.includeTimelines === true,
    path,
  ]);
  const { location, reused } = SegmentIndex.locateReusable(path, segmentIndexOptions(options));
  const quick = reused?.readRendering(view) ?? null;
  if (quick !== null) return JSON.parse(quick) as T;
  const { result, index } = await diagnoseLocated(path, options, location, reused);
  const rendered = options.render(result);
  await index?.writeRendering(view, JSON.stringify(rendered), result.index);
  return rendered;
}

/** The result, and the index it came from or went to (null for a JSON document). */
async function diagnoseLocated(
  path: string,
  options: DiagnoseTelemetryOptions,
  location: InputLocation | null,
  reused: SegmentIndex | null,
): Promise<{ result: DiagnoseTelemetryResult; index: SegmentIndex | null }> {
  const indexOptions = segmentIndexOptions(options);
  const view = JSON.stringify(["diagnose", options.sessionId ?? null, options.ranks ?? null, path]);
  const cacheable = options.includeTimelines !== true;
  const readStored = (index: SegmentIndex): DiagnoseTelemetryResult | null => {
    const text = cacheable ? index.readStored(view) : null;
    const stored = text === null ? null : deserializeDiagnose(text, index.stamp(view));
    return stored === null ? null : { ...stored, index: index.reusedUsage() };
  };
  const quick = reused === null ? null : readStored(reused);
  if (quick !== null) return { result: quick, index: reused };
  // Fingerprinted before it is resolved, so that a change made meanwhile shows next time.
  const snapshot = location === null || !indexOptions.index ? null : snapshotInput(location, INDEX_DIRNAME);
  // What the input's resolution and the segments' reading left out or distrusted (a link out of the
  // input, an unusable manifest, a segment shorter than its manifest says) leads the warnings.
  const notRead: string[] = [];
  const input = await resolveTelemetryInput(path, (message) => notRead.push(message));
  const warned = (found: Diagnosed): Diagnosed =>
    notRead.length === 0
      ? found
      : {
          ...found,
          diagnostics: { ...found.diagnostics, warnings: [...notRead, ...found.diagnostics.warnings] },
        };
  if (input.kind === "json")
    return { result: { ...warned(await diagnoseEvents(path, options)), index: null }, index: null };
  const index = await SegmentIndex.open(input, {
    ...indexOptions,
    ...(location !== null && snapshot !== null ? { location, snapshot } : {}),
  });
  try {
    const stored = readStored(index);
    if (stored !== null) {
      index.storeSnapshot();
      return { result: stored, index };
    }
    const { segments, usage } = await index.loadSegments();
    notRead.push(...segmentWarnings(input, segments));
    const result = warned(diagnoseSegments(input, segments, path, options));
    if (cacheable) await index.writeStored(view, serializeDiagnose(result, index.stamp(view)), usage);
    return { result: { ...result, index: usage }, index };
  } finally {
    index.dispose();
  }
}

type Diagnosed = Omit<DiagnoseTelemetryResult, "index">;

/** A JSON document (read whole): the view's events become a dataset of their own. */
async function diagnoseEvents(path: string, options: DiagnoseTelemetryOptions): Promise<Diagnosed> {
  const { selection, sessions, events } = await loadDistributedEvents(
    path,
    options.sessionId === undefined ? {} : { sessionId: options.sessionId },
  );
  if (events.length === 0) return { selection, sessions, diagnostics: noEvents(), firstTimestampNs: null };
  return { selection, sessions, ...diagnoseDataset(datasetOfEvents(path, events), datasetOptions(options)) };
}

/** The column version's options for `diagnoseTelemetry`'s. */
function datasetOptions(options: DiagnoseTelemetryOptions): DatasetDiagnosisOptions {
  const ranks = options.ranks;
  return {
    selectRanks: ranks === undefined ? null : (available) => parseRankFilter(ranks, available),
    includeTimelines: options.includeTimelines === true,
    collectiveAttributions: [],
    phaseResolver: undefined,
  };
}

/** The indexed version: the selected view's dataset. */
function diagnoseSegments(
  input: ResolvedTelemetryInput,
  segments: readonly SegmentData[],
  path: string,
  options: DiagnoseTelemetryOptions,
): Diagnosed {
  const listings = inputSessions(input, segments);
  const sessions = listings.map(sessionInfo);
  const selection = chooseView(listings, options.sessionId, path);
  const plan = planDataset(segments, selection.memberSessionIds);
  return { selection, sessions, ...diagnoseDataset(plan, datasetOptions(options)) };
}

/** What the column version takes besides the dataset. */
interface DatasetDiagnosisOptions {
  /** The ranks to diagnose among those there may be (present, or below the largest world size); null: all. */
  readonly selectRanks: ((available: ReadonlySet<number>) => ReadonlySet<number>) | null;
  readonly includeTimelines: boolean;
  readonly collectiveAttributions: readonly CollectiveAttributionLike[];
  /** As `DiagnosticsOptions.phaseResolver`: undefined resolves by each session's own phases. */
  readonly phaseResolver: PhaseResolver | null | undefined;
}

/**
 * The diagnostics of a planned dataset (the plan's sessions), one rank in memory at a time: a rank's
 * sessions merged in time order, as the events sort, samples to the reference's `strip().lower()` rule.
 */
function diagnoseDataset(
  plan: DatasetPlan,
  options: DatasetDiagnosisOptions,
): { diagnostics: DistributedDiagnostics; firstTimestampNs: bigint | null } {
  if (plan.eventCount === 0) return { diagnostics: noEvents(), firstTimestampNs: null };
  // World sizes, allocator counters and the first event, from the digests of the plan's sessions.
  const members = new Set<string>();
  for (const { series } of plan.ranks) for (const seriesPlan of series) members.add(seriesPlan.sessionId);
  const worldSizes = new Set<number>();
  let mixed = false;
  let anyAllocator = false;
  let firstTimestampNs: bigint | null = null;
  for (const segment of plan.segments) {
    for (const session of segment.digest.sessions) {
      if (!members.has(session.sessionId)) continue;
      const first = session.first?.timestamp_ns;
      if (first !== undefined && (firstTimestampNs === null || first < firstTimestampNs))
        firstTimestampNs = first;
      for (const rank of session.ranks) {
        if (rank.worldSizeMax > 0) worldSizes.add(rank.worldSizeMax);
        if (rank.worldSizeMixed) mixed = true;
        if (rank.allocatorSamples) anyAllocator = true;
      }
    }
  }
  let samples = 0;
  for (const [type, count] of plan.eventTypes) if (isSampleEventType(type, "strip-lower")) samples += count;
  const presentAll = plan.ranks.map((rank) => rank.rank);
  const warnings: string[] = [];
  // Every rank below world_size gets a row: a size no job has (a damaged record) is left out rather
  // than listing (or failing to list) a billion missing ranks.
  const beyond = [...worldSizes].filter((size) => size > MAX_LISTED_WORLD_SIZE);
  for (const size of beyond) {
    worldSizes.delete(size);
    warnings.push(
      `world_size ${size} left out: beyond the ${MAX_LISTED_WORLD_SIZE} ranks diagnostics list; check the records' world_size.`,
    );
  }
  let maxWorld = 0;
  for (const size of worldSizes) maxWorld = Math.max(maxWorld, size);
  const expectedWorldSize = worldSizes.size > 0 ? maxWorld : presentAll.length;
  const expectedSet = new Set(presentAll);
  for (let rank = 0; rank < expectedWorldSize; rank++) expectedSet.add(rank);
  const expectedAll = [...expectedSet].sort((a, b) => a - b);
  if (mixed || worldSizes.size > 1) {
    warnings.push("Inconsistent world_size values detected; using max observed world_size.");
  }
  if (samples > 0 && !anyAllocator) {
    warnings.push("Allocator-native diagnostics are unavailable; showing device memory usage only.");
  }
  let selected: ReadonlySet<number> | null = null;
  if (options.selectRanks !== null) {
    const available = new Set(presentAll);
    for (let rank = 0; rank < maxWorld; rank++) available.add(rank);
    selected = options.selectRanks(available);
  }
  const keep = (rank: number) => selected === null || selected.has(rank);
  const expected = expectedAll.filter(keep);
  const present = presentAll.filter(keep);
  const presentSet = new Set(present);
  const missing = expected.filter((rank) => !presentSet.has(rank));
  const collectiveByRank = new Map<number, CollectiveAttributionLike[]>();
  for (const attribution of options.collectiveAttributions) {
    const list = collectiveByRank.get(attribution.rank);
    if (list === undefined) collectiveByRank.set(attribution.rank, [attribution]);
    else list.push(attribution);
  }

  const rows: RankDiagnosticsRow[] = [];
  const perRank: { row: RankDiagnosticsRow; candidates: DiagnosticsAnomaly[] }[] = [];
  const leaks = new LeakAnomalies();
  const timelines = new Map<number, RankTimeline>();
  for (const { rank, series: sessionSeries } of loadRanks(plan, expected)) {
    if (sessionSeries.length === 0) {
      rows.push(missingRow(rank));
      continue;
    }
    // Each session of the rank (by id): the leak verdicts read them one by one, as the report does.
    const indexes = sessionSeries.map((series) => buildPhaseIndex(series));
    sessionSeries.forEach((series, j) => {
      leaks.addSeries(series, indexes[j]!);
    });
    const merged = mergeRankSeries(sessionSeries.map((series) => seriesForRule(series, "strip-lower")));
    const resolver =
      options.phaseResolver === undefined ? sessionsResolver(sessionSeries, indexes) : options.phaseResolver;
    const readings = readingColumns(merged);
    const entry = rankFromColumns(merged, readings, resolver, collectiveByRank.get(rank) ?? []);
    rows.push(entry.row);
    perRank.push(entry);
    if (options.includeTimelines) timelines.set(rank, timelineOfColumns(merged, readings));
  }
  // Leak verdicts need every rank: their anomalies join each rank's candidates at the end.
  const leakAnomalies = leaks.finish();
  const anomalies: DiagnosticsAnomaly[] = [];
  for (const { row, candidates } of perRank) {
    const rankLeaks = leakAnomalies.get(row.rank) ?? [];
    for (const leak of rankLeaks) candidates.push(leak);
    if (rankLeaks.length > 0) {
      const earliest = minBy(candidates, byTime)!;
      row.has_anomaly = true;
      row.first_anomaly_timestamp_ns = earliest.timestamp_ns;
      row.first_anomaly_signal = earliest.signal;
      row.first_anomaly_phase_path = earliest.phase_path;
    }
    for (const candidate of candidates) anomalies.push(candidate);
  }
  return {
    diagnostics: {
      rows,
      indicators: indicatorsOf(anomalies),
      expected_ranks: expected,
      present_ranks: present,
      missing_ranks: missing,
      per_rank_timelines: timelines,
      warnings,
      anomalies,
    },
    firstTimestampNs,
  };
}

/** Each session's phases for its own records (with one session, its index). */
function sessionsResolver(
  sessions: readonly RankSeries[],
  indexes: readonly (PhaseReplayIndex | null)[],
): PhaseResolver | null {
  if (sessions.length === 1) return indexes[0] ?? null;
  const bySession = new Map<string, PhaseReplayIndex>();
  sessions.forEach((series, j) => {
    const index = indexes[j];
    if (index) bySession.set(series.sessionId, index);
  });
  if (bySession.size === 0) return null;
  const of = (sessionId: unknown): PhaseReplayIndex | undefined =>
    typeof sessionId === "string" ? bySession.get(sessionId) : undefined;
  return {
    resolve: (timestampNs, sessionId, rank, originThreadId, originPhaseScopeId) =>
      of(sessionId)?.resolve(timestampNs, sessionId, rank, originThreadId, originPhaseScopeId) ?? null,
    resolveForEvent: (event) => of(event.session_id)?.resolveForEvent(event) ?? null,
  };
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
 * One present rank's row and anomaly candidates (but for its leak anomalies, which come once every
 * rank is in). `merged` holds its sessions' samples (to the diagnostics' rule) in time order;
 * `readings` merges its boundary readings in.
 */
function rankFromColumns(
  merged: MergedRank,
  readings: ReadingColumns,
  resolver: PhaseResolver | null,
  collective: readonly CollectiveAttributionLike[],
): { row: RankDiagnosticsRow; candidates: DiagnosticsAnomaly[] } {
  const { rank, parts, count: n, allocated } = merged;
  const { count: m, used, reserved, total } = readings;
  const sessionOf = (part: number): string => parts[part]!.sessionId;
  // Sample `i`'s series (its session) and its index there.
  const seriesOf = (i: number): RankSeries => parts[merged.samplePart?.[i] ?? 0]!;
  const indexIn = (i: number): number => merged.sampleIndex?.[i] ?? i;
  // Sample `i` as its session's record (time, session, identity, phase attribution hints).
  const record = (i: number): TelemetryEvent => sampleRecord(seriesOf(i), indexIn(i));
  const phaseOf = (event: PhaseEventLike): string | null =>
    resolver === null ? null : summarizePhaseAttribution(resolver.resolveForEvent(event));
  const anyExact = parts.some((series) => series.exact !== null);
  const exactOf = (i: number): ExactCounters | undefined =>
    anyExact ? exactAt(seriesOf(i), indexIn(i)) : undefined;
  // The exact counters of reading `i` that is sample `sample` (boundary readings have none).
  const exactOfReading = (i: number, sample: number): ExactCounters | undefined =>
    (readings.boundary?.[i] ?? -1) < 0 ? exactOf(sample) : undefined;
  /** Reading `i`'s hidden gap (null without both counters). */
  const gapAt = (i: number, exact: ExactCounters | undefined): number | bigint | null => {
    if (exact === undefined) {
      const gap = used[i]! - reserved[i]!;
      return Number.isNaN(gap) ? null : gap;
    }
    const deviceUsed = counterAt(used[i]!, exact, "device_used_bytes");
    const allocatorReserved = counterAt(reserved[i]!, exact, "allocator_reserved_bytes");
    return deviceUsed === null || allocatorReserved === null ? null : minus(deviceUsed, allocatorReserved);
  };
  let gapLatest: number | bigint | null = null;
  let gapPeak: number | bigint | null = null;
  for (let i = 0, sample = -1; i < m; i++) {
    if ((readings.boundary?.[i] ?? -1) < 0) sample++;
    const gap = gapAt(i, exactOfReading(i, sample));
    if (gap === null) continue;
    gapLatest = gap;
    const size = magnitude(gap);
    if (gapPeak === null || size > gapPeak) gapPeak = size;
  }
  const candidates: DiagnosticsAnomaly[] = [];
  for (const { alert, part } of merged.alerts) {
    const severity = ALERT_SEVERITY[alert.eventType];
    if (severity === undefined) continue;
    const phase = phaseOf({
      session_id: sessionOf(part),
      timestamp_ns: alert.timestampNs,
      rank,
      event_type: alert.eventType,
      metadata: alert.origin ?? {},
    });
    candidates.push(alertAnomaly(rank, severity, alert.timestampNs, alert.eventType, alert.context, phase));
  }
  let firstBreachNs: bigint | null = null;
  // Index of the sample reading `i` is (samples and boundary readings interleave).
  let sample = -1;
  for (let i = 0; i < m; i++) {
    const boundary = readings.boundary?.[i] ?? -1;
    if (boundary < 0) sample++;
    const deviceTotal = total[i]!;
    if (!(deviceTotal > 0)) continue;
    const exact = boundary < 0 ? exactOf(sample) : undefined;
    const gap = gapAt(i, exact);
    if (gap === null) continue;
    const ratio = gapRatio(gap, counterAt(deviceTotal, exact, "device_total_bytes")!);
    if (ratio < DIAGNOSTICS_GAP_RATIO_THRESHOLD) continue;
    const timestampNs = readingTimestamp(merged, readings, i);
    firstBreachNs ??= timestampNs;
    // A sample with its phase hints; a boundary reading by its time alone.
    const phase =
      boundary < 0
        ? phaseOf({
            session_id: seriesOf(sample).sessionId,
            timestamp_ns: timestampNs,
            rank,
            event_type: "sample",
            metadata: originAt(seriesOf(sample), indexIn(sample)) ?? {},
          })
        : phaseOf({
            session_id: sessionOf(merged.boundaryPart?.[boundary] ?? 0),
            timestamp_ns: timestampNs,
            rank,
            event_type: merged.boundaries[boundary]!.eventType,
            metadata: {},
          });
    candidates.push(gapBreachAnomaly(rank, timestampNs, ratio, phase));
  }
  const firstNs = n > 0 ? merged.base + BigInt(merged.t[0]!) : merged.minTs!;
  // The reference reads the gap from samples with all three allocator counters: the others lose their total.
  const maskedTotal = scratchDoubles("diagnostics.maskedTotal", n);
  for (let i = 0; i < n; i++) maskedTotal[i] = Number.isNaN(allocated[i]!) ? Number.NaN : merged.total[i]!;
  const findings = analyzeGapColumns(
    {
      count: n,
      used: merged.used,
      reserved: merged.reserved,
      allocated,
      total: maskedTotal,
      timeOf: sampleTimeAsNumber(merged),
      event: record,
      ...(anyExact ? { exactCounters: exactOf } : {}),
    },
    { phaseResolver: resolver },
  );
  for (const finding of findings) candidates.push(gapFindingAnomaly(rank, finding, firstBreachNs ?? firstNs));
  collectiveCandidates(candidates, rank, collective, firstNs);
  const earliest = minBy(candidates, byTime);
  const last = m - 1;
  // The first reading, when a sample, is sample 0; the last one sample n - 1.
  const firstExact = m > 0 ? exactOfReading(0, 0) : undefined;
  const lastExact = m > 0 ? exactOfReading(last, n - 1) : undefined;
  const change = (column: Float64Array, field: ExactCounterField): number | bigint | null =>
    m > 0
      ? delta(counterAt(column[0]!, firstExact, field), counterAt(column[last]!, lastExact, field))
      : null;
  const row: RankDiagnosticsRow = {
    rank,
    availability: "present",
    samples: n,
    boundary_readings: readings.boundaryReadings,
    allocated_delta_bytes: change(readings.allocated, "allocator_allocated_bytes"),
    reserved_delta_bytes: change(reserved, "allocator_reserved_bytes"),
    device_used_delta_bytes: change(used, "device_used_bytes"),
    hidden_gap_latest_bytes: gapLatest,
    hidden_gap_peak_abs_bytes: gapPeak,
    has_anomaly: candidates.length > 0,
    first_anomaly_timestamp_ns: earliest?.timestamp_ns ?? null,
    first_anomaly_signal: earliest?.signal ?? null,
    first_anomaly_phase_path: earliest?.phase_path ?? null,
  };
  return { row, candidates };
}

/** The exact timestamp of reading `i`. */
function readingTimestamp(merged: MergedRank, readings: ReadingColumns, i: number): bigint {
  return merged.base + BigInt(readings.t[i]!);
}

function timelineOfColumns(merged: MergedRank, readings: ReadingColumns): RankTimeline {
  const { count: n, used, reserved, allocated } = readings;
  const complete: number[] = [];
  const device: number[] = [];
  for (let i = 0; i < n; i++) {
    if (Number.isNaN(used[i]!)) continue;
    device.push(i);
    if (!Number.isNaN(allocated[i]!) && !Number.isNaN(reserved[i]!)) complete.push(i);
  }
  if (complete.length > 0) {
    return {
      timestamps_ns: complete.map((i) => readingTimestamp(merged, readings, i)),
      allocated: complete.map((i) => allocated[i]!),
      reserved: complete.map((i) => reserved[i]!),
      gap: complete.map((i) => used[i]! - reserved[i]!),
    };
  }
  return {
    timestamps_ns: device.map((i) => readingTimestamp(merged, readings, i)),
    device_used: device.map((i) => used[i]!),
  };
}

/** Versioned: results stored by an earlier version (before exact integers past 2^53, or the one selection type) are not read. */
const DIAGNOSE_FORMAT = "stormlog.diagnose_result.v4";

function serializeDiagnose(result: Diagnosed, stamp: string): string {
  const { per_rank_timelines: _timelines, ...diagnostics } = result.diagnostics;
  return stringifyJson({
    format: DIAGNOSE_FORMAT,
    stamp,
    result: { ...result, diagnostics } as unknown as JsonObject,
  });
}

/**
 * Integers under time keys back to bigints. Elsewhere a bigint was one (an exact result past 2^53):
 * `stringifyJson` writes a double past 2^53 as a float, which reads back as a number.
 */
function reviveTimes(value: JsonValue, time: boolean): JsonValue {
  if (typeof value === "number") return time && Number.isInteger(value) ? BigInt(value) : value;
  if (typeof value === "bigint") return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = reviveTimes(value[i]!, time);
    return value;
  }
  if (typeof value === "object" && value !== null) {
    for (const key of Object.keys(value))
      value[key] = reviveTimes(value[key]!, key.endsWith("_ns") || key.endsWith("Ns"));
  }
  return value;
}

function deserializeDiagnose(text: string, stamp: string): Diagnosed | null {
  const result = readStoredObject(text, DIAGNOSE_FORMAT, stamp, "result");
  if (result === null) return null;
  const out = reviveTimes(result, false) as unknown as Diagnosed;
  out.diagnostics.per_rank_timelines = new Map();
  return out;
}
