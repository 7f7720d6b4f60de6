/**
 * Leak verdicts per phase path, by retention (docs/leak-verdicts.md). A phase leaks when memory that
 * grows during it is still held when its enclosing repeated unit (the parent's next occurrence: the
 * step) comes around again, and the unit's level keeps rising from occurrence to occurrence.
 *
 * - The unit's level when it ends is tested for a rising trend (Mann-Kendall, Theil-Sen slope) over
 *   all its occurrences, its later half and its last third; a rise made of one step is a plateau.
 * - Inside the unit, each child's growth is paid back by what later siblings (latest debts first)
 *   and the parent's own code (oldest first) free in the same occurrence; what stays unpaid is what
 *   the child keeps. It is computed on the unit's average profile (occurrences that share the
 *   commonest list of children; readings that noise alone separates pooled into one level) and
 *   bootstrapped over occurrences for the share behind the confidence.
 * - A top-level phase, or one whose parent repeats too rarely, is judged on its own occurrences (or
 *   on the rounds of its parent's children).
 * - Phase records that carry the last sample's counters (the Python tracker's) cannot separate the
 *   children of a step: they get `insufficient_data`, and the step is judged on its levels.
 * - Birth-phase counts of live tensors (the tfjs adapter's attribution), where present, outrank counters.
 *
 * The analysis (@stormlog/analysis) and the tracker's leak alerts both judge through `judgeRetention`.
 */
import type { PhaseSpan } from "../replay.js";
import { type BirthSnapshot, type BirthVerdict, judgeBirths } from "./births.js";
import { localNoise, median, risingTrend, seededRandom, type TrendTest } from "./trend.js";
import type { RetentionEvidence, RetentionMetric, RetentionVerdictKind } from "./types.js";

/** RetentionOccurrences per rank needed for a verdict. */
export const MIN_LEAK_OCCURRENCES = 6;
/** p-values below which the unit's level "keeps rising": over all occurrences, the later half, the last third. */
export const RISING_P_ALL = 0.005;
export const RISING_P_HALF = 0.05;
export const RISING_P_THIRD = 0.1;
/** Points from which the later half and last third must rise significantly (fewer: only rise). */
const SIGNIFICANT_TAIL = 8;
/** Share of the unit's growth a child must keep, in the estimate and in this share of bootstrap resamples. */
export const CHILD_SHARE = 0.25;
export const CHILD_BOOTSTRAP_SHARE = 0.6;
/** Resamples of the unit's occurrences behind a child's share. */
export const BOOTSTRAP_ROUNDS = 200;
/** RetentionOccurrences of the unit the profile averages at most (the latest ones). */
const MAX_PROFILE_UNITS = 2000;
/** Growth per occurrence below which nothing is called a leak, whatever its significance. */
const MIN_RETAINED: Readonly<Record<RetentionMetric, number>> = {
  allocator_allocated_bytes: 4096,
  device_used_bytes: 4096,
  tfjs_num_tensors: 0.5,
};
/** A level step larger than this many noise deviations is a real step (one-time growth), not noise. */
const STEP_NOISE_MULTIPLE = 6;
const LAST_SAMPLE_REASON =
  "its phase records carry the last sample's counters, which cannot separate the phases of one step " +
  "(the Python tracker writes them so; Stormlog's tracker reads counters at the boundaries)";

type Metric = RetentionMetric;
type Reader = (occurrence: RetentionOccurrence, end: "enter" | "exit") => number;

const READERS: Readonly<Record<Metric, Reader>> = {
  allocator_allocated_bytes: (o, end) => (end === "enter" ? o.enterAllocated : o.exitAllocated),
  device_used_bytes: (o, end) => (end === "enter" ? o.enterUsed : o.exitUsed),
  tfjs_num_tensors: (o, end) => (end === "enter" ? o.enterTensors : o.exitTensors),
};

/** One metric's verdict on one path of one rank. */
export interface MetricVerdict {
  verdict: RetentionVerdictKind;
  confidence: number;
  evidence: RetentionEvidence | null;
  /** Kept per occurrence of the unit (leaking only). */
  retained: number;
  reason: string | null;
}

/** One session's rank's verdicts on one path. */
export interface RankVerdicts {
  rank: number;
  occurrences: number;
  bytes: MetricVerdict | null;
  tensors: MetricVerdict | null;
  /** From birth-phase attribution, where recorded; it outranks the counters' verdicts. */
  births: BirthVerdict | null;
}

/** What a verdict reads of an occurrence's span: a `PhaseSpan`, or its packed copy (`packed.ts`). */
export type RetentionSpan = Pick<
  PhaseSpan,
  "rank" | "threadId" | "path" | "phasePath" | "startNs" | "endNs" | "syntheticEnd"
>;

/** A phase occurrence with the counters read at its boundaries (NaN where absent). */
export interface RetentionOccurrence {
  readonly span: RetentionSpan;
  readonly enterAllocated: number;
  readonly exitAllocated: number;
  readonly enterUsed: number;
  readonly exitUsed: number;
  readonly enterTensors: number;
  readonly exitTensors: number;
}

