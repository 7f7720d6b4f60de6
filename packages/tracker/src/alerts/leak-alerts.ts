/**
 * The tracker's leak alerts: a bounded window of recent phase occurrences (with the counters their
 * phase records carry) and of birth-phase snapshots, judged now and then by the engine behind
 * `stormlog analyze` (`judgeRetention`, @stormlog/phases). A path that turns `leaking` raises one
 * `warning` per episode, worded as the analysis words it (retention/describe.ts).
 *
 * Cost: a phase boundary appends a few numbers to its path's typed arrays (no object is made once
 * the arrays have grown); judging, which builds the occurrences and runs the trend tests, runs only
 * on its own timer (on the judge's worker by default: leak-judge.ts) and at `stop()`.
 */
import type { Worker } from "node:worker_threads";
import {
  type Clock,
  InvalidConfigError,
  type JsonObject,
  type Scheduler,
  systemScheduler,
  type TimerHandle,
} from "@stormlog/core";
import { startWorkerBeside } from "@stormlog/core/internal";
import type { PhaseScopeTemplate, RecordedPhase } from "@stormlog/phases";
import {
  type BirthSnapshot,
  describeBirths,
  describeGrowthInside,
  describeKept,
  type JudgedInside,
  LIVE_BY_PHASE_KEY,
  type MetricVerdict,
  type PhaseScopeFacts,
  parseBirthCounts,
  type RankVerdicts,
  type RetentionEvidence,
  scopeFromTemplate,
  strongestVerdict,
} from "@stormlog/phases/internal";
import { describeError } from "../describe-error.js";
import { BOUNDARY_READ, type EventStore, PHASE_ENTER, PHASE_EXIT } from "../records/store.js";
import {
  type JudgeInput,
  judgeWindows,
  LeakJudgeWorker,
  OCCURRENCE_END,
  OCCURRENCE_ENTER,
  OCCURRENCE_EXIT,
  OCCURRENCE_READ,
  OCCURRENCE_SEQUENCE,
  OCCURRENCE_START,
  OCCURRENCE_THREAD,
  OCCURRENCE_WIDTH,
  type OpenPhaseData,
  timestampOf,
  VALUES,
  type WindowData,
} from "./leak-judge.js";

/** `leakAlerts` of `MemoryTrackerOptions`. */
export interface LeakAlertOptions {
  /** Default true. False: no leak watch at all (nothing is kept at phase boundaries). */
  readonly enabled?: boolean;
  /**
   * Milliseconds between checks (default 10000). A check that takes the training thread longer than
   * 0.05 % of this waits proportionally longer for the next one, so checks never take more than
   * 0.05 % of that thread's time.
   */
  readonly intervalMs?: number;
  /**
   * Where checks judge the window: `"worker"` (a worker thread shared by the process's trackers;
   * judging 4 phase paths takes 5-20 ms, 50 leaking paths ~190 ms, which would pause training on
   * its thread) or `"main"`. Default: `"worker"` with the real timers, `"main"` with an injected
   * scheduler (tests that advance fake time find a check's alerts as soon as its timer ran). Where
   * no worker can start, checks judge on the calling thread.
   */
  readonly judgeOn?: "worker" | "main";
}

/** `LeakAlertOptions` with defaults filled in (`judgeOn` undefined: chosen by the tracker's scheduler). */
export interface ResolvedLeakAlerts {
  readonly enabled: boolean;
  readonly intervalMs: number;
  readonly judgeOn: "worker" | "main" | undefined;
}

/** Closed occurrences kept per phase path (the latest ones). */
export const LEAK_WINDOW_OCCURRENCES = 512;
/** Phase paths watched; a new one beyond this replaces the path seen least recently. */
export const LEAK_WINDOW_PATHS = 50;
/** Birth-phase snapshots kept (samples whose metadata has `tfjs_live_by_phase`; the latest ones). */
export const LEAK_WINDOW_SNAPSHOTS = 512;
/** Phases open at once that are remembered (the oldest are dropped: phases never closed). */
const MAX_OPEN = 256;
/**
 * Records stored before the watch reads the phase records among them (fewer when the store holds fewer): read
 * together at the next sample or check, between training steps, where the store's rows and the
 * watch's are still in cache. Read at each boundary, inside a step whose tensors evicted them, the
 * watch took about a tenth of Stormlog's time in a tracked tfjs step (`bench:in-situ`).
 */
