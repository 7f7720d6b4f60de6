/** Types of the retention verdicts (see verdicts.ts). */

/** A leak verdict for one phase path. */
export type RetentionVerdictKind = "leaking" | "plateau" | "stable" | "insufficient_data";

/** What a verdict measured. */
export type RetentionMetric = "allocator_allocated_bytes" | "device_used_bytes" | "tfjs_num_tensors";

/** Evidence behind a leak verdict, for one metric (bytes or tensors). See docs/leak-verdicts.md. */
export interface RetentionEvidence {
  metric: RetentionMetric;
  /**
   * How the phase's share was found: `birth_phase` (live tensors counted by the phase they were created
   * in: exact), `own_levels` (a phase judged on its own occurrences: a top-level
   * phase, or one whose parent repeats too rarely), `retention_profile` (the parent's repeated unit,
   * its children's growth minus what later siblings and the parent give back in the same unit).
   */
  method: "own_levels" | "retention_profile" | "birth_phase";
  /** The repeated unit whose next occurrence must still hold the memory (the parent path, or the phase itself). */
  unit_path: string;
  /** Occurrences of the unit on the rank the evidence comes from. */
  unit_occurrences: number;
  /** What this phase keeps per occurrence of the unit (after give-backs in the same unit). */
  retained_per_occurrence: number;
  /** Theil-Sen slope of the unit's level when it ends, per occurrence. */
  level_slope_per_occurrence: number;
  /** The unit's level growth from its first to its last occurrence. */
  level_growth: number;
  /** One-sided Mann-Kendall p-value of "the unit's level keeps rising" over its later half. */
  p_rising: number;
  /**
   * Share of bootstrap resamples of the unit's occurrences in which this phase still keeps at least a
   * quarter of the unit's growth (`retention_profile` only; null otherwise).
   */
  share: number | null;
  /**
   * Set when a later sibling gave back part of this phase's growth and stopped short: counters
   * cannot tell "this phase kept part of what it allocated" from "that sibling freed less and kept
   * its own". Exact tfjs attribution (birth phases) can.
   */
  shortfall_sibling: string | null;
}

/** Live tensors of one dtype and shape born in one phase. */
export interface BirthGroup {
  dtype: string;
  shape: number[];
  /** Live bytes of the group. */
  bytes: number;
  /** Live tensors of the group. */
  count: number;
}

/** Exact evidence from birth-phase attribution: live tensors created in the phase, still alive. */
export interface BirthEvidence {
  /** The phase the survivors were created in. */
  birth_phase: string;
  /** The repeated unit "per step" refers to (the parent path, or the phase itself). */
  unit_path: string;
  /** Survivors added per occurrence of the unit. */
  tensors_per_occurrence: number;
  bytes_per_occurrence: number;
  /** Survivors at the last reading. */
  live_tensors: number;
  live_bytes: number;
  /** Occurrences of the unit since the survivors began to accumulate: how long the oldest has lived. */
  alive_for_occurrences: number;
  /** Largest groups of survivors at the last reading, largest first. */
  largest: BirthGroup[];
  /** One-sided Mann-Kendall p-value of "the survivors keep growing" over the later half. */
  p_rising: number;
}