/** What one rank's verdicts are judged on, besides its occurrences. */
export interface RetentionInput {
  /** The phase records carry the last sample's counters, not readings taken at the boundaries. */
  readonly lastSample: boolean;
  /** Live tensors by birth phase over time (tfjs attribution), empty without. */
  readonly births?: readonly BirthSnapshot[];
}

const round = (value: number, digits: number): number => {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
};

const byStart = (a: RetentionOccurrence, b: RetentionOccurrence): number =>
  a.span.startNs < b.span.startNs ? -1 : a.span.startNs > b.span.startNs ? 1 : 0;

/** The rank's occurrences of one path, closed, in time order. */
interface PathOccurrences {
  path: string;
  list: RetentionOccurrence[];
}

/** How the unit's level behaved over its occurrences. */
interface LevelVerdict {
  test: TrendTest;
  /** Rising over all, the later half and the last third, and not by one step. */
  growing: boolean;
  /** Material growth after the first occurrence (for a plateau), in the metric's unit. */
  rise: number;
  /** RetentionOccurrence indices (from 1) whose level step is real (above noise) and positive. */
  risingSteps: number[];
  pHalf: number;
  readonly levels: Float64Array;
}

function judgeLevels(levels: Float64Array, metric: Metric): LevelVerdict {
  const n = levels.length;
  const test = risingTrend(levels);
  const half = risingTrend(levels.subarray(Math.floor(n / 2)));
  const third = risingTrend(levels.subarray(n - Math.max(3, Math.floor(n / 3))));
  // Short tails cannot reach significance: there the later parts need only rise.
  const halfRising = half.points >= SIGNIFICANT_TAIL ? half.pRising < RISING_P_HALF : half.s > 0;
  const thirdRising = third.points >= SIGNIFICANT_TAIL ? third.pRising < RISING_P_THIRD : third.s > 0;
  const noise = localNoise(levels);
  const floor = MIN_RETAINED[metric];
  const stepSize = Math.max(floor, STEP_NOISE_MULTIPLE * noise);
  const risingSteps: number[] = [];
  for (let i = 1; i < n; i++) if (levels[i]! - levels[i - 1]! > stepSize) risingSteps.push(i);
  // A rise in the later half made of one real step that stays (the level after it holds at least half
  // of it) is a one-time step, not a trend; a transient spike that comes back down is neither.
  const halfStart = Math.floor(n / 2);
  const halfRise = levels[n - 1]! - levels[halfStart]!;
  let largestStep = 0;
  let stepAt = -1;
  for (let i = halfStart + 1; i < n; i++) {
    const step = levels[i]! - levels[i - 1]!;
    if (step > largestStep) {
      largestStep = step;
      stepAt = i;
    }
  }
  const held = stepAt < 0 ? 0 : median(levels.subarray(stepAt)) - levels[stepAt - 1]!;
  const oneStep = largestStep > stepSize && held >= 0.5 * largestStep && largestStep >= 0.5 * halfRise;
  const growing =
    n >= MIN_LEAK_OCCURRENCES &&
    test.pRising < RISING_P_ALL &&
    halfRising &&
    thirdRising &&
    half.slope > 0 &&
    test.slope >= floor &&
    !oneStep;
  const rise = levels[n - 1]! - levels[0]!;
  return {
    test,
    growing,
    rise: rise > Math.max(floor, STEP_NOISE_MULTIPLE * noise) ? rise : 0,
    risingSteps,
    pHalf: half.pRising,
    levels,
  };
}

/** A unit (one occurrence of the parent) with the readings of its boundaries and its children's. */
interface Unit {
  /** Readings in order: unit enter, each child's enter and exit, unit exit. */
  readings: number[];
  /** Owner of each segment between readings: a child path, or null for the parent's own code. */
  owners: (string | null)[];
}

interface Retention {
  /** Per owner (a child path; null for the parent's own code). */
  kept: Map<string | null, number>;
  /** Per child path: the later sibling that paid part of its growth and stopped short. */
  shortfall: Map<string, string>;
}

/**
 * Give-back over one unit's segments: a rise is a debt of its owner; a fall pays debts of the same
 * unit. A sibling's fall pays the latest debts first (backward frees what forward just allocated); the
 * parent's own code pays the oldest first (it disposes what an early child returned, the batch).
 * What stays unpaid per owner is what it keeps.
 */
function giveBack(segments: readonly number[], owners: readonly (string | null)[]): Retention {
  const debts: { owner: string | null; amount: number }[] = [];
  const shortfall = new Map<string, string>();
  for (let j = 0; j < segments.length; j++) {
    const delta = segments[j]!;
    const owner = owners[j]!;
    if (delta > 0) debts.push({ owner, amount: delta });
    else if (delta < 0) {
      let free = -delta;
      const latestFirst = owner !== null;
      for (let i = 0; i < debts.length && free > 0; i++) {
        const debt = debts[latestFirst ? debts.length - 1 - i : i]!;
        if (debt.amount <= 0) continue;
        const paid = Math.min(debt.amount, free);
        debt.amount -= paid;
        free -= paid;
        if (debt.amount > 0 && owner !== null && debt.owner !== null && owner !== debt.owner)
          shortfall.set(debt.owner, owner);
      }
    }
  }
  const kept = new Map<string | null, number>();
  for (const debt of debts)
    if (debt.amount > 0) kept.set(debt.owner, (kept.get(debt.owner) ?? 0) + debt.amount);
  return { kept, shortfall };
}