const READ_STORED_EVERY = 256;
/** Default time between checks. */
export const DEFAULT_LEAK_CHECK_INTERVAL_MS = 10_000;
/** A check may take at most this share of the time between checks (else the next one waits). */
const CHECK_TIME_SHARE = 0.0005;
const FIRST_CAPACITY = 16;
/**
 * Per open phase, one row (a cache line): its start's words, its scope's sequence, `OPEN_FLAGS`, then
 * its enter's VALUES.
 */
const OPEN_START = 0;
const OPEN_SEQUENCE = 2;
const OPEN_FLAGS = 3;
const OPEN_VALUES = 4;
const OPEN_WIDTH = OPEN_VALUES + VALUES;
/** `OPEN_FLAGS` bits: the enter's counters were read at the boundary; the scope has no template. */
const OPEN_READ = 1;
const OPEN_OTHER = 2;
/** Per open phase in `openRefs`: its template (or the scope itself, `OPEN_OTHER`), its window, the window's generation. */
const OPEN_REFS = 3;
const OPTION_KEYS: ReadonlySet<string> = new Set(["enabled", "intervalMs", "judgeOn"]);

/** Resolves `leakAlerts: boolean | LeakAlertOptions`; throws `InvalidConfigError`. */
export function resolveLeakAlerts(option: boolean | LeakAlertOptions | undefined): ResolvedLeakAlerts {
  if (option === undefined || option === true)
    return { enabled: true, intervalMs: DEFAULT_LEAK_CHECK_INTERVAL_MS, judgeOn: undefined };
  if (option === false)
    return { enabled: false, intervalMs: DEFAULT_LEAK_CHECK_INTERVAL_MS, judgeOn: undefined };
  if (typeof option !== "object" || option === null || Array.isArray(option))
    throw new InvalidConfigError(
      "leakAlerts",
      `expected true, false or { enabled?: boolean, intervalMs?: number, judgeOn?: "worker" | "main" }, got ${describeValue(option)}`,
    );
  for (const key of Object.keys(option)) {
    if (!OPTION_KEYS.has(key))
      throw new InvalidConfigError(
        "leakAlerts",
        `unknown key '${key}'; the keys are 'enabled' (boolean), 'intervalMs' (milliseconds between checks) and 'judgeOn' ("worker" or "main")`,
      );
  }
  const { enabled, intervalMs, judgeOn } = option;
  if (judgeOn !== undefined && judgeOn !== "worker" && judgeOn !== "main")
    throw new InvalidConfigError(
      "leakAlerts.judgeOn",
      `expected "worker" or "main", got ${describeValue(judgeOn)}`,
    );
  if (enabled !== undefined && typeof enabled !== "boolean")
    throw new InvalidConfigError(
      "leakAlerts.enabled",
      `expected true or false, got ${describeValue(enabled)}; use leakAlerts: false to turn leak alerts off`,
    );
  if (
    intervalMs !== undefined &&
    (typeof intervalMs !== "number" || !Number.isFinite(intervalMs) || intervalMs <= 0)
  )
    throw new InvalidConfigError(
      "leakAlerts.intervalMs",
      `expected a number of milliseconds > 0 (default ${DEFAULT_LEAK_CHECK_INTERVAL_MS}), got ${describeValue(intervalMs)}`,
    );
  return { enabled: enabled ?? true, intervalMs: intervalMs ?? DEFAULT_LEAK_CHECK_INTERVAL_MS, judgeOn };
}

function describeValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return "an array";
  return String(value);
}

/**
 * One path's recent closed occurrences, in a ring that grows up to the window: one row of
 * `OCCURRENCE_WIDTH` numbers per occurrence (two cache lines), as a boundary inside a training step
 * finds every line cold and pays for each it touches.
 */
class PathWindow implements WindowData {
  path = "";
  parts: readonly string[] = [];
  /** When a phase of the path last opened (a use count: least recently used windows are replaced first). */
  lastUse = 0;
  /** Bumped when the window is given to another path (an open phase of the old one is then dropped). */
  generation = 0;
  /** The windows of its child paths by phase name: found without hashing a child's path (a new string each time). */
  readonly children = new Map<string, PathWindow>();
  capacity = 0;
  count = 0;
  /** Where the next closed occurrence goes. */
  next = 0;
  /**
   * The occurrences' rows. Nothing made per occurrence is kept (its scope, its id, a bigint): objects
   * that outlive a young-generation collection would cost the collector more than the boundary's work.
   */
  rows = new Float64Array(0);

  reset(path: string, parts: readonly string[]): void {
    this.generation++;
    this.children.clear();
    this.path = path;
    this.parts = parts;
    this.count = 0;
    this.next = 0;
  }

