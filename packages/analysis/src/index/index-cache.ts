/**
 * Transparent indexing. The first analysis of a sink writes, as a by-product of its scan, one
 * aggregate file per segment and a catalog (with each segment's digest) into
 * `<sink>/.stormlog-index/` (or, when that location is not writable, a cache directory), plus the
 * finished report, with the input's snapshot (`input/snapshot.ts`) when nothing in it is racy. A
 * later analysis first checks that snapshot: when every directory and file still has its
 * fingerprint, it returns the stored report without resolving the input. Otherwise it stats every
 * segment (and the manifests and rollups): when none changed it returns the stored report; else it
 * takes the digest of each segment whose size, mtime, ctime and inode are unchanged from the catalog
 * (its aggregate is read only when its rank is analysed), scans only segments that changed or
 * appeared, forgets pruned ones, and starts over when the index's format or settings differ. There
 * is no separate indexing step, and nothing is used unless its source provably did not change: a
 * file modified within two seconds of being indexed (racy: it may change again without its times
 * showing it) is trusted only while its content check (`contentCheck`) still matches too.
 *
 * Scanned aggregates go to disk as soon as they are made, so memory holds one segment's aggregate
 * while scanning and one rank's data while analysing, whatever the size of the input; a big segment
 * (a whole job in one `.jsonl`) is scanned and stored in pieces (`piece-scan.ts`), on scan workers
 * where there is a second core. Without an index, large inputs spill to a temporary directory
 * removed afterwards.
 */
import {
  promises as fsPromises,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, relative } from "node:path";
import {
  type ResolvedTelemetryInput,
  readRegularFileSync,
  type TelemetryInputSegment,
} from "@stormlog/sink/internal";
import type { SegmentAggregate } from "../input/aggregate.js";
import {
  type DigestJson,
  digestFromJson,
  digestOf,
  digestToJson,
  type SegmentDigest,
} from "../input/digest.js";
import { type PieceRange, pieceBytes, pieceRanges } from "../input/pieces.js";
import { type ScanScratch, scanSegmentSync } from "../input/scan.js";
import type { SegmentData, SegmentPiece } from "../input/sessions.js";
import {
  contentCheck,
  type Fingerprint,
  fingerprint,
  type InputLocation,
  type InputSnapshot,
  isRacy,
  locateInput,
  printText,
  sameFingerprint,
} from "../input/snapshot.js";
import type { AnalysisReport, IndexUsage } from "../report/types.js";
import {
  aggregateStampMatches,
  encodeAggregateParts,
  isTemporaryAggregate,
  temporaryPath,
  writeAggregateFile,
} from "./index-format.js";
import { type AggregateWriter, type ScannedPiece, scanSegments } from "./piece-scan.js";
import { deserializeReport, serializeReport } from "./report-cache.js";
import {
  hashText,
  INDEX_VERSION,
  type IndexPlace,
  locateIndex,
  readIndexFile,
  readRenderingIn,
  SETTINGS,
  SNAPSHOT_FORMAT,
  STORED_RESULT_NAME,
  type StoredSnapshot,
  storedResultFile,
  storedResultPrefix,
  storedResultStamp,
  vouchedIndex,
} from "./stored-results.js";

/** `format` of the catalog. */
export const INDEX_FORMAT = "stormlog.analysis_index";
/**
 * Without an index, inputs larger than this spill scanned aggregates to a temporary directory
 * (`STORMLOG_SPILL_MIN_BYTES` overrides it, for tests).
 */
export const SPILL_MIN_BYTES = 128 << 20;

/** Stored reports kept per index (one per session choice). */
const MAX_REPORTS = 8;

interface CatalogEntry extends Fingerprint {
  /** Segment path relative to the index base. */
  path: string;
  /** Aggregate file in `segments/`. */
  file: string;
  ranks: number[];
  digest: DigestJson;
  /** Modified within RACY_NS of indexing: trusted only while its content check matches. */
  racy: boolean;
  /** The content check of a racy segment, taken before it was scanned (absent: scanned again). */
  check?: string;
  /** A big segment scanned and stored in pieces (`input/pieces.ts`); `file` is then its first piece's. */
  pieces?: CatalogPiece[];
}

/** One piece of a segment in the catalog: its aggregate file, bytes (`end` null: to the end), lines before it, digest. */
interface CatalogPiece {
  file: string;
  start: number;
  end: number | null;
  lineOffset: number;
  digest: DigestJson;
}

interface Catalog {
  format: string;
  version: number;
  settings: string;
  /** Absolute directory segment paths are relative to. */
  base: string;
  segments: CatalogEntry[];
}