function totalKept(kept: ReadonlyMap<string | null, number>): number {
  let total = 0;
  for (const amount of kept.values()) total += amount;
  return total;
}

/**
 * The unit's typical profile as segments: at each boundary, the trimmed mean over the picked units of
 * its reading relative to the unit's entry (trimmed, so the few units that a transient spike or a
 * collection crosses do not move it). Readings at both ends of a segment that noise alone explains
 * measure one level: they are pooled (averaged together), so such a segment is zero and the noise
 * of its readings averages out instead of landing in a neighbour's share.
 */
function segmentMeans(profile: UnitMatrix, counts: Uint32Array, mask: readonly boolean[]): number[] {
  const m = profile.segmentCount + 1;
  const levels = new Array<number>(m).fill(0);
  for (let j = 1; j < m; j++) levels[j] = trimmedMean(profile.levels, j - 1, counts).mean;
  const pooled = new Array<number>(m);
  let start = 0;
  for (let j = 1; j <= m; j++) {
    if (j < m && !mask[j - 1]) continue;
    let sum = 0;
    for (let i = start; i < j; i++) sum += levels[i]!;
    for (let i = start; i < j; i++) pooled[i] = sum / (j - start);
    start = j;
  }
  const segments: number[] = [];
  for (let j = 0; j + 1 < m; j++) segments.push(pooled[j + 1]! - pooled[j]!);
  return segments;
}

/** Share of units cut at each end by the trimmed means below. */
const TRIM = 0.1;

/**
 * The 10 % trimmed mean of row `row` of `matrix` over the units picked `counts[k]` times each, and
 * its standard error (winsorized variance): as efficient as a mean on plain noise, and the few units a
 * transient spike crosses do not move it. One walk of the row in sorted order finds both cut points
 * (a bootstrap's picks repeat units: counting them beats selecting among copies), a second sums.
 */
function trimmedMean(matrix: SortedRows, row: number, counts: Uint32Array): { mean: number; error: number } {
  const units = matrix.unitCount;
  const from = row * units;
  const values = matrix.sorted;
  const order = matrix.order;
  const n = matrix.picked;
  const cut = Math.floor(TRIM * n);
  // Under ten units nothing is cut.
  let low = Number.NEGATIVE_INFINITY;
  let high = Number.POSITIVE_INFINITY;
  if (cut > 0) {
    let rank = 0;
    let lowFound = false;
    for (let r = from; r < from + units; r++) {
      const c = counts[order[r]!]!;
      if (c === 0) continue;
      rank += c;
      if (!lowFound && rank > cut) {
        low = values[r]!;
        lowFound = true;
      }
      if (rank > n - 1 - cut) {
        high = values[r]!;
        break;
      }
    }
  }
  let sum = 0;
  let count = 0;
  let wSum = 0;
  let wSquares = 0;
  // Units not picked count zero times: no branch on it (a third of a bootstrap's units).
  for (let r = from; r < from + units; r++) {
    const c = counts[order[r]!]!;
    const value = values[r]!;
    const inside = value >= low && value <= high ? c : 0;
    sum += value * inside;
    count += inside;
    const w = Math.min(Math.max(value, low), high);
    wSum += w * c;
    wSquares += w * w * c;
  }
  const mean = count > 0 ? sum / count : 0;
  const wMean = wSum / n;
  const wVariance = n > 1 ? Math.max(0, (wSquares - n * wMean * wMean) / (n - 1)) : 0;
  return { mean, error: Math.sqrt(wVariance / n) / (1 - 2 * (cut / n)) };
}

/** Per segment: does its trimmed mean over the picked units stand out of its noise (two standard errors)? */
function significantSegments(profile: UnitMatrix, counts: Uint32Array): boolean[] {
  const mask: boolean[] = [];
  for (let j = 0; j < profile.segmentCount; j++) {
    const { mean, error } = trimmedMean(profile.deltas, j, counts);
    mask.push(mean !== 0 && Math.abs(mean) >= 2 * error);
  }
  return mask;
}

/** Rows of values, each sorted ascending, with the unit each value came from. */
interface SortedRows {
  readonly unitCount: number;
  /** Units picked in all (the sum of the counts a trimmed mean is given). */
  readonly picked: number;
  readonly sorted: Float64Array;
  readonly order: Uint32Array;
}

/**
 * The units' readings as two matrices, a row per segment, each row sorted: each segment's change,
 * and each reading's level above the unit's entry. Built once per judgement, so that the bootstrap's
 * rounds only count their picks per unit.
 */