  /** The slot of the next closed occurrence (the oldest one's once the window is full). */
  claim(): number {
    if (this.count === this.capacity && this.capacity < LEAK_WINDOW_OCCURRENCES) this.grow();
    const slot = this.next;
    this.next = slot + 1 === this.capacity ? 0 : slot + 1;
    if (this.count < this.capacity) this.count++;
    return slot;
  }

  /** Doubles the rows (up to the window), before the ring first wraps: it is in order then. */
  private grow(): void {
    const capacity = Math.min(LEAK_WINDOW_OCCURRENCES, Math.max(FIRST_CAPACITY, this.capacity * 2));
    const rows = new Float64Array(capacity * OCCURRENCE_WIDTH);
    rows.set(this.rows);
    this.rows = rows;
    this.capacity = capacity;
    this.next = this.count;
  }

  /** Index of the oldest closed occurrence in the ring. */
  get oldest(): number {
    return this.capacity === 0 ? 0 : (this.next - this.count + this.capacity) % this.capacity;
  }

  /** The window has dropped occurrences: it reaches back only to its oldest start. */
  get full(): boolean {
    return this.count === LEAK_WINDOW_OCCURRENCES;
  }
}

/** A snapshot as kept: the sample's object, parsed the first time a check reads it. */
interface SnapshotEntry {
  readonly timestampNs: bigint;
  raw: object | null;
  parsed: BirthSnapshot | null;
}

/** What the tracker gives the watch. */
export interface LeakAlertHost {
  readonly clock: Clock;
  readonly scheduler: Scheduler;
  warn(message: string): void;
  /** Records a `warning` with this context and metadata. */
  emit(context: string, metadata: JsonObject): void;
}

/** What a session's records say about themselves (see `begin`). */
export interface LeakSession {
  readonly sessionId: string;
  readonly rank: number;
  readonly schemaVersion: 3 | 4;
}

/** A leaking path as the alert reports it (the analysis' report of one rank). */
export interface LeakSuspicion {
  readonly phasePath: string;
  readonly message: string;
  readonly bytesPerOccurrence: number | null;
  readonly tensorsPerOccurrence: number | null;
  readonly confidence: number;
  readonly unitPath: string;
  /** `birth_phase`, or the counters' `own_levels` / `retention_profile` (`RetentionEvidence.method`). */
  readonly method: RetentionEvidence["method"];
  /** The unit path of its counters' evidence, for the parent's "kept inside" note (as the analysis). */
  readonly evidenceUnitPath: string | undefined;
}

const round = (value: number, digits: number): number => {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
};

function isLeaking(r: RankVerdicts): boolean {
  return r.bytes?.verdict === "leaking" || r.tensors?.verdict === "leaking" || r.births?.leaking === true;
}

/** Judged and found not leaking (rather than not judged at all): the end of an episode. */
function isQuiet(r: RankVerdicts): boolean {
  if (isLeaking(r)) return false;
  const judged = (v: MetricVerdict | null) => v?.verdict === "stable" || v?.verdict === "plateau";
  return judged(r.bytes) || judged(r.tensors) || r.births !== null;
}

/**
 * What `stormlog analyze` reports for a leaking path of one rank (leaks.ts `report()` with one
 * rank, `annotateParents` apart): its message, figures and evidence.
 */
export function describeSuspicion(phasePath: string, r: RankVerdicts): LeakSuspicion {
  const evidenceUnitPath = r.bytes?.evidence?.unit_path;
  if (r.births?.leaking === true) {
    const births = r.births.evidence;
    return {
      phasePath,
      message: describeBirths(phasePath, births),
      bytesPerOccurrence: births.bytes_per_occurrence,
      tensorsPerOccurrence: births.tensors_per_occurrence,
      confidence: round(r.births.confidence, 2),
      unitPath: births.unit_path,
      method: "birth_phase",
      evidenceUnitPath,
    };
  }
  const bytes = r.bytes?.verdict === "leaking" ? r.bytes : null;
  const tensors = r.tensors?.verdict === "leaking" ? r.tensors : null;
  const bytesPer = bytes !== null ? Math.round(bytes.retained) : null;
  const tensorsPer = tensors !== null ? round(tensors.retained, 1) : null;
  const unitPath = r.bytes?.evidence?.unit_path ?? r.tensors?.evidence?.unit_path ?? phasePath;
  const shortfall = r.bytes?.evidence?.shortfall_sibling ?? r.tensors?.evidence?.shortfall_sibling ?? null;
  const method = (bytes ?? tensors)?.evidence?.method ?? "own_levels";
  return {
    phasePath,
    message: describeKept(phasePath, { bytesPer, tensorsPer, unitPath, shortfall }),
    bytesPerOccurrence: bytesPer,
    tensorsPerOccurrence: tensorsPer,
    confidence: round(strongestVerdict([r.bytes, r.tensors])?.confidence ?? 0, 2),
    unitPath,
    method,
    evidenceUnitPath,
  };
}

