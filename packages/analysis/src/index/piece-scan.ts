/**
 * Scans a big segment in pieces (`input/pieces.ts`) on scan workers (`scan-worker.ts`) where the
 * machine has a second core: each thread takes the next piece off a shared counter, scans it and
 * writes its aggregate file. A process's first big scan runs on two workers while this thread waits
 * (scanning here as well grew this thread's heap, which the analysis after then kept: 20-40 MB more
 * peak RSS at 1 GB); later ones run here and on one worker. The pieces are then settled here, in
 * order: a piece whose scan does not stand on its own is scanned again with what came before it.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type ResourceLimits, Worker } from "node:worker_threads";
import type { TelemetryInputSegment } from "@stormlog/sink/internal";
import type { SegmentAggregate } from "../input/aggregate.js";
import { digestFromJson, digestOf, mergeDigests, type SegmentDigest } from "../input/digest.js";
import { outcomeOf, type PieceOutcome, type PieceRange, PieceSettler } from "../input/pieces.js";
import { type ScanScratch, scanRangeSync } from "../input/scan.js";
import type { ScanTask, WorkerReply } from "./scan-worker-protocol.js";

/** Where scanned aggregates go: encoded (in parts), then written on the thread pool (false: failed). */
export interface AggregateWriter {
  encode(aggregate: SegmentAggregate, stamp: string): Uint8Array[] | null;
  later(path: string, parts: readonly Uint8Array[]): Promise<boolean>;
}

/** A big segment to scan in pieces: its pieces, and where each piece's aggregate file goes. */
export interface PieceJob {
  readonly segment: TelemetryInputSegment;
  /** The segment's bytes when fingerprinted (the last piece reads to the end of the file). */
  readonly size: number;
  readonly ranges: readonly PieceRange[];
  readonly files: readonly string[];
  readonly stamps: readonly string[];
}

/** A scanned piece: its line offset and digest, and its aggregate unless its file has it. */
export interface ScannedPiece {
  readonly range: PieceRange;
  readonly lineOffset: number;
  readonly digest: SegmentDigest;
  readonly aggregate: SegmentAggregate | null;
  /** Its file is whole, or being written (see `pending`). */
  readonly written: boolean;
}

/** What `scanPieces` gives: the whole segment's digest, its pieces, and the writes still under way. */
export interface ScannedSegment {
  readonly digest: SegmentDigest;
  readonly pieces: readonly ScannedPiece[];
  readonly pending: readonly Promise<boolean>[];
}

/**
 * Scans `job`'s pieces on the scan workers and here (see above), then settles them. Aggregates
 * scanned here and written to their files are let go (the last one stays in memory: reading it back
 * would cost as much), so memory holds about a piece per thread. Throws what a scan of the whole
 * segment throws.
 */