interface UnitMatrix {
  readonly segmentCount: number;
  /** Row j: reading j + 1 less reading j. */
  readonly deltas: SortedRows;
  /** Row j: reading j + 1 less the entry reading. */
  readonly levels: SortedRows;
}

function unitMatrix(units: readonly Unit[]): UnitMatrix {
  const unitCount = units.length;
  const segmentCount = units[0]!.readings.length - 1;
  const rows = (value: (readings: readonly number[], j: number) => number): SortedRows => {
    const sorted = new Float64Array(segmentCount * unitCount);
    const order = new Uint32Array(segmentCount * unitCount);
    const column = new Float64Array(unitCount);
    const byValue = Array.from({ length: unitCount }, (_, k) => k);
    for (let j = 0; j < segmentCount; j++) {
      for (let k = 0; k < unitCount; k++) column[k] = value(units[k]!.readings, j);
      byValue.sort((a, b) => column[a]! - column[b]!);
      for (let r = 0; r < unitCount; r++) {
        order[j * unitCount + r] = byValue[r]!;
        sorted[j * unitCount + r] = column[byValue[r]!]!;
      }
    }
    return { unitCount, picked: unitCount, sorted, order };
  };
  return {
    segmentCount,
    deltas: rows((r, j) => r[j + 1]! - r[j]!),
    levels: rows((r, j) => r[j + 1]! - r[0]!),
  };
}

/**
 * One occurrence of a repeated unit: a parent occurrence, or (when the parent repeats too rarely) one
 * cycle of its children, from one start of its first child to the next.
 */
interface UnitSpec {
  readonly children: readonly RetentionOccurrence[];
  enter(read: Reader): number;
  /** The level when the unit ends (for a cycle: when the next one begins). */
  exit(read: Reader): number;
}

function parentUnits(
  parents: readonly RetentionOccurrence[],
  childrenOf: ReadonlyMap<RetentionOccurrence, RetentionOccurrence[]>,
): UnitSpec[] {
  return parents
    .filter((parent) => !parent.span.syntheticEnd)
    .map((parent) => ({
      children: childrenOf.get(parent) ?? [],
      enter: (read: Reader) => read(parent, "enter"),
      exit: (read: Reader) => read(parent, "exit"),
    }));
}

/** The children of rare parent occurrences cut into cycles, each starting where the first child starts again. */
function cycleUnits(
  parents: readonly RetentionOccurrence[],
  childrenOf: ReadonlyMap<RetentionOccurrence, RetentionOccurrence[]>,
): UnitSpec[] {
  const units: UnitSpec[] = [];
  for (const parent of parents) {
    const children = childrenOf.get(parent) ?? [];
    if (children.length === 0) continue;
    const head = children[0]!.span.phasePath;
    const starts: number[] = [];
    children.forEach((child, i) => {
      if (child.span.phasePath === head) starts.push(i);
    });
    starts.forEach((start, k) => {
      const end = starts[k + 1] ?? children.length;
      const cycle = children.slice(start, end);
      const next = children[end];
      units.push({
        children: cycle,
        enter: (read) => read(cycle[0]!, "enter"),
        exit: (read) => (next !== undefined ? read(next, "enter") : read(cycle[cycle.length - 1]!, "exit")),
      });
    });
  }
  return units;
}

/** Readings of the units on one metric, those that share the commonest list of children. */
function unitsOf(specs: readonly UnitSpec[], read: Reader): readonly Unit[] {
  const bySignature = new Map<string, Unit[]>();
  for (const spec of specs) {
    const readings = [spec.enter(read)];
    const owners: (string | null)[] = [];
    let ok = true;
    for (const child of spec.children) {
      if (child.span.syntheticEnd) {
        ok = false;
        break;
      }
      readings.push(read(child, "enter"), read(child, "exit"));
      owners.push(null, child.span.phasePath);
    }
    readings.push(spec.exit(read));
    owners.push(null);
    if (!ok || readings.some(Number.isNaN)) continue;
    const signature = owners.join("\n");
    const list = bySignature.get(signature);
    if (list === undefined) bySignature.set(signature, [{ readings, owners }]);
    else list.push({ readings, owners });
  }
  let best: Unit[] = [];
  for (const list of bySignature.values()) if (list.length > best.length) best = list;
  return steadyUnits(best.slice(-MAX_PROFILE_UNITS));
}

/** Occurrences per side a warm-up test compares at most (evenly spaced), to keep it cheap. */
const WARM_UP_SAMPLE = 200;

/**
 * The steady state of a unit's occurrences: without its first quarter when that quarter differs from
 * the rest (warm-up: arenas and caches filling), else all of them (the more occurrences, the less
 * noise in the profile). "Differs": a segment whose values in the first quarter and in the rest a
 * Mann-Whitney test tells apart (|z| > 3.3, two-sided p < 0.001); rank-based, so a few large
 * warm-up steps count as much as many small ones.
 */
