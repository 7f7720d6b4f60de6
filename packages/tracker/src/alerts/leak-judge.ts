/**
 * A leak check's judgement as a pure function of the watch's windows (`judgeWindows`), so that it
 * runs where the check wants: on the training thread, or on the judge's worker (`leak-judge-worker`)
 * with copies of the windows' arrays. A check judging 4 paths took 5-20 ms, 50 leaking paths 186 ms:
 * on the training thread that is a pause of the training loop.
 */
import type { Worker } from "node:worker_threads";
import type { PhaseSpan } from "@stormlog/phases";
import {
  type BirthSnapshot,
  judgeRetention,
  type RankVerdicts,
  type RetentionOccurrence,
} from "@stormlog/phases/internal";

/** Per occurrence end: allocated, reserved, used, tensors (`EventStore.readPhaseRecord`). */
export const VALUES = 4;

/**
 * An occurrence's row in a window: its start's and end's timestamps as two 32-bit words each (in
 * memory order, `timestampOf`), its thread id and sequence, the enter's VALUES, the exit's, and whether
 * either record's counters were read at the boundary; 16 numbers, two cache lines.
 */
export const OCCURRENCE_START = 0;
export const OCCURRENCE_END = 2;
export const OCCURRENCE_THREAD = 4;
export const OCCURRENCE_SEQUENCE = 5;
export const OCCURRENCE_ENTER = 6;
export const OCCURRENCE_EXIT = OCCURRENCE_ENTER + VALUES;
export const OCCURRENCE_READ = OCCURRENCE_EXIT + VALUES;
export const OCCURRENCE_WIDTH = 16;

const TIMESTAMP = new BigInt64Array(1);
const TIMESTAMP_WORDS = new Int32Array(TIMESTAMP.buffer);

/**
 * The timestamp whose two 32-bit words are at `at`, in memory order (as `EventStore.readPhaseRecord`
 * copies them from its own BigInt64Array: put back the same way, on either byte order).
 */
export function timestampOf(cells: Float64Array, at: number): bigint {
  TIMESTAMP_WORDS[0] = cells[at] as number;
  TIMESTAMP_WORDS[1] = cells[at + 1] as number;
  return TIMESTAMP[0] as bigint;
}

/** One path's closed occurrences, in a ring (the watch's `PathWindow`, or a copy of its rows). */
export interface WindowData {
  readonly path: string;
  readonly parts: readonly string[];
  readonly capacity: number;
  readonly count: number;
  /** Index of the oldest occurrence in the ring. */
  readonly oldest: number;
  /** `OCCURRENCE_WIDTH` numbers per occurrence. */
  readonly rows: Float64Array;
}

/** A phase still open at the check: it ends "now", as the analysis ends unclosed scopes. */
export interface OpenPhaseData {
  readonly threadId: number;
  readonly threadName: string;
  readonly scopeId: string;
  readonly path: readonly string[];
  readonly phasePath: string;
  readonly sequence: number;
  readonly startNs: bigint;
  /** The enter's VALUES. */
  readonly values: readonly number[];
  readonly read: boolean;
}

/** Everything one check judges. */
export interface JudgeInput {
  readonly sessionId: string;
  readonly rank: number;
  readonly schemaVersion: 3 | 4;
  readonly nowNs: bigint;
  readonly windows: readonly WindowData[];
  /** The name of each thread id in the windows' rows. */
  readonly threadNames: ReadonlyMap<number, string>;
  readonly open: readonly OpenPhaseData[];
  /** The latest start among full windows' oldest occurrences: before it, some path's window is empty. */
  readonly reach: bigint | null;
  /** Birth-phase snapshots since `reach`, oldest first. */
  readonly births: readonly BirthSnapshot[];
}

/** `judgeRetention` over the windows, as the analysis judges one rank's records. */
export function judgeWindows(input: JudgeInput): Map<string, RankVerdicts> {
  const { sessionId, rank, reach } = input;
  const v3 = input.schemaVersion === 3;
  const occurrences: RetentionOccurrence[] = [];
  let boundaryRead = false;
  for (const window of input.windows) {
    const { capacity, count, rows: v } = window;
    for (let n = 0, i = window.oldest; n < count; n++, i = i + 1 === capacity ? 0 : i + 1) {
      const row = i * OCCURRENCE_WIDTH;
      if (v[row + OCCURRENCE_READ] !== 0) boundaryRead = true;
      const startNs = timestampOf(v, row + OCCURRENCE_START);
      // Windows of paths that run several times per step reach back fewer steps than their parent's:
      // all are cut to the shortest full one's reach, so that every unit judged still has its children.
      if (reach !== null && startNs < reach) continue;
      const at = row + OCCURRENCE_ENTER;
      const threadId = v[row + OCCURRENCE_THREAD] as number;
      const span: PhaseSpan = {
        sessionId,
        rank,
        threadId,
        threadName: input.threadNames.get(threadId) ?? "",
        scopeId: "",
        path: window.parts,
        phasePath: window.path,
        depth: window.parts.length,
        startNs,
        endNs: timestampOf(v, row + OCCURRENCE_END),
        sequence: v[row + OCCURRENCE_SEQUENCE] as number,
        syntheticEnd: false,
      };
      occurrences.push(
        occurrence(
          span,
          v[at]!,
          v[at + 1]!,
          v[at + 2]!,
          v[at + 3]!,
          v[at + 4]!,
          v[at + 5]!,
          v[at + 6]!,
          v[at + 7]!,
          v3,
        ),
      );
    }
  }
  for (const open of input.open) {
    if (open.read) boundaryRead = true;
    const span: PhaseSpan = {
      sessionId,
      rank,
      threadId: open.threadId,
      threadName: open.threadName,
      scopeId: open.scopeId,
      path: open.path,
      phasePath: open.phasePath,
      depth: open.path.length,
      startNs: open.startNs,
      endNs: input.nowNs,
      sequence: open.sequence,
      syntheticEnd: true,
    };
    const [a, r, u, t] = open.values as [number, number, number, number];
    const n = Number.NaN;
    occurrences.push(occurrence(span, a, r, u, t, n, n, n, n, v3));
  }
  if (occurrences.length === 0) return new Map();
  return judgeRetention(occurrences, { lastSample: !boundaryRead, births: input.births });
}

