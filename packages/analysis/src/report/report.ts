/**
 * `analyzeTelemetry(path)`: one streaming scan of a sink (indexed transparently, see
 * `index-cache.ts`) feeds every analysis of the selected session or rank group: summary, phases,
 * leaks, hidden-memory gaps, cross-rank first cause, collector health, alerts and the sink's
 * counters. `analyzeEvents(events)` runs the same analyses on events in memory.
 */
import { join } from "node:path";
import {
  type JsonObject,
  type JsonValue,
  parseJson,
  type SessionSummary,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { loadTelemetrySessions } from "@stormlog/sink";
import {
  type ResolvedTelemetryInput,
  readRegularFile,
  removedWhileRead,
  resolveTelemetryInput,
  segmentShortfall,
} from "@stormlog/sink/internal";
import { type RankAnalysis, type RankData, rankData } from "../analyses/analysis.js";
import { CrossRankAccumulator } from "../analyses/cross-rank.js";
import { GapAccumulator } from "../analyses/gap-accumulator.js";
import { IN_THREAD_JUDGE, type LeakJudge, leakJudgeFor } from "../analyses/leak-judges.js";
import { LeakAccumulator } from "../analyses/leaks.js";
import { PhaseAccumulator } from "../analyses/phase-stats.js";
import { AlertsAccumulator, HealthAccumulator, SummaryAccumulator } from "../analyses/summary.js";
import { TimeRangeError } from "../errors.js";
import { SegmentIndex, segmentIndexOptions } from "../index/index-cache.js";
import { INDEX_DIRNAME, renderingView } from "../index/stored-results.js";
import type { SegmentAggregate } from "../input/aggregate.js";
import { type DatasetPlan, loadRanks, planDataset } from "../input/dataset.js";
import { aggregateEvents } from "../input/scan.js";
import {
  chooseView,
  inMemorySegment,
  inputSessions,
  listSessions,
  type SegmentData,
  type SessionListing,
  type SessionSelection,
} from "../input/sessions.js";
import { type InputLocation, snapshotInput } from "../input/snapshot.js";
import { formatReportText } from "./text.js";
import type {
  AnalysisReport,
  IndexUsage,
  ReportInput,
  ReportSession,
  SinkCounters,
  SinkDirectoryReport,
  SinkReport,
} from "./types.js";

/** Progress of a long analysis (bytes scanned, for a progress bar on a terminal). */
export interface AnalyzeProgress {
  /** `scan` while reading segments, `analyze` once. */
  phase: string;
  done: number;
  total: number;
}

/** Options of `analyzeTelemetry`. */
export interface AnalyzeOptions {
  /** A session's id, or a rank group's synthetic id (default: a rank group if any, else the reader's default). */
  sessionId?: string;
  /** Use and maintain the index beside the sink (default true). */
  index?: boolean;
  /**
   * Where indexes go when the input's location is not writable (default `STORMLOG_CACHE_DIR`, else
   * `$XDG_CACHE_HOME/stormlog` or `~/.cache/stormlog`). Given explicitly, it is used for every input.
   */
  cacheDir?: string;
  /** Told about progress while segments are scanned. */
  onProgress?: (progress: AnalyzeProgress) => void;
}

/** Context of `analyzeEvents`. */
export interface AnalyzeEventsContext {
  /** Reported as the selected session (default: the events' session when there is one). */
  sessionId?: string;
  /** Reported as discovered sessions (default: the events' sessions). */
  discoveredSessionIds?: string[];
  /** Reported as the input path. */
  path?: string;
}

interface ReportParts {
  input: ReportInput;
  sessions: readonly SessionListing[];
  selection: SessionSelection;
  segments: readonly SegmentData[];
  sink: SinkReport;
  index: IndexUsage | null;
  notes: string[];
  /** Shown each rank as the analyses read it (exporters that write the dataset in the same pass). */
  visitor?: RankVisitor;
}

/**
 * What an exporter sees of an analysis while it runs (`analyzeTelemetryRanks`, internal): the
 * selection and its segments once, then each rank as the analyses read it (valid until the next).
 */
export interface RankVisitor {
  begin?(context: { readonly selection: SessionSelection; readonly segments: readonly SegmentData[] }): void;
  rank(data: RankData): void;
}

function sessionSection(sessions: readonly SessionListing[], selection: SessionSelection): ReportSession {
  const summary: SessionSummary | null = selection.summary;
  const section: ReportSession = {
    selected_session_id: selection.sessionId,
    discovered_session_ids: sessions.map((session) => session.summary.session_id),
    status: summary?.status ?? null,
    started_at_ns: summary?.started_at_ns ?? null,
    ended_at_ns: summary?.ended_at_ns ?? null,
    job_id: summary?.job_id ?? null,
    world_size: summary?.world_size ?? 1,
  };
  if (selection.rankGroup !== null) section.merged_session_ids = [...selection.memberSessionIds];
  return section;
}

/**
 * Runs every analysis over the selection, one rank at a time: each rank's sessions are loaded (from
 * memory or the index), fed to the accumulators, and let go before the next rank. Ranks are judged
 * for leaks on this thread.
 */
function analyze(parts: ReportParts): AnalysisReport {
  return runAnalyses(parts, () => IN_THREAD_JUDGE).report();
}

/** `analyze`, with a big selection's ranks judged for leaks on a judge worker meanwhile (`leak-judges.ts`). */
async function analyzeBesideJudge(parts: ReportParts): Promise<AnalysisReport> {
  const run = runAnalyses(parts, (plan) => leakJudgeFor(plan.eventTypes.get("phase_enter") ?? 0));
  await run.leaks.settled();
  return run.report();
}

/** The analyses fed every rank; `report` once the leak accumulator's verdicts are all in. */
function runAnalyses(
  parts: ReportParts,
  judgeFor: (plan: DatasetPlan) => LeakJudge,
): { leaks: LeakAccumulator; report: () => AnalysisReport } {
  const plan = planDataset(parts.segments, parts.selection.memberSessionIds);
  const health = new HealthAccumulator(plan.eventTypes);
  const leaks = new LeakAccumulator(judgeFor(plan));
  // Each section of the report is one analysis over the dataset, fed the same ranks.
  const sections = {
    summary: new SummaryAccumulator(plan.eventTypes, plan.eventCount, health, sinkCounters(parts.sink)),
    phases: new PhaseAccumulator(),
    leaks,
    gap_analysis: new GapAccumulator(),
    cross_rank_analysis: plan.ranks.length > 1 ? new CrossRankAccumulator(plan) : null,
    collector_health: health,
    alerts: new AlertsAccumulator(plan.eventTypes),
  } satisfies Record<string, RankAnalysis<unknown> | null>;
  const analyses = Object.values(sections).filter((analysis) => analysis !== null);
  const visitor = parts.visitor;
  try {
    visitor?.begin?.({ selection: parts.selection, segments: parts.segments });
    for (const loaded of loadRanks(plan)) {
      const data = rankData(loaded);
      for (const analysis of analyses) analysis.addRank(data);
      visitor?.rank(data);
    }
  } catch (error) {
    // The judge's worker goes with the analysis.
    void leaks.settled().catch(() => {});
    throw error;
  }
  const report = (): AnalysisReport => ({
    input: parts.input,
    session: sessionSection(parts.sessions, parts.selection),
    summary: sections.summary.finish(),
    phases: sections.phases.finish(),
    leaks: sections.leaks.finish(),
    gap_analysis: sections.gap_analysis.finish(),
    cross_rank_analysis: sections.cross_rank_analysis?.finish() ?? null,
    collector_health: sections.collector_health.finish(),
    alerts: sections.alerts.finish(),
    sink: parts.sink,
    notes: [...parts.notes, ...parts.selection.notes],
    index: parts.index,
  });
  return { leaks, report };
}

function sinkCounters(sink: SinkReport): SinkCounters {
  return {
    directory_count: sink.directory_count,
    segment_count: sink.segment_count,
    retained_bytes: sink.retained_bytes,
    retained_event_count: sink.retained_event_count,
    missing_segment_count: sink.missing_segment_count,
    pruned_segment_count: sink.pruned_segment_count,
    pruned_bytes: sink.pruned_bytes,
    open_segment_count: sink.open_segment_count,
  };
}

function emptySink(kind: ReportInput["kind"], path: string | null, warnings: string[]): SinkReport {
  return {
    kind,
    path,
    directory_count: 0,
    segment_count: 0,
    retained_bytes: 0,
    retained_event_count: 0,
    missing_segment_count: 0,
    pruned_segment_count: 0,
    pruned_bytes: 0,
    open_segment_count: 0,
    directories: [],
    warnings,
  };
}

function intOf(value: JsonValue | undefined): number {
  return typeof value === "number" && Number.isFinite(value)
    ? value
    : typeof value === "bigint"
      ? Number(value)
      : 0;
}

/** `rollups.json` coverage: the reference's pruning counters, where the sink wrote them. */
async function readRollupsCoverage(dir: string): Promise<{ pruned: number; prunedBytes: number } | null> {
  let text: string;
  try {
    text = await readRegularFile(join(dir, "rollups.json"));
  } catch {
    return null;
  }
  try {
    const payload = parseJson(text);
    if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return null;
    const coverage = payload.coverage;
    if (typeof coverage !== "object" || coverage === null || Array.isArray(coverage)) return null;
    return { pruned: intOf(coverage.pruned_segment_count), prunedBytes: intOf(coverage.pruned_bytes) };
  } catch {
    return null;
  }
}

/**
 * What reading the segments left out, segment by segment: a final line cut short, and a segment
 * shorter than its manifest says (`segments` are the input's, in its reading order).
 */
export function segmentWarnings(input: ResolvedTelemetryInput, segments: readonly SegmentData[]): string[] {
  const warnings: string[] = [];
  const inputSegments = input.parts.flatMap((part) => part.segments);
  segments.forEach((segment, k) => {
    for (const warning of segment.digest.warnings) warnings.push(warning.message);
    const source = inputSegments[k];
    if (source === undefined) return;
    // A segment pruned while the input was read is not one cut short.
    const removed = removedWhileRead(source.path);
    if (segment.digest.warnings.some((warning) => warning.message === removed)) return;
    const shortfall = segmentShortfall(source, segment.digest.eventCount);
    if (shortfall !== null) warnings.push(shortfall);
  });
  return warnings;
}

async function sinkSection(
  input: ResolvedTelemetryInput,
  segments: readonly SegmentData[],
  sizes: readonly number[],
  sessions: readonly SessionListing[],
): Promise<SinkReport> {
  const report = emptySink(input.kind, input.path, segmentWarnings(input, segments));
  let k = 0;
  for (const part of input.parts) {
    const present = new Set(part.segments.map((segment) => segment.path.slice(part.dir.length + 1)));
    let bytes = 0;
    let events = 0;
    for (let i = 0; i < part.segments.length; i++, k++) {
      bytes += sizes[k] ?? 0;
      events += segments[k]?.digest.eventCount ?? 0;
    }
    const listed = part.manifest?.segments ?? [];
    const missing = listed.filter((segment) => !present.has(segment.filename)).length;
    const open = listed.filter((segment) => !segment.closed && present.has(segment.filename)).length;
    const rollups = await readRollupsCoverage(part.dir);
    const sessionIds = new Set(part.manifest?.sessions.map((s) => s.session_id) ?? []);
    for (const session of sessions) {
      if (session.sources.some((source) => source.startsWith(`${part.dir}/`) || source === part.dir))
        sessionIds.add(session.summary.session_id);
    }
    const directory: SinkDirectoryReport = {
      path: part.dir,
      has_manifest: part.manifest !== null,
      has_rollups: rollups !== null,
      session_count: sessionIds.size,
      segment_count: part.segments.length,
      retained_bytes: bytes,
      retained_event_count: events,
      missing_segment_count: missing,
      pruned_segment_count: rollups?.pruned ?? 0,
      pruned_bytes: rollups?.prunedBytes ?? 0,
      open_segment_count: open,
    };
    report.directories.push(directory);
    report.directory_count++;
    report.segment_count += directory.segment_count;
    report.retained_bytes += bytes;
    report.retained_event_count += events;
    report.missing_segment_count += missing;
    report.pruned_segment_count += directory.pruned_segment_count;
    report.pruned_bytes += directory.pruned_bytes;
    report.open_segment_count += open;
  }
  return report;
}

/**
 * Analyses a sink directory, a root of per-rank sink directories, a JSONL segment or a JSON file.
 * Per-rank sessions of one job are merged into one distributed view (selected unless `sessionId`
 * names a single session). The first analysis of a sink builds an index beside it (or in the cache
 * directory); later ones re-read only segments that changed. Throws `TelemetrySourceError` (path
 * missing, not telemetry), `SessionNotFoundError` (unknown `sessionId`) and the decoder's errors for
 * a malformed line.
 */
export async function analyzeTelemetry(path: string, options: AnalyzeOptions = {}): Promise<AnalysisReport> {
  const { location, reused } = SegmentIndex.locateReusable(path, segmentIndexOptions(options));
  return (await analyzeLocated(path, options, location, reused)).report;
}

/** Options of `renderTelemetryAnalysis`. */
export interface RenderAnalysisOptions extends AnalyzeOptions {
  /** `txt`: `formatReportText`; `json`: `reportToJson` with a 2-space indent. */
  format: "txt" | "json";
  /** ANSI colours in `txt` (pass true only when writing to a terminal). */
  color?: boolean;
}

/**
 * `analyzeTelemetry`, rendered as the `stormlog analyze` command prints it (ending with a newline).
 * The rendering the next analysis of the unchanged input would make (of the report as stored, read
 * back) is stored in the index too, so that it reads one file (`readStoredRendering`) instead of
 * parsing and rendering the report.
 */
export async function renderTelemetryAnalysis(path: string, options: RenderAnalysisOptions): Promise<string> {
  const choice = { format: options.format, color: options.color ?? false, sessionId: options.sessionId };
  const { location, reused } = SegmentIndex.locateReusable(path, segmentIndexOptions(options));
  const storedSize = reused?.storedSizeBytes ?? null;
  const quick =
    reused === null || storedSize === null
      ? null
      : reused.readRendering(renderingView(choice, path, storedSize));
  if (quick !== null) return quick;
  const { report, index } = await analyzeLocated(path, options, location, reused);
  const render = (of: AnalysisReport): string =>
    choice.format === "json"
      ? `${stringifyJson(reportToJson(of), { indent: 2 })}\n`
      : formatReportText(of, { color: choice.color }).replace(/\n?$/, "\n");
  const rendered = render(report);
  // The next run renders the stored report as read back (its index usage "reused"); rendering that
  // same object here keeps the stored text exactly what the next run would print.
  const next =
    report.index?.report_reused === true ? report : (index?.readReport(reportView(options, path)) ?? null);
  if (next !== null && index !== null) {
    next.input.size_bytes = report.input.size_bytes;
    const text = next === report ? rendered : render(next);
    await index.writeRendering(renderingView(choice, path, report.input.size_bytes), text, next.index);
  }
  return rendered;
}

/** What a stored report depends on besides the files: the session asked for, the path as given (it names it). */
const reportView = (options: AnalyzeOptions, path: string): string =>
  JSON.stringify([options.sessionId ?? null, path]);

/** The report, and the index it came from or went to (null for a JSON document). */
async function analyzeLocated(
  path: string,
  options: AnalyzeOptions,
  location: InputLocation | null,
  reused: SegmentIndex | null,
): Promise<{ report: AnalysisReport; index: SegmentIndex | null }> {
  const view = reportView(options, path);
  const quick = reused?.readReport(view) ?? null;
  if (quick !== null) {
    quick.input.size_bytes = reused!.storedSizeBytes!;
    return { report: quick, index: reused };
  }
  // Fingerprinted before it is resolved, so that a change made meanwhile shows next time.
  const snapshot = location === null ? null : snapshotInput(location, INDEX_DIRNAME);
  const warnings: string[] = [];
  const input = await resolveTelemetryInput(path, (message) => warnings.push(message));
  const inputSize = snapshot?.sizeBytes ?? 0;
  if (input.kind === "json")
    return { report: await analyzeJsonFile(input, options, inputSize, warnings), index: null };
  const index = await SegmentIndex.open(input, {
    ...segmentIndexOptions(options),
    ...(location !== null && snapshot !== null ? { location, snapshot } : {}),
  });
  const stored = index.readReport(view);
  if (stored !== null) {
    stored.input.size_bytes = inputSize;
    index.storeSnapshot();
    return { report: stored, index };
  }
  try {
    return { report: await analyzeIndexed(input, index, options, inputSize, warnings, view), index };
  } finally {
    index.dispose();
  }
}

async function analyzeIndexed(
  input: ResolvedTelemetryInput,
  index: SegmentIndex,
  options: AnalyzeOptions,
  inputSize: number,
  warnings: readonly string[],
  view: string,
  visitor?: RankVisitor,
): Promise<AnalysisReport> {
  // Aggregate files are written while the analysis runs; `settle` then gives the index's usage.
  const { segments, sizes, usage, settle } = await index.loadSegments({ settleLater: true });
  const sessions = inputSessions(input, segments);
  const selection = chooseView(sessions, options.sessionId, input.path);
  const sink = await sinkSection(input, segments, sizes, sessions);
  sink.warnings.unshift(...warnings);
  options.onProgress?.({ phase: "analyze", done: 0, total: 1 });
  const report = await analyzeBesideJudge({
    input: { path: input.path, kind: input.kind, size_bytes: inputSize },
    sessions,
    selection,
    segments,
    sink,
    index: usage,
    notes: [],
    ...(visitor !== undefined ? { visitor } : {}),
  });
  options.onProgress?.({ phase: "analyze", done: 1, total: 1 });
  if (settle !== undefined) report.index = await settle();
  await index.writeReport(view, report);
  return report;
}

async function analyzeJsonFile(
  input: ResolvedTelemetryInput,
  options: AnalyzeOptions,
  size: number,
  warnings: readonly string[],
  visitor?: RankVisitor,
): Promise<AnalysisReport> {
  const loaded = await loadTelemetrySessions(input.path);
  const events: TelemetryEvent[] = [];
  for (const session of loaded) events.push(...session.events);
  let aggregate: SegmentAggregate;
  try {
    aggregate = aggregateEvents(events);
  } catch (error) {
    // Its records were sorted by time: the file is named, not a line.
    throw TimeRangeError.locate(error, input.path);
  }
  const segments: SegmentData[] = [inMemorySegment(input.absolute, null, aggregate)];
  const sessions = listSessions(segments, new Map(), input.defaultSource, input.absolute);
  const selection = chooseView(sessions, options.sessionId, input.path);
  return analyze({
    input: { path: input.path, kind: "json", size_bytes: size },
    sessions,
    selection,
    segments,
    // The resolution's word on the input (an OOM dump folder says what it is).
    sink: emptySink("json", input.path, [...warnings]),
    index: {
      status: "disabled",
      location: null,
      segments_reused: 0,
      segments_scanned: 0,
      segments_dropped: 0,
      report_reused: false,
      reason: "JSON documents are read whole, not indexed",
    },
    notes: [],
    ...(visitor !== undefined ? { visitor } : {}),
  });
}

/**
 * `analyzeTelemetry`'s report, computed afresh (a stored report is not reused), with `visitor` shown
 * the selection and each rank as the analyses read it: exporters write the dataset in the same pass
 * (internal: `@stormlog/analysis/internal`). The index is used and maintained as `analyzeTelemetry` does.
 */
export async function analyzeTelemetryRanks(
  path: string,
  visitor: RankVisitor,
  options: AnalyzeOptions = {},
): Promise<AnalysisReport> {
  const warnings: string[] = [];
  const input = await resolveTelemetryInput(path, (message) => warnings.push(message));
  if (input.kind === "json") return analyzeJsonFile(input, options, 0, warnings, visitor);
  const index = await SegmentIndex.open(input, segmentIndexOptions(options));
  try {
    const view = JSON.stringify([options.sessionId ?? null, path]);
    return await analyzeIndexed(input, index, options, 0, warnings, view, visitor);
  } finally {
    index.dispose();
  }
}

/**
 * Analyses events already in memory, all of them as one view (no session selection or merging:
 * pass the events you want analysed). `context` only names things in the report.
 */
export function analyzeEvents(
  events: readonly TelemetryEvent[],
  context: AnalyzeEventsContext = {},
): AnalysisReport {
  const segments: SegmentData[] = [
    inMemorySegment(context.path ?? "<events>", null, aggregateEvents(events)),
  ];
  const sessions = listSessions(segments, new Map(), "artifact:events", context.path ?? "<events>");
  const memberIds = sessions.map((session) => session.summary.session_id);
  const only = sessions.length === 1 ? sessions[0]! : null;
  const selectedId = context.sessionId ?? only?.summary.session_id ?? null;
  const selection: SessionSelection = {
    sessionId: selectedId,
    summary: sessions.find((session) => session.summary.session_id === selectedId)?.summary ?? null,
    memberSessionIds: memberIds,
    rankGroup: null,
    notes: [],
  };
  const discovered = context.discoveredSessionIds;
  const listed =
    discovered === undefined
      ? sessions
      : sessions.filter((session) => discovered.includes(session.summary.session_id));
  const report = analyze({
    input: { path: context.path ?? null, kind: "events", size_bytes: 0 },
    sessions: listed,
    selection,
    segments,
    sink: emptySink("events", context.path ?? null, []),
    index: null,
    notes: [],
  });
  if (discovered !== undefined) report.session.discovered_session_ids = [...discovered];
  return report;
}

function floats(object: object | null | undefined, keys: readonly string[]): void {
  if (object === null || object === undefined) return;
  for (const key of keys) {
    const value = (object as Record<string, unknown>)[key];
    if (typeof value === "number" && Number.isFinite(value)) markFloat(object as JsonObject, key);
  }
}

/** Replaces NaN and infinities (which JSON cannot hold) by null, in place. */
function finite(value: unknown): void {
  if (Array.isArray(value)) {
    value.forEach((item, i) => {
      if (typeof item === "number" && !Number.isFinite(item)) value[i] = null;
      else finite(item);
    });
  } else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      if (typeof item === "number" && !Number.isFinite(item)) (value as Record<string, unknown>)[key] = null;
      else finite(item);
    }
  }
}