function steadyUnits(units: readonly Unit[]): readonly Unit[] {
  if (units.length < 4 * MIN_LEAK_OCCURRENCES) return units;
  const quarter = Math.floor(units.length / 4);
  const spaced = (from: number, to: number): number[] => {
    const count = Math.min(WARM_UP_SAMPLE, to - from);
    return Array.from({ length: count }, (_, i) => from + Math.floor((i * (to - from)) / count));
  };
  const head = spaced(0, quarter);
  const rest = spaced(quarter, units.length);
  const m = units[0]!.readings.length - 1;
  const h = head.length;
  const n = h + rest.length;
  const pairs = h * rest.length;
  // Segment j's deltas, the head's first; sorted by value through `order`, for their ranks.
  const values = new Float64Array(n);
  const order = Array.from({ length: n }, (_, i) => i);
  for (let j = 0; j < m; j++) {
    for (let i = 0; i < n; i++) {
      const k = i < h ? head[i]! : rest[i - h]!;
      const readings = units[k]!.readings;
      values[i] = readings[j + 1]! - readings[j]!;
    }
    order.sort((a, b) => values[a]! - values[b]!);
    // U counts the (head, rest) pairs where the head's value is larger, a tie as one half: the head's
    // rank sum (ties at their mean rank) less h(h+1)/2, in O(n log n) rather than pair by pair.
    let headRanks = 0;
    let ties = 0;
    for (let from = 0; from < n; ) {
      let to = from + 1;
      while (to < n && values[order[to]!] === values[order[from]!]) to++;
      const t = to - from;
      // The variance of U with ties corrected: exact repeats (an allocation of the same size each step) are common.
      ties += t * t * t - t;
      const meanRank = (from + 1 + to) / 2;
      for (let i = from; i < to; i++) if (order[i]! < h) headRanks += meanRank;
      from = to;
    }
    const u = headRanks - (h * (h + 1)) / 2;
    const sd = Math.sqrt((pairs / 12) * (n + 1 - ties / (n * (n - 1))));
    if (sd > 0 && Math.abs(u - pairs / 2) / sd > 3.3) return units.slice(quarter);
  }
  return units;
}

/** Everything the verdicts of one rank need. */
interface RankModel {
  paths: Map<string, PathOccurrences>;
  /** Direct children of each occurrence, in time order. */
  childrenOf: Map<RetentionOccurrence, RetentionOccurrence[]>;
  /** Parent path of each path (null for top level or when no parent occurrence encloses it). */
  parentPath: Map<string, string | null>;
  lastSample: boolean;
}

function modelOf(occurrences: readonly RetentionOccurrence[], lastSample: boolean): RankModel {
  const paths = new Map<string, PathOccurrences>();
  for (const occurrence of occurrences) {
    const key = occurrence.span.phasePath;
    const entry = paths.get(key);
    if (entry === undefined) paths.set(key, { path: key, list: [occurrence] });
    else entry.list.push(occurrence);
  }
  for (const entry of paths.values()) entry.list.sort(byStart);
  const childrenOf = new Map<RetentionOccurrence, RetentionOccurrence[]>();
  const parentPath = new Map<string, string | null>();
  for (const entry of paths.values()) {
    const path = entry.list[0]!.span.path;
    const parentKey = path.length > 1 ? path.slice(0, -1).join(" / ") : null;
    const parents = parentKey === null ? undefined : paths.get(parentKey);
    if (parents === undefined) {
      parentPath.set(entry.path, null);
      continue;
    }
    let found = false;
    for (const child of entry.list) {
      const parent = enclosing(parents.list, child);
      if (parent === null) continue;
      found = true;
      const list = childrenOf.get(parent);
      if (list === undefined) childrenOf.set(parent, [child]);
      else list.push(child);
    }
    parentPath.set(entry.path, found ? parentKey : null);
  }
  for (const list of childrenOf.values()) list.sort(byStart);
  return { paths, childrenOf, parentPath, lastSample };
}

/** The last parent occurrence that starts at or before `child` and ends at or after it, same thread. */
function enclosing(
  parents: readonly RetentionOccurrence[],
  child: RetentionOccurrence,
): RetentionOccurrence | null {
  let lo = 0;
  let hi = parents.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (parents[mid]!.span.startNs <= child.span.startNs) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo - 1; i >= 0 && i >= lo - 8; i--) {
    const parent = parents[i]!;
    if (parent.span.endNs >= child.span.endNs && parent.span.threadId === child.span.threadId) return parent;
  }
  return null;
}

function closedLevels(
  list: readonly RetentionOccurrence[],
  read: Reader,
): { levels: Float64Array; nets: number[] } {
  const levels = new Float64Array(list.length);
  const nets: number[] = [];
  for (const occurrence of list) {
    if (occurrence.span.syntheticEnd) continue;
    const enter = read(occurrence, "enter");
    const exit = read(occurrence, "exit");
    if (Number.isNaN(exit)) continue;
    levels[nets.length] = exit;
    nets.push(Number.isNaN(enter) ? Number.NaN : exit - enter);
  }
  return { levels: levels.subarray(0, nets.length), nets };
}