/** The index options of an analysis's options (`index`, `cacheDir`, `onProgress`). */
export function segmentIndexOptions(options: {
  readonly index?: boolean;
  readonly cacheDir?: string;
  readonly onProgress?: SegmentIndexOptions["onProgress"];
}): SegmentIndexOptions {
  return {
    index: options.index !== false,
    ...(options.cacheDir !== undefined ? { cacheDir: options.cacheDir } : {}),
    ...(options.onProgress !== undefined ? { onProgress: options.onProgress } : {}),
  };
}

/** Options of `SegmentIndex.open`. */
export interface SegmentIndexOptions {
  index: boolean;
  cacheDir?: string;
  /** The input's location, when the caller has it (else it is located again). */
  location?: InputLocation;
  /** The input's snapshot, taken before it was resolved: stored with the results for `reuse`. */
  snapshot?: InputSnapshot;
  onProgress?: (progress: { phase: string; done: number; total: number }) => void;
}

/** Segments in reading order, their sizes, and how the index was used. */
export interface LoadedSegments {
  segments: SegmentData[];
  sizes: number[];
  usage: IndexUsage;
  /**
   * With `loadSegments({ settleLater: true })`, while aggregate files are still being written:
   * waits for them, writes the catalog and gives the final usage (`usage` is provisional until then).
   */
  settle?: () => Promise<IndexUsage>;
}

/**
 * Just-scanned aggregates whose encoded size adds up to at most this stay in memory for the
 * analysis (`STORMLOG_KEEP_SCANNED_BYTES` overrides it, for tests and benchmarks), and so does the
 * last one scanned, whatever its size (it is in memory when the scan ends; reading it back would
 * take as much): the analysis then neither reads their files back nor decodes them, and the files
 * are written on the thread pool meanwhile. Every other aggregate is let go once written, so memory
 * stays bounded on large inputs. Small: held in memory, an aggregate takes several times its
 * encoded size (measured on the 1 GB, 64-rank job of bench/generate-multirank.mjs: peak RSS 175 MB
 * with no budget, 193 MB with 4 MiB, 353 MB with 64 MiB).
 */
export const KEEP_SCANNED_BYTES = 2 << 20;
/**
 * Up to KEEP_SMALL_INPUT_UP_TO bytes scanned, just-scanned aggregates stay in memory within
 * KEEP_SMALL_INPUT_SCANNED_BYTES (encoded; a job's samples encode to about an eighth of their
 * lines): on the 240 MB 64-rank job all 28 MB of them stay, which saves reading them back and
 * decoding them (loading its ranks: 30-45 ms instead of 80-130 ms) for 7 MB more peak RSS
 * (172 MB). Bounded in bytes kept too, not only in bytes scanned: records kept whole (alerts,
 * lifecycle records) or long scopes take more. Larger inputs keep within KEEP_SCANNED_BYTES, so
 * peak RSS stays as flat up to 1 GB.
 */
export const KEEP_SMALL_INPUT_UP_TO = 256 << 20;
export const KEEP_SMALL_INPUT_SCANNED_BYTES = 32 << 20;

function stampOf(path: string, print: Fingerprint): string {
  return `${path}|${printText(print)}|${SETTINGS}`;
}

/** The aggregate file of piece `k` of the segment whose aggregate file would be `file`. */
const pieceFileName = (file: string, k: number): string => file.replace(/\.agg$/, `-${k}.agg`);

/** The stamp of piece `k` of the segment stamped `stamp`. */
const pieceStamp = (stamp: string, k: number): string => `${stamp}|piece ${k}`;

const readCatalog = (dir: string, name: string) => readIndexFile<Catalog>(dir, name, "segments");

const writeAtomic = writeAggregateFile;

function describeError(error: unknown): string {
  const code = (error as { code?: string }).code;
  return code ? `${code}: ${(error as Error).message}` : String(error);
}

/** Creates `dir/segments`; the first candidate that works. */
function writableDir(candidates: readonly string[], failures: string[]): string | null {
  for (const candidate of candidates) {
    try {
      mkdirSync(join(candidate, "segments"), { recursive: true });
      return candidate;
    } catch (error) {
      failures.push(`${candidate}: ${describeError(error)}`);
    }
  }
  return null;
}

/** One segment to scan, with where its aggregate goes (null: keep it in memory). */
interface ScanJob {
  readonly segment: TelemetryInputSegment;
  readonly size: number;
  readonly stamp: string;
  readonly path: string | null;
  /** A big segment's pieces, with their aggregate files and stamps (`path` is then the first's). */
  readonly pieces: {
    readonly ranges: readonly PieceRange[];
    readonly files: readonly string[];
    readonly stamps: readonly string[];
  } | null;
}

