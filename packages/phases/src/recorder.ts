import type { JsonObject, PhaseHost, PhaseOptions, PhaseScope } from "@stormlog/core";
import { nodeWorkerThreads } from "@stormlog/core/internal";
import {
  type AsyncContextMode,
  asyncPhaseOpened,
  asyncPhaseSettled,
  asyncPhasesOpen,
  isAsyncFunction,
  phaseStorage,
  pinAsyncContext,
  unpinAsyncContext,
} from "./async-context.js";
import { PhaseProtocolError } from "./errors.js";
import { NoopPhaseScope, normalizePhaseName } from "./noop.js";
import { PHASE_ENTER_EVENT, PHASE_EXIT_EVENT } from "./replay.js";

/**
 * `metadata.phase_scope` of a boundary record, keys in the reference's order. `attributes` is present
 * only when the phase has some (and is repeated on exit).
 */
export interface PhaseScopePayload {
  action: "enter" | "exit";
  name: string;
  path: string[];
  depth: number;
  scope_id: string;
  parent_scope_id: string | null;
  thread_id: number;
  thread_name: string;
  sequence: number;
  attributes?: JsonObject;
}

/**
 * What every scope of one phase path on one thread of a session shares: a record of such a scope is
 * its template and its sequences. Writers that keep records keep the template (one long-lived object)
 * rather than the scope (a new object per phase, which would then outlive a young-generation collection).
 */
export interface PhaseScopeTemplate {
  readonly name: string;
  readonly path: readonly string[];
  readonly phasePath: string;
  readonly depth: number;
  readonly threadId: number;
  readonly threadName: string;
  /** Scope ids are `<sessionId>:<sequence>`. */
  readonly sessionId: string;
  /** The path's key (`RecordedPhase.pathKey`). */
  readonly pathKey: object;
}

/**
 * What a phase record tells of its scope: a `RecordedPhase`, or a template and sequences kept in its
 * place (`PhaseScopeTemplate`).
 */
export type PhaseScopeFacts = Pick<
  RecordedPhase,
  | "name"
  | "path"
  | "phasePath"
  | "depth"
  | "scopeId"
  | "parentScopeId"
  | "threadId"
  | "threadName"
  | "attributes"
  | "sequence"
  | "sessionId"
  | "parentSequence"
  | "pathKey"
>;

/** A scope id: `<sessionId>:<sequence>` (the reference's). */
export function scopeIdOf(sessionId: string, sequence: number): string {
  return `${sessionId}:${sequence}`;
}

/** A recorder's scope as a record keeps it: its path's template and its sequences. */
class TemplateScope implements PhaseScopeFacts {
  constructor(
    private readonly template: PhaseScopeTemplate,
    readonly sequence: number,
    readonly parentSequence: number | null,
  ) {}

  get name(): string {
    return this.template.name;
  }
  get path(): readonly string[] {
    return this.template.path;
  }
  get phasePath(): string {
    return this.template.phasePath;
  }
  get depth(): number {
    return this.template.depth;
  }
  get threadId(): number {
    return this.template.threadId;
  }
  get threadName(): string {
    return this.template.threadName;
  }
  get sessionId(): string {
    return this.template.sessionId;
  }
  get pathKey(): object {
    return this.template.pathKey;
  }
  get attributes(): undefined {
    return undefined;
  }
  get scopeId(): string {
    return scopeIdOf(this.template.sessionId, this.sequence);
  }
  get parentScopeId(): string | null {
    return this.parentSequence === null ? null : scopeIdOf(this.template.sessionId, this.parentSequence);
  }
}

/**
 * The facts of a recorder's scope (without attributes) from what a writer kept of it: its template,
 * its enter's sequence and its parent's (null at the top).
 */
export function scopeFromTemplate(
  template: PhaseScopeTemplate,
  sequence: number,
  parentSequence: number | null,
): PhaseScopeFacts {
  return new TemplateScope(template, sequence, parentSequence);
}

