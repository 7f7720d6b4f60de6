/**
 * Phase attribution policy: collapses the phase spans active at one instant into one answer, as the
 * Python reference's `stormlog/phases/policy.py` does (strategy `deepest_per_thread` only).
 *
 * Order of preference: an exact `origin_phase_scope_id` match (`exact`), then the most recent span
 * on `origin_thread_id` (`thread_local`), then the deepest span of each thread (`heuristic`). When
 * threads disagree, or one thread has two deepest spans with different paths, the result stays
 * `ambiguous` and lists every candidate path; it never invents a unique path.
 */
import { InvalidConfigError } from "@stormlog/core";
import type { PhaseSpan, PhaseThreadId } from "./replay.js";

/** Whether an attribution names one phase or several candidates. */
export type PhaseResolution = "unique" | "ambiguous";
/** How a unique attribution was found. */
export type PhaseSource = "exact" | "thread_local" | "heuristic";
/** The only strategy the reference implements. */
export type PhaseAttributionStrategy = "deepest_per_thread";

/** A presentation hint for an ambiguous attribution: the most recently entered candidate. */
export interface PhaseSummary {
  readonly phasePath: string;
  readonly source: PhaseSource;
}

/** The phase an anomaly or report item is attributed to (the reference's `PhaseAttribution`). */
export interface PhaseAttribution {
  readonly phaseResolution: PhaseResolution;
  readonly phaseSource: PhaseSource | null;
  /** Set for unique attributions only. */
  readonly phasePath: string | null;
  /** Candidate paths: one for unique, sorted candidates for ambiguous. */
  readonly phasePaths: readonly string[];
  readonly scopeId: string | null;
  readonly threadId: PhaseThreadId | null;
  readonly threadName: string | null;
  readonly phaseSummary: PhaseSummary | null;
}

/** The JSON form of a `PhaseAttribution` (`phase_attribution_to_payload`), in the reference's key order. */
export type PhaseAttributionPayload = {
  phase_resolution: PhaseResolution;
  phase_paths: string[];
  phase_source?: PhaseSource;
  phase_path?: string;
  scope_id?: string;
  thread_id?: PhaseThreadId;
  thread_name?: string;
  phase_summary?: { phase_path: string; source: PhaseSource };
};

/** Options of `attributeActiveSpans`. */
export interface AttributeOptions {
  readonly strategy?: PhaseAttributionStrategy;
  readonly originThreadId?: PhaseThreadId | null;
  readonly originPhaseScopeId?: string | null;
}

/** Builds a `PhaseAttribution` with the reference dataclass defaults for omitted fields. */
export function createPhaseAttribution(
  init: Partial<PhaseAttribution> & { readonly phaseResolution: PhaseResolution },
): PhaseAttribution {
  return {
    phaseResolution: init.phaseResolution,
    phaseSource: init.phaseSource ?? null,
    phasePath: init.phasePath ?? null,
    phasePaths: init.phasePaths ?? [],
    scopeId: init.scopeId ?? null,
    threadId: init.threadId ?? null,
    threadName: init.threadName ?? null,
    phaseSummary: init.phaseSummary ?? null,
  };
}

/** `"a / b"`: the display label of a path, empty parts dropped. */
export function formatPhasePath(path: readonly string[]): string {
  let label = "";
  let first = true;
  for (const part of path) {
    if (!part) continue;
    label = first ? part : `${label} / ${part}`;
    first = false;
  }
  return label;
}

/**
 * Python's string order (by code point). JS `<` compares UTF-16 code units, which differs only
 * when a surrogate (astral character) meets a BMP character at or above U+E000.
 */
export function comparePythonStrings(a: string, b: string): number {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys && (xs ? y >= 0xe000 : x >= 0xe000)) return xs ? 1 : -1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

function sortPython(labels: Iterable<string>): string[] {
  return [...labels].sort(comparePythonStrings);
}

/** `(sequence, scope_id)` of `a` greater than that of `b`. */
function isMoreRecent(a: PhaseSpan, b: PhaseSpan): boolean {
  if (a.sequence !== b.sequence) return a.sequence > b.sequence;
  return comparePythonStrings(a.scopeId, b.scopeId) > 0;
}

/** The span with the largest `(sequence, scope_id)`; the first one on ties, like Python's `max`. */
function mostRecent(spans: readonly PhaseSpan[]): PhaseSpan {
  let best = spans[0]!;
  for (let i = 1; i < spans.length; i++) {
    const span = spans[i]!;
    if (isMoreRecent(span, best)) best = span;
  }
  return best;
}

