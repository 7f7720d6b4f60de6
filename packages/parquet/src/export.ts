/**
 * `exportParquet(input, outputDir)`: a telemetry path (sink, root of per-rank sinks, JSONL segment,
 * JSON file) as a hive-partitioned Parquet dataset, written from the analysis's own pass over the
 * dataset (`analyzeTelemetryRanks`): each rank's columns are written as the analyses read them and let
 * go before the next rank, so memory holds one rank, whatever the input's size.
 *
 * Layout: `samples/job_id=<job>/rank=<rank>/part-<segment>.parquet` (one part per input segment),
 * `phase_occurrences/job_id=<job>/rank=<rank>/part-0.parquet`, and `<table>/job_id=<job>/part-0.parquet`
 * for the sparse tables (alerts, collector transitions, hidden-memory findings: `rank` a column) and
 * the job's (leak verdicts, sessions). `_stormlog_dataset.json` lists every part with the
 * fingerprint of the input it came from: a re-export rewrites only the parts whose segments changed,
 * keeps the others, and removes parts whose input is gone.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type {
  AnalysisReport,
  AnalyzeOptions,
  LeakReport,
  RankGapFinding,
  SessionSelection,
} from "@stormlog/analysis";
import {
  analyzeTelemetryRanks,
  exactAt,
  ORDER_SEGMENT_SCALE,
  originAt,
  type RankData,
  type RankSeries,
  type SegmentData,
} from "@stormlog/analysis/internal";
import type { JsonValue } from "@stormlog/core";
import { stringifyJson } from "@stormlog/core";
import { nodeCrypto } from "@stormlog/core/internal";
import type { PhaseAttribution, PhaseReplayIndex, PhaseThreadId } from "@stormlog/phases";
import { SinkDirectoryLockedError } from "@stormlog/sink";
import {
  claimSinkDirectory,
  readRegularFileSync,
  WRITER_LOCK_FILENAME,
  type WriterLock,
} from "@stormlog/sink/internal";
import type { EncoderValues } from "./encoder/columns.js";
import { Int64Column, splitBase, TextRuns } from "./encoder/columns.js";
import { ParquetDatasetError } from "./errors.js";
import { type ParquetTableName, parquetTable } from "./schema.js";
import { PACKAGE_VERSION } from "./version.js";
import { TableWriter } from "./write-table.js";

/** The dataset's manifest, at the top of the output directory. */
export const DATASET_MANIFEST = "_stormlog_dataset.json";

/** Version of the layout and the columns; a dataset of another version is rewritten whole. */
export const DATASET_FORMAT_VERSION = 1;

/** A segment modified this recently is not trusted to be unchanged when its size and times are. */
const RECENT_MS = 2000;

/** Hive's directory value for a null partition key (Spark and Trino read it as NULL). */
export const NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__";

/** Options of `exportParquet`. */
export interface ParquetExportOptions {
  /** A session's or a rank group's id (default: the view `analyzeTelemetry` picks). */
  readonly sessionId?: string;
  /** Use and maintain the analysis index beside the sink (default true). */
  readonly index?: boolean;
  /** Where indexes go when the input's location is not writable (see `AnalyzeOptions.cacheDir`). */
  readonly cacheDir?: string;
  /** Told after each rank is written (`done` of `total` ranks). */
  readonly onProgress?: (done: number, total: number) => void;
}

/** Rows and files of one table. */
export interface ParquetTableCount {
  /** Rows written by this export (parts kept from a previous export are not counted). */
  readonly rows: number;
  /** Parts the dataset holds for the table after this export. */
  readonly files: number;
}

/** What `exportParquet` did. */
export interface ParquetExportResult {
  readonly outputDir: string;
  /** The job's id (its partition value), null when the records have none. */
  readonly jobId: string | null;
  readonly selectedSessionId: string | null;
  readonly ranks: number;
  readonly tables: Readonly<Record<ParquetTableName, ParquetTableCount>>;
  /** Parts written, kept unchanged from the previous export, and removed (their input is gone). */
  readonly filesWritten: number;
  readonly filesKept: number;
  readonly filesRemoved: number;
  /** The analysis report the dataset was written beside (its figures are the dataset's). */
  readonly report: AnalysisReport;
}