/** An open (or closed) phase as the recorder sees it: a `PhaseScope` with its thread and sequence. */
export interface RecordedPhase extends PhaseScope {
  readonly depth: number;
  readonly parentScopeId: string | null;
  /** The sequence number of the enter boundary. */
  readonly sequence: number;
  /** What plays the reference's thread: the JS thread, or an async task (see the README). */
  readonly threadId: number;
  readonly threadName: string;
  readonly attributes: JsonObject | undefined;
  /**
   * The same object for every scope of this path opened by one recorder (while it keeps its paths
   * interned): a cheap identity key for per-path caches. Absent on scopes from elsewhere.
   */
  readonly pathKey?: object;
  /**
   * Set when the scope's id is `<sessionId>:<sequence>` and its parent's `<sessionId>:<parentSequence>`
   * (the recorder's own scopes), so writers can skip building and parsing the ids.
   */
  readonly sessionId?: string;
  /** The parent's enter sequence (see `sessionId`), null at the top. */
  readonly parentSequence?: number | null;
  /**
   * Opened with `{ readings: true }` (`PhaseOptions.readings`): the boundary listener reads memory at
   * its enter and exit even from collectors too costly to read at every boundary.
   */
  readonly readings?: boolean;
  /** Set on the recorder's own scopes: what this scope shares with the others of its path and thread. */
  readonly template?: PhaseScopeTemplate;
}

/**
 * One boundary, handed synchronously to the recorder's listener (the tracker turns it into a record).
 * `context` and `phaseScope` are built when read; `phaseScopePayload(scope, action, sequence)` builds
 * the same payload again later.
 */
export interface PhaseBoundary {
  readonly eventType: "phase_enter" | "phase_exit";
  readonly scope: RecordedPhase;
  /** This boundary's own sequence number (an exit has a larger one than its enter). */
  readonly sequence: number;
  /** `Phase entered: a / b` or `Phase exited: a / b`. */
  readonly context: string;
  /** The `metadata.phase_scope` object of the record (a new object at each read). */
  readonly phaseScope: PhaseScopePayload;
}

/** The reference's `metadata.phase_scope` for one boundary of `scope`. */
export function phaseScopePayload(
  scope: PhaseScopeFacts,
  action: "enter" | "exit",
  sequence: number,
): PhaseScopePayload {
  const payload: PhaseScopePayload = {
    action,
    name: scope.name,
    // A copy: the recorder shares one frozen list among every scope of a path.
    path: [...scope.path],
    depth: scope.depth,
    scope_id: scope.scopeId,
    parent_scope_id: scope.parentScopeId,
    thread_id: scope.threadId,
    thread_name: scope.threadName,
    sequence,
  };
  if (scope.attributes !== undefined) payload.attributes = scope.attributes;
  return payload;
}

/** The reference's context of a boundary record: `Phase entered: a / b` / `Phase exited: a / b`. */
export function phaseBoundaryContext(eventType: "phase_enter" | "phase_exit", phasePath: string): string {
  return (eventType === PHASE_ENTER_EVENT ? "Phase entered: " : "Phase exited: ") + phasePath;
}

class Boundary implements PhaseBoundary {
  constructor(
    readonly eventType: "phase_enter" | "phase_exit",
    readonly scope: RecordedPhase,
    readonly sequence: number,
  ) {}

  get context(): string {
    return phaseBoundaryContext(this.eventType, this.scope.phasePath);
  }

  get phaseScope(): PhaseScopePayload {
    return phaseScopePayload(
      this.scope,
      this.eventType === PHASE_ENTER_EVENT ? "enter" : "exit",
      this.sequence,
    );
  }
}

/** Options of a `PhaseRecorder`. */
export interface PhaseRecorderOptions {
  /** Receives every boundary, synchronously, in order. Exceptions are caught (see `onListenerError`). */
  readonly onBoundary: (boundary: PhaseBoundary) => void;
  /** How phases follow async code; see `AsyncContextMode`. Default `auto`. */
  readonly asyncContext?: AsyncContextMode;
  /** Called when `onBoundary` throws; the phase API itself never fails because of the listener. */
  readonly onListenerError?: (error: unknown) => void;
  /**
   * Reuse the scope objects of closed `phase(name, fn)` phases whose `fn` returned synchronously and
   * that have no attributes (default false): a loop of phases then allocates none. Only for a listener
   * that keeps nothing of a boundary's `scope` but copies (its `template`, sequences, strings) once it
   * returns. Scopes returned to code (`enterPhase`, `openPhases()`) are never reused.
   */
  readonly reuseScopes?: boolean;
}