function uniqueAttribution(span: PhaseSpan, source: PhaseSource): PhaseAttribution {
  const phasePath = span.phasePath;
  return {
    phaseResolution: "unique",
    phaseSource: source,
    phasePath,
    phasePaths: [phasePath],
    scopeId: span.scopeId,
    threadId: span.threadId,
    threadName: span.threadName,
    phaseSummary: null,
  };
}

/** The most recent deepest span of a thread, or null when its deepest spans have different paths. */
function deepestOfThread(spans: readonly PhaseSpan[], threadId: PhaseThreadId): PhaseSpan | null {
  let maxDepth = -1;
  for (const span of spans) if (span.threadId === threadId && span.depth > maxDepth) maxDepth = span.depth;
  let winner: PhaseSpan | null = null;
  for (const span of spans) {
    if (span.threadId !== threadId || span.depth !== maxDepth) continue;
    if (winner === null) winner = span;
    else if (span.phasePath !== winner.phasePath) return null;
    else if (isMoreRecent(span, winner)) winner = span;
  }
  return winner;
}

function originAttribution(
  spans: readonly PhaseSpan[],
  originThreadId: PhaseThreadId | null | undefined,
  originPhaseScopeId: string | null | undefined,
): PhaseAttribution | null {
  if (originPhaseScopeId) {
    let match: PhaseSpan | undefined;
    let count = 0;
    for (const span of spans) {
      if (span.scopeId === originPhaseScopeId) {
        match = span;
        count++;
      }
    }
    if (count === 1) return uniqueAttribution(match!, "exact");
  }
  if (originThreadId !== null && originThreadId !== undefined) {
    const threadSpans = spans.filter((span) => span.threadId === originThreadId);
    if (threadSpans.length > 0) return uniqueAttribution(mostRecent(threadSpans), "thread_local");
  }
  return null;
}

/**
 * Collapses active spans into a unique or an ambiguity-preserving attribution
 * (`attribute_active_spans`). `spans` should be in the index's order (`activeSpans`); the order only
 * decides between spans with the same `(sequence, scope_id)`.
 */
export function attributeActiveSpans(
  spans: readonly PhaseSpan[],
  options: AttributeOptions = {},
): PhaseAttribution | null {
  const strategy = options.strategy ?? "deepest_per_thread";
  if (strategy !== "deepest_per_thread") {
    throw new InvalidConfigError(
      "strategy",
      `unsupported phase attribution strategy '${String(strategy)}'; use 'deepest_per_thread'.`,
    );
  }
  if (spans.length === 0) return null;

  const origin = originAttribution(spans, options.originThreadId, options.originPhaseScopeId);
  if (origin !== null) return origin;

  // Threads in order of first appearance, as the reference's dict keyed by thread_id.
  const firstThread = spans[0]!.threadId;
  let threads: PhaseThreadId[] | null = null;
  for (let i = 1; i < spans.length; i++) {
    const threadId = spans[i]!.threadId;
    if (threadId === firstThread) continue;
    threads ??= [firstThread];
    if (!threads.includes(threadId)) threads.push(threadId);
  }
  if (threads === null) {
    // One thread (the usual case): its deepest span, unless deepest spans disagree on the path.
    const winner = deepestOfThread(spans, firstThread);
    if (winner !== null) return uniqueAttribution(winner, "heuristic");
    threads = [firstThread];
  }

  const matches: PhaseSpan[] = [];
  let ambiguous: Set<string> | null = null;
  for (const threadId of threads) {
    const winner = deepestOfThread(spans, threadId);
    if (winner !== null) {
      matches.push(winner);
      continue;
    }
    ambiguous ??= new Set();
    let maxDepth = -1;
    for (const span of spans) if (span.threadId === threadId && span.depth > maxDepth) maxDepth = span.depth;
    for (const span of spans) {
      if (span.threadId === threadId && span.depth === maxDepth) ambiguous.add(span.phasePath);
    }
  }

  if (ambiguous === null && matches.length === 1) return uniqueAttribution(matches[0]!, "heuristic");
  if (ambiguous === null && matches.length === 0) return null;

  const labels = new Set(ambiguous ?? []);
  for (const span of matches) labels.add(span.phasePath);
  const phasePaths = sortPython(labels);
  return {
    phaseResolution: "ambiguous",
    phaseSource: null,
    phasePath: null,
    phasePaths,
    scopeId: null,
    threadId: null,
    threadName: null,
    phaseSummary: buildPhaseSummary(spans, phasePaths),
  };
}

