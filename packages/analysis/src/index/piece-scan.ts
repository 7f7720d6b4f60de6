/**
 * Scans the segments an analysis must scan, big ones in pieces (`input/pieces.ts`), on scan workers
 * (`scan-worker.ts`) where the machine has a second core and there is enough to scan: each thread
 * takes the next piece (or whole segment) off a shared counter, scans it and writes its aggregate
 * file. A process's first scan of 512 MiB or more runs on two workers while this thread waits
 * (scanning here as well grew this thread's heap, which the analysis after then kept: 20-40 MB more
 * peak RSS at 1 GB); smaller ones run here, beside one worker where workers help (`threads.ts`:
 * this thread starts at once, while a fresh worker starts and compiles the scan code), and later
 * ones here and beside one worker, which stays for the next (on two cores as well: a process that
 * scans big inputs again pays a worker's compiling once). Each segment's pieces are then settled here, in
 * order: a piece whose scan does not stand on its own is scanned again with what came before it,
 * so that errors, warnings and results are those of one scan of each segment after the other.
 */
import { availableParallelism } from "node:os";
import type { ResourceLimits, Worker } from "node:worker_threads";
import { startWorkerBeside } from "@stormlog/core/internal";
import type { TelemetryInputSegment } from "@stormlog/sink/internal";
import type { SegmentAggregate } from "../input/aggregate.js";
import { digestFromJson, digestOf, mergeDigests, type SegmentDigest } from "../input/digest.js";
import { outcomeOf, type PieceOutcome, type PieceRange, PieceSettler, pieceBytes } from "../input/pieces.js";
import { type ScanScratch, scanRangeSync } from "../input/scan.js";
import { workersAllowed, workersHelp } from "../threads.js";
import type { ScanTask, WorkerReply } from "./scan-worker-protocol.js";

/** Where scanned aggregates go: encoded (in parts), then written on the thread pool (false: failed). */
export interface AggregateWriter {
  encode(aggregate: SegmentAggregate, stamp: string): Uint8Array[] | null;
  later(path: string, parts: readonly Uint8Array[]): Promise<boolean>;
}

/**
 * A segment to scan: its pieces (one, `[0, Infinity)`, for a segment scanned whole), and where each
 * piece's aggregate file goes.
 */
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
  /** Its file is whole, or being written (see `ScannedSegments.pending`). */
  readonly written: boolean;
}

/** A scanned segment: its digest (the whole segment's), and its pieces. */
export interface ScannedSegment {
  readonly digest: SegmentDigest;
  readonly pieces: readonly ScannedPiece[];
}

/** What `scanSegments` gives: each job's segment, and the writes still under way. */
export interface ScannedSegments {
  readonly segments: readonly ScannedSegment[];
  readonly pending: readonly Promise<boolean>[];
}

/** Scan workers start only for this many pieces' bytes (`PIECE_BYTES` each) or more in all. */
const MIN_PIECES = 8;
/** A process's first scan of this many pieces' bytes or more runs on workers alone (512 MiB). */
const ALONE_PIECES = 32;

/**
 * Scans the jobs' pieces on the scan workers and here (see above), then settles each segment's.
 * Aggregates scanned here and written to their files are let go, except within `keepBytes`
 * (encoded, summed) and the last one (reading it back would cost as much), so memory holds about a
 * piece per thread beyond that. Throws what scanning the segments one after the other throws.
 */
