/**
 * Where the leak analysis judges a session's rank (`judgeRetention`): on this thread, or on a judge
 * worker (`judge-worker.ts`) while this thread goes on with the next ranks' other analyses. Judging
 * was the largest analysis of a cold `stormlog analyze` of the 64-rank benchmark job (about 40 % of
 * the analyses' time) and stands alone: a rank's occurrences in, its verdicts out.
 */
import type { Worker } from "node:worker_threads";
import { startWorkerBeside } from "@stormlog/core/internal";
import {
  judgeRetention,
  type PackedRetention,
  packRetention,
  type RankVerdicts,
  type RetentionInput,
  type RetentionOccurrence,
  unpackRetention,
} from "@stormlog/phases/internal";
import { workersHelp } from "../threads.js";

/** Judges one session's rank: at once, or later. */
export interface LeakJudge {
  judge(
    occurrences: readonly RetentionOccurrence[],
    input: RetentionInput,
  ): Map<string, RankVerdicts> | Promise<Map<string, RankVerdicts>>;
  /** Lets go of what the judge holds (its worker); judgements still pending are settled first. */
  close(): Promise<void>;
}

/** A rank to judge, sent to the judge worker. */
export interface JudgeRequest {
  readonly id: number;
  readonly packed: PackedRetention;
}

/** The judge worker's answer: the rank's verdicts by path, or that judging threw (judged here again). */
export type JudgeReply =
  | { readonly id: number; readonly verdicts: [string, RankVerdicts][] }
  | { readonly id: number; readonly failed: true };

/** Judges on this thread, at once. */
export const IN_THREAD_JUDGE: LeakJudge = {
  judge: (occurrences, input) => judgeRetention(occurrences, input),
  close: async () => {},
};

/**
 * The worker's heap: a rank's verdicts are small, the bootstrap's garbage short-lived. A small young
 * generation keeps the judge's share of the peak RSS small: on the 1.1 GB 64-rank file, peak RSS
 * 170-175 MB with 2 MB, 187-189 MB with 8 MB (the build without the judge worker: 157-174 MB).
 */
const LIMITS = { maxOldGenerationSizeMb: 48, maxYoungGenerationSizeMb: 2 };

/**
 * Phase occurrences (`phase_enter` records) from which a judge worker is started. A fresh one answers
 * its first rank about 75 ms after it is started (the built package, 2-core VM), about what judging
 * 6,000 occurrences takes a cold thread; this thread goes on meanwhile. The 64-rank benchmark job has 16,000.
 */
export const OFF_THREAD_OCCURRENCES = 4000;

/**
 * The judge for an analysis of `occurrences` phase occurrences: a worker where workers help
 * (`workersHelp`) and there is enough to judge, else this thread.
 */
export function leakJudgeFor(occurrences: number): LeakJudge {
  if (occurrences < OFF_THREAD_OCCURRENCES || !workersHelp()) return IN_THREAD_JUDGE;
  return WorkerJudge.start() ?? IN_THREAD_JUDGE;
}

function startJudgeWorker(): Worker {
  return startWorkerBeside(import.meta.url, "judge-worker", LIMITS);
}

interface Pending {
  readonly packed: PackedRetention;
  readonly resolve: (verdicts: Map<string, RankVerdicts>) => void;
  readonly reject: (error: unknown) => void;
}

/** How long a judge worker waits, idle, for the next big analysis of this process before it ends. */
const IDLE_MS = 10_000;

/**
 * The judge worker of an analysis that ended, kept for the next one (a process that analyses
 * again, as a dashboard does, starts none; a one-shot command exits without waiting for it).
 */
let idle: { worker: Worker; timer: NodeJS.Timeout; ended: () => void } | null = null;

/** Lets go of the kept worker, if `worker` is it. */
function forget(worker: Worker): void {
  if (idle?.worker !== worker) return;
  clearTimeout(idle.timer);
  worker.off("error", idle.ended);
  worker.off("exit", idle.ended);
  idle = null;
}

/**
 * Judges on a worker. A rank whose judging threw there, or that the worker left unanswered (it
 * ended, or could not start), is judged here: its error, if any, is then this thread's, as without
 * the worker.
 */
export class WorkerJudge implements LeakJudge {
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private alive = true;
  private closed = false;
  private readonly onReply = (reply: JudgeReply): void => {
    const entry = this.pending.get(reply.id);
    if (entry === undefined) return;
    this.pending.delete(reply.id);
    if ("verdicts" in reply) entry.resolve(new Map(reply.verdicts));
    else this.judgeHere(entry);
    if (this.pending.size === 0) this.worker.unref();
  };
  private readonly onGone = (): void => {
    if (!this.alive) return;
    this.alive = false;
    const left = [...this.pending.values()];
    this.pending.clear();
    for (const entry of left) this.judgeHere(entry);
  };

  private constructor(
    private readonly worker: Worker,
    /** Started as the judge worker beside this module: it may be kept for the next analysis. */
    private readonly keepable: boolean,
  ) {
    worker.on("message", this.onReply);
    worker.on("error", this.onGone);
    worker.on("exit", this.onGone);
  }

  /**
   * A judge on the kept worker, else on a fresh one (`startWorker`: the judge worker beside this
   * module); null when none can start.
   */
  static start(startWorker: () => Worker = startJudgeWorker): WorkerJudge | null {
    const keepable = startWorker === startJudgeWorker;
    let worker: Worker;
    if (keepable && idle !== null) {
      worker = idle.worker;
      forget(worker);
    } else {
      try {
        worker = startWorker();
      } catch {
        return null;
      }
    }
    // Referenced only while it has ranks to judge: an analysis that throws must not leave it waiting.
    worker.unref();
    return new WorkerJudge(worker, keepable);
  }

  /** The worker's thread id (a kept worker judges the next analysis). */
  get threadId(): number {
    return this.worker.threadId;
  }

  judge(
    occurrences: readonly RetentionOccurrence[],
    input: RetentionInput,
  ): Map<string, RankVerdicts> | Promise<Map<string, RankVerdicts>> {
    if (!this.alive || occurrences.length === 0) return judgeRetention(occurrences, input);
    const packed = packRetention(occurrences, input);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { packed, resolve, reject });
      if (this.pending.size === 1) this.worker.ref();
      this.worker.postMessage({ id, packed } satisfies JudgeRequest);
    });
  }

  private judgeHere(entry: Pending): void {
    try {
      const { occurrences, input } = unpackRetention(entry.packed);
      entry.resolve(judgeRetention(occurrences, input));
    } catch (error) {
      entry.reject(error);
    }
  }

  /** Judges here what is still pending, then keeps the worker idle for the next analysis, or ends it. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const wasAlive = this.alive;
    this.alive = false;
    const left = [...this.pending.values()];
    this.pending.clear();
    for (const entry of left) this.judgeHere(entry);
    const worker = this.worker;
    worker.off("message", this.onReply);
    worker.off("error", this.onGone);
    worker.off("exit", this.onGone);
    if (wasAlive && this.keepable && idle === null) {
      worker.unref();
      // A kept worker that fails or ends meanwhile is not used again.
      const ended = (): void => forget(worker);
      worker.on("error", ended);
      worker.on("exit", ended);
      const timer = setTimeout(() => {
        forget(worker);
        void worker.terminate();
      }, IDLE_MS);
      timer.unref();
      idle = { worker, timer, ended };
      return;
    }
    await worker.terminate();
  }
}