/**
 * The leak watch of one tracker: `phaseStored()` at every phase record and `recordStored()` at every
 * other stored record (phase records are read later, from the store), `sampled()` at every sample,
 * `begin()` / `end()` with the session; checks on its own timer.
 */
export class LeakWatch {
  private readonly windows = new Map<string, PathWindow>();
  /**
   * Open phases (enter seen, exit not yet), innermost last: a row of numbers (`OPEN_WIDTH`) and
   * `OPEN_REFS` references each. The recorder's scopes are kept as their templates: a scope is a
   * young object, and keeping it in these long-lived arrays would cost a remembered-set entry at
   * every boundary.
   */
  private readonly openRows = new Float64Array(MAX_OPEN * OPEN_WIDTH);
  private readonly openRefs: (PhaseScopeTemplate | RecordedPhase | PathWindow | number | null)[] = new Array(
    MAX_OPEN * OPEN_REFS,
  ).fill(null);
  /** Thread names by id, as the session's scopes name them (the recorder's ids name one thread each). */
  private readonly threadNames = new Map<number, string>();
  private lastThreadId = Number.NaN;
  private lastThreadName = "";
  /** The window of the top-level path opened last, and its generation then (most loops have one). */
  private topNode: object | undefined = undefined;
  private topWindow: PathWindow | null = null;
  private topGeneration = 0;
  private openCount = 0;
  private uses = 0;
  private readonly snapshots: (SnapshotEntry | undefined)[] = new Array(LEAK_WINDOW_SNAPSHOTS);
  private snapshotCount = 0;
  private snapshotNext = 0;
  /** The last sample's tensor count (NaN before one), for records without their own. */
  private sampledTensors = Number.NaN;
  /** The store's records before this index were read (`readStored`). */
  private readUpTo = 0;
  /** `readStored` at the latest when this many records were stored since: before the store overwrites any. */
  private readonly readEvery: number;
  /** A kept scope's sequences, as `EventStore.keptScope` writes them. */
  private readonly keptSequences = new Float64Array(2);
  /** Paths whose leak was reported and has not ended since. */
  private readonly alerted = new Set<string>();
  private session: LeakSession | null = null;
  private timer: TimerHandle | null = null;
  private failed = false;
  /** The timer runs from the session's first phase boundary on (without phases there is nothing to judge). */
  private armed = false;
  private lastCheckMs = 0;
  private readonly checkTask = (): void => {
    this.timer = null;
    if (this.session === null) return;
    if (this.judgeOnWorker && this.checkOnWorker()) return;
    this.check();
    this.schedule();
  };
  /** Checks on the timer judge on the leak-judge worker (`LeakAlertOptions.judgeOn`). */
  private readonly judgeOnWorker: boolean;

  constructor(
    readonly options: ResolvedLeakAlerts,
    private readonly host: LeakAlertHost,
    private readonly store: EventStore,
  ) {
    this.judgeOnWorker =
      options.judgeOn === "worker" || (options.judgeOn === undefined && host.scheduler === systemScheduler);
    this.readEvery = Math.max(1, Math.min(READ_STORED_EVERY, store.capacity));
  }

  /** Starts watching a session, forgetting the last one; the timer starts at its first phase boundary. */
  begin(session: LeakSession): void {
    this.stopTimer();
    this.session = session;
    this.windows.clear();
    this.openRefs.fill(null);
    this.threadNames.clear();
    this.lastThreadId = Number.NaN;
    this.openCount = 0;
    this.topNode = undefined;
    this.topWindow = null;
    this.alerted.clear();
    this.snapshots.fill(undefined);
    this.snapshotCount = 0;
    this.snapshotNext = 0;
    this.sampledTensors = Number.NaN;
    this.failed = false;
    this.armed = false;
    this.lastCheckMs = 0;
    this.readUpTo = this.store.written;
  }

  /** Stops the timer; `finalCheck` judges the window once more first (at `stop()`). */
  end(finalCheck: boolean): void {
    this.stopTimer();
    if (finalCheck && this.session !== null) this.check();
    this.session = null;
    this.armed = false;
  }

  /** Phase paths watched now. */
  get paths(): number {
    this.readStored();
    return this.windows.size;
  }