/** Closed scopes kept for reuse (`reuseScopes`): a loop's nesting depth. */
const MAX_REUSED_SCOPES = 16;

/** Where phases are opened: the top level of a JS thread, or the body of an async phase. */
interface PhaseContextNode {
  /** The innermost phase opened in this context and still open (an async frame starts at itself). */
  current: PhaseFrame | null;
}

/** A stack of phases: what the reference keys by thread. Records carry its id and name. */
class PhaseFlow {
  readonly stack: PhaseFrame[] = [];
  /** Its scopes' templates by path (see `PathNode.template`). */
  readonly templates = new Map<PathNode, FrameTemplate>();
  constructor(
    readonly id: number,
    readonly name: string,
    readonly forked: boolean,
  ) {}
}

/**
 * A phase path, shared by every scope opened on it: its name list and joined path are built once,
 * not per scope (a training loop opens the same few paths millions of times).
 */
class PathNode {
  readonly path: readonly string[];
  readonly phasePath: string;
  /** Interned child paths by name (see `MAX_INTERNED_PATHS`). */
  readonly children = new Map<string, PathNode>();
  /** The template made last for a scope of this path, and its flow: a loop's next scope needs no lookup. */
  template: FrameTemplate | null = null;
  templateFlow: PhaseFlow | null = null;
  /** Kept in its parent's `children` (see `MAX_INTERNED_PATHS`); flows keep templates of these only. */
  interned = false;

  constructor(
    readonly parent: PathNode | null,
    readonly name: string,
  ) {
    this.path = Object.freeze(parent === null ? [name] : [...parent.path, name]);
    this.phasePath = parent === null ? name : `${parent.phasePath} / ${name}`;
  }
}

/**
 * Paths a recorder interns; past this (names made per step, `batch-17`), new paths get nodes of
 * their own, which cost what they did before interning.
 */
const MAX_INTERNED_PATHS = 4096;

/** The recorder's own templates: their key is the path's interned node. */
interface FrameTemplate extends PhaseScopeTemplate {
  readonly pathKey: PathNode;
}

class PhaseFrame implements RecordedPhase, PhaseContextNode {
  private text: string | null = null;
  closed = false;
  /** Its function returned a pending promise: it runs on, detached from the caller. */
  detached = false;
  /** Closed, but its exit record waits for detached phases above it on its stack to finish. */
  pendingExit = false;
  /** Set when this frame is the context of an async phase body. */
  current: PhaseFrame | null = null;
  /** May be reused once closed (`reuseScopes`): never handed to code other than the listener. */
  reusable = false;
  /** The parent's sequence, kept here: a child outlives its parent's frame, which may be reused. */
  parentSequence: number | null;

  constructor(
    readonly recorder: PhaseRecorder,
    public epoch: number,
    public ctx: PhaseContextNode,
    public flow: PhaseFlow,
    public parent: PhaseFrame | null,
    public sequence: number,
    public attributes: JsonObject | undefined,
    public readings: boolean,
    public template: FrameTemplate,
  ) {
    this.parentSequence = parent === null ? null : parent.sequence;
  }

  /** Makes a closed, reusable frame a new scope (the same fields, in the constructor's order). */
  reopen(
    epoch: number,
    ctx: PhaseContextNode,
    flow: PhaseFlow,
    parent: PhaseFrame | null,
    sequence: number,
    readings: boolean,
    template: FrameTemplate,
  ): void {
    this.text = null;
    this.closed = false;
    this.detached = false;
    this.pendingExit = false;
    this.current = null;
    this.reusable = false;
    this.parentSequence = parent === null ? null : parent.sequence;
    this.epoch = epoch;
    this.ctx = ctx;
    this.flow = flow;
    this.parent = parent;
    this.sequence = sequence;
    this.attributes = undefined;
    this.readings = readings;
    this.template = template;
  }

