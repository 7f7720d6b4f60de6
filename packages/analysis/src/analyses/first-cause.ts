/**
 * The cross-rank first-cause analysis's result types and constants, the reference's notes, and how
 * the ranks' spike candidates become the cluster onset and the ranked first-cause suspects: what
 * the analysis (`cross-rank.ts`), the timeline merge (`cross-rank-timelines.ts`) and the event
 * oracle share.
 */
import type { PhaseAttributionPayload, PhaseResolver } from "@stormlog/phases";

/** Minimum cumulative device-used growth that counts as a spike (64 MiB), as in the reference. */
export const SPIKE_MIN_BYTES = 64 * 1024 ** 2;
/** A rank whose first sample is more than this many median intervals from the anchor gets a note. */
export const SKEW_NOTE_MULTIPLIER = 5;

/** How sure the analysis is that a suspect spiked first. */
export type FirstCauseConfidence = "high" | "medium" | "low";

/** A ranked first-cause candidate (`FirstCauseSuspect`, serialized). */
export interface FirstCauseSuspect {
  rank: number;
  /** When the rank's growth window crossed the spike threshold (the rank's own clock). */
  first_spike_timestamp_ns: bigint;
  aligned_first_spike_timestamp_ns: bigint;
  /** Cumulative device-used growth of the window at the crossing (a `bigint` only past 2^53). */
  peak_delta_bytes: number | bigint;
  spike_window_samples: number;
  lead_over_cluster_onset_ns: bigint;
  confidence: FirstCauseConfidence;
  evidence: { device_used_delta_bytes: number | bigint; supporting_ranks_at_or_before_onset: number };
  /** The phase active on that rank at `first_spike_timestamp_ns`, when a resolver is given. */
  phase_attribution: PhaseAttributionPayload | null;
}

/** `summarize_cross_rank_analysis`: the reference's JSON structure, keys in its order. */
export interface CrossRankAnalysis {
  job_id: string | null;
  world_size: number;
  participating_ranks: number[];
  missing_ranks: number[];
  rank_sample_counts: Record<string, number>;
  alignment_offsets_ns: Record<string, bigint>;
  /** The aligned spike time of the second-earliest candidate; null with fewer than two. */
  cluster_onset_timestamp_ns: bigint | null;
  first_cause_suspects: FirstCauseSuspect[];
  /** De-duplicated, in order. */
  notes: string[];
}

/** Options of the cross-rank analysis. */
export interface CrossRankOptions {
  /** Attributes each suspect's spike to a phase (e.g. a `PhaseReplayIndex` of the same events). */
  readonly phaseResolver?: PhaseResolver | null;
}

export const NOTE_NON_SAMPLE = "Ignored non-sample events during cross-rank analysis.";
export const NOTE_NO_DEVICE_USED = "Ignored samples without device-used memory during cross-rank analysis.";
export const NOTE_NO_SAMPLES = "No sample telemetry events were available for distributed analysis.";
export const NOTE_MULTIPLE_JOBS = "Multiple job_id values were observed; filtering to the most common value.";
export const NOTE_ONE_RANK = "At least two ranks are required for cross-rank first-cause analysis.";
export const NOTE_NO_SPIKES = "No qualifying cross-rank spikes were detected.";
export const NOTE_ONE_SPIKE = "Only one rank produced a qualifying spike; confidence is limited.";

/** A rank's first qualifying spike, and when it happened on the aligned clock. */
export interface SpikeCandidate {
  readonly rank: number;
  readonly firstSpikeNs: bigint;
  readonly alignedFirstSpikeNs: bigint;
  /** A `bigint` only past 2^53 (counters read exactly). */
  readonly peakDeltaBytes: number | bigint;
  readonly windowSamples: number;
}

/** The cluster onset, the suspects and the notes of `_detect_first_cause_spikes`. */
export interface FirstCause {
  clusterOnsetNs: bigint | null;
  suspects: FirstCauseSuspect[];
  notes: string[];
}

/**
 * `_detect_first_cause_spikes` once every rank's candidate is known: ranks with fewer than two
 * samples (`sparseRanks`) are noted, candidates are ordered by aligned spike time (then larger
 * growth, then rank), the second one sets the cluster onset, and those at or before it are the
 * suspects, the earliest with high confidence when it leads alone by at least one sampling interval.
 */
export function rankFirstCause<C extends SpikeCandidate>(
  candidates: C[],
  sparseRanks: readonly number[],
  missingRanks: readonly number[],
  medianIntervalNs: bigint,
  attribution: (candidate: C) => PhaseAttributionPayload | null,
): FirstCause {
  const notes: string[] = [];
  if (sparseRanks.length > 0) {
    const listed = [...sparseRanks].sort((a, b) => a - b).join(", ");
    notes.push(`Some ranks have fewer than two samples and cannot contribute to spike detection: ${listed}.`);
  }
  if (candidates.length === 0) {
    notes.push(NOTE_NO_SPIKES);
    return { clusterOnsetNs: null, suspects: [], notes };
  }
  candidates.sort((a, b) => {
    if (a.alignedFirstSpikeNs !== b.alignedFirstSpikeNs)
      return a.alignedFirstSpikeNs < b.alignedFirstSpikeNs ? -1 : 1;
    // Larger growth first (a number and a bigint compare exactly).
    if (a.peakDeltaBytes > b.peakDeltaBytes) return -1;
    if (a.peakDeltaBytes < b.peakDeltaBytes) return 1;
    return a.rank - b.rank;
  });
  let clusterOnsetNs: bigint | null = null;
  if (candidates.length >= 2) clusterOnsetNs = candidates[1]!.alignedFirstSpikeNs;
  else notes.push(NOTE_ONE_SPIKE);
  const cutoff = clusterOnsetNs ?? candidates[0]!.alignedFirstSpikeNs;
  const ranked = candidates.filter((candidate) => candidate.alignedFirstSpikeNs <= cutoff);
  const earliest = ranked[0]!.alignedFirstSpikeNs;
  let earliestCount = 0;
  for (const candidate of ranked) if (candidate.alignedFirstSpikeNs === earliest) earliestCount++;
  const sparse = missingRanks.length > 0 || sparseRanks.length > 0;
  const suspects = ranked.map((candidate): FirstCauseSuspect => {
    const lead = clusterOnsetNs === null ? 0n : clusterOnsetNs - candidate.alignedFirstSpikeNs;
    let confidence: FirstCauseConfidence = "low";
    if (candidates.length >= 2 && candidate.alignedFirstSpikeNs === earliest) {
      if (earliestCount === 1 && !sparse && (medianIntervalNs <= 0n || lead >= medianIntervalNs))
        confidence = "high";
      else confidence = sparse ? "low" : "medium";
    }
    return {
      rank: candidate.rank,
      first_spike_timestamp_ns: candidate.firstSpikeNs,
      aligned_first_spike_timestamp_ns: candidate.alignedFirstSpikeNs,
      peak_delta_bytes: candidate.peakDeltaBytes,
      spike_window_samples: candidate.windowSamples,
      lead_over_cluster_onset_ns: lead,
      confidence,
      evidence: {
        device_used_delta_bytes: candidate.peakDeltaBytes,
        supporting_ranks_at_or_before_onset: ranked.length,
      },
      phase_attribution: attribution(candidate),
    };
  });
  return { clusterOnsetNs, suspects, notes };
}