/**
 * What the judge's worker is sent: `input` with copies of its windows' arrays, which are transferred
 * (the watch's own arrays stay, and later boundaries cannot change what is judged).
 */
export function workerInput(input: JudgeInput): JudgeInput {
  return { ...input, windows: input.windows.map(copyWindow), threadNames: new Map(input.threadNames) };
}

function copyWindow(window: WindowData): WindowData {
  const { capacity } = window;
  return {
    path: window.path,
    parts: [...window.parts],
    capacity,
    count: window.count,
    oldest: window.oldest,
    rows: window.rows.slice(0, capacity * OCCURRENCE_WIDTH),
  };
}

/** The buffers of `workerInput`'s copies, to transfer rather than copy again. */
function transferablesOf(input: JudgeInput): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const w of input.windows) out.push(w.rows.buffer as ArrayBuffer);
  return out;
}

/**
 * One occurrence with the counters a reader of its records sees: schema 3 writes an unread allocated
 * as device used (else reserved) and an unread device used as max(allocated, reserved), as the
 * records do (records/store.ts `materialize`); schema 4 writes what was read.
 */
function occurrence(
  span: PhaseSpan,
  enterAllocated: number,
  enterReserved: number,
  enterUsed: number,
  enterTensors: number,
  exitAllocated: number,
  exitReserved: number,
  exitUsed: number,
  exitTensors: number,
  v3: boolean,
): RetentionOccurrence {
  if (!v3) return { span, enterAllocated, exitAllocated, enterUsed, exitUsed, enterTensors, exitTensors };
  const a0 = v3Allocated(enterAllocated, enterUsed, enterReserved);
  const a1 = v3Allocated(exitAllocated, exitUsed, exitReserved);
  return {
    span,
    enterAllocated: a0,
    exitAllocated: a1,
    enterUsed: v3Used(enterUsed, a0, enterReserved),
    exitUsed: v3Used(exitUsed, a1, exitReserved),
    enterTensors,
    exitTensors,
  };
}

function v3Allocated(allocated: number, used: number, reserved: number): number {
  if (!Number.isNaN(allocated)) return allocated;
  return Number.isNaN(used) ? reserved : used;
}

function v3Used(used: number, allocated: number, reserved: number): number {
  if (!Number.isNaN(used)) return used;
  return Math.max(allocated, Number.isNaN(reserved) ? allocated : reserved);
}

/** A check sent to the judge's worker. */
export interface JudgeRequest {
  readonly id: number;
  readonly input: JudgeInput;
}

/** The worker's answer: the verdicts, or why judging failed. */
export type JudgeReply =
  | { readonly id: number; readonly verdicts: Map<string, RankVerdicts> }
  | { readonly id: number; readonly error: string };

/**
 * The process's leak-judge worker, started at the first check that asks for it and shared by every
 * tracker; it never keeps the process alive. When it cannot start or fails, `shared()` answers null
 * from then on and checks judge on the calling thread.
 */
export class LeakJudgeWorker {
  private static current: LeakJudgeWorker | null | undefined;
  private readonly pending = new Map<
    number,
    { resolve: (verdicts: Map<string, RankVerdicts>) => void; reject: (error: Error) => void }
  >();
  private nextId = 0;
  private failure: string | null = null;

  /** The running worker, or null where none can run. */
  static shared(start: () => Worker): LeakJudgeWorker | null {
    if (LeakJudgeWorker.current === undefined) {
      try {
        LeakJudgeWorker.current = new LeakJudgeWorker(start());
      } catch {
        LeakJudgeWorker.current = null;
      }
    }
    return LeakJudgeWorker.current;
  }

  private constructor(private readonly worker: Worker) {
    worker.on("message", (reply: JudgeReply) => this.receive(reply));
    worker.on("error", (error) => this.fail(error.message));
    worker.on("exit", (code) => this.fail(`it exited with code ${code}`));
    // After the listeners: adding a "message" listener refs the worker again.
    worker.unref();
  }

  /** Judges `input` on the worker (sending `workerInput(input)`). Rejects when the worker fails. */
  judge(input: JudgeInput): Promise<Map<string, RankVerdicts>> {
    if (this.failure !== null) return Promise.reject(new Error(this.failure));
    const id = this.nextId++;
    const sent = workerInput(input);
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      try {
        this.worker.postMessage({ id, input: sent } satisfies JudgeRequest, transferablesOf(sent));
      } catch (error) {
        this.pending.delete(id);
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    });
  }

  private receive(reply: JudgeReply): void {
    const waiting = this.pending.get(reply.id);
    if (waiting === undefined) return;
    this.pending.delete(reply.id);
    if ("error" in reply) waiting.reject(new Error(reply.error));
    else waiting.resolve(reply.verdicts);
  }

  private fail(reason: string): void {
    if (this.failure !== null) return;
    this.failure = `the leak-judge worker failed (${reason})`;
    if (LeakJudgeWorker.current === this) LeakJudgeWorker.current = null;
    for (const waiting of this.pending.values()) waiting.reject(new Error(this.failure));
    this.pending.clear();
    void this.worker.terminate();
  }
}