  // What every scope of the path and thread shares, from their template.
  get pathKey(): PathNode {
    return this.template.pathKey;
  }
  get name(): string {
    return this.template.name;
  }
  get sessionId(): string {
    return this.template.sessionId;
  }
  get path(): readonly string[] {
    return this.template.path;
  }
  get phasePath(): string {
    return this.template.phasePath;
  }
  /** Built when first read: most boundaries reach the disk as numbers, the id rebuilt there. */
  get scopeId(): string {
    this.text ??= scopeIdOf(this.template.sessionId, this.sequence);
    return this.text;
  }
  get depth(): number {
    return this.template.depth;
  }
  get parentScopeId(): string | null {
    return this.parentSequence === null ? null : scopeIdOf(this.template.sessionId, this.parentSequence);
  }
  get threadId(): number {
    return this.template.threadId;
  }
  get threadName(): string {
    return this.template.threadName;
  }

  close(): void {
    if (!this.closed) this.recorder.closeScope(this);
  }

  [Symbol.dispose](): void {
    if (!this.closed) this.recorder.closeScope(this);
  }
}

const LIFO_MESSAGE = "Phase handles must be closed in strict LIFO order per thread.";
const THREAD_MESSAGE = "Phase handle was closed from a different thread than it was opened.";

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

function attributesOf(options: PhaseOptions | undefined): JsonObject | undefined {
  const metadata = options?.metadata;
  if (metadata === undefined || metadata === null) return undefined;
  for (const _ in metadata) return { ...metadata };
  return undefined;
}

let jsThread: { readonly id: number; readonly name: string } | undefined;

/** This JS thread's id and name (`main` or `worker-<id>`), worked out when the first recorder needs them. */
function currentJsThread(): { readonly id: number; readonly name: string } {
  if (jsThread === undefined) {
    const { isMainThread, threadId } = nodeWorkerThreads();
    jsThread = { id: threadId, name: isMainThread ? "main" : `worker-${threadId}` };
  }
  return jsThread;
}

/**
 * Nested phases with the Python reference's semantics (`PhaseRecorder`, §4.2): names stripped and
 * checked, paths built from the enclosing phases, one sequence counter per session incremented on
 * every enter and exit, scope ids `<session_id>:<sequence>`, strict LIFO closing per thread with the
 * reference's `PhaseProtocolError` messages. Boundaries go to `onBoundary`; the tracker owns one
 * recorder and turns them into `phase_enter`/`phase_exit` records.
 *
 * JavaScript has one thread per isolate but many concurrent async tasks, so a "thread" here is a
 * stack of phases: the JS thread's own (`thread_id` = `worker_threads.threadId`, 0 and `main` on the
 * main thread) or a task's (`task-<n>`). An async phase stays on its caller's stack when nothing else
 * runs there; a phase opened while a sibling async phase is still running on that stack starts a new
 * task stack, so concurrent tasks never interleave on one stack and the replay index rebuilds them
 * exactly. While no session is active every call is a no-op that only checks the name.
 */
export class PhaseRecorder implements PhaseHost {
  private readonly listener: (boundary: PhaseBoundary) => void;
  private readonly onListenerError: ((error: unknown) => void) | undefined;
  private readonly mode: AsyncContextMode;
  private session: string | null = null;
  private epoch = 0;
  private sequence = 0;
  private pinned = false;
  private root: PhaseContextNode = { current: null };
  private readonly thread = currentJsThread();
  private rootFlow = new PhaseFlow(this.thread.id, this.thread.name, false);
  private freeFlowIds: number[] = [];
  private nextFlowId = this.thread.id + 1;
  private readonly forkedFlows = new Set<PhaseFlow>();
  private readonly topPaths = new Map<string, PathNode>();
  private internedPaths = 0;
  /** The node `pathNode` returned last. */
  private lastPathNode: PathNode | null = null;
  /** Closed frames to reuse (`reuseScopes`), or null when not reusing. */
  private readonly reusable: PhaseFrame[] | null;

  constructor(options: PhaseRecorderOptions) {
    this.listener = options.onBoundary;
    this.onListenerError = options.onListenerError;
    this.mode = options.asyncContext ?? "auto";
    this.reusable = options.reuseScopes === true ? [] : null;
  }

  /** The session phases are recorded into, or null while inactive. */
  get sessionId(): string | null {
    return this.session;
  }

  /** True between `begin()` and `end()`. */
  get active(): boolean {
    return this.session !== null;
  }

