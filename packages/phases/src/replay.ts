/**
 * Phase replay: rebuilds the spans of nested phases from `phase_enter`/`phase_exit` telemetry and
 * answers "which phase was active at time t", with the Python reference's semantics
 * (`stormlog/phases/replay.py`): boundaries grouped by `(session_id, rank)`, replayed per thread in
 * `(timestamp_ns, sequence, scope_id)` order, an exit closing only the scope on top of its thread's
 * stack, inclusive ends, and scopes never closed ending at the group's last event (`syntheticEnd`).
 *
 * Lookup structure: a nested containment list (NCList, Alekseyenko & Lee 2007) per group. Spans are
 * sorted by (start asc, end desc); a span contained in another becomes its child, so each list holds
 * siblings none of which contains another, and their starts and ends both increase. A stabbing query
 * binary-searches a list for the first sibling whose end is >= t, takes siblings while start <= t,
 * and descends into each hit's child list the same way: O(log n) per visited list, O((k + 1) log n)
 * for k hits, O(n) memory, whatever the overlap across threads. Phase spans of one thread nest
 * perfectly, so lists are short and deep only as deep as the phase nesting. Times are stored as
 * doubles relative to the group's earliest start (exact while the group spans < 2^53 ns, ~104 days;
 * wider groups fall back to exact rank coordinates), so a query costs one bigint subtraction.
 * Hits are returned in the reference's order (spans sorted by start, end, then replay order), which
 * only matters to the policy for spans with equal `(sequence, scope_id)`.
 */
import type { JsonObject } from "@stormlog/core";
import { FLOAT_KEYS, pythonStrip } from "@stormlog/core/internal";
import {
  type AttributeOptions,
  attributeActiveSpans,
  comparePythonStrings,
  formatPhasePath,
  type PhaseAttribution,
} from "./policy.js";

/** Event type of a phase entry record. */
export const PHASE_ENTER_EVENT = "phase_enter";
/** Event type of a phase exit record. */
export const PHASE_EXIT_EVENT = "phase_exit";
/** Metadata key holding the phase scope of a boundary record. */
export const PHASE_SCOPE_METADATA_KEY = "phase_scope";
/** Key of the user attributes inside `metadata.phase_scope`. */
export const PHASE_SCOPE_ATTRIBUTES_KEY = "attributes";

/** A thread id as recorded (`thread_id`); `bigint` only beyond 2^53. */
export type PhaseThreadId = number | bigint;

/**
 * Anything the replay index reads: a decoded `TelemetryEvent`, or a plain object from elsewhere
 * (fields are checked at run time as the reference checks them).
 */
export interface PhaseEventLike {
  readonly session_id?: unknown;
  readonly timestamp_ns?: unknown;
  readonly rank?: unknown;
  readonly event_type?: unknown;
  readonly metadata?: unknown;
  readonly origin_thread_id?: unknown;
  readonly origin_phase_scope_id?: unknown;
}

/** One validated phase boundary (`PhaseBoundaryRecord`). */
export interface PhaseBoundaryRecord {
  readonly action: "enter" | "exit";
  /** The leaf name, stripped. */
  readonly name: string;
  /** Non-empty string parts of the recorded path. */
  readonly path: readonly string[];
  readonly depth: number;
  readonly scopeId: string;
  readonly parentScopeId: string | null;
  readonly threadId: PhaseThreadId;
  readonly threadName: string;
  readonly sequence: number | bigint;
  readonly sessionId: string;
  readonly timestampNs: bigint;
  readonly attributes: JsonObject;
}

/** One replayed phase occurrence (`PhaseSpan`). Both ends are inclusive. */
export interface PhaseSpan {
  readonly sessionId: string;
  readonly rank: number;
  readonly threadId: PhaseThreadId;
  readonly threadName: string;
  readonly scopeId: string;
  readonly path: readonly string[];
  /** `path` joined with `" / "`. */
  readonly phasePath: string;
  /** `path.length`. */
  readonly depth: number;
  readonly startNs: bigint;
  readonly endNs: bigint;
  /** The enter record's sequence. */
  readonly sequence: number | bigint;
  /** True when the scope was never closed and ends at its group's last event. */
  readonly syntheticEnd: boolean;
}

/** What analyses need from a phase index: attribution of an instant or of an event. */
export interface PhaseResolver {
  resolve(
    timestampNs: bigint,
    sessionId: string | null | undefined,
    rank?: number | null,
    originThreadId?: PhaseThreadId | null,
    originPhaseScopeId?: string | null,
  ): PhaseAttribution | null;
  resolveForEvent(event: PhaseEventLike): PhaseAttribution | null;
}