  private stopTimer(): void {
    if (this.timer !== null) {
      this.host.scheduler.clearTimeout(this.timer);
      this.timer = null;
    }
  }

  private schedule(): void {
    const delay = Math.max(this.options.intervalMs, this.lastCheckMs / CHECK_TIME_SHARE);
    this.timer = this.host.scheduler.setTimeout(this.checkTask, delay);
  }

  private fail(what: string, error: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.host.warn(`leak alerts: ${what} failed (${describeError(error)}); tracking goes on`);
  }

  /**
   * The tracker stored phase record `index` (its counters final): the watch reads it with the others
   * at the next sample or check (`readStored`), or sooner (`recordStored`). Never throws; does
   * nothing between sessions.
   */
  phaseStored(index: number): void {
    if (this.session === null) return;
    if (!this.armed) {
      this.armed = true;
      this.schedule();
    }
    this.recordStored(index);
  }

  /**
   * The tracker stored record `index`, of any kind: the waiting phase records are read now when
   * another record would overwrite the oldest of them (a small store, many samples or alerts).
   */
  recordStored(index: number): void {
    if (index + 1 - this.readUpTo >= this.readEvery) this.readStored();
  }

  /** Reads the phase records stored since the last call, in order. Never throws. */
  private readStored(): void {
    const store = this.store;
    const end = store.written;
    // After the store started over (a new session), nothing of before is read.
    let index = this.readUpTo <= end ? Math.max(this.readUpTo, end - store.capacity) : end;
    this.readUpTo = end;
    if (this.session === null) return;
    for (; index < end; index++) {
      const kind = store.flagsAt(index) & (PHASE_ENTER | PHASE_EXIT);
      if (kind !== 0) this.readPhaseRecord(index, kind === PHASE_EXIT);
    }
  }

  /**
   * Stored phase record `index`: the enter opens an occurrence, the exit closes it into its path's
   * window with the counters of both records. Everything stays in this one body so that no counter
   * is boxed on its way.
   */
  private readPhaseRecord(index: number, exit: boolean): void {
    const store = this.store;
    try {
      const sequences = this.keptSequences;
      const kept = store.keptScope(index, sequences);
      // A recorder's scope without attributes is kept as its path's template and sequences (its object
      // is reused for later phases); other scopes are kept themselves.
      let scope: RecordedPhase | null;
      let template: PhaseScopeTemplate | undefined;
      let sequence: number;
      if (Number.isNaN(sequences[0])) {
        scope = kept as RecordedPhase;
        template = scope.template;
        sequence = scope.sequence;
      } else {
        scope = null;
        template = kept as PhaseScopeTemplate;
        sequence = sequences[0] as number;
      }
      const open = this.openRows;
      const refs = this.openRefs;
      if (!exit) {
        if (this.openCount === MAX_OPEN) this.dropOpen(0);
        const window =
          scope === null
            ? this.windowAtEnter(kept, (sequences[1] as number) < 0 ? null : (sequences[1] as number), null)
            : this.windowAtEnter(
                scope,
                scope.sessionId === undefined ? undefined : scope.parentSequence,
                scope.parentScopeId,
              );
        const k = this.openCount++;
        const at = k * OPEN_WIDTH;
        const flags = store.readPhaseRecord(index, open, at + OPEN_VALUES, at + OPEN_START);
        if (Number.isNaN(open[at + OPEN_VALUES + 3]!)) open[at + OPEN_VALUES + 3] = this.sampledTensors;
        open[at + OPEN_SEQUENCE] = sequence;
        open[at + OPEN_FLAGS] =
          ((flags & BOUNDARY_READ) !== 0 ? OPEN_READ : 0) | (template === undefined ? OPEN_OTHER : 0);
        const r = k * OPEN_REFS;
        refs[r] = template === undefined ? scope : template;
        refs[r + 1] = window;
        refs[r + 2] = window.generation;
        return;
      }
      // Sequences are unique within a session; a scope not made by a recorder is matched by identity.
      let k = this.openCount - 1;
      if (template === undefined) while (k >= 0 && refs[k * OPEN_REFS] !== scope) k--;
      else
        while (
          k >= 0 &&
          (open[k * OPEN_WIDTH + OPEN_SEQUENCE] !== sequence ||
            ((open[k * OPEN_WIDTH + OPEN_FLAGS] as number) & OPEN_OTHER) !== 0)
        )
          k--;
      // Entered before the watch began, or dropped as never closed: nothing to pair it with.
      if (k < 0) return;
      const r = k * OPEN_REFS;
      const window = refs[r + 1] as PathWindow;
      if (window.generation !== refs[r + 2]) {
        // Its window went to another path meanwhile (more than LEAK_WINDOW_PATHS paths).
        this.dropOpen(k);
        return;
      }
      const slot = window.claim();
      const rows = window.rows;
      const at = slot * OCCURRENCE_WIDTH;
      const from = k * OPEN_WIDTH;
      const flags = store.readPhaseRecord(index, rows, at + OCCURRENCE_EXIT, at + OCCURRENCE_END);
      if (Number.isNaN(rows[at + OCCURRENCE_EXIT + 3]!)) rows[at + OCCURRENCE_EXIT + 3] = this.sampledTensors;
      rows[at + OCCURRENCE_START] = open[from + OPEN_START]!;
      rows[at + OCCURRENCE_START + 1] = open[from + OPEN_START + 1]!;
      rows[at + OCCURRENCE_SEQUENCE] = sequence;
      rows[at + OCCURRENCE_ENTER] = open[from + OPEN_VALUES]!;
      rows[at + OCCURRENCE_ENTER + 1] = open[from + OPEN_VALUES + 1]!;
      rows[at + OCCURRENCE_ENTER + 2] = open[from + OPEN_VALUES + 2]!;
      rows[at + OCCURRENCE_ENTER + 3] = open[from + OPEN_VALUES + 3]!;
      rows[at + OCCURRENCE_READ] =
        ((open[from + OPEN_FLAGS] as number) & OPEN_READ) !== 0 || (flags & BOUNDARY_READ) !== 0 ? 1 : 0;
      const opened = refs[r] as PhaseScopeTemplate | RecordedPhase;
      const threadId = opened.threadId;
      rows[at + OCCURRENCE_THREAD] = threadId;
      if (threadId !== this.lastThreadId || opened.threadName !== this.lastThreadName)
        this.noteThread(opened);
      if (k === this.openCount - 1) {
        this.openCount = k;
        refs[r] = null;
        refs[r + 1] = null;
      } else this.dropOpen(k);
    } catch (error) {
      this.fail("recording a phase boundary", error);
    }
  }

