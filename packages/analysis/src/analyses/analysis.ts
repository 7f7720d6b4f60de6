/**
 * The one shape of an analysis: fed the selection one rank at a time (all of that rank's
 * sessions), then asked once for its result. What several analyses need of a rank (its phase
 * replay indexes, its phase occurrences) is computed once per rank by `rankData` and shared.
 */
import type { PhaseReplayIndex } from "@stormlog/phases";
import type { LoadedRank, RankSeries } from "../input/dataset.js";
import { buildPhaseIndex, collectOccurrences, type Occurrence } from "./phase-stats.js";

/** One rank of the selection, as every analysis reads it; valid until the next rank is loaded. */
export interface RankData {
  readonly rank: number;
  /** One series per session of the rank, in session id order. */
  readonly series: readonly RankSeries[];
  /** The series' phase replay index (null without phase records). */
  phaseIndex(series: RankSeries): PhaseReplayIndex | null;
  /** The series' phase occurrences, with their peaks and net changes. */
  occurrences(series: RankSeries): readonly Occurrence[];
}

/** An analysis over the dataset. */
export interface RankAnalysis<Result> {
  addRank(data: RankData): void;
  finish(): Result;
}

/** A loaded rank with its phase indexes and occurrences computed on first use, once. */
export function rankData(loaded: LoadedRank): RankData {
  const indexes = new Map<RankSeries, PhaseReplayIndex | null>();
  const occurrences = new Map<RankSeries, Occurrence[]>();
  const phaseIndex = (series: RankSeries): PhaseReplayIndex | null => {
    let index = indexes.get(series);
    if (index === undefined) {
      index = buildPhaseIndex(series);
      indexes.set(series, index);
    }
    return index;
  };
  return {
    rank: loaded.rank,
    series: loaded.series,
    phaseIndex,
    occurrences(series) {
      let list = occurrences.get(series);
      if (list === undefined) {
        list = collectOccurrences(series, phaseIndex(series));
        occurrences.set(series, list);
      }
      return list;
    },
  };
}