/** What a dataset holds of one job (by its partition value): the last export of it. */
interface JobEntry {
  job_id: string | null;
  input: string;
  selected_session_id: string | null;
  /** Relative part path to the fingerprint of what it was written from. */
  parts: Record<string, string>;
}

interface DatasetManifest {
  format: "stormlog-parquet";
  version: number;
  generator: string;
  /** By `job_id` partition value: a dataset holds any number of jobs, each replaced by its next export. */
  jobs: Record<string, JobEntry>;
}

/**
 * Longest partition value kept whole: a directory name (`job_id=<value>`) may take 255 bytes on every
 * common file system; the rest is left for the key.
 */
const MAX_PARTITION_VALUE_LENGTH = 200;

/** Hex digits of the SHA-256 that a cut partition value ends with (so that cut values stay apart). */
const PARTITION_HASH_LENGTH = 16;

/** Every character but ASCII letters, digits, `_` and `-` as `%XX` per UTF-8 byte. */
function percentEncode(text: string): string {
  let out = "";
  for (const byte of Buffer.from(text, "utf8")) {
    const ch = String.fromCharCode(byte);
    out += /[\w-]/.test(ch) && byte < 0x80 ? ch : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** `text` as a directory value, however long. */
function wholePartitionValue(text: string): string {
  return /^[\w.-]+$/.test(text) && text !== "." && text !== ".." ? text : percentEncode(text);
}

/** Whether `partitionValue(value)` is cut: the directory then names a prefix and a hash, the manifest the whole value. */
export function isCutPartitionValue(value: string): boolean {
  return wholePartitionValue(value).length > MAX_PARTITION_VALUE_LENGTH;
}

/**
 * A hive partition value: characters other than letters, digits, `_`, `.` and `-` percent-encoded.
 * A value longer than `MAX_PARTITION_VALUE_LENGTH` encoded keeps its first characters and ends with
 * `-` and a hash of the whole (a 300-character job id would make a name past the file system's limit).
 */
export function partitionValue(value: string | number | null): string {
  if (value === null) return NULL_PARTITION;
  const text = String(value);
  const whole = wholePartitionValue(text);
  if (whole.length <= MAX_PARTITION_VALUE_LENGTH) return whole;
  const room = MAX_PARTITION_VALUE_LENGTH - PARTITION_HASH_LENGTH - 1;
  let kept = "";
  // Cut between characters: a cut inside a character's %XX bytes would decode to broken UTF-8.
  for (const char of text) {
    const encoded = percentEncode(char);
    if (kept.length + encoded.length > room) break;
    kept += encoded;
  }
  const hash = nodeCrypto().createHash("sha256").update(text).digest("hex").slice(0, PARTITION_HASH_LENGTH);
  return `${kept}-${hash}`;
}

const int64 = (value: number): bigint | null => (Number.isFinite(value) ? BigInt(Math.trunc(value)) : null);

/** The columns of a table being filled: one array per column. */
class Columns {
  readonly values = new Map<string, EncoderValues>();
  rows = 0;
  constructor(readonly table: ParquetTableName) {}
  set(name: string, values: EncoderValues): void {
    this.values.set(name, values);
  }
}

/** Column arrays for row-by-row tables (the small ones). */
class RowTable {
  private readonly data = new Map<string, unknown[]>();
  rows = 0;
  constructor(readonly table: ParquetTableName) {
    for (const column of parquetTable(table).columns) this.data.set(column.name, []);
  }
  add(row: Readonly<Record<string, bigint | number | string | boolean | null>>): void {
    for (const [name, list] of this.data) list.push(row[name] ?? null);
    this.rows++;
  }
  columns(): Map<string, EncoderValues> {
    return this.data as Map<string, EncoderValues>;
  }
}

function readManifest(dir: string): DatasetManifest | null {
  const path = join(dir, DATASET_MANIFEST);
  if (!existsSync(path)) {
    if (existsSync(dir) && readdirSync(dir).some((name) => name !== WRITER_LOCK_FILENAME))
      throw new ParquetDatasetError(
        `${dir} is not empty and holds no Stormlog Parquet dataset (${DATASET_MANIFEST}); ` +
          "export into an empty or new directory, or into a dataset written before",
        dir,
      );
    return null;
  }
  try {
    const manifest = JSON.parse(readRegularFileSync(path, "utf8-lenient")) as DatasetManifest;
    if (manifest.format === "stormlog-parquet" && manifest.version === DATASET_FORMAT_VERSION)
      return manifest;
  } catch {
    // An unreadable manifest: the dataset is written again whole.
  }
  return null;
}

function scopeOrigin(series: RankSeries, i: number): [PhaseThreadId | null, string | null] {
  const origin = originAt(series, i);
  if (origin === undefined) return [null, null];
  const thread = origin.origin_thread_id;
  const scope = origin.origin_phase_scope_id;
  return [
    typeof thread === "number" || typeof thread === "bigint" ? thread : null,
    typeof scope === "string" ? scope : null,
  ];
}

/** The collector a rank's samples name (that of its peak readings). */
function collectorOf(series: RankSeries): string | null {
  for (const peak of series.peaks) if (peak !== null) return peak.collector;
  return null;
}

type CounterColumn = "allocated" | "reserved" | "used" | "total";
const COUNTERS: readonly [CounterColumn, string][] = [
  ["allocated", "allocator_allocated_bytes"],
  ["reserved", "allocator_reserved_bytes"],
  ["used", "device_used_bytes"],
  ["total", "device_total_bytes"],
];

/**
 * The phase of each sample, resolved by the index as the analyses resolve it, once per stretch of
 * time between two phase boundaries (the set of active phases is the same all along it): samples
 * without attribution hints in one stretch share the answer; a sample at a boundary, or with hints,
 * is resolved on its own.
 */
class SamplePhases {
  /** Span starts and ends, as offsets from the series' base, ascending and distinct. */
  private readonly points: Float64Array;
  private cursor = 0;
  private cachedStretch = -1;
  private cached: PhaseAttribution | null = null;

  constructor(
    private readonly series: RankSeries,
    private readonly index: PhaseReplayIndex,
  ) {
    const times: number[] = [];
    for (const span of index.spansFor(series.sessionId, series.rank)) {
      times.push(Number(span.startNs - series.base), Number(span.endNs - series.base));
    }
    times.sort((a, b) => a - b);
    const points: number[] = [];
    for (const time of times)
      if (points.length === 0 || points[points.length - 1] !== time) points.push(time);
    this.points = Float64Array.from(points);
  }

  /** Sample `i`'s attribution (samples asked in time order). */
  resolve(i: number, thread: PhaseThreadId | null, scope: string | null): PhaseAttribution | null {
    const { series, points } = this;
    const t = series.t[i]!;
    while (this.cursor < points.length && points[this.cursor]! < t) this.cursor++;
    const onPoint = this.cursor < points.length && points[this.cursor] === t;
    const exact = (): PhaseAttribution | null =>
      this.index.resolve(series.base + BigInt(t), series.sessionId, series.rank, thread, scope);
    if (onPoint || thread !== null || scope !== null) return exact();
    // Stretch `cursor`: strictly between points[cursor - 1] and points[cursor].
    if (this.cachedStretch !== this.cursor) {
      this.cached = exact();
      this.cachedStretch = this.cursor;
    }
    return this.cached;
  }
}

/** The samples of one part: indices of each series' samples in it. */
interface SamplePick {
  readonly series: RankSeries;
  /** Ranges of sample indices, `[start, end)` pairs, in time order. */
  readonly ranges: readonly number[];
  /** Samples in the ranges. */
  readonly count: number;
}

function sampleColumns(picks: readonly SamplePick[], data: RankData): Columns {
  let n = 0;
  for (const pick of picks) n += pick.count;
  const out = new Columns("samples");
  const sessionIds = new TextRuns();
  const timestamps = new Int64Column(n);
  const collectors = new TextRuns();
  const devices = new Int32Array(n);
  const hosts = new TextRuns();
  const pids = new Int64Column(n);
  const worldSizes = new Int32Array(n);
  const intervals = new Float64Array(n);
  const phasePaths = new TextRuns();
  const resolutions = new TextRuns();
  const counters = COUNTERS.map(() => new Int64Column(n));
  const tensors = new Int64Column(n);
  let k = 0;
  for (const { series, ranges } of picks) {
    const index = data.phaseIndex(series);
    const phases = index === null ? null : new SamplePhases(series, index);
    const collector = collectorOf(series);
    const { base, t, identities, identity, sessionId } = series;
    const [baseHi, baseLo] = splitBase(base);
    const columns = COUNTERS.map(([key]) => series[key]);
    const tensorValues = series.tensors;
    for (let r = 0; r < ranges.length; r += 2)
      for (let i = ranges[r]!; i < ranges[r + 1]!; i++) {
        timestamps.setOffset(k, baseHi, baseLo, t[i]!);
        sessionIds.push(sessionId);
        collectors.push(collector);
        const who = identities[identity === null ? 0 : identity[i]!];
        if (who !== undefined) {
          devices[k] = who.device_id;
          hosts.push(who.host);
          pids.setNumber(k, who.pid);
          worldSizes[k] = who.world_size;
          intervals[k] = who.sampling_interval_ms;
        } else hosts.push("");
        for (let c = 0; c < COUNTERS.length; c++) {
          const value = columns[c]![i]!;
          if (Number.isNaN(value)) counters[c]!.setNull(k);
          else counters[c]!.setNumber(k, value);
        }
        if (series.exact !== null) {
          const exact = exactAt(series, i);
          if (exact !== undefined)
            COUNTERS.forEach(([, name], c) => {
              const v = exact[name as keyof typeof exact];
              if (v !== undefined) counters[c]!.setBigint(k, v);
            });
        }
        const tensorCount = tensorValues[i]!;
        if (Number.isNaN(tensorCount)) tensors.setNull(k);
        else tensors.setNumber(k, tensorCount);
        if (phases === null) {
          phasePaths.push(null);
          resolutions.push("none");
        } else {
          const attribution =
            series.origins === null
              ? phases.resolve(i, null, null)
              : phases.resolve(i, ...scopeOrigin(series, i));
          phasePaths.push(attribution?.phasePath ?? null);
          resolutions.push(attribution?.phaseResolution ?? "none");
        }
        k++;
      }
  }
  out.rows = n;
  out.set("session_id", sessionIds);
  out.set("timestamp_ns", timestamps);
  out.set("collector", collectors);
  out.set("device_id", devices);
  out.set("host", hosts);
  out.set("pid", pids);
  out.set("world_size", worldSizes);
  out.set("sampling_interval_ms", intervals);
  COUNTERS.forEach(([, name], c) => {
    out.set(name, counters[c]!);
  });
  out.set("tfjs_num_tensors", tensors);
  out.set("phase_path", phasePaths);
  out.set("phase_resolution", resolutions);
  return out;
}

/**
 * The rank's phase occurrences as columns, straight from the analysis's occurrences (the report's
 * `PhaseOccurrence` fields, and the readings at entry and exit), without an object per row.
 */
function occurrenceColumns(data: RankData): Columns {
  let n = 0;
  for (const series of data.series) n += data.occurrences(series).length;
  const out = new Columns("phase_occurrences");
  const sessionIds = new TextRuns();
  const paths = new TextRuns();
  const names = new TextRuns();
  const depths = new Int32Array(n);
  const scopes = new TextRuns();
  const starts = new Int64Column(n);
  const ends = new Int64Column(n);
  const durations = new Int64Column(n);
  const synthetic: boolean[] = new Array(n);
  const peakAllocated = new Int64Column(n);
  const peakAllocatedNs = new Int64Column(n);
  const peakUsed = new Int64Column(n);
  const peakUsedNs = new Int64Column(n);
  const netAllocated = new Int64Column(n);
  const netUsed = new Int64Column(n);
  const enterTensors = new Int64Column(n);
  const exitTensors = new Int64Column(n);
  const netTensors = new Int64Column(n);
  const boundaryRead: boolean[] = new Array(n);
  const net = (column: Int64Column, k: number, enter: number, exit: number): void => {
    if (Number.isNaN(enter) || Number.isNaN(exit)) column.setNull(k);
    else column.setNumber(k, exit - enter);
  };
  let k = 0;
  for (const series of data.series) {
    for (const occurrence of data.occurrences(series)) {
      const { span } = occurrence;
      sessionIds.push(span.sessionId);
      paths.push(span.phasePath);
      names.push(span.path[span.path.length - 1] ?? span.phasePath);
      depths[k] = span.depth;
      scopes.push(span.scopeId);
      starts.setBigint(k, span.startNs);
      ends.setBigint(k, span.endNs);
      durations.setBigint(k, span.endNs - span.startNs);
      synthetic[k] = span.syntheticEnd;
      if (Number.isNaN(occurrence.peakAllocated)) {
        peakAllocated.setNull(k);
        peakAllocatedNs.setNull(k);
      } else {
        peakAllocated.setNumber(k, occurrence.peakAllocated);
        peakAllocatedNs.setBigint(k, occurrence.peakAllocatedNs);
      }
      if (Number.isNaN(occurrence.peakUsed)) {
        peakUsed.setNull(k);
        peakUsedNs.setNull(k);
      } else {
        peakUsed.setNumber(k, occurrence.peakUsed);
        peakUsedNs.setBigint(k, occurrence.peakUsedNs);
      }
      net(netAllocated, k, occurrence.enterAllocated, occurrence.exitAllocated);
      net(netUsed, k, occurrence.enterUsed, occurrence.exitUsed);
      enterTensors.set(k, occurrence.enterTensors);
      exitTensors.set(k, occurrence.exitTensors);
      net(netTensors, k, occurrence.enterTensors, occurrence.exitTensors);
      boundaryRead[k] = occurrence.boundaryRead;
      k++;
    }
  }
  out.rows = n;
  out.set("session_id", sessionIds);
  out.set("phase_path", paths);
  out.set("phase_name", names);
  out.set("depth", depths);
  out.set("scope_id", scopes);
  out.set("start_ns", starts);
  out.set("end_ns", ends);
  out.set("duration_ns", durations);
  out.set("synthetic_end", synthetic);
  out.set("peak_allocated_bytes", peakAllocated);
  out.set("peak_allocated_ns", peakAllocatedNs);
  out.set("peak_device_used_bytes", peakUsed);
  out.set("peak_device_used_ns", peakUsedNs);
  out.set("net_allocated_bytes", netAllocated);
  out.set("net_device_used_bytes", netUsed);
  out.set("enter_tensors", enterTensors);
  out.set("exit_tensors", exitTensors);
  out.set("net_tensors", netTensors);
  out.set("boundary_read", boundaryRead);
  return out;
}

function leakRow(leak: LeakReport): Record<string, bigint | number | string | boolean | null> {
  return {
    phase_path: leak.phase_path,
    verdict: leak.verdict,
    confidence: leak.confidence,
    message: leak.message,
    bytes_per_occurrence: leak.bytes_per_occurrence,
    tensors_per_occurrence: leak.tensors_per_occurrence,
    occurrences: BigInt(leak.occurrences),
    ranks_analyzed: leak.ranks_analyzed,
    leaking_ranks: JSON.stringify(leak.leaking_ranks),
    reason: leak.reason,
  };
}

function findingRow(finding: RankGapFinding): Record<string, bigint | number | string | boolean | null> {
  return {
    session_id: finding.session_id,
    rank: finding.rank,
    classification: finding.classification,
    severity: finding.severity,
    confidence: finding.confidence,
    description: finding.description,
    evidence_timestamp_ns: finding.evidence_timestamp_ns,
    phase_path: finding.phase_attribution?.phase_path ?? null,
    evidence: stringifyJson(finding.evidence as unknown as JsonValue),
    remediation: JSON.stringify(finding.remediation),
  };
}

/**
 * Writes the selection of `input` (the view `analyzeTelemetry` picks, or `options.sessionId`) as a
 * Parquet dataset under `outputDir` (created when missing; a directory written by an earlier export
 * is updated: parts whose input segments are unchanged are kept). Reads the input through the
 * analysis index, as `analyzeTelemetry` does, one rank at a time. Throws `ParquetDatasetError` when
 * `outputDir` holds something other than a dataset.
 */
export async function exportParquet(
  input: string,
  outputDir: string,
  options: ParquetExportOptions = {},
): Promise<ParquetExportResult> {
  const dir = resolve(outputDir);
  // A directory that is not a dataset is refused before anything is written into it.
  readManifest(dir);
  const lock = lockDataset(dir);
  try {
    return await exportLocked(input, dir, options);
  } finally {
    lock.release();
  }
}

/**
 * Takes the dataset for this export: a second export into it (from any process on this host, or
 * another host sharing the directory) would interleave its parts and manifest with this one's.
 * A lock left by an export that died is broken.
 */
function lockDataset(dir: string): WriterLock {
  try {
    return claimSinkDirectory(dir, { policy: "refuse" }).lock;
  } catch (error) {
    if (!SinkDirectoryLockedError.isInstance(error)) throw error;
    const { pid, host } = error.owner;
    throw new ParquetDatasetError(
      `${dir} is being written by another export (pid ${pid} on ${host}): wait for it to finish or export ` +
        `into another directory; if that process is gone, delete ${join(dir, WRITER_LOCK_FILENAME)}`,
      dir,
    );
  }
}

/** `exportParquet` once the dataset is this process's. */
async function exportLocked(
  input: string,
  dir: string,
  options: ParquetExportOptions,
): Promise<ParquetExportResult> {
  const previous = readManifest(dir);
  /** The previous export of this job (known once the selection is: `begin`). */
  let previousJob: JobEntry | undefined;
  const parts: Record<string, string> = {};
  const rowCounts = new Map<ParquetTableName, number>();
  let written = 0;
  let kept = 0;
  let selection: SessionSelection | null = null;
  let segments: readonly SegmentData[] = [];
  let jobPartition = NULL_PARTITION;
  let totalRanks = 0;
  let doneRanks = 0;
  const fingerprints = new Map<number, string>();
  const segmentIds = new Map<number, string>();
  const sessions = new RowTable("sessions");
  const alerts = new RowTable("alerts");
  const transitions = new RowTable("collector_transitions");
  const files = new TableWriter();

  const fingerprintOf = (ordinal: number): string => {
    let known = fingerprints.get(ordinal);
    if (known === undefined) {
      const source = segments[ordinal]!.source;
      try {
        const stat = statSync(source);
        known = `${source}|${stat.size}|${stat.mtimeMs}|${stat.ino}`;
        // Changed within the file system's timestamp granularity, it may change again unseen: not trusted
        // (its parts are written again next time), as the analysis index does not trust it.
        if (Date.now() - stat.mtimeMs < RECENT_MS) known += `|recent ${Math.random()}`;
      } catch {
        known = `${source}|?${Math.random()}`;
      }
      fingerprints.set(ordinal, known);
    }
    return known;
  };
  const segmentId = (ordinal: number): string => {
    let id = segmentIds.get(ordinal);
    if (id === undefined) {
      id = nodeCrypto().createHash("sha1").update(segments[ordinal]!.source).digest("hex").slice(0, 16);
      segmentIds.set(ordinal, id);
    }
    return id;
  };
  const count = (table: ParquetTableName, rows: number): void => {
    rowCounts.set(table, (rowCounts.get(table) ?? 0) + rows);
  };
  /** Writes a part unless the previous export wrote it from the same input (`fingerprint`). */
  const part = (
    relative: string,
    fingerprint: string,
    build: () => {
      table: ParquetTableName;
      rows: number;
      columns: ReadonlyMap<string, EncoderValues>;
    } | null,
  ): void => {
    const key = `${DATASET_FORMAT_VERSION}|${selection?.sessionId ?? ""}|${fingerprint}`;
    if (previousJob?.parts[relative] === key && existsSync(join(dir, relative))) {
      parts[relative] = key;
      kept++;
      return;
    }
    const built = build();
    if (built === null || built.rows === 0) return;
    files.write(join(dir, relative), parquetTable(built.table), built.rows, built.columns);
    count(built.table, built.rows);
    parts[relative] = key;
    written++;
  };

  const visitRank = (data: RankData): void => {
    const rankDir = `job_id=${jobPartition}/rank=${partitionValue(data.rank)}`;
    // Samples by the segment that holds them.
    const samplesBySegment = new Map<number, SamplePick[]>();
    const ordinals = new Set<number>();
    for (const series of data.series) {
      // Runs of samples in one segment (a segment's samples are usually one run: time order is storage order).
      const local = new Map<number, { ranges: number[]; count: number }>();
      let i = 0;
      while (i < series.count) {
        const ordinal = Math.floor(series.order[i]! / ORDER_SEGMENT_SCALE);
        const start = i;
        const upper = (ordinal + 1) * ORDER_SEGMENT_SCALE;
        const lower = ordinal * ORDER_SEGMENT_SCALE;
        while (i < series.count && series.order[i]! < upper && series.order[i]! >= lower) i++;
        const known = local.get(ordinal);
        if (known === undefined) local.set(ordinal, { ranges: [start, i], count: i - start });
        else {
          known.ranges.push(start, i);
          known.count += i - start;
        }
      }
      for (const [ordinal, { ranges, count }] of local) {
        ordinals.add(ordinal);
        const picks = samplesBySegment.get(ordinal);
        if (picks === undefined) samplesBySegment.set(ordinal, [{ series, ranges, count }]);
        else picks.push({ series, ranges, count });
      }
      for (const order of series.alertOrder) ordinals.add(Math.floor(order / ORDER_SEGMENT_SCALE));
      for (const order of series.boundaryOrder) ordinals.add(Math.floor(order / ORDER_SEGMENT_SCALE));
      const who = series.identities[0];
      sessions.add({
        session_id: series.sessionId,
        rank: series.rank,
        selected_session_id: selection?.sessionId ?? null,
        host: series.hosts[0] ?? who?.host ?? null,
        pid: who === undefined ? null : BigInt(who.pid),
        world_size: who?.world_size ?? null,
        first_timestamp_ns: series.minTs,
        last_timestamp_ns: series.maxTs,
        event_count: BigInt(series.eventCount),
        sample_count: BigInt(series.count),
        status: selection?.summary?.status ?? null,
      });
    }
    for (const [ordinal, picks] of samplesBySegment) {
      part(`samples/${rankDir}/part-${segmentId(ordinal)}.parquet`, fingerprintOf(ordinal), () => {
        const columns = sampleColumns(picks, data);
        return { table: "samples", rows: columns.rows, columns: columns.values };
      });
    }
    // The rank's derived tables depend on all of its segments.
    const rankFingerprint = [...ordinals]
      .sort((a, b) => a - b)
      .map(fingerprintOf)
      .join("\n");
    part(`phase_occurrences/${rankDir}/part-0.parquet`, rankFingerprint, () => {
      const columns = occurrenceColumns(data);
      return { table: "phase_occurrences", rows: columns.rows, columns: columns.values };
    });
    // The sparse tables, one file per job (written after the last rank).
    for (const series of data.series) {
      const index = data.phaseIndex(series);
      for (const alert of series.alerts) {
        const thread = alert.origin?.origin_thread_id;
        const scope = alert.origin?.origin_phase_scope_id;
        const attribution = index?.resolve(
          alert.timestampNs,
          series.sessionId,
          series.rank,
          typeof thread === "number" || typeof thread === "bigint" ? thread : null,
          typeof scope === "string" ? scope : null,
        );
        alerts.add({
          session_id: series.sessionId,
          rank: series.rank,
          timestamp_ns: alert.timestampNs,
          event_type: alert.eventType,
          context: alert.context,
          oom_reason: alert.oomReason,
          allocator_allocated_bytes: int64(alert.allocated),
          device_used_bytes: int64(alert.used),
          phase_path: attribution?.phasePath ?? null,
        });
      }
      for (const entry of series.health)
        transitions.add({
          session_id: series.sessionId,
          rank: series.rank,
          timestamp_ns: entry.timestampNs,
          event_type: entry.eventType,
          collector: entry.collector,
          status: entry.status,
          error: entry.error,
          context: entry.context,
        });
    }
    doneRanks++;
    options.onProgress?.(doneRanks, totalRanks);
  };

  const analyzeOptions: AnalyzeOptions = {
    ...(options.sessionId !== undefined ? { sessionId: options.sessionId } : {}),
    ...(options.index !== undefined ? { index: options.index } : {}),
    ...(options.cacheDir !== undefined ? { cacheDir: options.cacheDir } : {}),
  };
  const report = await analyzeTelemetryRanks(
    input,
    {
      begin(context) {
        selection = context.selection;
        segments = context.segments;
        jobPartition = partitionValue(context.selection.summary?.job_id ?? null);
        previousJob = previous?.jobs[jobPartition];
        totalRanks = new Set(
          context.segments.flatMap((segment) =>
            segment.digest.sessions
              .filter((session) => context.selection.memberSessionIds.includes(session.sessionId))
              .flatMap((session) => session.ranks.map((rank) => rank.rank)),
          ),
        ).size;
      },
      rank: visitRank,
    },
    analyzeOptions,
  );
  // The job's tables, and the analysis's per-rank findings: small, written every time.
  const always = `report ${Date.now()}`;
  part(`hidden_memory_findings/job_id=${jobPartition}/part-0.parquet`, always, () => {
    const rows = new RowTable("hidden_memory_findings");
    for (const finding of report.gap_analysis) rows.add(findingRow(finding));
    return { table: "hidden_memory_findings", rows: rows.rows, columns: rows.columns() };
  });
  part(`alerts/job_id=${jobPartition}/part-0.parquet`, always, () => ({
    table: "alerts",
    rows: alerts.rows,
    columns: alerts.columns(),
  }));
  part(`collector_transitions/job_id=${jobPartition}/part-0.parquet`, always, () => ({
    table: "collector_transitions",
    rows: transitions.rows,
    columns: transitions.columns(),
  }));
  part(`leak_verdicts/job_id=${jobPartition}/part-0.parquet`, always, () => {
    const rows = new RowTable("leak_verdicts");
    for (const leak of report.leaks) rows.add(leakRow(leak));
    return { table: "leak_verdicts", rows: rows.rows, columns: rows.columns() };
  });
  part(`sessions/job_id=${jobPartition}/part-0.parquet`, always, () => ({
    table: "sessions",
    rows: sessions.rows,
    columns: sessions.columns(),
  }));

  // Parts of the previous export that this one did not produce: their input is gone.
  let removed = 0;
  for (const relative of Object.keys(previousJob?.parts ?? {})) {
    if (Object.hasOwn(parts, relative)) continue;
    try {
      unlinkSync(join(dir, relative));
      removed++;
    } catch {
      // Already gone.
    }
  }
  const chosen = selection as SessionSelection | null;
  const manifest: DatasetManifest = {
    format: "stormlog-parquet",
    version: DATASET_FORMAT_VERSION,
    generator: `@stormlog/parquet ${PACKAGE_VERSION}`,
    jobs: {
      ...previous?.jobs,
      [jobPartition]: {
        job_id: chosen?.summary?.job_id ?? null,
        input: resolve(input),
        selected_session_id: chosen?.sessionId ?? null,
        parts,
      },
    },
  };
  mkdirSync(dir, { recursive: true });
  const temporary = join(dir, `.${DATASET_MANIFEST}.${process.pid}.tmp`);
  writeFileSync(temporary, `${JSON.stringify(manifest, null, 2)}\n`);
  renameSync(temporary, join(dir, DATASET_MANIFEST));

  const tables = {} as Record<ParquetTableName, ParquetTableCount>;
  for (const table of [
    "samples",
    "phase_occurrences",
    "alerts",
    "collector_transitions",
    "hidden_memory_findings",
    "leak_verdicts",
    "sessions",
  ] as const) {
    const files = Object.keys(parts).filter((relative) => relative.startsWith(`${table}/`)).length;
    tables[table] = { rows: rowCounts.get(table) ?? 0, files };
  }
  return {
    outputDir: dir,
    jobId: chosen?.summary?.job_id ?? null,
    selectedSessionId: chosen?.sessionId ?? null,
    ranks: doneRanks,
    tables,
    filesWritten: written,
    filesKept: kept,
    filesRemoved: removed,
    report,
  };
}