export async function scanSegments(
  jobs: readonly PieceJob[],
  writer: AggregateWriter,
  keepBytes: number,
  onBytes: (done: number) => void,
  scratch: ScanScratch,
): Promise<ScannedSegments> {
  // Every piece of every job, in reading order.
  const units = jobs.flatMap((job, j) => job.ranges.map((range, k) => ({ job: j, piece: k, range })));
  const count = units.length;
  const bytesOf = (u: number): number => {
    const { job, range } = units[u]!;
    return Math.max(0, Math.min(range.end, jobs[job]!.size) - range.start);
  };
  // undefined: not back; null: its scan threw, or its file could not be written.
  const outcomes: (PieceOutcome | null | undefined)[] = new Array(count).fill(undefined);
  const digests: (SegmentDigest | null)[] = new Array(count).fill(null);
  const aggregates: (SegmentAggregate | null)[] = new Array(count).fill(null);
  const writes: (Promise<boolean> | null)[] = new Array(count).fill(null);
  const byWorker = new Set<number>();
  const fileOf = (u: number): string => jobs[units[u]!.job]!.files[units[u]!.piece]!;
  const stampOf = (u: number): string => jobs[units[u]!.job]!.stamps[units[u]!.piece]!;
  let done = 0;
  let kept = 0;
  let held = -1;

  /** Encodes and writes unit `u`'s aggregate; kept within the budget, else held until let go. */
  const store = async (u: number, aggregate: SegmentAggregate): Promise<void> => {
    aggregates[u] = aggregate;
    const parts = writer.encode(aggregate, stampOf(u));
    writes[u] = parts === null ? Promise.resolve(false) : writer.later(fileOf(u), parts);
    let size = 0;
    for (const part of parts ?? []) size += part.length;
    if (parts !== null && kept + size <= keepBytes) {
      kept += size;
      return;
    }
    const previous = held;
    held = u;
    if (previous >= 0) await letGo(previous);
  };
  /** Lets go of unit `u`'s aggregate once its file is whole (kept if it could not be written). */
  const letGo = async (u: number): Promise<void> => {
    if (await writes[u]!) aggregates[u] = null;
  };

  let total = 0;
  for (const job of jobs) total += job.size;
  const counter = new SharedArrayBuffer(4);
  const next = new Int32Array(counter);
  const warm = ScanWorker.warm;
  // This thread scans too, beside one worker, unless a first scan is big (see the file's comment).
  const here = warm || total < ALONE_PIECES * pieceBytes();
  // A fresh worker beside this thread pays only where workers help (`workersHelp`): on two cores it
  // finished its first piece ~300 ms in, and this thread then read back and decoded its aggregates.
  const helped = warm || !here || workersHelp();
  const big = count > 1 && total >= MIN_PIECES * pieceBytes();
  const workers = big && helped ? ScanWorker.start(here) : [];
  let running = workers.length;
  let wake: (() => void) | null = null;
  const task: ScanTask = {
    id: ScanWorker.nextTask++,
    units: units.map((unit, u) => {
      const { segment } = jobs[unit.job]!;
      return {
        path: segment.path,
        hint: segment.hint,
        defaultSessionId: segment.defaultSessionId,
        start: unit.range.start,
        end: unit.range.end,
        file: fileOf(u),
        stamp: stampOf(u),
      };
    }),
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
        if (reply.unit < 0) return finished();
        byWorker.add(reply.unit);
        outcomes[reply.unit] = reply.outcome;
        digests[reply.unit] = reply.digest === null ? null : digestFromJson(reply.digest);
        done += bytesOf(reply.unit);
        onBytes(done);
      },
      finished,
    );
  }

  /** Scans here the units left on the counter. */
  const scanHere = async (): Promise<void> => {
    for (;;) {
      const u = Atomics.add(next, 0, 1);
      if (u >= count) return;
      const { job, range } = units[u]!;
      let outcome: PieceOutcome | null = null;
      try {
        const scan = scanRangeSync(
          jobs[job]!.segment,
          { start: range.start, end: range.end, lineOffset: 0 },
          (bytes) => onBytes(done + bytes),
          scratch,
        );
        outcome = outcomeOf(scan);
        digests[u] = digestOf(scan.aggregate);
        await store(u, scan.aggregate);
      } catch {
        // Settled below: scanned again with what came before it, which throws the error in place.
      }
      outcomes[u] = outcome;
      done += bytesOf(u);
      onBytes(done);
      // Let the workers' replies, progress output and the writes above run.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  };
  let scanned = false;
  try {
    // A thread that has scanned before scans beside its worker; else it waits for its workers.
    if (workers.length === 0 || here) await scanHere();
    while (running > 0) await new Promise<void>((resolve) => (wake = resolve));
    // Units no worker took (they are gone): scanned here.
    await scanHere();
    scanned = true;
  } finally {
    // A process's first big scan ends its workers; a later one keeps one (see ScanWorker), unless
    // it threw (its worker may still be scanning the pieces of a scan no one waits for).
    for (const [k, worker] of workers.entries()) worker.end(scanned && warm && k === 0);
    // A thread that scanned a big input once is likely to again (a server, a notebook): its next
    // big scan has a worker beside it, even where a first scan's worker would not pay.
    if (big) ScanWorker.warm = true;
  }

  const segments: ScannedSegment[] = [];
  let u = 0;
  for (const job of jobs) {
    const settler = new PieceSettler(job.segment);
    const pieces: ScannedPiece[] = [];
    for (const range of job.ranges) {
      const scanned = outcomes[u] ?? null;
      const redo = settler.redo(range, scanned);
      let outcome: PieceOutcome;
      if (redo === null && scanned !== null) outcome = scanned;
      else {
        if (writes[u] !== null) await writes[u];
        const scan = scanRangeSync(job.segment, redo!, undefined, scratch);
        outcome = outcomeOf(scan);
        digests[u] = digestOf(scan.aggregate);
        byWorker.delete(u);
        await store(u, scan.aggregate);
      }
      pieces.push({
        range,
        lineOffset: settler.accept(outcome),
        digest: digests[u]!,
        aggregate: null,
        written: false,
      });
      u++;
    }
    segments.push({
      digest: pieces.length === 1 ? pieces[0]!.digest : mergeDigests(pieces),
      pieces,
    });
  }
  // What is still held once every write is under way (let go meanwhile: see `store`).
  let v = 0;
  const out = segments.map(
    (segment): ScannedSegment => ({
      digest: segment.digest,
      pieces: segment.pieces.map((piece) => {
        const w = v++;
        return { ...piece, aggregate: aggregates[w]!, written: byWorker.has(w) || writes[w] !== null };
      }),
    }),
  );
  return { segments: out, pending: writes.filter((write) => write !== null) };
}

/**
 * A worker's heap: a small old generation, so that the workers and this thread stay within about
 * 200 MB at 1 GB (a piece's aggregate is a few MB). A worker that runs out (a line of tens of MB)
 * ends, and the pieces it did not return are scanned here.
 */
const LIMITS: ResourceLimits = { maxOldGenerationSizeMb: 48 };

/**
 * A worker's young generation (MB): a scan's garbage is short-lived, and with 4 MB a worker spent
 * more time collecting than this thread (49 collections against its 32 on the 240 MB, 64-rank
 * file). The one worker beside this thread gets 32 (`stormlog analyze` on that job as a sink root
 * up to 7 % faster, as one file within noise, peak RSS the same); the two of a first scan of 512 MiB
 * or more, whose peak memory is the highest, 16 (the 1.1 GB file 7-10 % faster, peak RSS 190-197
 * MiB against 183-199).
 */
const youngMb = (here: boolean): number => (here ? 32 : 16);

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
   * Workers for a scan: one per core but this thread's when it scans `here` as well, else both
   * cores' worth; none on a single core, while another scan has them, or with
   * `STORMLOG_SCAN_THREADS=1` (tests and benchmarks compare the two).
   */
  static start(here: boolean): ScanWorker[] {
    if (!workersAllowed() || ScanWorker.running > 0) return [];
    const cores = Math.min(2, availableParallelism());
    const workers: ScanWorker[] = [];
    const kept = ScanWorker.kept;
    if (kept !== null) {
      ScanWorker.kept = null;
      clearTimeout(kept.timer);
      kept.worker.worker.ref();
      workers.push(kept.worker);
    }
    while (workers.length < (here ? cores - 1 : cores)) {
      const started = startScanWorker(youngMb(here));
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
 * Starts `scan-worker` next to this module (see `startWorkerBeside`), its young generation `young`
 * MB; null when there is none to start (the scan then runs on this thread).
 */
function startScanWorker(young: number): Worker | null {
  try {
    return startWorkerBeside(import.meta.url, "scan-worker", { ...LIMITS, maxYoungGenerationSizeMb: young });
  } catch {
    return null;
  }
}