export async function scanPieces(
  job: PieceJob,
  writer: AggregateWriter,
  onBytes: (done: number) => void,
  scratch: ScanScratch,
): Promise<ScannedSegment> {
  const { segment, ranges, files, stamps } = job;
  const count = ranges.length;
  const bytesOf = (k: number): number => Math.max(0, Math.min(ranges[k]!.end, job.size) - ranges[k]!.start);
  // undefined: not back; null: its scan threw, or its file could not be written.
  const outcomes: (PieceOutcome | null | undefined)[] = new Array(count).fill(undefined);
  const digests: (SegmentDigest | null)[] = new Array(count).fill(null);
  const aggregates: (SegmentAggregate | null)[] = new Array(count).fill(null);
  const writes: (Promise<boolean> | null)[] = new Array(count).fill(null);
  const byWorker = new Set<number>();
  let done = 0;

  /** Encodes and writes piece `k`'s aggregate, held until the write is whole (for good if it fails). */
  const store = (k: number, aggregate: SegmentAggregate): void => {
    aggregates[k] = aggregate;
    const parts = writer.encode(aggregate, stamps[k]!);
    writes[k] = parts === null ? Promise.resolve(false) : writer.later(files[k]!, parts);
  };
  /** Lets go of piece `k`'s aggregate once its file is whole. */
  const letGo = async (k: number): Promise<void> => {
    if (await writes[k]!) aggregates[k] = null;
  };

  const counter = new SharedArrayBuffer(4);
  const next = new Int32Array(counter);
  const warm = ScanWorker.warm;
  const workers = ScanWorker.start(count);
  let running = workers.length;
  let wake: (() => void) | null = null;
  const task: ScanTask = {
    id: ScanWorker.nextTask++,
    path: segment.path,
    hint: segment.hint,
    defaultSessionId: segment.defaultSessionId,
    ranges: ranges.map((range) => [range.start, range.end] as const),
    files,
    stamps,
    counter,
  };
  for (const worker of workers) {
    let over = false;
    // It ran out of pieces, or it is gone (whichever comes first).
    const finished = (): void => {
      if (over) return;
      over = true;
      running--;
      wake?.();
    };
    worker.run(
      task,
      (reply) => {
        if (reply.piece < 0) return finished();
        byWorker.add(reply.piece);
        outcomes[reply.piece] = reply.outcome;
        digests[reply.piece] = reply.digest === null ? null : digestFromJson(reply.digest);
        done += bytesOf(reply.piece);
        onBytes(done);
      },
      finished,
    );
  }

  let held = -1;
  /** Scans here the pieces left on the counter. */
  const scanHere = async (): Promise<void> => {
    for (;;) {
      const k = Atomics.add(next, 0, 1);
      if (k >= count) return;
      let outcome: PieceOutcome | null = null;
      try {
        const range = { start: ranges[k]!.start, end: ranges[k]!.end, lineOffset: 0 };
        const scan = scanRangeSync(segment, range, (bytes) => onBytes(done + bytes), scratch);
        outcome = outcomeOf(scan);
        digests[k] = digestOf(scan.aggregate);
        store(k, scan.aggregate);
        if (held >= 0) await letGo(held);
        held = k;
      } catch {
        // Settled below: scanned again with what came before it, which throws the error in place.
      }
      outcomes[k] = outcome;
      done += bytesOf(k);
      onBytes(done);
      // Let the workers' replies, progress output and the writes above run.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  };
  try {
    // A thread that has scanned before scans beside its worker; else it waits for its workers.
    if (workers.length === 0 || warm) await scanHere();
    while (running > 0) await new Promise<void>((resolve) => (wake = resolve));
    // Pieces no worker took (they are gone): scanned here.
    await scanHere();
  } finally {
    // A process's first big scan ends its workers; a later one keeps one (see ScanWorker).
    for (const [k, worker] of workers.entries()) worker.end(warm && k === 0);
    ScanWorker.warm = true;
  }

  const settler = new PieceSettler(segment);
  const offsets: number[] = [];
  for (let k = 0; k < count; k++) {
    const scanned = outcomes[k] ?? null;
    const redo = settler.redo(ranges[k]!, scanned);
    let outcome: PieceOutcome;
    if (redo === null && scanned !== null) outcome = scanned;
    else {
      if (writes[k] !== null) await writes[k];
      const scan = scanRangeSync(segment, redo!, undefined, scratch);
      outcome = outcomeOf(scan);
      digests[k] = digestOf(scan.aggregate);
      byWorker.delete(k);
      store(k, scan.aggregate);
      if (k !== held) await letGo(k);
    }
    offsets.push(settler.accept(outcome));
  }
  const pieces = ranges.map(
    (range, k): ScannedPiece => ({
      range,
      lineOffset: offsets[k]!,
      digest: digests[k]!,
      aggregate: aggregates[k]!,
      written: byWorker.has(k) || writes[k] !== null,
    }),
  );
  const digest = mergeDigests(pieces.map(({ digest, lineOffset }) => ({ digest, lineOffset })));
  return { digest, pieces, pending: writes.filter((write) => write !== null) };
}

/** Fewer pieces than this are scanned here: starting workers would cost more than they save. */
const MIN_PIECES = 8;
/**
 * A worker's heap: small, so that the workers and this thread stay within about 200 MB at 1 GB (a
 * piece's aggregate is a few MB). A worker that runs out (a line of tens of MB) ends, and the
 * pieces it did not return are scanned here.
 */
const LIMITS: ResourceLimits = { maxYoungGenerationSizeMb: 4, maxOldGenerationSizeMb: 48 };

/** How long a kept worker waits, idle, for the next big scan before it ends. */
const IDLE_MS = 10_000;

/**
 * A scan worker. The workers of a process's first big scan end after it (a one-shot process, as
 * the CLI is, then analyses within its peak memory); a process that scans again keeps one,
 * idle and unreferenced, for IDLE_MS, so that its next scan has a second thread whose scan code is
 * compiled (a fresh worker spends its first pieces compiling it: 100-150 ms).
 */
class ScanWorker {
  static nextTask = 1;
  /** Workers running now (one big scan at a time has them). */
  private static running = 0;
  /** Whether this thread has scanned a big segment before (its scan code compiled, its heap grown). */
  static warm = false;
  private static kept: { worker: ScanWorker; timer: NodeJS.Timeout } | null = null;

  private alive = true;
  private onReply: ((reply: WorkerReply) => void) | null = null;
  private onGone: (() => void) | null = null;
  private task = 0;

  private constructor(private readonly worker: Worker) {
    worker.on("message", (reply: WorkerReply) => {
      if (reply.id === this.task) this.onReply?.(reply);
    });
    const gone = (): void => {
      if (!this.alive) return;
      this.alive = false;
      if (ScanWorker.kept?.worker === this) {
        clearTimeout(ScanWorker.kept.timer);
        ScanWorker.kept = null;
      }
      const onGone = this.onGone;
      this.onGone = null;
      onGone?.();
    };
    worker.on("error", gone);
    worker.on("exit", gone);
  }

  /**
   * Workers for a segment of `pieces` pieces: one per core but this thread's, and both cores'
   * worth while this thread has never scanned (the first analysis of a process, as the CLI runs:
   * its heap stays small until the analysis grows it anyway); none for a few pieces, on a single
   * core, while another scan has them, or with `STORMLOG_SCAN_THREADS=1` (tests and benchmarks
   * compare the two).
   */
  static start(pieces: number): ScanWorker[] {
    const cores = Math.min(2, availableParallelism());
    if (pieces < MIN_PIECES || cores < 2 || ScanWorker.running > 0) return [];
    if (process.env.STORMLOG_SCAN_THREADS === "1") return [];
    const workers: ScanWorker[] = [];
    const kept = ScanWorker.kept;
    if (kept !== null) {
      ScanWorker.kept = null;
      clearTimeout(kept.timer);
      kept.worker.worker.ref();
      workers.push(kept.worker);
    }
    while (workers.length < (ScanWorker.warm ? cores - 1 : cores)) {
      const started = startScanWorker();
      if (started === null) break;
      workers.push(new ScanWorker(started));
    }
    ScanWorker.running = workers.length;
    return workers;
  }

  /** Posts `task`; `onReply` gets the worker's replies, `onGone` is called if it ends first. */
  run(task: ScanTask, onReply: (reply: WorkerReply) => void, onGone: () => void): void {
    this.task = task.id;
    this.onReply = onReply;
    this.onGone = onGone;
    this.worker.postMessage(task);
  }

  /** Ends the worker, or, with `keep`, keeps it for the next scan (see the class). */
  end(keep: boolean): void {
    ScanWorker.running--;
    this.onReply = null;
    this.onGone = null;
    if (keep && this.alive && ScanWorker.kept === null) {
      this.worker.unref();
      const timer = setTimeout(() => {
        if (ScanWorker.kept?.worker !== this) return;
        ScanWorker.kept = null;
        this.alive = false;
        void this.worker.terminate();
      }, IDLE_MS);
      timer.unref();
      ScanWorker.kept = { worker: this, timer };
      return;
    }
    this.alive = false;
    void this.worker.terminate();
  }
}

/**
 * Starts `scan-worker` next to this module: the built `.js`/`.cjs` (or the CLI bundle's), or, when
 * the analysis runs from its TypeScript source (this repository's tests and benchmarks), the `.ts`
 * file through tsx. Null when there is none to start (the scan then runs on this thread).
 */
function startScanWorker(): Worker | null {
  try {
    const here = import.meta.url;
    if (!here.endsWith(".ts")) {
      const entry = new URL(here.endsWith(".cjs") ? "./scan-worker.cjs" : "./scan-worker.js", here);
      if (!existsSync(fileURLToPath(entry))) return null;
      return new Worker(entry, { execArgv: [], resourceLimits: LIMITS });
    }
    const entry = new URL("./scan-worker.ts", here).href;
    const tsx = tsxLoaderUrl(here);
    if (tsx === null) return null;
    const bootstrap = `import(${JSON.stringify(tsx)}).then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}));`;
    return new Worker(bootstrap, {
      eval: true,
      execArgv: ["--conditions=@stormlog/source"],
      // Compiling the source through tsx takes more than the scan's own heap.
      // Compiling the source through tsx takes more than the scan's own heap.
      resourceLimits: { ...LIMITS, maxOldGenerationSizeMb: 128 },
    });
  } catch {
    return null;
  }
}

/** tsx's ESM loader API (`tsx/esm/api`, its `import` export), found from `from`; null without tsx. */
function tsxLoaderUrl(from: string): string | null {
  const manifestPath = createRequire(from).resolve("tsx/package.json");
  const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as {
    exports: Record<string, { import: { default: string } }>;
  };
  const api = manifest.exports["./esm/api"]?.import.default;
  return api === undefined ? null : new URL(api, pathToFileURL(manifestPath)).href;
}