/**
 * The JSON report: `session`, `summary`, `phases`, `leaks`, `gap_analysis`, `cross_rank_analysis`
 * (only with more than one rank), `collector_health`, `alerts`, `sink`, `notes`. Integers stay exact
 * (`bigint` timestamps); write it with core's `stringifyJson`, which also keeps floats as floats.
 */
export function reportToJson(report: AnalysisReport): JsonObject {
  floats(report.summary, ["duration_s"]);
  for (const phase of report.phases) {
    floats(phase.net_allocated_bytes, ["mean", "median"]);
    floats(phase.net_tensors, ["mean", "median"]);
  }
  for (const leak of report.leaks) {
    floats(leak, ["confidence"]);
    for (const evidence of [leak.evidence.bytes, leak.evidence.tensors]) {
      floats(evidence, ["retained_per_occurrence", "level_slope_per_occurrence", "p_rising", "share"]);
    }
  }
  const json: Record<string, unknown> = {
    session: report.session,
    summary: report.summary,
    phases: report.phases,
    leaks: report.leaks,
    gap_analysis: report.gap_analysis,
  };
  if (report.cross_rank_analysis !== null) json.cross_rank_analysis = report.cross_rank_analysis;
  json.collector_health = report.collector_health;
  json.alerts = report.alerts;
  json.sink = report.sink;
  json.notes = report.notes;
  finite(json);
  return json as unknown as JsonObject;
}
