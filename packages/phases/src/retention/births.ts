/**
 * Leak verdicts from birth-phase attribution: the tfjs adapter counts live tensors by the phase they
 * were created in (`metadata.tfjs_live_by_phase` on samples). Survivors born in a phase that keep
 * accumulating from step to step are that phase's leak, exactly: no give-back to infer.
 */
import { risingTrend } from "./trend.js";
import type { BirthEvidence, BirthGroup } from "./types.js";

/** Live tensors born in one phase at one reading. */
export interface BirthCount {
  readonly tensors: number;
  readonly bytes: number;
  readonly largest: readonly BirthGroup[];
}

/** One reading of live tensors per birth phase (one sample's `tfjs_live_by_phase`). */
export interface BirthSnapshot {
  readonly timestampNs: bigint;
  /** By birth phase path ("" for tensors created outside any phase). */
  readonly phases: ReadonlyMap<string, BirthCount>;
}

/** The repeated unit of a birth phase: its name and the start times of its occurrences, in order. */
export interface BirthUnit {
  readonly path: string;
  readonly startsNs: readonly bigint[];
}

/** A birth phase's verdict. */
export interface BirthVerdict {
  readonly leaking: boolean;
  /** Confidence of a leak: 1 - the later half's p-value. */
  readonly confidence: number;
  readonly evidence: BirthEvidence;
}

/**
 * A sample's `tfjs_live_by_phase` object as counts by birth phase. Entries that are not
 * `{ tensors, bytes, largest }` objects (another writer's) are left out rather than guessed at.
 */
export function parseBirthCounts(value: unknown): Map<string, BirthCount> {
  const phases = new Map<string, BirthCount>();
  if (typeof value !== "object" || value === null || Array.isArray(value)) return phases;
  for (const [phase, count] of Object.entries(value as Record<string, unknown>)) {
    if (typeof count !== "object" || count === null) continue;
    const { tensors, bytes, largest } = count as Record<string, unknown>;
    if (typeof tensors !== "number" || typeof bytes !== "number") continue;
    const groups: BirthGroup[] = [];
    if (Array.isArray(largest)) {
      for (const group of largest as unknown[]) {
        if (typeof group !== "object" || group === null) continue;
        const { dtype, shape, bytes: groupBytes, count: groupCount } = group as Record<string, unknown>;
        if (
          typeof dtype === "string" &&
          Array.isArray(shape) &&
          shape.every((dim) => typeof dim === "number") &&
          typeof groupBytes === "number" &&
          typeof groupCount === "number"
        )
          groups.push({ dtype, shape: [...(shape as number[])], bytes: groupBytes, count: groupCount });
      }
    }
    phases.set(phase, { tensors, bytes, largest: groups });
  }
  return phases;
}

/** The metadata key the tfjs adapter writes. */
export const LIVE_BY_PHASE_KEY = "tfjs_live_by_phase";

/** Readings needed before births are judged. */
const MIN_SNAPSHOTS = 6;
/** Survivors per unit occurrence below which growth is not called a leak. */
const MIN_TENSORS_PER_OCCURRENCE = 0.5;

const round = (value: number, digits: number): number => {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
};

/** Occurrences of the unit that start in (from, to]. */
function occurrencesBetween(starts: readonly bigint[], from: bigint, to: bigint): number {
  let count = 0;
  for (const start of starts) if (start > from && start <= to) count++;
  return count;
}

/**
 * The readings taken while the unit runs: from its first start to the first reading after its last
 * start. Survivors accumulate only while steps run; the flat stretch after a loop ends (evaluation,
 * saving) says nothing about whether they would have kept growing.
 */
function whileRunning(ordered: readonly BirthSnapshot[], startsNs: readonly bigint[]): BirthSnapshot[] {
  if (startsNs.length === 0) return [...ordered];
  const first = startsNs[0]!;
  const last = startsNs[startsNs.length - 1]!;
  const out: BirthSnapshot[] = [];
  for (const snapshot of ordered) {
    if (snapshot.timestampNs < first) continue;
    out.push(snapshot);
    if (snapshot.timestampNs >= last) break;
  }
  return out;
}

/**
 * Judges every birth phase of one rank. A phase leaks when its live tensors rise over all readings
 * (Mann-Kendall p < 0.005), over the later half (p < 0.05, or only rise when the half is short), and
 * by at least half a tensor per occurrence of its unit.
 */
export function judgeBirths(
  snapshots: readonly BirthSnapshot[],
  unitOf: (birthPhase: string) => BirthUnit | null,
): Map<string, BirthVerdict> {
  const out = new Map<string, BirthVerdict>();
  if (snapshots.length < MIN_SNAPSHOTS) return out;
  const ordered = [...snapshots].sort((a, b) =>
    a.timestampNs < b.timestampNs ? -1 : a.timestampNs > b.timestampNs ? 1 : 0,
  );
  const phases = new Set<string>();
  for (const snapshot of ordered) for (const phase of snapshot.phases.keys()) phases.add(phase);
  for (const phase of phases) {
    if (phase === "") continue;
    const unit = unitOf(phase);
    const window = unit === null ? ordered : whileRunning(ordered, unit.startsNs);
    if (window.length < MIN_SNAPSHOTS) continue;
    const tensors = Float64Array.from(window, (s) => s.phases.get(phase)?.tensors ?? 0);
    const bytes = window.map((s) => s.phases.get(phase)?.bytes ?? 0);
    const all = risingTrend(tensors);
    const halfStart = Math.floor(tensors.length / 2);
    const half = risingTrend(tensors.subarray(halfStart));
    const halfRising = half.points >= 8 ? half.pRising < 0.05 : half.s > 0;
    // Where the survivors began to accumulate: the last reading at the run's lowest count.
    let low = Number.POSITIVE_INFINITY;
    for (const count of tensors) if (count < low) low = count;
    let begin = 0;
    for (let i = 0; i < tensors.length; i++) if (tensors[i] === low) begin = i;
    const first = window[begin]!;
    const last = window[window.length - 1]!;
    const occurrences =
      unit === null ? 0 : occurrencesBetween(unit.startsNs, first.timestampNs, last.timestampNs);
    const added = tensors[tensors.length - 1]! - tensors[begin]!;
    const addedBytes = bytes[bytes.length - 1]! - bytes[begin]!;
    const perOccurrence = occurrences > 0 ? added / occurrences : 0;
    const leaking =
      all.pRising < 0.005 && halfRising && half.slope > 0 && perOccurrence >= MIN_TENSORS_PER_OCCURRENCE;
    const lastCount = last.phases.get(phase);
    out.set(phase, {
      leaking,
      confidence: round(1 - half.pRising, 2),
      evidence: {
        birth_phase: phase,
        unit_path: unit?.path ?? phase,
        tensors_per_occurrence: round(perOccurrence, 2),
        bytes_per_occurrence: occurrences > 0 ? Math.round(addedBytes / occurrences) : 0,
        live_tensors: lastCount?.tensors ?? 0,
        live_bytes: lastCount?.bytes ?? 0,
        alive_for_occurrences: occurrences,
        largest: (lastCount?.largest ?? []).map((group) => ({ ...group, shape: [...group.shape] })),
        p_rising: Number(half.pRising.toPrecision(3)),
      },
    });
  }
  return out;
}