class Span implements PhaseSpan {
  readonly depth: number;

  constructor(
    readonly sessionId: string,
    readonly rank: number,
    readonly threadId: PhaseThreadId,
    readonly threadName: string,
    readonly scopeId: string,
    readonly path: readonly string[],
    readonly phasePath: string,
    readonly startNs: bigint,
    readonly endNs: bigint,
    readonly sequence: number | bigint,
    readonly syntheticEnd: boolean,
  ) {
    this.depth = path.length;
  }
}

/** Interns path labels during a build, so equal paths share one string and one id. */
class LabelTable {
  readonly ids = new Map<string, number>();

  id(label: string): number {
    let id = this.ids.get(label);
    if (id === undefined) {
      id = this.ids.size;
      this.ids.set(label, id);
    }
    return id;
  }
}

// ---------------------------------------------------------------------------------------------
// Python-compatible field checks
// ---------------------------------------------------------------------------------------------

type Container = { readonly [key: string]: unknown; readonly [FLOAT_KEYS]?: Set<string | number> };

function isMapping(value: unknown): value is Container {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `_event_field(event, name, default)`: an absent (or undefined) field reads as the default. */
function field(event: PhaseEventLike, name: keyof PhaseEventLike, fallback: unknown = null): unknown {
  const value = event[name];
  return value === undefined ? fallback : value;
}

function normalizeInt(value: bigint): number | bigint {
  return value >= -9007199254740991n && value <= 9007199254740991n ? Number(value) : value;
}

/**
 * Python's `isinstance(value, int)`: integers (a `1.0` token decoded by core's parser is a float, as
 * in Python), and booleans, which Python counts as ints.
 */
function pythonInt(container: Container, key: string, value: unknown): number | bigint | null {
  switch (typeof value) {
    case "number":
      if (!Number.isInteger(value) || container[FLOAT_KEYS]?.has(key) === true) return null;
      return value;
    case "bigint":
      return normalizeInt(value);
    case "boolean":
      return value ? 1 : 0;
    default:
      return null;
  }
}

function pythonTimestamp(event: PhaseEventLike): bigint | null {
  const value = event.timestamp_ns;
  if (typeof value === "bigint") return value;
  const int = pythonInt(event as Container, "timestamp_ns", value);
  return int === null ? null : BigInt(int);
}

const DECIMAL_DIGIT = /\p{Nd}/u;
const INT_LITERAL = /^[+-]?\d+(?:_\d+)*$/;

/** Python's `int(text)` for a stripped string, or null where Python raises ValueError. */
function pythonParseInt(text: string): bigint | null {
  let ascii = "";
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (code < 0x80 || !DECIMAL_DIGIT.test(ch)) {
      ascii += ch;
      continue;
    }
    // Unicode decimal digits come in runs of ten starting at zero; find the digit's value.
    let zero = code;
    while (zero > 0 && DECIMAL_DIGIT.test(String.fromCodePoint(zero - 1))) zero--;
    ascii += String((code - zero) % 10);
  }
  if (!INT_LITERAL.test(ascii)) return null;
  return BigInt(ascii.replaceAll("_", ""));
}

/**
 * `_coerce_rank`: an int, or a string holding one (`" 3 "`); booleans and anything else give null.
 * Ranks beyond 2^53 are treated as malformed.
 */
export function coerceRank(value: unknown, container?: object, key = "rank"): number | null {
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) return null;
    if (container !== undefined && (container as Container)[FLOAT_KEYS]?.has(key) === true) return null;
    return value;
  }
  if (typeof value === "bigint") {
    const int = normalizeInt(value);
    return typeof int === "number" ? int : null;
  }
  if (typeof value === "string") {
    const stripped = pythonStrip(value);
    if (!stripped) return null;
    const parsed = pythonParseInt(stripped);
    if (parsed === null) return null;
    const int = normalizeInt(parsed);
    return typeof int === "number" ? int : null;
  }
  return null;
}

function isPhaseEventType(eventType: unknown): eventType is "phase_enter" | "phase_exit" {
  return eventType === PHASE_ENTER_EVENT || eventType === PHASE_EXIT_EVENT;
}