  /** Starts recording into a session: sequence back to 0, no open phases (reference `reset()`). */
  begin(sessionId: string): void {
    this.end();
    this.session = sessionId;
    if (this.mode === "always") {
      pinAsyncContext();
      this.pinned = true;
    }
  }

  /**
   * Stops recording. Open phases are dropped without exit records (the replay index ends them at the
   * session's last event); closing their scopes later is a no-op.
   */
  end(): void {
    this.epoch++;
    this.session = null;
    this.sequence = 0;
    this.root = { current: null };
    this.rootFlow = new PhaseFlow(this.thread.id, this.thread.name, false);
    this.freeFlowIds = [];
    this.nextFlowId = this.thread.id + 1;
    this.forkedFlows.clear();
    if (this.pinned) {
      this.pinned = false;
      unpinAsyncContext();
    }
  }

  /**
   * The innermost open phase's path where code runs now, or "" outside any phase or session: the
   * tracker hands it to collectors that attribute allocations to phases (core's `PhaseContextLike`),
   * which call it per allocation, so it allocates nothing.
   */
  currentPhasePath(): string {
    if (this.session === null) return "";
    const current = this.currentContext().current;
    return current === null ? "" : current.phasePath;
  }

  /** Every open phase, outermost first per stack (for diagnostics). */
  openPhases(): RecordedPhase[] {
    const result: RecordedPhase[] = [];
    for (const flow of [this.rootFlow, ...this.forkedFlows]) {
      for (const frame of flow.stack) {
        if (frame.closed) continue;
        frame.reusable = false;
        result.push(frame);
      }
    }
    return result;
  }

  /** Runs `fn` inside the phase and returns what it returns; closes the phase when it throws or rejects. */
  phase<T>(name: string, fn: () => T, options?: PhaseOptions): T;
  /** Opens a phase for `using scope = recorder.phase("forward")`. */
  phase(name: string, options?: PhaseOptions): PhaseScope;
  phase<T>(name: string, fnOrOptions?: (() => T) | PhaseOptions, options?: PhaseOptions): T | PhaseScope {
    if (typeof fnOrOptions === "function") return this.run(name, fnOrOptions, options);
    return this.enterPhase(name, fnOrOptions);
  }

  /** Opens a phase that the caller closes with `close()` (idempotent) or `using`. */
  enterPhase(name: string, options?: PhaseOptions): RecordedPhase {
    const normalized = normalizePhaseName(name);
    if (this.session === null) return new NoopPhaseScope(normalized) as unknown as RecordedPhase;
    const ctx = this.currentContext();
    const frame = this.open(ctx, normalized, options, false);
    ctx.current = frame;
    return frame;
  }

  private run<T>(name: string, fn: () => T, options: PhaseOptions | undefined): T {
    const normalized = normalizePhaseName(name);
    if (this.session === null) return fn();
    const ctx = this.currentContext();
    if (this.mode !== "off" && (asyncPhasesOpen() || isAsyncFunction(fn))) {
      return this.runInContext(ctx, normalized, fn, options);
    }
    const frame = this.open(ctx, normalized, options, this.reusable !== null);
    ctx.current = frame;
    let result: T;
    try {
      result = fn();
    } catch (error) {
      this.complete(frame, true);
      throw error;
    }
    if (isThenable(result)) {
      frame.reusable = false;
      frame.detached = true;
      if (ctx.current === frame) ctx.current = frame.parent;
      return this.completeLater(frame, result, false) as T;
    }
    // Closed and off its stack at once (nothing detached above it): nothing refers to it any more.
    if (this.complete(frame, false) && frame.reusable) {
      const reusable = this.reusable as PhaseFrame[];
      if (reusable.length < MAX_REUSED_SCOPES) {
        frame.parent = null;
        reusable.push(frame);
      }
    }
    return result;
  }

  private runInContext<T>(
    ctx: PhaseContextNode,
    name: string,
    fn: () => T,
    options: PhaseOptions | undefined,
  ): T {
    const frame = this.open(ctx, name, options, false);
    frame.current = frame;
    asyncPhaseOpened();
    let result: T;
    try {
      result = phaseStorage.run(frame, fn);
    } catch (error) {
      asyncPhaseSettled();
      this.complete(frame, true);
      throw error;
    }
    if (isThenable(result)) {
      frame.detached = true;
      return this.completeLater(frame, result, true) as T;
    }
    asyncPhaseSettled();
    this.complete(frame, false);
    return result;
  }