  private noteThread(scope: PhaseScopeTemplate | RecordedPhase): void {
    this.lastThreadId = scope.threadId;
    this.lastThreadName = scope.threadName;
    this.threadNames.set(scope.threadId, scope.threadName);
  }

  /** Forgets the `k`-th open phase (closed out of order, or the oldest when too many are open). */
  private dropOpen(k: number): void {
    const last = this.openCount - 1;
    this.openRows.copyWithin(k * OPEN_WIDTH, (k + 1) * OPEN_WIDTH, this.openCount * OPEN_WIDTH);
    this.openRefs.copyWithin(k * OPEN_REFS, (k + 1) * OPEN_REFS, this.openCount * OPEN_REFS);
    this.openRefs.fill(null, last * OPEN_REFS, this.openCount * OPEN_REFS);
    this.openCount = last;
  }

  /**
   * A sample's metadata: its tensor count (primary device, for the boundaries stored after it that
   * lack their own) and birth-phase snapshot. Never throws; does nothing between sessions.
   */
  sampled(primary: boolean, ts: bigint, metadata: JsonObject): void {
    if (this.session === null) return;
    // The boundaries stored before this sample carry the tensor count before it.
    this.readStored();
    try {
      const tensors = primary ? metadata.tfjs_num_tensors : undefined;
      if (typeof tensors === "number") this.sampledTensors = tensors;
      const live = metadata[LIVE_BY_PHASE_KEY];
      if (typeof live !== "object" || live === null || Array.isArray(live)) return;
      this.snapshots[this.snapshotNext] = { timestampNs: ts, raw: live, parsed: null };
      this.snapshotNext = (this.snapshotNext + 1) % LEAK_WINDOW_SNAPSHOTS;
      if (this.snapshotCount < LEAK_WINDOW_SNAPSHOTS) this.snapshotCount++;
    } catch (error) {
      this.fail("reading a sample", error);
    }
  }