function evidence(
  metric: Metric,
  method: RetentionEvidence["method"],
  unitPath: string,
  level: LevelVerdict,
  retained: number,
  share: number | null,
  shortfall: string | null,
): RetentionEvidence {
  return {
    metric,
    method,
    unit_path: unitPath,
    unit_occurrences: level.levels.length,
    retained_per_occurrence: round(retained, 3),
    level_slope_per_occurrence: round(level.test.slope, 3),
    level_growth: level.levels.length > 0 ? level.levels[level.levels.length - 1]! - level.levels[0]! : 0,
    p_rising: Number(level.pHalf.toPrecision(3)),
    share: share === null ? null : round(share, 3),
    shortfall_sibling: shortfall,
  };
}

const insufficient = (reason: string): MetricVerdict => ({
  verdict: "insufficient_data",
  confidence: 0,
  evidence: null,
  retained: 0,
  reason,
});

/** A phase judged on its own occurrences (top level, or its parent repeats too rarely). */
function judgeOwn(entry: PathOccurrences, metric: Metric, lastSample: boolean): MetricVerdict {
  const { levels, nets } = closedLevels(entry.list, READERS[metric]);
  if (levels.length < MIN_LEAK_OCCURRENCES)
    return insufficient(
      `${levels.length} closed occurrence${levels.length === 1 ? "" : "s"} on a rank; ${MIN_LEAK_OCCURRENCES} needed`,
    );
  const level = judgeLevels(levels, metric);
  const measured = nets.filter((net) => !Number.isNaN(net));
  if (!lastSample && measured.length < MIN_LEAK_OCCURRENCES)
    return insufficient(
      `its phase records carry no reading at entry, so its own growth cannot be told from its surroundings`,
    );
  // With last-sample counters a phase's own net change is not measured: its levels decide alone.
  // Otherwise the growth counts as the phase's unless its mean net is surely below a quarter of it.
  const own = lastSample || measured.length < 2 ? null : meanWithError(measured);
  const ownNet = own === null ? level.test.slope : own.mean;
  const ownUpper = own === null ? ownNet : own.mean + 2 * own.error;
  if (level.growing && ownUpper >= CHILD_SHARE * level.test.slope) {
    const retained = Math.min(Math.max(ownNet, 0), level.test.slope);
    return {
      verdict: "leaking",
      confidence: round(1 - level.pHalf, 2),
      evidence: evidence(metric, "own_levels", entry.path, level, retained, null, null),
      retained,
      reason: null,
    };
  }
  let ownRise = 0;
  for (let i = 1; i < nets.length; i++) if (!Number.isNaN(nets[i]!)) ownRise += nets[i]!;
  if (level.rise > 0 && !level.growing && (lastSample || ownRise >= 0.5 * level.rise)) {
    return {
      verdict: "plateau",
      confidence: round(1 - level.test.pRising, 2),
      evidence: evidence(metric, "own_levels", entry.path, level, 0, null, null),
      retained: 0,
      reason: null,
    };
  }
  return {
    verdict: "stable",
    confidence: round(stableConfidence(level), 2),
    evidence: evidence(metric, "own_levels", entry.path, level, 0, null, null),
    retained: 0,
    reason: null,
  };
}

function meanWithError(values: readonly number[]): { mean: number; error: number } {
  let sum = 0;
  for (const value of values) sum += value;
  const mean = sum / values.length;
  let squares = 0;
  for (const value of values) squares += (value - mean) ** 2;
  return { mean, error: Math.sqrt(squares / (values.length - 1) / values.length) };
}

/** 1 - p of "rising" over the later half when it falls, else that p: how little the level suggests growth. */
function stableConfidence(level: LevelVerdict): number {
  return Math.min(1, Math.max(0.5, level.pHalf));
}

/**
 * How many of the bootstrap's rounds find each owner keeping at least `CHILD_SHARE` of what the units
 * kept. Its own function: V8 compiles this loop alone rather than all of `judgeChildren` around it
 * (which took a cold analysis's optimizing compiler 85 ms each time, the most of any function).
 */
function bootstrapHits(
  profile: UnitMatrix,
  owners: readonly (string | null)[],
  unitCount: number,
): Map<string, number> {
  const hits = new Map<string, number>();
  const counts = new Uint32Array(unitCount);
  const random = seededRandom(unitCount * 2654435761 + owners.length);
  for (let round = 0; round < BOOTSTRAP_ROUNDS; round++) {
    counts.fill(0);
    for (let i = 0; i < unitCount; i++) counts[Math.floor(random() * unitCount)]!++;
    // Each resample decides anew which segments stand out: which readings are noise is uncertain too.
    const kept = giveBack(segmentMeans(profile, counts, significantSegments(profile, counts)), owners).kept;
    const total = totalKept(kept);
    for (const [owner, amount] of kept)
      if (owner !== null && total > 0 && amount >= CHILD_SHARE * total)
        hits.set(owner, (hits.get(owner) ?? 0) + 1);
  }
  return hits;
}