  private completeLater(
    frame: PhaseFrame,
    result: PromiseLike<unknown>,
    counted: boolean,
  ): PromiseLike<unknown> {
    return result.then(
      (value) => {
        if (counted) asyncPhaseSettled();
        frame.detached = false;
        this.complete(frame, false);
        return value;
      },
      (error: unknown) => {
        if (counted) asyncPhaseSettled();
        frame.detached = false;
        this.complete(frame, true);
        throw error;
      },
    );
  }

  /** The context code runs in: the innermost open async phase of this recorder, or the top level. */
  private currentContext(): PhaseContextNode {
    if (!asyncPhasesOpen()) return this.root;
    let store = phaseStorage.getStore() as PhaseFrame | undefined;
    while (store !== undefined) {
      if (store.recorder !== this || store.epoch !== this.epoch) return this.root;
      if (!store.closed) return store;
      // Work left running by a finished async phase belongs to the context that phase ran in.
      store = store.ctx === this.root ? undefined : (store.ctx as PhaseFrame);
    }
    return this.root;
  }

  /** `reusable`: a sync `phase(name, fn)` frame, reusable once closed unless code gets it meanwhile. */
  private open(
    ctx: PhaseContextNode,
    name: string,
    options: PhaseOptions | undefined,
    reusable: boolean,
  ): PhaseFrame {
    const parent = ctx.current;
    let flow = parent === null ? this.rootFlow : parent.flow;
    const stack = flow.stack;
    const top = stack.length === 0 ? null : (stack[stack.length - 1] as PhaseFrame);
    // Something else runs on the parent's stack (a sibling async phase): this phase gets its own.
    if (top !== parent) flow = this.forkFlow();
    const sequence = ++this.sequence;
    const node = this.pathNode(parent === null ? null : parent.pathKey, name);
    const template =
      node.templateFlow === flow ? (node.template as FrameTemplate) : this.templateOf(node, flow);
    const attributes = attributesOf(options);
    const readings = options?.readings === true;
    const reused = attributes === undefined ? this.reusable?.pop() : undefined;
    let frame: PhaseFrame;
    if (reused !== undefined) {
      reused.reopen(this.epoch, ctx, flow, parent, sequence, readings, template);
      frame = reused;
    } else {
      frame = new PhaseFrame(this, this.epoch, ctx, flow, parent, sequence, attributes, readings, template);
    }
    // Before the listener runs: it may hand the scope to code (`openPhases()`), which marks it kept.
    frame.reusable = reusable && attributes === undefined;
    flow.stack.push(frame);
    this.emit(PHASE_ENTER_EVENT, frame, sequence);
    return frame;
  }

  /** `close()` / `[Symbol.dispose]()` from user code: the reference's strict checks. */
  closeScope(frame: PhaseFrame): void {
    if (frame.closed) return;
    if (frame.epoch !== this.epoch) {
      frame.closed = true;
      return;
    }
    const ctx = this.currentContext();
    if (frame.ctx !== ctx) {
      throw new PhaseProtocolError(
        `${THREAD_MESSAGE} '${frame.phasePath}' (${frame.scopeId}) belongs to ${frame.flow.name}; close it in ` +
          "the async task that opened it, or give each task its own phase with phase(name, async () => ...).",
      );
    }
    if (ctx.current !== frame) {
      const inner = ctx.current;
      throw new PhaseProtocolError(
        `${LIFO_MESSAGE} '${frame.phasePath}' (${frame.scopeId}) was closed while ` +
          `${inner === null ? "another phase" : `'${inner.phasePath}' (${inner.scopeId})`} is still open inside it; ` +
          "close the inner phase first (or use `using`).",
      );
    }
    const stack = frame.flow.stack;
    if (stack[stack.length - 1] !== frame) {
      const above = stack[stack.lastIndexOf(frame) + 1];
      if (above === undefined || !(above.detached || above.pendingExit)) {
        throw new PhaseProtocolError(
          `${LIFO_MESSAGE} '${frame.phasePath}' (${frame.scopeId}) is not the innermost phase of ${frame.flow.name}.`,
        );
      }
    }
    ctx.current = frame.parent;
    this.finish(frame);
  }