  /**
   * The window of a phase that opens: its parent's (open, usually just below it) child of that name,
   * else found by path.
   */
  private windowAtEnter(
    scope: PhaseScopeTemplate | RecordedPhase,
    parentSequence: number | null | undefined,
    parentScopeId: string | null,
  ): PathWindow {
    // The recorder's scopes name their parent by sequence (`parentSequence`): no id strings built or compared.
    const parentId = parentSequence === undefined ? parentScopeId : null;
    let window: PathWindow | undefined;
    if (parentSequence != null || parentId !== null) {
      for (let j = this.openCount - 1; j >= 0; j--) {
        if (
          parentSequence != null
            ? this.openRows[j * OPEN_WIDTH + OPEN_SEQUENCE] !== parentSequence ||
              ((this.openRows[j * OPEN_WIDTH + OPEN_FLAGS] as number) & OPEN_OTHER) !== 0
            : this.openScopeFacts(j).scopeId !== parentId
        )
          continue;
        const parent = this.openRefs[j * OPEN_REFS + 1] as PathWindow;
        const generation = this.openRefs[j * OPEN_REFS + 2];
        if (parent.generation === generation) {
          window = parent.children.get(scope.name);
          if (window === undefined) {
            window = this.windowOf(scope);
            // Unless finding it gave the parent's own window to another path.
            if (parent.generation === generation) parent.children.set(scope.name, window);
          }
        }
        break;
      }
    }
    if (window === undefined) {
      const node = scope.pathKey;
      const top = this.topWindow;
      if (parentSequence === null && node !== undefined) {
        if (node === this.topNode && top !== null && top.generation === this.topGeneration) window = top;
        else {
          window = this.windowOf(scope);
          this.topNode = node;
          this.topWindow = window;
          this.topGeneration = window.generation;
        }
      } else window = this.windowOf(scope);
    }
    window.lastUse = ++this.uses;
    return window;
  }

  /** What the judge needs of the `k`-th open phase. */
  private openScopeFacts(k: number): PhaseScopeFacts {
    const kept = this.openRefs[k * OPEN_REFS];
    if (((this.openRows[k * OPEN_WIDTH + OPEN_FLAGS] as number) & OPEN_OTHER) !== 0)
      return kept as RecordedPhase;
    // Its parent is not needed: the judge nests phases by their paths and times.
    return scopeFromTemplate(
      kept as PhaseScopeTemplate,
      this.openRows[k * OPEN_WIDTH + OPEN_SEQUENCE] as number,
      null,
    );
  }

  private windowOf(scope: PhaseScopeTemplate | RecordedPhase): PathWindow {
    const path = scope.phasePath;
    let window = this.windows.get(path);
    if (window === undefined) {
      if (this.windows.size >= LEAK_WINDOW_PATHS) {
        let stalest: PathWindow | undefined;
        for (const candidate of this.windows.values())
          if (stalest === undefined || candidate.lastUse < stalest.lastUse) stalest = candidate;
        window = stalest as PathWindow;
        this.windows.delete(window.path);
        this.alerted.delete(window.path);
        for (const other of this.windows.values()) other.children.clear();
      } else {
        window = new PathWindow();
      }
      window.reset(path, scope.path);
      this.windows.set(path, window);
    }
    return window;
  }

  /** Judges the window here and records a warning for each path whose leak is new. Never throws. */
  check(): void {
    const started = this.host.clock.nowNs();
    try {
      this.emitSuspicions(this.judge());
    } catch (error) {
      this.fail("a leak check", error);
    }
    this.lastCheckMs = Math.max(0, Number(this.host.clock.nowNs() - started) / 1e6);
  }

  /**
   * A check judged on the leak-judge worker: the windows are copied here (0.4 ms for a full window of
   * 50 paths), judged there, and the warnings recorded when the verdicts come back (unless
   * the session ended meanwhile); the next check is scheduled then. False when no worker can run.
   */
  private checkOnWorker(): boolean {
    const worker = LeakJudgeWorker.shared(startJudgeWorker);
    if (worker === null) return false;
    const clock = this.host.clock;
    const started = clock.nowNs();
    const input = this.judgeInput();
    const session = this.session;
    if (input === null || session === null) return false;
    const judged = worker.judge(input);
    // The time share (`CHECK_TIME_SHARE`) is the training thread's: here, the copy sent.
    this.lastCheckMs = Math.max(0, Number(clock.nowNs() - started) / 1e6);
    judged
      .then(
        (verdicts) => {
          if (this.session === session) this.emitSuspicions(this.suspicionsOf(verdicts));
        },
        () => {
          // The worker failed (later checks judge here): this one is judged here now.
          if (this.session === session) this.check();
        },
      )
      .catch((error: unknown) => this.fail("a leak check", error))
      .finally(() => {
        if (this.session === session && this.timer === null) this.schedule();
      });
    return true;
  }

