/**
 * Transparent indexing. The first analysis of a sink writes, as a by-product of its scan, one
 * aggregate file per segment and a catalog into `<sink>/.stormlog-index/` (or, when that location
 * is not writable, a cache directory), plus the finished report. A later analysis stats every
 * segment (and the manifests and rollups): when nothing changed it returns the stored report; else
 * it reads the aggregate of each segment whose size, mtime, ctime and inode are unchanged, scans
 * only segments that changed or appeared, forgets pruned ones, and starts over when the index's
 * format or settings differ. There is no separate indexing step, and nothing is used unless its
 * source provably did not change: a file modified within two seconds of being indexed is read again.
 */
import { createHash } from "node:crypto";
import { readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { mkdir, readdir, rm, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, join, relative } from "node:path";
import { DETAIL_CAP, type SegmentAggregate } from "./aggregate.js";
import { aggregateRanks, decodeAggregate, encodeAggregate } from "./index-format.js";
import type { SegmentData } from "./merge.js";
import { deserializeReport, serializeReport } from "./report-cache.js";
import { type InputSegment, type ResolvedInput, scanSegment } from "./scan.js";
import type { AnalysisReport, IndexUsage } from "./types.js";

/** Directory the index is written to, beside the input. */
export const INDEX_DIRNAME = ".stormlog-index";
/** `format` of the catalog. */
export const INDEX_FORMAT = "stormlog.analysis_index";
/** Bumped whenever what an aggregate or a stored report holds, or how it is computed, changes. */
export const INDEX_VERSION = 1;
/** Environment variable naming the cache directory for indexes. */
export const CACHE_DIR_ENV = "STORMLOG_CACHE_DIR";

/** Everything an aggregate depends on besides the segment's bytes. */
const SETTINGS = JSON.stringify({
  version: INDEX_VERSION,
  detailCap: DETAIL_CAP,
  strict: true,
  permissiveLegacy: true,
  upgradeTo: 3,
});
/** A file modified this recently may still change within the file system's timestamp granularity. */
const RACY_NS = 2_000_000_000n;
/** Stored reports kept per index (one per session choice). */
const MAX_REPORTS = 8;

interface Fingerprint {
  size: number;
  mtimeNs: string;
  ctimeNs: string;
  ino: string;
  dev: string;
}

interface CatalogEntry extends Fingerprint {
  /** Segment path relative to the index base. */
  path: string;
  file: string;
  lines: number;
  events: number;
  minTs: string | null;
  maxTs: string | null;
  ranks: number[];
  /** Modified within RACY_NS of indexing: never trusted, scanned again. */
  racy: boolean;
}

interface Catalog {
  format: string;
  version: number;
  settings: string;
  /** Absolute directory segment paths are relative to. */
  base: string;
  segments: CatalogEntry[];
}

/** Options of `SegmentIndex.open`. */
export interface SegmentIndexOptions {
  index: boolean;
  cacheDir?: string;
  onProgress?: (progress: { phase: string; done: number; total: number }) => void;
}

/** Segments' aggregates in reading order, their sizes, and how the index was used. */
export interface LoadedSegments {
  segments: SegmentData[];
  sizes: number[];
  usage: IndexUsage;
}

async function fingerprint(path: string): Promise<Fingerprint | null> {
  try {
    const info = await stat(path, { bigint: true });
    return {
      size: Number(info.size),
      mtimeNs: info.mtimeNs.toString(),
      ctimeNs: info.ctimeNs.toString(),
      ino: info.ino.toString(),
      dev: info.dev.toString(),
    };
  } catch {
    return null;
  }
}

const printText = (print: Fingerprint | null): string =>
  print === null ? "-" : `${print.size}:${print.mtimeNs}:${print.ctimeNs}:${print.ino}:${print.dev}`;

const sameFingerprint = (a: Fingerprint, b: Fingerprint): boolean =>
  a.size === b.size &&
  a.mtimeNs === b.mtimeNs &&
  a.ctimeNs === b.ctimeNs &&
  a.ino === b.ino &&
  a.dev === b.dev;

function isRacy(print: Fingerprint | null, nowNs: bigint): boolean {
  return (
    print !== null && (nowNs - BigInt(print.mtimeNs) < RACY_NS || nowNs - BigInt(print.ctimeNs) < RACY_NS)
  );
}

function stampOf(path: string, print: Fingerprint): string {
  return `${path}|${printText(print)}|${SETTINGS}`;
}

const hash = (text: string, length: number): string =>
  createHash("sha1").update(text).digest("hex").slice(0, length);

/** The user cache directory for indexes. */
function userCacheDir(): string {
  const env = process.env[CACHE_DIR_ENV];
  if (env) return env;
  const xdg = process.env.XDG_CACHE_HOME;
  return join(xdg || join(homedir(), ".cache"), "stormlog");
}

/** Where an input's index lives: base directory, catalog file name, candidate index directories. */
function locate(
  input: ResolvedInput,
  cacheDir: string | undefined,
): { base: string; catalog: string; dirs: string[]; explicit: boolean } {
  const file = input.kind === "jsonl" || basename(input.absolute) === "manifest.json";
  const base = file ? dirname(input.absolute) : input.absolute;
  const catalog = input.kind === "jsonl" ? `index-${basename(input.absolute)}.json` : "index.json";
  const cached = (root: string): string => join(root, hash(base, 16));
  const explicit = cacheDir ?? process.env[CACHE_DIR_ENV];
  if (explicit) return { base, catalog, dirs: [cached(explicit)], explicit: true };
  return { base, catalog, dirs: [join(base, INDEX_DIRNAME), cached(userCacheDir())], explicit: false };
}

async function readCatalog(dir: string, name: string): Promise<Catalog | null> {
  try {
    const value = JSON.parse(readFileSync(join(dir, name), "utf8")) as Catalog;
    if (typeof value !== "object" || value === null || !Array.isArray(value.segments)) return null;
    return value;
  } catch {
    return null;
  }
}

/** Writes through a temporary file and a rename, so readers never see half a file (synchronous: small files, CPU-bound caller). */
async function writeAtomic(path: string, data: Uint8Array | string): Promise<void> {
  const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (error) {
    rmSync(tmp, { force: true });
    throw error;
  }
}

function describeError(error: unknown): string {
  const code = (error as { code?: string }).code;
  return code ? `${code}: ${(error as Error).message}` : String(error);
}

async function scanAll(
  segments: readonly InputSegment[],
  onProgress: SegmentIndexOptions["onProgress"],
  sizes: readonly number[],
): Promise<SegmentAggregate[]> {
  let total = 0;
  for (const size of sizes) total += size;
  let done = 0;
  const out: SegmentAggregate[] = [];
  for (let i = 0; i < segments.length; i++) {
    const before = done;
    out.push(
      await scanSegment(segments[i]!, (bytes) =>
        onProgress?.({ phase: "scan", done: before + bytes, total }),
      ),
    );
    done += sizes[i]!;
    onProgress?.({ phase: "scan", done, total });
  }
  return out;
}

/** The index of one input: what is known about its segments, and where it is stored. */
export class SegmentIndex {
  private constructor(
    private readonly options: SegmentIndexOptions,
    private readonly segmentsIn: readonly InputSegment[],
    private readonly prints: readonly Fingerprint[],
    private readonly where: ReturnType<typeof locate> | null,
    private dir: string | null,
    private catalog: Catalog | null,
    private readonly reason: string | null,
    /** Digest of everything the report depends on; null when something may still be changing. */
    private readonly state: string | null,
  ) {}

  /** Stats the input's files and reads the catalog (no segment is read yet). */
  static async open(input: ResolvedInput, options: SegmentIndexOptions): Promise<SegmentIndex> {
    const segments = input.parts.flatMap((part) => part.segments);
    const prints = await Promise.all(segments.map((segment) => fingerprint(segment.path)));
    const missing = prints.indexOf(null);
    if (missing >= 0) {
      // Listed a moment ago and gone now (retention pruned it): the scan reports it as the reader would.
      prints[missing] = { size: 0, mtimeNs: "0", ctimeNs: "0", ino: "0", dev: "0" };
    }
    const solid = prints as Fingerprint[];
    if (!options.index)
      return new SegmentIndex(options, segments, solid, null, null, null, null, null);
    const where = locate(input, options.cacheDir);
    let dir = where.dirs[0]!;
    let catalog = await readCatalog(dir, where.catalog);
    if (catalog === null && where.dirs.length > 1) {
      const other = await readCatalog(where.dirs[1]!, where.catalog);
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
    const sidecars = await Promise.all(
      input.parts.flatMap((part) => [
        fingerprint(join(part.dir, "manifest.json")),
        fingerprint(join(part.dir, "rollups.json")),
      ]),
    );
    const racy =
      missing >= 0 ||
      solid.some((print) => isRacy(print, nowNs)) ||
      sidecars.some((print) => isRacy(print, nowNs));
    const state = racy
      ? null
      : hash(
          [
            input.kind,
            where.base,
            ...input.parts.map((part) => relative(where.base, part.dir)),
            ...sidecars.map(printText),
            ...segments.map((segment, i) => `${relative(where.base, segment.path)}=${printText(solid[i]!)}`),
          ].join("\n"),
          32,
        );
    return new SegmentIndex(options, segments, solid, where, dir, catalog, reason, state);
  }

  /** Segment sizes in reading order. */
  get sizes(): number[] {
    return this.prints.map((print) => print.size);
  }

  private reportFile(sessionId: string | undefined): string | null {
    if (this.state === null || this.dir === null) return null;
    return join(this.dir, `report-${this.state.slice(0, 24)}-${hash(sessionId ?? "", 8)}.json`);
  }

  /** The stored report for this exact state of the input, if there is one. */
  async readReport(sessionId: string | undefined): Promise<AnalysisReport | null> {
    const file = this.reportFile(sessionId);
    if (file === null || this.catalog === null) return null;
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      return null;
    }
    const report = deserializeReport(text, `${this.state}|${sessionId ?? ""}`);
    if (report === null) return null;
    report.index = {
      status: "reused",
      location: this.dir,
      segments_reused: this.segmentsIn.length,
      segments_scanned: 0,
      segments_dropped: 0,
      report_reused: true,
      reason: null,
    };
    return report;
  }

  /** Stores a finished report (best effort: failures only mean the next analysis recomputes it). */
  async writeReport(sessionId: string | undefined, report: AnalysisReport): Promise<void> {
    const file = this.reportFile(sessionId);
    if (file === null || report.index === null || report.index.location !== this.dir) return;
    try {
      await writeAtomic(file, serializeReport(report, `${this.state}|${sessionId ?? ""}`));
      const prefix = `report-${this.state!.slice(0, 24)}-`;
      const others = (await readdir(this.dir!)).filter((name) =>
        /^report-[0-9a-f]{24}-[0-9a-f]{8}\.json$/.test(name),
      );
      const stale = others.filter((name) => !name.startsWith(prefix));
      const current = others.filter((name) => name.startsWith(prefix));
      for (const name of stale) await rm(join(this.dir!, name), { force: true });
      if (current.length > MAX_REPORTS) {
        const dated = await Promise.all(
          current.map(async (name) => ({ name, mtime: (await stat(join(this.dir!, name))).mtimeMs })),
        );
        dated.sort((a, b) => a.mtime - b.mtime);
        for (const { name } of dated.slice(0, dated.length - MAX_REPORTS))
          await rm(join(this.dir!, name), { force: true });
      }
    } catch {
      // Best effort.
    }
  }

  /**
   * The aggregates of every segment, from the index where fresh, else by scanning (and then written
   * to the index). Without an index everything is scanned and nothing written.
   */
  async loadSegments(): Promise<LoadedSegments> {
    const { options, segmentsIn: inputSegments, prints } = this;
    const sizes = this.sizes;
    const toData = (aggregates: readonly SegmentAggregate[]): SegmentData[] =>
      aggregates.map((aggregate, i) => ({
        source: inputSegments[i]!.path,
        hint: inputSegments[i]!.hint,
        aggregate,
      }));
    const where = this.where;
    if (where === null) {
      const aggregates = await scanAll(inputSegments, options.onProgress, sizes);
      return {
        segments: toData(aggregates),
        sizes,
        usage: {
          status: "disabled",
          location: null,
          segments_reused: 0,
          segments_scanned: inputSegments.length,
          segments_dropped: 0,
          report_reused: false,
          reason: null,
        },
      };
    }
    let dir = this.dir!;
    const catalog = this.catalog;
    const known = new Map<string, CatalogEntry>();
    for (const entry of catalog?.segments ?? []) known.set(entry.path, entry);
    const aggregates: (SegmentAggregate | undefined)[] = new Array(inputSegments.length);
    const relPaths = inputSegments.map((segment) => relative(where.base, segment.path));
    await Promise.all(
      inputSegments.map(async (_segment, i) => {
        const entry = known.get(relPaths[i]!);
        if (entry === undefined || entry.racy || !sameFingerprint(entry, prints[i]!)) return;
        try {
          aggregates[i] = decodeAggregate(
            readFileSync(join(dir, "segments", entry.file)),
            stampOf(relPaths[i]!, prints[i]!),
          );
        } catch {
          aggregates[i] = undefined;
        }
      }),
    );
    const missing = inputSegments.map((_, i) => i).filter((i) => aggregates[i] === undefined);
    const scanned = await scanAll(
      missing.map((i) => inputSegments[i]!),
      options.onProgress,
      missing.map((i) => sizes[i]!),
    );
    missing.forEach((i, k) => {
      aggregates[i] = scanned[k]!;
    });
    const reused = inputSegments.length - missing.length;
    const current = new Set(relPaths);
    const dropped = [...known.keys()].filter((path) => !current.has(path)).length;
    const result = toData(aggregates as SegmentAggregate[]);
    const reason = this.reason;
    if (missing.length === 0 && dropped === 0 && catalog !== null) {
      return {
        segments: result,
        sizes,
        usage: {
          status: "reused",
          location: dir,
          segments_reused: reused,
          segments_scanned: 0,
          segments_dropped: 0,
          report_reused: false,
          reason,
        },
      };
    }

    // Write the scanned segments' aggregates and the new catalog; on failure try the next location.
    const nowNs = BigInt(Date.now()) * 1_000_000n;
    const entries: CatalogEntry[] = inputSegments.map((_segment, i) => {
      const print = prints[i]!;
      const aggregate = aggregates[i]!;
      return {
        path: relPaths[i]!,
        ...print,
        file: `seg-${hash(stampOf(relPaths[i]!, print), 24)}.agg`,
        lines: aggregate.lineCount,
        events: aggregate.eventCount,
        minTs: aggregate.minTs?.toString() ?? null,
        maxTs: aggregate.maxTs?.toString() ?? null,
        ranks: aggregateRanks(aggregate),
        racy: isRacy(print, nowNs),
      };
    });
    const next: Catalog = {
      format: INDEX_FORMAT,
      version: INDEX_VERSION,
      settings: SETTINGS,
      base: where.base,
      segments: entries,
    };
    const fresh = new Set(missing);
    const candidates = [dir, ...where.dirs.filter((candidate) => candidate !== dir)];
    const failures: string[] = [];
    for (const candidate of candidates) {
      try {
        const segmentsDir = join(candidate, "segments");
        await mkdir(segmentsDir, { recursive: true });
        const rewriteAll = candidate !== dir;
        for (let k = 0; k < entries.length; k++) {
          if (!fresh.has(k) && !rewriteAll) continue;
          const entry = entries[k]!;
          await writeAtomic(
            join(segmentsDir, entry.file),
            encodeAggregate(aggregates[k]!, stampOf(entry.path, prints[k]!)),
          );
        }
        await writeAtomic(join(candidate, where.catalog), JSON.stringify(next));
        await removeUnreferenced(candidate, where.catalog, entries);
        if (candidate === where.dirs[0] && !where.explicit) await writeReadme(candidate);
        dir = candidate;
        this.dir = candidate;
        this.catalog = next;
        return {
          segments: result,
          sizes,
          usage: {
            status: catalog === null ? "built" : "updated",
            location: candidate,
            segments_reused: reused,
            segments_scanned: missing.length,
            segments_dropped: dropped,
            report_reused: false,
            reason,
          },
        };
      } catch (error) {
        failures.push(`${candidate}: ${describeError(error)}`);
      }
    }
    this.dir = null;
    return {
      segments: result,
      sizes,
      usage: {
        status: "unavailable",
        location: null,
        segments_reused: reused,
        segments_scanned: missing.length,
        segments_dropped: dropped,
        report_reused: false,
        reason: `no writable index location (${failures.join("; ")})`,
      },
    };
  }
}

/** Deletes aggregate files no catalog in `dir` refers to (other inputs' catalogs may share the directory). */
async function removeUnreferenced(
  dir: string,
  catalogName: string,
  entries: readonly CatalogEntry[],
): Promise<void> {
  const referenced = new Set(entries.map((entry) => entry.file));
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (name === catalogName || !/^index.*\.json$/.test(name)) continue;
    const other = await readCatalog(dir, name);
    for (const entry of other?.segments ?? []) referenced.add(entry.file);
  }
  let files: string[];
  try {
    files = await readdir(join(dir, "segments"));
  } catch {
    return;
  }
  for (const file of files) {
    if (/^seg-[0-9a-f]{24}\.agg$/.test(file) && !referenced.has(file))
      await rm(join(dir, "segments", file), { force: true });
  }
}

async function writeReadme(dir: string): Promise<void> {
  const path = join(dir, "README");
  try {
    await stat(path);
  } catch {
    await writeFile(
      path,
      "Index written by `stormlog analyze` (@stormlog/analysis) to make later analyses of this sink fast.\n" +
        "It is rebuilt from the segments whenever they change; deleting this directory is always safe.\n",
    );
  }
}