/** A scanned segment: its digest, and its aggregate unless it was written to its file and let go. */
interface ScanResult {
  readonly digest: SegmentDigest;
  readonly aggregate: SegmentAggregate | null;
  /** Its file is written (or being written: see `pending`). */
  readonly written: boolean;
  /** A segment scanned in pieces: they hold its aggregate (`aggregate` is null). */
  readonly pieces?: readonly ScannedPiece[];
}

/**
 * Scans the jobs: with a place for their aggregate files, through `scanSegments` (each aggregate
 * encoded as soon as it is made and its file written while the scan goes on; big segments in
 * pieces; on scan workers where there is a second core and enough to scan), within `keepBytes`
 * (encoded, summed) and the last one kept in memory, the others let go once their files are whole;
 * else one after the other here, every aggregate kept in memory (small inputs without an index).
 */
async function scanJobs(
  jobs: readonly ScanJob[],
  writer: AggregateWriter,
  keepBytes: number,
  onBytes: (done: number) => void,
): Promise<{ results: ScanResult[]; pending: readonly Promise<boolean>[] }> {
  const scratch: ScanScratch = { buf: null };
  if (jobs.length > 0 && jobs.every((job) => job.path !== null)) {
    const { segments, pending } = await scanSegments(
      jobs.map((job) => ({
        segment: job.segment,
        size: job.size,
        ...(job.pieces ?? {
          ranges: [{ start: 0, end: Number.POSITIVE_INFINITY }],
          files: [job.path!],
          stamps: [job.stamp],
        }),
      })),
      writer,
      keepBytes,
      onBytes,
      scratch,
    );
    const results = segments.map((segment, j): ScanResult => {
      if (jobs[j]!.pieces !== null)
        return { digest: segment.digest, aggregate: null, written: true, pieces: segment.pieces };
      const [whole] = segment.pieces;
      return { digest: segment.digest, aggregate: whole!.aggregate, written: whole!.written };
    });
    return { results, pending };
  }
  const results: ScanResult[] = [];
  let done = 0;
  for (const job of jobs) {
    const before = done;
    const aggregate = scanSegmentSync(job.segment, (bytes) => onBytes(before + bytes), scratch);
    results.push({ digest: digestOf(aggregate), aggregate, written: false });
    done += job.size;
    onBytes(done);
    // Let timers and I/O callbacks (progress output) run between segments.
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return { results, pending: [] };
}

/** `writeAggregateFile` on the thread pool: a temporary name, then a rename. */
async function writeAggregateFileLater(path: string, parts: readonly Uint8Array[]): Promise<void> {
  const tmp = temporaryPath(path);
  try {
    // One request for all the parts: written part by part, each part waited for on this thread, the
    // writes of a cold scan's files were left until its analysis was done (it does not yield).
    const file = await fsPromises.open(tmp, "w");
    try {
      let expected = 0;
      for (const part of parts) expected += part.byteLength;
      const { bytesWritten } = await file.writev(parts as Uint8Array[]);
      if (bytesWritten !== expected) throw new Error(`wrote ${bytesWritten} of ${expected} bytes`);
    } finally {
      await file.close();
    }
    await fsPromises.rename(tmp, path);
  } catch (error) {
    await fsPromises.rm(tmp, { force: true });
    throw error;
  }
}

/** The index of one input: what is known about its segments, and where it is stored. */
export class SegmentIndex {
  /** Temporary directory aggregates were spilled to (removed by `dispose`). */
  private spill: string | null = null;

  private constructor(
    private readonly options: SegmentIndexOptions,
    private readonly segmentsIn: readonly TelemetryInputSegment[],
    private readonly prints: readonly Fingerprint[],
    /**
     * Per segment: undefined when it was not racy when fingerprinted, else its content check (null
     * when it could not be read).
     */
    private readonly checks: readonly (string | null | undefined)[],
    private readonly where: IndexPlace | null,
    private dir: string | null,
    private catalog: Catalog | null,
    private readonly reason: string | null,
    /** Digest of everything the report depends on; null when something may still be changing. */
    private readonly state: string | null,
    /** Set by `reuse`: the stored snapshot that vouches for `state` (no catalog was read). */
    private readonly vouched: StoredSnapshot | null = null,
  ) {}

  /**
   * The index of the input at `location` when its stored snapshot still holds, file for file: its
   * stored results can be read without resolving the input (no directory listed, no manifest
   * parsed, no catalog read). Null otherwise; then `open` the resolved input.
   */
  static reuse(location: InputLocation, options: SegmentIndexOptions): SegmentIndex | null {
    const vouched = vouchedIndex(location, options);
    if (vouched === null) return null;
    const { place, dir, snapshot } = vouched;
    return new SegmentIndex(options, [], [], [], place, dir, null, null, snapshot.state, snapshot);
  }

  /** The input at `path` located, and its index when `reuse` can vouch for it (see there). */
  static locateReusable(
    path: string,
    options: SegmentIndexOptions,
  ): { location: InputLocation | null; reused: SegmentIndex | null } {
    const location = locateInput(path);
    return { location, reused: location === null ? null : SegmentIndex.reuse(location, options) };
  }

  /** The input's bytes on disk, when `reuse` vouched for it (else the caller's snapshot has them). */
  get storedSizeBytes(): number | null {
    return this.vouched?.size_bytes ?? null;
  }

  /** Stats the input's files and reads the catalog (no segment is read yet). */
  static async open(input: ResolvedTelemetryInput, options: SegmentIndexOptions): Promise<SegmentIndex> {
    const segments = input.parts.flatMap((part) => part.segments);
    const prints = segments.map((segment) => fingerprint(segment.path));
    const missing = prints.indexOf(null);
    // Listed a moment ago and gone now (retention pruned them): the scan reports them as the reader would.
    const solid = prints.map((print) => print ?? { size: 0, mtimeNs: "0", ctimeNs: "0", ino: "0", dev: "0" });
    const location = options.location ?? locateInput(input.path);
    if (!options.index || location === null)
      return new SegmentIndex(options, segments, solid, [], null, null, null, null, null);
    const where = locateIndex(location, options.cacheDir);
    let dir = where.dirs[0]!;
    let catalog = readCatalog(dir, where.catalog);
    if (catalog === null && where.dirs.length > 1) {
      const other = readCatalog(where.dirs[1]!, where.catalog);
      if (other !== null) {
        dir = where.dirs[1]!;
        catalog = other;
      }
    }
    let reason: string | null = null;
    if (
      catalog !== null &&
      (catalog.format !== INDEX_FORMAT ||
        catalog.version !== INDEX_VERSION ||
        catalog.settings !== SETTINGS ||
        catalog.base !== where.base)
    ) {
      reason = "the index was written by another version or with other settings; rebuilt";
      catalog = null;
    }
    // The report depends on the segments, the manifests (session ledger) and rollups.json (pruning counters).
    const nowNs = BigInt(Date.now()) * 1_000_000n;
    const sidecarPaths = input.parts.flatMap((part) => [
      join(part.dir, "manifest.json"),
      join(part.dir, "rollups.json"),
    ]);
    const sidecars = sidecarPaths.map(fingerprint);
    // A racy file is known by its content check as well, taken before it is read (see input/snapshot.ts).
    const checkOf = (path: string, print: Fingerprint | null): string | null | undefined =>
      print !== null && isRacy(print, nowNs) ? contentCheck(path, print.size) : undefined;
    const checks = segments.map((segment, i) => checkOf(segment.path, solid[i]!));
    const sidecarChecks = sidecarPaths.map((path, i) => checkOf(path, sidecars[i]!));
    const unchecked = checks.includes(null) || sidecarChecks.includes(null);
    const withCheck = (text: string, check: string | null | undefined): string =>
      check === undefined || check === null ? text : `${text}#${check}`;
    const state =
      missing >= 0 || unchecked
        ? null
        : hashText(
            [
              input.kind,
              where.base,
              ...input.parts.map((part) => relative(where.base, part.dir)),
              ...sidecars.map((print, i) => withCheck(printText(print), sidecarChecks[i]!)),
              ...segments.map(
                (segment, i) =>
                  `${relative(where.base, segment.path)}=${withCheck(printText(solid[i]!), checks[i]!)}`,
              ),
            ].join("\n"),
            32,
          );
    return new SegmentIndex(options, segments, solid, checks, where, dir, catalog, reason, state);
  }

  /** Segment sizes in reading order. */
  get sizes(): number[] {
    return this.prints.map((print) => print.size);
  }

  private reportFile(view: string): string | null {
    if (this.state === null || this.dir === null) return null;
    return storedResultFile(this.dir, this.state, view);
  }

  /**
   * The stored report for this exact state of the input and this `view` (what else the report
   * depends on: the session asked for, the path as given), if there is one.
   */
  readReport(view: string): AnalysisReport | null {
    const text = this.readStored(view);
    if (text === null) return null;
    const report = deserializeReport(text, this.stamp(view));
    if (report === null) return null;
    report.index = this.reusedUsage();
    return report;
  }

  /** Usage of an index whose stored result was returned as is. */
  reusedUsage(): IndexUsage {
    return {
      status: "reused",
      location: this.dir,
      segments_reused: this.vouched?.segment_count ?? this.segmentsIn.length,
      segments_scanned: 0,
      segments_dropped: 0,
      report_reused: true,
      reason: null,
    };
  }

  /** The stamp a result stored for `view` carries (the input's state and the view). */
  stamp(view: string): string {
    return storedResultStamp(String(this.state), view);
  }

  /** The text stored for this exact state of the input and `view`, if there is one. */
  readStored(view: string): string | null {
    const file = this.reportFile(view);
    // A catalog of this version (or a snapshot that vouches for the state) says the file is ours.
    if (file === null || (this.catalog === null && this.vouched === null)) return null;
    try {
      return readRegularFileSync(file);
    } catch {
      return null;
    }
  }

  /**
   * A rendering stored with `writeRendering` for `view`, when this index's stored results were
   * vouched for by its snapshot (a rendering may name what the state leaves out: files beside the
   * sinks); else null.
   */
  readRendering(view: string): string | null {
    if (this.vouched === null || this.dir === null || this.state === null) return null;
    return readRenderingIn(this.dir, this.state, view);
  }

  /**
   * Stores the rendering of a result that was itself read back from this index (`usage` says
   * "reused"): only then is the next rendering of the unchanged input the same (best effort).
   */
  async writeRendering(view: string, text: string, usage: IndexUsage | null): Promise<void> {
    if (usage?.report_reused !== true) return;
    await this.writeStored(view, `${this.stamp(view)}\n${text}`, usage);
  }

  /** Stores a finished report (best effort: failures only mean the next analysis recomputes it). */
  async writeReport(view: string, report: AnalysisReport): Promise<void> {
    await this.writeStored(view, serializeReport(report, this.stamp(view)), report.index);
  }

  /**
   * Stores a finished result for `view` (best effort), when `usage` says the index is usable where
   * it is; results of other states of the input are removed, and at most MAX_REPORTS kept.
   */
  async writeStored(view: string, text: string, usage: IndexUsage | null): Promise<void> {
    const file = this.reportFile(view);
    const dir = this.dir;
    if (file === null || dir === null || usage === null || usage.location !== dir) return;
    try {
      writeAtomic(file, text);
      this.storeSnapshot();
      const prefix = storedResultPrefix(this.state!);
      const others = (await fsPromises.readdir(dir)).filter((name) => STORED_RESULT_NAME.test(name));
      for (const name of others.filter((name) => !name.startsWith(prefix)))
        await fsPromises.rm(join(dir, name), { force: true });
      const current = others.filter((name) => name.startsWith(prefix));
      if (current.length > MAX_REPORTS) {
        const dated = await Promise.all(
          current.map(async (name) => ({ name, mtime: (await fsPromises.stat(join(dir, name))).mtimeMs })),
        );
        dated.sort((a, b) => a.mtime - b.mtime);
        for (const { name } of dated.slice(0, dated.length - MAX_REPORTS))
          await fsPromises.rm(join(dir, name), { force: true });
      }
    } catch {
      // Best effort.
    }
  }

  /**
   * Stores the caller's snapshot as the one that vouches for this state, so that the next analysis
   * of the unchanged input can `reuse` this index (best effort; not when anything was racy).
   */
  storeSnapshot(): void {
    const { snapshot, location } = this.options;
    const { dir, where, state } = this;
    if (snapshot === undefined || location === undefined || !snapshot.reusable) return;
    if (dir === null || where === null || state === null || this.vouched !== null) return;
    const stored: StoredSnapshot = {
      format: SNAPSHOT_FORMAT,
      version: INDEX_VERSION,
      settings: SETTINGS,
      kind: location.kind,
      absolute: location.absolute,
      state,
      segment_count: this.segmentsIn.length,
      size_bytes: snapshot.sizeBytes,
      entries: snapshot.entries as [string, string][],
    };
    try {
      writeAtomic(join(dir, where.snapshot), JSON.stringify(stored));
    } catch {
      // Best effort: the next analysis resolves the input again.
    }
  }

  /** Removes the temporary spill directory, if any. Call when the analysis is done. */
  dispose(): void {
    if (this.spill !== null) rmSync(this.spill, { recursive: true, force: true });
    this.spill = null;
  }

  /**
   * Every segment: its digest from the catalog where fresh, else from a scan whose aggregate is
   * written to the index (or spilled, or kept in memory for small inputs without an index), and
   * kept in memory within KEEP_SCANNED_BYTES. With `settleLater`, it returns while those files are
   * still being written: the caller analyses meanwhile, then calls `settle`.
   */
  async loadSegments(options: { settleLater?: boolean } = {}): Promise<LoadedSegments> {
    const { segmentsIn: inputSegments, prints, checks, where } = this;
    const onProgress = this.options.onProgress;
    const sizes = this.sizes;
    const relPaths = inputSegments.map((segment) =>
      where === null ? segment.path : relative(where.base, segment.path),
    );
    const known = new Map<string, CatalogEntry>();
    for (const entry of this.catalog?.segments ?? []) known.set(entry.path, entry);

    const data: (SegmentData | undefined)[] = new Array(inputSegments.length);
    const entries: (CatalogEntry | undefined)[] = new Array(inputSegments.length);
    const readFrom = this.dir;
    inputSegments.forEach((segment, i) => {
      const entry = known.get(relPaths[i]!);
      if (entry === undefined || readFrom === null || !sameFingerprint(entry, prints[i]!)) return;
      // A racy entry holds while the segment's content check still matches the one taken when it was indexed.
      if (
        entry.racy &&
        (entry.check === undefined ||
          entry.check !== (checks[i] === undefined ? contentCheck(segment.path, prints[i]!.size) : checks[i]))
      )
        return;
      const stamp = stampOf(relPaths[i]!, prints[i]!);
      const file = { path: join(readFrom, "segments", entry.file), stamp };
      if (entry.pieces !== undefined) {
        const pieces = entry.pieces.map(
          (piece, k): SegmentPiece => ({
            start: piece.start,
            end: piece.end ?? Number.POSITIVE_INFINITY,
            lineOffset: piece.lineOffset,
            digest: digestFromJson(piece.digest),
            aggregate: null,
            file: { path: join(readFrom, "segments", piece.file), stamp: pieceStamp(stamp, k) },
          }),
        );
        // As below, for every piece's file.
        if (!pieces.every((piece) => aggregateStampMatches(piece.file!.path, piece.file!.stamp))) return;
        entries[i] = entry;
        const digest = digestFromJson(entry.digest);
        data[i] = {
          source: segment.path,
          hint: segment.hint,
          digest,
          aggregate: null,
          file: null,
          segment,
          pieces,
        };
        return;
      }
      // A missing or foreign aggregate file (deleted, damaged, another writer's): scanned again.
      if (!aggregateStampMatches(file.path, file.stamp)) return;
      entries[i] = entry;
      data[i] = {
        source: segment.path,
        hint: segment.hint,
        digest: digestFromJson(entry.digest),
        aggregate: null,
        file,
        segment,
      };
    });
    const missing = inputSegments.map((_, i) => i).filter((i) => data[i] === undefined);
    const reused = inputSegments.length - missing.length;
    const present = new Set(relPaths);
    const dropped = [...known.keys()].filter((path) => !present.has(path)).length;
    if (where !== null && missing.length === 0 && dropped === 0 && this.catalog !== null) {
      return {
        segments: data as SegmentData[],
        sizes,
        usage: {
          status: "reused",
          location: this.dir,
          segments_reused: reused,
          segments_scanned: 0,
          segments_dropped: 0,
          report_reused: false,
          reason: this.reason,
        },
      };
    }

    // Where scanned aggregates go: the index; without one, a spill directory for large inputs.
    const unusable: string[] = [];
    const failures: string[] = [];
    let target: string | null = null;
    if (where !== null) {
      target = writableDir(
        [this.dir!, ...where.dirs.filter((candidate) => candidate !== this.dir)],
        unusable,
      );
    }
    let total = 0;
    for (const i of missing) total += sizes[i]!;
    const spillAt = Number(process.env.STORMLOG_SPILL_MIN_BYTES ?? SPILL_MIN_BYTES);
    if (target === null && total >= spillAt) {
      try {
        this.spill = mkdtempSync(join(tmpdir(), "stormlog-analysis-"));
        mkdirSync(join(this.spill, "segments"));
      } catch {
        this.spill = null;
      }
    }
    const sink = target ?? this.spill;
    // Moving to another location: the aggregates already indexed elsewhere are written there too.
    const relocating = target !== null && target !== readFrom;
    const files = missing.map((i) => `seg-${hashText(stampOf(relPaths[i]!, prints[i]!), 24)}.agg`);
    const bytesPerPiece = pieceBytes();
    const jobs: ScanJob[] = missing.map((i, k) => {
      const segment = inputSegments[i]!;
      const stamp = stampOf(relPaths[i]!, prints[i]!);
      if (sink === null) return { segment, size: sizes[i]!, stamp, path: null, pieces: null };
      const path = join(sink, "segments", files[k]!);
      let ranges: PieceRange[] = [];
      try {
        ranges = pieceRanges(segment.path, sizes[i]!, bytesPerPiece);
      } catch {
        // Unreadable: the scan reports it as the reader would.
      }
      if (ranges.length < 2) return { segment, size: sizes[i]!, stamp, path, pieces: null };
      const names = ranges.map((_, p) => pieceFileName(files[k]!, p));
      const pieces = {
        ranges,
        files: names.map((name) => join(sink, "segments", name)),
        stamps: ranges.map((_, p) => pieceStamp(stamp, p)),
      };
      return { segment, size: sizes[i]!, stamp, path: pieces.files[0]!, pieces };
    });
    const fail = (error: unknown): false => {
      failures.push(`${sink}: ${describeError(error)}`);
      return false;
    };
    const writer: AggregateWriter = {
      encode: (aggregate, stamp) => {
        try {
          return encodeAggregateParts(aggregate, stamp);
        } catch (error) {
          fail(error);
          return null;
        }
      },
      later: (path, parts) =>
        writeAggregateFileLater(path, parts).then(
          () => true,
          (error: unknown) => fail(error),
        ),
    };
    const keepBytes = Number(
      process.env.STORMLOG_KEEP_SCANNED_BYTES ??
        (total <= KEEP_SMALL_INPUT_UP_TO ? KEEP_SMALL_INPUT_SCANNED_BYTES : KEEP_SCANNED_BYTES),
    );
    const { results, pending } = await scanJobs(jobs, writer, keepBytes, (done) =>
      onProgress?.({ phase: "scan", done, total }),
    );
    missing.forEach((i, k) => {
      const segment = inputSegments[i]!;
      const result = results[k]!;
      const job = jobs[k]!;
      entries[i] = {
        path: relPaths[i]!,
        ...prints[i]!,
        file: files[k]!,
        ranks: result.digest.sessions
          .flatMap((session) => session.ranks.map((rank) => rank.rank))
          .filter((rank, j, all) => all.indexOf(rank) === j)
          .sort((a, b) => a - b),
        digest: digestToJson(result.digest),
        // Racy when fingerprinted (`open`), with the check taken then; a racy one without a check is scanned again.
        racy: checks[i] !== undefined,
        ...(typeof checks[i] === "string" ? { check: checks[i] } : {}),
      };
      if (result.pieces !== undefined && job.pieces !== null) {
        const { files: paths, stamps } = job.pieces;
        entries[i]!.file = basename(paths[0]!);
        entries[i]!.pieces = result.pieces.map((piece, p) => ({
          file: basename(paths[p]!),
          start: piece.range.start,
          end: Number.isFinite(piece.range.end) ? piece.range.end : null,
          lineOffset: piece.lineOffset,
          digest: digestToJson(piece.digest),
        }));
        const pieces = result.pieces.map(
          (piece, p): SegmentPiece => ({
            start: piece.range.start,
            end: piece.range.end,
            lineOffset: piece.lineOffset,
            digest: piece.digest,
            aggregate: piece.aggregate,
            file: piece.written ? { path: paths[p]!, stamp: stamps[p]! } : null,
          }),
        );
        const digest = result.digest;
        data[i] = {
          source: segment.path,
          hint: segment.hint,
          digest,
          aggregate: null,
          file: null,
          segment,
          pieces,
        };
        return;
      }
      data[i] = {
        source: segment.path,
        hint: segment.hint,
        digest: result.digest,
        aggregate: result.aggregate,
        file: result.written ? { path: job.path!, stamp: job.stamp } : null,
        segment,
      };
    });
    if (relocating && target !== null) {
      for (let i = 0; i < inputSegments.length; i++) {
        const item = data[i]!;
        if (item.pieces !== undefined) {
          // A segment in pieces: each piece's file, as a segment's below.
          const pieces = item.pieces.map((piece): SegmentPiece => {
            if (piece.aggregate !== null || piece.file === null) return piece;
            if (piece.file.path.startsWith(join(target, "segments"))) return piece;
            const path = join(target, "segments", basename(piece.file.path));
            try {
              writeAtomic(path, readRegularFileSync(piece.file.path, null));
              return { ...piece, file: { path, stamp: piece.file.stamp } };
            } catch (error) {
              failures.push(`${target}: ${describeError(error)}`);
              return piece;
            }
          });
          data[i] = { ...item, pieces };
          continue;
        }
        if (
          item.aggregate !== null ||
          item.file === null ||
          item.file.path.startsWith(join(target, "segments"))
        )
          continue;
        const path = join(target, "segments", entries[i]!.file);
        try {
          writeAtomic(path, readRegularFileSync(item.file.path, null));
          data[i] = { ...item, file: { path, stamp: item.file.stamp } };
        } catch (error) {
          failures.push(`${target}: ${describeError(error)}`);
        }
      }
    }
    const segments = data as SegmentData[];
    const counts = { segments_reused: reused, segments_scanned: missing.length, segments_dropped: dropped };
    if (where === null) {
      await Promise.all(pending);
      return {
        segments,
        sizes,
        usage: {
          status: "disabled",
          location: null,
          ...counts,
          segments_dropped: 0,
          report_reused: false,
          reason: null,
        },
      };
    }
    const settle = (): Promise<IndexUsage> =>
      Promise.all(pending).then(() => this.writeCatalog(target, where, entries, failures, unusable, counts));
    if (options.settleLater === true && pending.length > 0) {
      // What the usage will be if every write succeeds; `settle` tells what it is.
      const provisional: IndexUsage = {
        status: this.catalog === null || relocating ? "built" : "updated",
        location: target,
        ...counts,
        report_reused: false,
        reason: this.reason,
      };
      return { segments, sizes, usage: provisional, settle };
    }
    return { segments, sizes, usage: await settle() };
  }

  /**
   * Once the scanned aggregates are written: the catalog, unreferenced files removed, and how the
   * index was used (`unavailable` when something could not be written).
   */
  private async writeCatalog(
    target: string | null,
    where: IndexPlace,
    entries: readonly (CatalogEntry | undefined)[],
    failures: readonly string[],
    unusable: readonly string[],
    counts: Pick<IndexUsage, "segments_reused" | "segments_scanned" | "segments_dropped">,
  ): Promise<IndexUsage> {
    const relocating = target !== null && target !== this.dir;
    if (target === null || failures.length > 0) {
      this.dir = null;
      const why =
        target === null
          ? `no writable index location (${unusable.join("; ")})`
          : `the index could not be written (${failures.join("; ")})`;
      return { status: "unavailable", location: null, ...counts, report_reused: false, reason: why };
    }
    const next: Catalog = {
      format: INDEX_FORMAT,
      version: INDEX_VERSION,
      settings: SETTINGS,
      base: where.base,
      segments: entries as CatalogEntry[],
    };
    try {
      writeAtomic(join(target, where.catalog), JSON.stringify(next));
      removeUnreferenced(target, where.catalog, next.segments);
      if (target === where.dirs[0] && !where.explicit) writeReadme(target);
    } catch (error) {
      this.dir = null;
      return {
        status: "unavailable",
        location: null,
        ...counts,
        report_reused: false,
        reason: `the index could not be written (${describeError(error)})`,
      };
    }
    const status = this.catalog === null || relocating ? "built" : "updated";
    this.dir = target;
    this.catalog = next;
    const reason =
      this.reason ??
      (unusable.length > 0 ? `the preferred location was not writable (${unusable.join("; ")})` : null);
    return { status, location: target, ...counts, report_reused: false, reason };
  }
}

/**
 * Deletes aggregate files no catalog in `dir` refers to (other inputs' catalogs may share the
 * directory). Blocking, as `writeReadme`: a few small calls, each of which took a round trip through
 * the thread pool at the end of every cold analysis.
 */
function removeUnreferenced(dir: string, catalogName: string, entries: readonly CatalogEntry[]): void {
  const referenced = new Set<string>();
  const refer = (entry: CatalogEntry): void => {
    referenced.add(entry.file);
    for (const piece of entry.pieces ?? []) referenced.add(piece.file);
  };
  for (const entry of entries) refer(entry);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (name === catalogName || !/^index.*\.json$/.test(name)) continue;
    const other = readCatalog(dir, name);
    for (const entry of other?.segments ?? []) refer(entry);
  }
  let files: string[];
  try {
    files = readdirSync(join(dir, "segments"));
  } catch {
    return;
  }
  const staleBefore = Date.now() - STALE_TEMPORARY_MS;
  for (const file of files) {
    const path = join(dir, "segments", file);
    if (/^seg-[0-9a-f]{24}(-\d+)?\.agg$/.test(file)) {
      if (!referenced.has(file)) rmSync(path, { force: true });
    } else if (isTemporaryAggregate(file)) {
      // Left by an analysis that ended while it wrote (killed, or ended early): an old one is no
      // other analysis's write under way.
      try {
        if (statSync(path).mtimeMs < staleBefore) rmSync(path, { force: true });
      } catch {
        // Renamed or removed meanwhile.
      }
    }
  }
}

/** A temporary aggregate file older than this is left over, not being written (an hour). */
const STALE_TEMPORARY_MS = 60 * 60 * 1000;

function writeReadme(dir: string): void {
  const path = join(dir, "README");
  try {
    statSync(path);
  } catch {
    writeFileSync(
      path,
      "Index written by `stormlog analyze` (@stormlog/analysis) to make later analyses of this sink fast.\n" +
        "It is rebuilt from the segments whenever they change; deleting this directory is always safe.\n",
    );
  }
}