/** The children of one parent path, judged on the parent's units. */
function judgeChildren(
  model: RankModel,
  parent: PathOccurrences,
  children: readonly PathOccurrences[],
  metric: Metric,
): Map<string, MetricVerdict> {
  const out = new Map<string, MetricVerdict>();
  const read = READERS[metric];
  if (model.lastSample) {
    for (const child of children) out.set(child.path, insufficient(LAST_SAMPLE_REASON));
    return out;
  }
  const closedParents = parent.list.filter((o) => !o.span.syntheticEnd);
  // A parent that repeats too rarely (one `train` around the whole loop): its children's cycles are the unit.
  const cycles = closedParents.length < MIN_LEAK_OCCURRENCES;
  const specs = cycles
    ? cycleUnits(closedParents, model.childrenOf)
    : parentUnits(closedParents, model.childrenOf);
  const specLevels = Float64Array.from(specs, (spec) => spec.exit(read));
  const levelSpecs = specs.filter((_, i) => !Number.isNaN(specLevels[i]!));
  const levels = specLevels.filter((value) => !Number.isNaN(value));
  if (levels.length < MIN_LEAK_OCCURRENCES) {
    for (const child of children) out.set(child.path, judgeOwn(child, metric, false));
    return out;
  }
  const unitPath = cycles ? `${parent.path} (each round of its children)` : parent.path;
  const level = judgeLevels(levels, metric);
  const units = unitsOf(specs, read);
  const inProfile = new Set(units[0]?.owners.filter((o): o is string => o !== null) ?? []);
  for (const child of children) {
    if (!inProfile.has(child.path) || units.length < MIN_LEAK_OCCURRENCES) {
      out.set(child.path, judgeOwn(child, metric, false));
    }
  }
  const profiled = children.filter((child) => !out.has(child.path));
  if (profiled.length === 0) return out;

  if (level.growing) {
    const profile = unitMatrix(units);
    // Each unit picked once, for the estimate (the bootstrap's rounds draw their own: `bootstrapHits`).
    const counts = new Uint32Array(units.length).fill(1);
    const mask = significantSegments(profile, counts);
    const owners = units[0]!.owners;
    const estimate = giveBack(segmentMeans(profile, counts, mask), owners);
    const estimateTotal = totalKept(estimate.kept);
    const hits = bootstrapHits(profile, owners, units.length);
    for (const child of profiled) {
      const kept = estimate.kept.get(child.path) ?? 0;
      const fraction = estimateTotal > 0 ? kept / estimateTotal : 0;
      // The unit's slope is the well-measured total; the profile says how much of it this child keeps.
      const retained = Math.max(0, level.test.slope) * fraction;
      const share = (hits.get(child.path) ?? 0) / BOOTSTRAP_ROUNDS;
      const shortfall = estimate.shortfall.get(child.path) ?? null;
      const leaking =
        fraction >= CHILD_SHARE && share >= CHILD_BOOTSTRAP_SHARE && retained >= MIN_RETAINED[metric];
      out.set(child.path, {
        verdict: leaking ? "leaking" : "stable",
        confidence: round(leaking ? (1 - level.pHalf) * share : Math.max(0.5, 1 - share), 2),
        evidence: evidence(
          metric,
          "retention_profile",
          unitPath,
          level,
          leaking ? retained : 0,
          share,
          shortfall,
        ),
        retained: leaking ? retained : 0,
        reason: null,
      });
    }
    return out;
  }

  if (level.rise > 0) {
    // Warm-up or a one-time step: who kept the growth in the occurrences where the level stepped up.
    const kept = new Map<string, number>();
    let total = 0;
    for (const index of level.risingSteps) {
      const spec = levelSpecs[index];
      if (spec === undefined) continue;
      const unit = unitsOf([spec], read)[0];
      if (unit === undefined) continue;
      const segments = unit.readings.slice(1).map((value, j) => value - unit.readings[j]!);
      for (const [owner, amount] of giveBack(segments, unit.owners).kept) {
        if (owner !== null) kept.set(owner, (kept.get(owner) ?? 0) + amount);
        total += amount;
      }
    }
    for (const child of profiled) {
      const share = total > 0 ? (kept.get(child.path) ?? 0) / total : 0;
      out.set(child.path, {
        verdict: share >= CHILD_SHARE ? "plateau" : "stable",
        confidence: round(share >= CHILD_SHARE ? (1 - level.test.pRising) * share : 1 - share, 2),
        evidence: evidence(metric, "retention_profile", unitPath, level, 0, null, null),
        retained: 0,
        reason: null,
      });
    }
    return out;
  }
  for (const child of profiled) {
    out.set(child.path, {
      verdict: "stable",
      confidence: round(stableConfidence(level), 2),
      evidence: evidence(metric, "retention_profile", unitPath, level, 0, null, null),
      retained: 0,
      reason: null,
    });
  }
  return out;
}