function parseScope(
  scope: Container,
  eventType: "phase_enter" | "phase_exit",
  sessionId: string,
  timestampNs: bigint,
): PhaseBoundaryRecord | null {
  const action = scope.action;
  const name = scope.name;
  const scopeId = scope.scope_id;
  const rawPath = scope.path;
  const threadName = scope.thread_name;
  if (
    typeof action !== "string" ||
    typeof name !== "string" ||
    typeof scopeId !== "string" ||
    typeof threadName !== "string" ||
    !Array.isArray(rawPath)
  ) {
    return null;
  }
  const strippedName = pythonStrip(name);
  if (!strippedName) return null;
  if (action !== (eventType === PHASE_ENTER_EVENT ? "enter" : "exit")) return null;
  let path: string[] = rawPath as string[];
  for (let i = 0; i < rawPath.length; i++) {
    const part: unknown = rawPath[i];
    if (typeof part === "string" && part) continue;
    // Rare: drop non-string and empty parts, as the reference does.
    path = rawPath.filter((item: unknown): item is string => typeof item === "string" && item !== "");
    break;
  }
  if (path.length === 0) return null;
  const sequence = pythonInt(scope, "sequence", scope.sequence);
  if (sequence === null) return null;
  const threadId = pythonInt(scope, "thread_id", scope.thread_id);
  if (threadId === null) return null;
  const parent = scope.parent_scope_id;
  if (parent !== undefined && parent !== null && typeof parent !== "string") return null;
  const attributes = scope[PHASE_SCOPE_ATTRIBUTES_KEY];
  return {
    action,
    name: strippedName,
    path: path === rawPath ? path.slice() : path,
    depth: path.length,
    scopeId,
    parentScopeId: parent ?? null,
    threadId,
    threadName,
    sequence,
    sessionId,
    timestampNs,
    attributes: isMapping(attributes) ? { ...(attributes as JsonObject) } : {},
  };
}

function scopeOf(event: PhaseEventLike): Container | null {
  const metadata = field(event, "metadata", {});
  if (!isMapping(metadata)) return null;
  const scope = metadata[PHASE_SCOPE_METADATA_KEY];
  return isMapping(scope) ? scope : null;
}

/**
 * `parse_phase_boundary`: the normalized phase boundary of an event, or null when the event is not
 * a well-formed `phase_enter`/`phase_exit` record (wrong types, blank name, action not matching the
 * event type, empty path, non-integer sequence or thread id, non-string parent). A wrong `depth` is
 * recomputed; non-object attributes become `{}`.
 */
export function parsePhaseBoundary(event: PhaseEventLike): PhaseBoundaryRecord | null {
  const eventType = field(event, "event_type", "");
  if (!isPhaseEventType(eventType)) return null;
  const scope = scopeOf(event);
  if (scope === null) return null;
  const sessionId = field(event, "session_id");
  const timestampNs = pythonTimestamp(event);
  if (typeof sessionId !== "string" || timestampNs === null) return null;
  return parseScope(scope, eventType, sessionId, timestampNs);
}

/** True when the event is a well-formed phase boundary record. */
export function isPhaseBoundaryEvent(event: PhaseEventLike): boolean {
  return parsePhaseBoundary(event) !== null;
}

// ---------------------------------------------------------------------------------------------
// Index
// ---------------------------------------------------------------------------------------------

const MAX_EXACT_OFFSET = 2n ** 53n - 1n;
/** Slots per block of the first search level. */
const BLOCK = 16;
const EMPTY_SPANS: readonly PhaseSpan[] = Object.freeze([]);