  private emitSuspicions(suspicions: readonly LeakSuspicion[]): void {
    for (const suspicion of suspicions) {
      this.host.emit(`Leak suspected: ${suspicion.message}`, {
        leak_phase_path: suspicion.phasePath,
        leak_bytes_per_occurrence: suspicion.bytesPerOccurrence,
        leak_tensors_per_occurrence: suspicion.tensorsPerOccurrence,
        leak_confidence: suspicion.confidence,
        leak_unit_path: suspicion.unitPath,
        leak_method: suspicion.method,
      });
    }
  }

  /** The paths whose leak starts now (and updates the episodes). */
  judge(): LeakSuspicion[] {
    return this.suspicionsOf(this.verdicts());
  }

  /** The paths of `verdicts` whose leak starts now (and updates the episodes). */
  private suspicionsOf(verdicts: Map<string, RankVerdicts>): LeakSuspicion[] {
    const leaking: LeakSuspicion[] = [];
    for (const [path, r] of verdicts) {
      if (isLeaking(r)) leaking.push(describeSuspicion(path, r));
      else if (isQuiet(r)) this.alerted.delete(path);
    }
    const judged: JudgedInside[] = [];
    for (const [path, r] of verdicts) {
      const verdict = strongestVerdict([r.bytes, r.tensors]);
      if (verdict === null || verdict.verdict === "insufficient_data") continue;
      const leakingPath = isLeaking(r);
      judged.push({ path, leaking: leakingPath, ownUnit: verdict.evidence?.unit_path === path });
    }
    const out: LeakSuspicion[] = [];
    for (const suspicion of leaking) {
      if (this.alerted.has(suspicion.phasePath)) continue;
      this.alerted.add(suspicion.phasePath);
      out.push({
        ...suspicion,
        message: suspicion.message + describeGrowthInside(suspicion.phasePath, judged),
      });
    }
    return out;
  }

  /** `judgeRetention` over the window, as the analysis judges one rank's records. */
  verdicts(): Map<string, RankVerdicts> {
    const input = this.judgeInput();
    return input === null ? new Map() : judgeWindows(input);
  }

  /** What a check judges: the windows themselves (the judge's worker is sent copies). */
  private judgeInput(): JudgeInput | null {
    const session = this.session;
    if (session === null) return null;
    this.readStored();
    let reach: bigint | null = null;
    const windows: WindowData[] = [];
    for (const window of this.windows.values()) {
      if (window.full) {
        const oldest = timestampOf(window.rows, window.oldest * OCCURRENCE_WIDTH + OCCURRENCE_START);
        if (reach === null || oldest > reach) reach = oldest;
      }
      windows.push(window);
    }
    const open: OpenPhaseData[] = [];
    for (let k = 0; k < this.openCount; k++) {
      const scope = this.openScopeFacts(k);
      const from = k * OPEN_WIDTH;
      const ov = this.openRows;
      const values = from + OPEN_VALUES;
      open.push({
        threadId: scope.threadId,
        threadName: scope.threadName,
        scopeId: scope.scopeId,
        path: scope.path,
        phasePath: scope.phasePath,
        sequence: scope.sequence,
        startNs: timestampOf(ov, from + OPEN_START),
        values: [ov[values]!, ov[values + 1]!, ov[values + 2]!, ov[values + 3]!],
        read: ((ov[from + OPEN_FLAGS] as number) & OPEN_READ) !== 0,
      });
    }
    return {
      sessionId: session.sessionId,
      rank: session.rank,
      schemaVersion: session.schemaVersion,
      nowNs: this.host.clock.nowNs(),
      windows,
      threadNames: this.threadNames,
      open,
      reach,
      births: this.births(reach),
    };
  }

  /** The snapshots since `reach`, oldest first, parsed. */
  private births(reach: bigint | null): BirthSnapshot[] {
    const out: BirthSnapshot[] = [];
    const count = this.snapshotCount;
    const first = (this.snapshotNext - count + LEAK_WINDOW_SNAPSHOTS) % LEAK_WINDOW_SNAPSHOTS;
    for (let n = 0; n < count; n++) {
      const entry = this.snapshots[(first + n) % LEAK_WINDOW_SNAPSHOTS] as SnapshotEntry;
      if (reach !== null && entry.timestampNs < reach) continue;
      if (entry.parsed === null) {
        entry.parsed = { timestampNs: entry.timestampNs, phases: parseBirthCounts(entry.raw) };
        entry.raw = null;
      }
      out.push(entry.parsed);
    }
    return out;
  }
}

/** Starts `leak-judge-worker` next to this module (or, built, next to the bundle). */
function startJudgeWorker(): Worker {
  return startWorkerBeside(import.meta.url, "leak-judge-worker");
}