/** The bytes metric of a rank: allocator allocated where recorded, else device used. */
function bytesMetric(occurrences: readonly RetentionOccurrence[]): Metric | null {
  let used = false;
  for (const o of occurrences) {
    if (!Number.isNaN(o.exitAllocated)) return "allocator_allocated_bytes";
    if (!Number.isNaN(o.exitUsed)) used = true;
  }
  return used ? "device_used_bytes" : null;
}

function hasTensors(occurrences: readonly RetentionOccurrence[]): boolean {
  return occurrences.some((o) => !Number.isNaN(o.exitTensors));
}

/** Verdicts for every path of one session's rank (its occurrences of all paths, any order). */
export function judgeRetention(
  occurrences: readonly RetentionOccurrence[],
  input: RetentionInput,
): Map<string, RankVerdicts> {
  const out = new Map<string, RankVerdicts>();
  if (occurrences.length === 0) return out;
  const model = modelOf(occurrences, input.lastSample);
  const rank = occurrences[0]!.span.rank;
  const metrics: [Metric | null, "bytes" | "tensors"][] = [
    [bytesMetric(occurrences), "bytes"],
    [hasTensors(occurrences) ? "tfjs_num_tensors" : null, "tensors"],
  ];
  for (const entry of model.paths.values())
    out.set(entry.path, { rank, occurrences: entry.list.length, bytes: null, tensors: null, births: null });
  for (const [metric, slot] of metrics) {
    if (metric === null) continue;
    const childrenByParent = new Map<string, PathOccurrences[]>();
    for (const entry of model.paths.values()) {
      const parentKey = model.parentPath.get(entry.path) ?? null;
      if (parentKey === null) {
        out.get(entry.path)![slot] = judgeOwn(entry, metric, model.lastSample);
        continue;
      }
      const list = childrenByParent.get(parentKey);
      if (list === undefined) childrenByParent.set(parentKey, [entry]);
      else list.push(entry);
    }
    for (const [parentKey, children] of childrenByParent) {
      const verdicts = judgeChildren(model, model.paths.get(parentKey)!, children, metric);
      for (const [path, verdict] of verdicts) out.get(path)![slot] = verdict;
    }
  }
  if (input.births !== undefined && input.births.length > 0) applyBirths(model, out, input.births);
  return out;
}

/**
 * Birth-phase evidence outranks counters: a phase whose survivors accumulate leaks (its ancestors
 * too: their step holds them); when some phase's survivors accumulate, a child the counters blamed
 * but whose own survivors do not grow is cleared (counters cannot tell a phase from its sibling).
 */
function applyBirths(
  model: RankModel,
  out: Map<string, RankVerdicts>,
  births: readonly BirthSnapshot[],
): void {
  const verdicts = judgeBirths(births, (birthPhase) => {
    const parentKey = model.parentPath.get(birthPhase) ?? null;
    const unit = model.paths.get(parentKey ?? birthPhase);
    if (unit === undefined) return null;
    const starts = unit.list.map((o) => o.span.startNs);
    // A parent that repeats too rarely: each start of the phase itself is a step.
    if (parentKey !== null && starts.length < MIN_LEAK_OCCURRENCES) {
      const own = model.paths.get(birthPhase);
      return own === undefined ? null : { path: birthPhase, startsNs: own.list.map((o) => o.span.startNs) };
    }
    return { path: unit.path, startsNs: starts };
  });
  const leakingBirths = [...verdicts.values()].filter((verdict) => verdict.leaking);
  for (const [path, verdict] of verdicts) {
    const entry = out.get(path);
    if (entry !== undefined) entry.births = verdict;
  }
  if (leakingBirths.length === 0) return;
  const leakingPaths = new Set(leakingBirths.map((verdict) => verdict.evidence.birth_phase));
  for (const [path, entry] of out) {
    const own = leakingPaths.has(path);
    const ancestorOfLeak = [...leakingPaths].some((leak) => leak.startsWith(`${path} / `));
    if (own || ancestorOfLeak) continue;
    if (model.parentPath.get(path) === null) continue;
    for (const slot of ["bytes", "tensors"] as const) {
      const verdict = entry[slot];
      if (verdict?.verdict !== "leaking") continue;
      entry[slot] = {
        ...verdict,
        verdict: "stable",
        retained: 0,
        confidence: entry.births?.confidence ?? 0.5,
      };
    }
  }
}

/** Order of verdicts, strongest first (leaking outranks plateau, stable, insufficient data). */
export const VERDICT_ORDER: Readonly<Record<RetentionVerdictKind, number>> = {
  leaking: 0,
  plateau: 1,
  stable: 2,
  insufficient_data: 3,
};

/** The strongest of a rank's metric verdicts (by `VERDICT_ORDER`, then confidence). */
export function strongestVerdict(verdicts: readonly (MetricVerdict | null)[]): MetricVerdict | null {
  let best: MetricVerdict | null = null;
  for (const verdict of verdicts) {
    if (verdict === null) continue;
    if (
      best === null ||
      VERDICT_ORDER[verdict.verdict] < VERDICT_ORDER[best.verdict] ||
      (verdict.verdict === best.verdict && verdict.confidence > best.confidence)
    )
      best = verdict;
  }
  return best;
}