function compareBigint(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The spans of one `(session_id, rank)` and their containment lists. */
class SpanGroup {
  /** Spans in the reference's order: by (start, end), ties in replay order. */
  readonly spans: Span[];
  /** Coordinates are `Number(t - base)`, or positions in `points` when the group is too wide. */
  private readonly base: bigint;
  private readonly points: bigint[] | null;
  // NCList, laid out list after list: per slot the span (as its index in `spans`), its start and
  // end coordinates, and where its child list lies.
  private readonly slotSpan: Int32Array;
  private readonly slotStart: Float64Array;
  private readonly slotEnd: Float64Array;
  private readonly childOffset: Int32Array;
  private readonly childCount: Int32Array;
  private readonly topCount: number;
  private readonly stack: Int32Array;
  // Per span (index in `spans`): what the one-thread heuristic needs, without touching span objects.
  // Thread ids and sequences are NaN when they are bigints (the general policy handles those).
  private readonly labelOf: Int32Array;
  private readonly depthOf: Int32Array;
  private readonly threadOf: Float64Array;
  private readonly sequenceOf: Float64Array;
  #heuristic: Array<PhaseAttribution | undefined> | undefined;
  /** End of the last slot of every full block of BLOCK slots: a cache-friendly first search level. */
  private readonly blockLast: Float64Array;

  // The constructor's steps are functions of their own (`spanCoordinates`, `nestedLists`): V8
  // compiled it whole around all their loops, once per rank of a cold analysis.
  constructor(spans: Span[], labels: LabelTable) {
    spans.sort((a, b) => compareBigint(a.startNs, b.startNs) || compareBigint(a.endNs, b.endNs));
    this.spans = spans;
    const n = spans.length;
    this.labelOf = new Int32Array(n);
    this.depthOf = new Int32Array(n);
    this.threadOf = new Float64Array(n);
    this.sequenceOf = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const span = spans[i]!;
      this.labelOf[i] = labels.id(span.phasePath);
      this.depthOf[i] = span.depth;
      this.threadOf[i] = typeof span.threadId === "number" ? span.threadId : Number.NaN;
      this.sequenceOf[i] = typeof span.sequence === "number" ? span.sequence : Number.NaN;
    }
    const { base, points, starts, ends } = spanCoordinates(spans);
    this.base = base;
    this.points = points;
    const lists = nestedLists(starts, ends);
    this.slotSpan = lists.slotSpan;
    this.slotStart = lists.slotStart;
    this.slotEnd = lists.slotEnd;
    this.childOffset = lists.childOffset;
    this.childCount = lists.childCount;
    this.topCount = lists.topCount;
    this.stack = new Int32Array(2 * (lists.maxDepth + 1));
    const blocks = Math.floor(n / BLOCK);
    this.blockLast = new Float64Array(blocks);
    for (let j = 0; j < blocks; j++) this.blockLast[j] = this.slotEnd[j * BLOCK + BLOCK - 1]!;
  }

  /** The query time as a coordinate comparable with the stored ones, order preserved exactly. */
  private coordinate(timestampNs: bigint): number {
    const points = this.points;
    if (points === null) return Number(timestampNs - this.base);
    let lo = 0;
    let hi = points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (points[mid]! < timestampNs) lo = mid + 1;
      else hi = mid;
    }
    return lo < points.length && points[lo] === timestampNs ? lo : lo - 0.5;
  }

  /**
   * The unique `heuristic` attribution of a span, built once and frozen: the same span always
   * yields the same answer, so repeated lookups allocate nothing.
   */
  heuristicAttribution(index: number): PhaseAttribution {
    this.#heuristic ??= new Array(this.spans.length);
    let attribution = this.#heuristic[index];
    if (attribution === undefined) {
      const span = this.spans[index]!;
      attribution = Object.freeze({
        phaseResolution: "unique",
        phaseSource: "heuristic",
        phasePath: span.phasePath,
        phasePaths: Object.freeze([span.phasePath]),
        scopeId: span.scopeId,
        threadId: span.threadId,
        threadName: span.threadName,
        phaseSummary: null,
      } as const);
      this.#heuristic[index] = attribution;
    }
    return attribution;
  }

  /**
   * The `deepest_per_thread` winner among `count` hits when the answer is a plain heuristic unique
   * one: all hits on one thread, deepest hits sharing one path, one largest sequence. Returns the
   * span index, or -1 when the general policy must decide (several threads, ambiguity, ties,
   * bigint ids). Hit order does not matter here, so the hits need no sorting.
   */
  deepestOnOneThread(hits: Int32Array, count: number): number {
    const threadOf = this.threadOf;
    const depthOf = this.depthOf;
    const first = hits[0]!;
    const thread = threadOf[first]!;
    if (Number.isNaN(thread)) return -1; // a bigint thread id
    let maxDepth = depthOf[first]!;
    for (let i = 1; i < count; i++) {
      const h = hits[i]!;
      if (threadOf[h] !== thread) return -1;
      if (depthOf[h]! > maxDepth) maxDepth = depthOf[h]!;
    }
    const labelOf = this.labelOf;
    const sequenceOf = this.sequenceOf;
    let winner = -1;
    for (let i = 0; i < count; i++) {
      const h = hits[i]!;
      if (depthOf[h] !== maxDepth) continue;
      if (winner === -1) {
        winner = h;
        continue;
      }
      if (labelOf[h] !== labelOf[winner]) return -1;
      const a = sequenceOf[h]!;
      const b = sequenceOf[winner]!;
      // Equal sequences (scope_id decides) and bigint ones (NaN here) go to the general policy.
      if (a === b || Number.isNaN(a) || Number.isNaN(b)) return -1;
      if (a > b) winner = h;
    }
    return winner;
  }

  /**
   * First slot in the list [from, to) whose end is >= t (ends increase along a list), or `to`.
   * Long lists first search `blockLast` (1/BLOCK of the size, stays in cache), then one block.
   */
  private firstEndAtLeast(from: number, to: number, t: number, slotEnd: Float64Array): number {
    let lo = from;
    let hi = to;
    if (to - from > 2 * BLOCK) {
      const firstBlock = Math.ceil(from / BLOCK);
      const headEnd = firstBlock * BLOCK;
      if (headEnd > from && slotEnd[headEnd - 1]! >= t) {
        hi = headEnd;
      } else {
        const blockLast = this.blockLast;
        let jl = firstBlock;
        let jh = Math.floor(to / BLOCK);
        while (jl < jh) {
          const mid = (jl + jh) >>> 1;
          if (blockLast[mid]! < t) jl = mid + 1;
          else jh = mid;
        }
        lo = jl * BLOCK;
        hi = Math.min(to, lo + BLOCK);
        if (lo < from) lo = from;
      }
    }
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (slotEnd[mid]! < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Appends the indices (in `spans`) of the spans containing `timestampNs` to `out`; returns the count. */
  stab(timestampNs: bigint, out: Int32Array, outCount: number): number {
    const t = this.coordinate(timestampNs);
    const slotStart = this.slotStart;
    const slotEnd = this.slotEnd;
    const stack = this.stack;
    let count = outCount;
    let depth = 0;
    let from = 0;
    let to = this.topCount;
    for (;;) {
      const lo = this.firstEndAtLeast(from, to, t, slotEnd);
      if (lo < to && slotStart[lo]! <= t) {
        out[count++] = this.slotSpan[lo]!;
        // Resume this list after the hit, then descend into the hit's children.
        stack[depth++] = lo + 1;
        stack[depth++] = to;
        from = this.childOffset[lo]!;
        to = from + this.childCount[lo]!;
        continue;
      }
      // Done with this list: pop to the next sibling of the last hit.
      for (;;) {
        if (depth === 0) return count;
        to = stack[--depth]!;
        from = stack[--depth]!;
        if (from < to && slotStart[from]! <= t) break;
      }
      out[count++] = this.slotSpan[from]!;
      stack[depth++] = from + 1;
      stack[depth++] = to;
      const slot = from;
      from = this.childOffset[slot]!;
      to = from + this.childCount[slot]!;
    }
  }
}

function compareBoundaries(x: PhaseBoundaryRecord, y: PhaseBoundaryRecord): number {
  if (x.timestampNs !== y.timestampNs) return x.timestampNs < y.timestampNs ? -1 : 1;
  if (x.sequence !== y.sequence) return x.sequence < y.sequence ? -1 : 1;
  return comparePythonStrings(x.scopeId, y.scopeId);
}

interface GroupInput {
  readonly sessionId: string;
  readonly rank: number;
  readonly boundaries: PhaseBoundaryRecord[];
  endNs: bigint;
}

/**
 * Replays phase boundaries into spans and answers which phase was active when
 * (`PhaseReplayIndex`). Build it once per analysis with `PhaseReplayIndex.fromEvents(events)`.
 */
export class PhaseReplayIndex implements PhaseResolver {
  /** session id -> rank -> group, in the reference's group order. */
  readonly #groups: Map<string, Map<number, SpanGroup>>;
  #scratch = new Int32Array(64);
  readonly #spanCount: number;

  private constructor(groups: Map<string, Map<number, SpanGroup>>, spanCount: number) {
    this.#groups = groups;
    this.#spanCount = spanCount;
  }

  /** Number of spans in the index. */
  get size(): number {
    return this.#spanCount;
  }

  /**
   * Builds the index from events in any order (`PhaseReplayIndex.from_events`). Every event with a
   * string `session_id`, an integer `timestamp_ns` and a valid rank extends its group's end;
   * malformed boundaries are skipped, as in the reference.
   */
  static fromEvents(events: Iterable<PhaseEventLike>): PhaseReplayIndex {
    // Replay group by group in (session_id, rank) order, as the reference's global sort does.
    const ordered = groupInputs(events);
    ordered.sort((a, b) => comparePythonStrings(a.sessionId, b.sessionId) || a.rank - b.rank);

    const closedFirst: Array<[GroupInput, Span[]]> = [];
    const syntheticOnly: Array<[GroupInput, Span[]]> = [];
    let spanCount = 0;
    for (const input of ordered) {
      if (input.boundaries.length === 0) continue;
      const { spans, hadClosed } = replayGroup(input);
      if (spans.length === 0) continue;
      spanCount += spans.length;
      (hadClosed ? closedFirst : syntheticOnly).push([input, spans]);
    }

    const groups = new Map<string, Map<number, SpanGroup>>();
    const labels = new LabelTable();
    for (const [input, spans] of [...closedFirst, ...syntheticOnly]) {
      let byRank = groups.get(input.sessionId);
      if (byRank === undefined) {
        byRank = new Map();
        groups.set(input.sessionId, byRank);
      }
      byRank.set(input.rank, new SpanGroup(spans, labels));
    }
    return new PhaseReplayIndex(groups, spanCount);
  }

  /** All spans of a session, or of one rank of it (`spans_for`), in the reference's order. */
  spansFor(sessionId: string, rank?: number | null): PhaseSpan[] {
    const byRank = this.#groups.get(sessionId);
    if (byRank === undefined) return [];
    if (rank !== undefined && rank !== null) return [...(byRank.get(rank)?.spans ?? EMPTY_SPANS)];
    const out: PhaseSpan[] = [];
    for (const group of byRank.values()) out.push(...group.spans);
    return out;
  }

  /** Spans with `start <= t <= end` (`active_spans`), before any attribution policy. */
  activeSpans(timestampNs: bigint, sessionId: string, rank?: number | null): PhaseSpan[] {
    const byRank = this.#groups.get(sessionId);
    if (byRank === undefined) return [];
    if (rank !== undefined && rank !== null) {
      const group = byRank.get(rank);
      return group === undefined ? [] : this.#stabGroup(group, timestampNs);
    }
    const out: PhaseSpan[] = [];
    for (const group of byRank.values()) out.push(...this.#stabGroup(group, timestampNs));
    return out;
  }

  #stabGroup(group: SpanGroup, timestampNs: bigint): PhaseSpan[] {
    if (this.#scratch.length < group.spans.length) this.#scratch = new Int32Array(group.spans.length);
    const hits = this.#scratch;
    const count = group.stab(timestampNs, hits, 0);
    if (count === 0) return [];
    // Back to the reference's order (span index order); k is small, insertion sort.
    for (let i = 1; i < count; i++) {
      const value = hits[i]!;
      let j = i - 1;
      while (j >= 0 && hits[j]! > value) {
        hits[j + 1] = hits[j]!;
        j--;
      }
      hits[j + 1] = value;
    }
    const spans = group.spans;
    const out: PhaseSpan[] = new Array(count);
    for (let i = 0; i < count; i++) out[i] = spans[hits[i]!]!;
    return out;
  }

  /**
   * The phase active at `timestampNs` in a session (and rank), after the `deepest_per_thread`
   * policy (`resolve`). Null when `sessionId` is null or no span is active.
   */
  resolve(
    timestampNs: bigint,
    sessionId: string | null | undefined,
    rank?: number | null,
    originThreadId?: PhaseThreadId | null,
    originPhaseScopeId?: string | null,
  ): PhaseAttribution | null {
    if (sessionId === null || sessionId === undefined) return null;
    if (
      rank !== undefined &&
      rank !== null &&
      (originThreadId === undefined || originThreadId === null) &&
      !originPhaseScopeId
    ) {
      const group = this.#groups.get(sessionId)?.get(rank);
      if (group === undefined) return null;
      if (this.#scratch.length < group.spans.length) this.#scratch = new Int32Array(group.spans.length);
      const count = group.stab(timestampNs, this.#scratch, 0);
      if (count === 0) return null;
      const winner = group.deepestOnOneThread(this.#scratch, count);
      if (winner >= 0) return group.heuristicAttribution(winner);
    }
    const spans = this.activeSpans(timestampNs, sessionId, rank);
    if (spans.length === 0) return null;
    const options: AttributeOptions = {
      originThreadId: originThreadId ?? null,
      originPhaseScopeId: originPhaseScopeId ?? null,
    };
    return attributeActiveSpans(spans, options);
  }

  /** Resolves an event by its timestamp, session, rank and origin hints (`resolve_for_event`). */
  resolveForEvent(event: PhaseEventLike): PhaseAttribution | null {
    return resolvePhaseForEvent(this, event);
  }
}

function originThreadIdOf(event: PhaseEventLike): PhaseThreadId | null {
  const direct = pythonInt(event as Container, "origin_thread_id", event.origin_thread_id);
  if (direct !== null) return direct;
  const metadata = field(event, "metadata", {});
  if (isMapping(metadata)) return pythonInt(metadata, "origin_thread_id", metadata.origin_thread_id);
  return null;
}

function originScopeIdOf(event: PhaseEventLike): string | null {
  const direct = event.origin_phase_scope_id;
  if (typeof direct === "string" && direct) return direct;
  const metadata = field(event, "metadata", {});
  if (isMapping(metadata)) {
    const value = metadata.origin_phase_scope_id;
    if (typeof value === "string" && value) return value;
  }
  return null;
}

/**
 * `resolve_phase_for_event`: attribution of one event through `index`, using the event's
 * `timestamp_ns`, `session_id`, `rank` (default 0; malformed gives null) and its
 * `origin_thread_id`/`origin_phase_scope_id` (top-level or in metadata).
 */
export function resolvePhaseForEvent(
  index: PhaseReplayIndex,
  event: PhaseEventLike,
): PhaseAttribution | null {
  const timestampNs = pythonTimestamp(event);
  const sessionId = event.session_id;
  if (timestampNs === null || typeof sessionId !== "string") return null;
  const rank = coerceRank(field(event, "rank", 0), event);
  if (rank === null) return null;
  const spans = index.activeSpans(timestampNs, sessionId, rank);
  if (spans.length === 0) return null;
  return attributeActiveSpans(spans, {
    originThreadId: originThreadIdOf(event),
    originPhaseScopeId: originScopeIdOf(event),
  });
}

// `fromEvents` in parts: V8 compiled it whole around each of its loops (~100 ms of a cold
// analysis's compiling, which builds an index per rank); each part it compiles on its own.

/** The events' boundaries and ends by (session, rank): sessions as first seen, each one's ranks as first seen. */
function groupInputs(events: Iterable<PhaseEventLike>): GroupInput[] {
  const inputs = new Map<string, Map<number, GroupInput>>();
  const ordered: GroupInput[] = [];
  let last: GroupInput | undefined;
  for (const event of events) {
    const sessionId = event.session_id;
    if (typeof sessionId !== "string") continue;
    const ts = event.timestamp_ns;
    const timestampNs = typeof ts === "bigint" ? ts : pythonTimestamp(event);
    if (timestampNs === null) continue;
    const rawRank = event.rank;
    const rank =
      typeof rawRank === "number" && Number.isSafeInteger(rawRank) && !(event as Container)[FLOAT_KEYS]
        ? rawRank
        : coerceRank(rawRank === undefined ? 0 : rawRank, event);
    if (rank === null) continue;
    let input = last !== undefined && last.rank === rank && last.sessionId === sessionId ? last : undefined;
    if (input === undefined) {
      let byRank = inputs.get(sessionId);
      if (byRank === undefined) {
        byRank = new Map();
        inputs.set(sessionId, byRank);
      }
      input = byRank.get(rank);
      if (input === undefined) {
        input = { sessionId, rank, boundaries: [], endNs: timestampNs };
        byRank.set(rank, input);
      }
      last = input;
    }
    if (timestampNs > input.endNs) input.endNs = timestampNs;
    const eventType = event.event_type;
    if (!isPhaseEventType(eventType)) continue;
    const scope = scopeOf(event);
    if (scope === null) continue;
    const record = parseScope(scope, eventType, sessionId, timestampNs);
    if (record !== null) input.boundaries.push(record);
  }
  for (const byRank of inputs.values()) for (const input of byRank.values()) ordered.push(input);
  return ordered;
}

/** One group's spans: closed ones as their exits come, then those left open (`hadClosed`: any closed). */
function replayGroup(input: GroupInput): { spans: Span[]; hadClosed: boolean } {
  const boundaries = input.boundaries;
  let sorted = true;
  for (let i = 1; i < boundaries.length && sorted; i++) {
    if (compareBoundaries(boundaries[i - 1]!, boundaries[i]!) > 0) sorted = false;
  }
  if (!sorted) boundaries.sort(compareBoundaries);
  const spans: Span[] = [];
  // Stacks per thread; a Map keeps the reference's dict order (a stack emptied by an exit is
  // removed, so its thread moves to the end when it opens a scope again).
  const stacks = new Map<PhaseThreadId, PhaseBoundaryRecord[]>();
  for (const record of boundaries) {
    let stack = stacks.get(record.threadId);
    if (stack === undefined) {
      stack = [];
      stacks.set(record.threadId, stack);
    }
    if (record.action === "enter") {
      stack.push(record);
      continue;
    }
    const top = stack[stack.length - 1];
    if (top === undefined || top.scopeId !== record.scopeId) continue;
    stack.pop();
    if (stack.length === 0) stacks.delete(record.threadId);
    spans.push(
      new Span(
        record.sessionId,
        input.rank,
        record.threadId,
        record.threadName,
        record.scopeId,
        top.path,
        formatPhasePath(top.path),
        top.timestampNs,
        record.timestampNs,
        top.sequence,
        false,
      ),
    );
  }
  const hadClosed = spans.length > 0;
  for (const stack of stacks.values()) {
    for (const scope of stack) {
      spans.push(
        new Span(
          input.sessionId,
          input.rank,
          scope.threadId,
          scope.threadName,
          scope.scopeId,
          scope.path,
          formatPhasePath(scope.path),
          scope.timestampNs,
          input.endNs,
          scope.sequence,
          true,
        ),
      );
    }
  }
  return { spans, hadClosed };
}

/**
 * Where a group's spans start and end as doubles: offsets from the earliest start, or, when the
 * group spans 2^53 ns or more, positions among its distinct times.
 */
function spanCoordinates(spans: readonly Span[]): {
  base: bigint;
  points: bigint[] | null;
  starts: Float64Array;
  ends: Float64Array;
} {
  const n = spans.length;
  let min = spans[0]!.startNs;
  let max = spans[0]!.endNs;
  for (const span of spans) {
    if (span.startNs < min) min = span.startNs;
    if (span.endNs > max) max = span.endNs;
  }
  const starts = new Float64Array(n);
  const ends = new Float64Array(n);
  let points: bigint[] | null = null;
  if (max - min <= MAX_EXACT_OFFSET) {
    for (let i = 0; i < n; i++) {
      starts[i] = Number(spans[i]!.startNs - min);
      ends[i] = Number(spans[i]!.endNs - min);
    }
  } else {
    points = [...new Set(spans.flatMap((span) => [span.startNs, span.endNs]))].sort(compareBigint);
    const position = new Map(points.map((point, index) => [point, index]));
    for (let i = 0; i < n; i++) {
      starts[i] = position.get(spans[i]!.startNs)!;
      ends[i] = position.get(spans[i]!.endNs)!;
    }
  }
  return { base: min, points, starts, ends };
}

/** The spans (coordinates `starts`, `ends`) as a nested containment list, laid out list after list. */
function nestedLists(
  starts: Float64Array,
  ends: Float64Array,
): {
  slotSpan: Int32Array;
  slotStart: Float64Array;
  slotEnd: Float64Array;
  childOffset: Int32Array;
  childCount: Int32Array;
  topCount: number;
  maxDepth: number;
} {
  const n = starts.length;
  // Containment order: start ascending, end descending (a container precedes what it contains).
  const order = new Int32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  order.sort((a, b) => starts[a]! - starts[b]! || ends[b]! - ends[a]! || a - b);

  const parent = new Int32Array(n);
  const children = new Int32Array(n + 1); // per span, then the root at index n
  const open = new Int32Array(n);
  let openCount = 0;
  let maxDepth = 0;
  for (let k = 0; k < n; k++) {
    const i = order[k]!;
    while (openCount > 0 && ends[open[openCount - 1]!]! < ends[i]!) openCount--;
    const p = openCount > 0 ? open[openCount - 1]! : n;
    parent[i] = p;
    children[p]!++;
    open[openCount++] = i;
    if (openCount > maxDepth) maxDepth = openCount;
  }

  // Lists laid out contiguously: the root's first, then each span's in containment order.
  const listStart = new Int32Array(n + 1);
  let next = children[n]!;
  for (let k = 0; k < n; k++) {
    const i = order[k]!;
    listStart[i] = next;
    next += children[i]!;
  }
  const fill = new Int32Array(n + 1);
  const slotSpan = new Int32Array(n);
  const slotStart = new Float64Array(n);
  const slotEnd = new Float64Array(n);
  const childOffset = new Int32Array(n);
  const childCount = new Int32Array(n);
  for (let k = 0; k < n; k++) {
    const i = order[k]!;
    const p = parent[i]!;
    const slot = listStart[p]! + fill[p]!++;
    slotSpan[slot] = i;
    slotStart[slot] = starts[i]!;
    slotEnd[slot] = ends[i]!;
    childOffset[slot] = listStart[i]!;
    childCount[slot] = children[i]!;
  }
  return { slotSpan, slotStart, slotEnd, childOffset, childCount, topCount: children[n]!, maxDepth };
}