function buildPhaseSummary(spans: readonly PhaseSpan[], phasePaths: readonly string[]): PhaseSummary | null {
  let distinct = 0;
  let previous: string | null = null;
  for (const path of phasePaths) {
    if (path && path !== previous) distinct++;
    previous = path;
  }
  if (distinct <= 1) return null;
  const winnerPath = mostRecent(spans).phasePath;
  if (!winnerPath) return null;
  return { phasePath: winnerPath, source: "heuristic" };
}

/**
 * One line for a report (`summarize_phase_attribution`): the path when unique, `(likely) <path>`
 * when an ambiguous attribution has a heuristic summary, `(ambiguous) a | b` otherwise.
 */
export function summarizePhaseAttribution(attribution: PhaseAttribution | null | undefined): string | null {
  if (!attribution) return null;
  if (attribution.phaseSummary !== null) {
    if (attribution.phaseSummary.source === "heuristic")
      return `(likely) ${attribution.phaseSummary.phasePath}`;
    return attribution.phaseSummary.phasePath;
  }
  return summarizePhaseResolution(attribution.phaseResolution, attribution.phasePath, attribution.phasePaths);
}

/** Renders a resolution without hiding ambiguity (`summarize_phase_resolution`). */
export function summarizePhaseResolution(
  phaseResolution: string | null | undefined,
  phasePath?: string | null,
  phasePaths?: readonly string[] | null,
): string | null {
  const labels = (phasePaths ?? []).filter((path) => path);
  if (phaseResolution === "unique") {
    if (phasePath) return phasePath;
    if (labels.length === 1) return labels[0]!;
    return null;
  }
  if (phaseResolution === "ambiguous" && labels.length > 0) return `(ambiguous) ${labels.join(" | ")}`;
  return null;
}

function attributionPaths(attribution: PhaseAttribution): string[] {
  if (attribution.phasePaths.length > 0) return attribution.phasePaths.filter((path) => path);
  if (attribution.phasePath) return [attribution.phasePath];
  return [];
}

function sameUniqueScope(first: PhaseAttribution, second: PhaseAttribution): boolean {
  return (
    first.phaseResolution === "unique" &&
    second.phaseResolution === "unique" &&
    first.phasePath === second.phasePath &&
    first.scopeId === second.scopeId &&
    first.threadId === second.threadId
  );
}

/**
 * Merges two candidates without inventing a unique path (`merge_phase_attributions`): the same
 * label from two different scopes or threads stays ambiguous.
 */
export function mergePhaseAttributions(
  first: PhaseAttribution | null | undefined,
  second: PhaseAttribution | null | undefined,
): PhaseAttribution | null {
  if (!first) return second ?? null;
  if (!second) return first;
  const firstPaths = attributionPaths(first);
  const secondPaths = attributionPaths(second);
  if (firstPaths.length === 0) return second;
  if (secondPaths.length === 0) return first;
  const merged = sortPython(new Set([...firstPaths, ...secondPaths]));
  if (merged.length === 1 && sameUniqueScope(first, second)) return first;
  return createPhaseAttribution({ phaseResolution: "ambiguous", phasePaths: merged });
}

/**
 * The JSON payload of an attribution (`phase_attribution_to_payload`): `phase_resolution`,
 * `phase_paths` (empty labels dropped), then only the fields that are set, in the reference's order.
 */
export function phaseAttributionToPayload(
  attribution: PhaseAttribution | null | undefined,
): PhaseAttributionPayload | null {
  if (!attribution) return null;
  const payload: PhaseAttributionPayload = {
    phase_resolution: attribution.phaseResolution,
    phase_paths: attribution.phasePaths.filter((path) => path),
  };
  if (attribution.phaseSource !== null) payload.phase_source = attribution.phaseSource;
  if (attribution.phasePath !== null) payload.phase_path = attribution.phasePath;
  if (attribution.scopeId !== null) payload.scope_id = attribution.scopeId;
  if (attribution.threadId !== null) payload.thread_id = attribution.threadId;
  if (attribution.threadName !== null) payload.thread_name = attribution.threadName;
  if (attribution.phaseSummary !== null) {
    payload.phase_summary = {
      phase_path: attribution.phaseSummary.phasePath,
      source: attribution.phaseSummary.source,
    };
  }
  return payload;
}