  /**
   * Closes a `phase(name, fn)` frame when `fn` returns, throws or settles. Scopes opened inside and
   * left open are closed first (their exits recorded); unless `fn` failed, that is then reported as
   * the programming error it is. True when the frame was the top of its stack and is off it now.
   */
  private complete(frame: PhaseFrame, failed: boolean): boolean {
    if (frame.closed) return false;
    if (frame.epoch !== this.epoch) {
      frame.closed = true;
      return false;
    }
    const ctx = frame.ctx;
    const stack = frame.flow.stack;
    if (stack[stack.length - 1] === frame) {
      if (ctx.current === frame) ctx.current = frame.parent;
      this.finish(frame);
      return true;
    }
    const index = stack.lastIndexOf(frame);
    let leaked: PhaseFrame | null = null;
    for (let i = index + 1; i < stack.length; i++) {
      const above = stack[i] as PhaseFrame;
      if (above.detached || above.pendingExit) break;
      leaked ??= above;
      above.closed = true;
      above.pendingExit = true;
      if (above.ctx.current === above) above.ctx.current = above.parent;
      if (frame.current === above) frame.current = frame;
    }
    for (let node = ctx.current; node !== null; node = node.parent) {
      if (node === frame) {
        ctx.current = frame.parent;
        break;
      }
    }
    this.finish(frame);
    if (leaked !== null && !failed) {
      throw new PhaseProtocolError(
        `${LIFO_MESSAGE} '${leaked.phasePath}' (${leaked.scopeId}) was still open when '${frame.phasePath}' ended; ` +
          "close scopes opened inside a phase before it returns (or use `using`).",
      );
    }
    return false;
  }

  /** Marks the frame closed and records its exit now, or once the detached phases above it finish. */
  private finish(frame: PhaseFrame): void {
    frame.closed = true;
    frame.pendingExit = true;
    const flow = frame.flow;
    const stack = flow.stack;
    while (stack.length > 0) {
      const top = stack[stack.length - 1] as PhaseFrame;
      if (!top.pendingExit) return;
      stack.pop();
      this.emit(PHASE_EXIT_EVENT, top, ++this.sequence);
    }
    if (flow.forked) {
      this.forkedFlows.delete(flow);
      this.freeFlowIds.push(flow.id);
    }
  }

  /** The node of `name` under `parent`: interned, or a node of its own past `MAX_INTERNED_PATHS`. */
  private pathNode(parent: PathNode | null, name: string): PathNode {
    // A loop opens the same phase again and again: its node, without a lookup.
    const last = this.lastPathNode;
    if (last !== null && last.parent === parent && last.name === name) return last;
    const siblings = parent === null ? this.topPaths : parent.children;
    let node = siblings.get(name);
    if (node === undefined) {
      node = new PathNode(parent, name);
      if (this.internedPaths < MAX_INTERNED_PATHS) {
        node.interned = true;
        siblings.set(name, node);
        this.internedPaths++;
      }
    }
    this.lastPathNode = node;
    return node;
  }

  /** The template of `node`'s scopes on `flow`, made the first time. */
  private templateOf(node: PathNode, flow: PhaseFlow): FrameTemplate {
    let template = node.interned ? flow.templates.get(node) : undefined;
    if (template === undefined) {
      template = {
        name: node.name,
        path: node.path,
        phasePath: node.phasePath,
        depth: node.path.length,
        threadId: flow.id,
        threadName: flow.name,
        sessionId: this.session as string,
        pathKey: node,
      };
      if (node.interned) flow.templates.set(node, template);
    }
    node.template = template;
    node.templateFlow = flow;
    return template;
  }

  private forkFlow(): PhaseFlow {
    const id = this.freeFlowIds.length > 0 ? (this.freeFlowIds.pop() as number) : this.nextFlowId++;
    const flow = new PhaseFlow(id, `task-${id}`, true);
    this.forkedFlows.add(flow);
    return flow;
  }

  private emit(eventType: "phase_enter" | "phase_exit", frame: PhaseFrame, sequence: number): void {
    try {
      this.listener(new Boundary(eventType, frame, sequence));
    } catch (error) {
      this.onListenerError?.(error);
    }
  }
}
