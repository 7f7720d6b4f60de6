/**
 * `stormlog sessions`: an input's sessions and rank groups, read through the index that analyses,
 * diagnoses and exports share (built on first use), so that listing costs what one analysis's scan
 * does (nothing more once an analysis has run), and the groups listed are the ones they read.
 */
import { loadTelemetrySessions, type SessionInfo } from "@stormlog/sink";
import { type ResolvedTelemetryInput, resolveTelemetryInput } from "@stormlog/sink/internal";
import { SegmentIndex, segmentIndexOptions } from "../index/index-cache.js";
import {
  inputSessions,
  loadedListings,
  type RankGroupSession,
  rankGroupSession,
  rankGroupsOf,
  type SegmentData,
  type SessionListing,
  sessionInfo,
} from "../input/sessions.js";
import { segmentWarnings } from "./report.js";

/** Options of `listTelemetrySessions`. */
export interface ListSessionsOptions {
  /** Use and maintain the analysis index beside the sink (default true), as `analyzeTelemetry`. */
  readonly index?: boolean;
  /** Where indexes go when the input's location is not writable (see `AnalyzeOptions.cacheDir`). */
  readonly cacheDir?: string;
  /** Told what the reading left out or distrusted (a final line cut short, a link out of the input). */
  readonly onWarning?: (message: string) => void;
}

/** An input's sessions, and the rank groups among them. */
export interface TelemetrySessionList {
  /** In the reference's order: completed, then interrupted, incomplete, running; newest first in each. */
  readonly sessions: readonly SessionInfo[];
  /**
   * Per-rank sessions merged into one view each, in the order of their best member: the first is
   * what `analyzeTelemetry`, `diagnoseTelemetry` and the exports read unless a session is asked for.
   */
  readonly rankGroups: readonly RankGroupSession[];
}

/** The sessions of a sink, a `.jsonl` file or a JSON document, and their rank groups. */
export async function listTelemetrySessions(
  path: string,
  options: ListSessionsOptions = {},
): Promise<TelemetrySessionList> {
  const input = await resolveTelemetryInput(path, options.onWarning);
  let listings: SessionListing[];
  if (input.kind === "json") listings = loadedListings(await loadTelemetrySessions(path));
  else {
    const index = await SegmentIndex.open(input, segmentIndexOptions(options));
    try {
      listings = (await listedSegments(input, index, options.onWarning)).sessions;
    } finally {
      index.dispose();
    }
  }
  return {
    sessions: listings.map(sessionInfo),
    rankGroups: rankGroupsOf(listings).map(rankGroupSession),
  };
}

/**
 * The index's segments (scanned where the index does not hold them), what reading them left out
 * told to `onWarning`, and the input's sessions.
 */
export async function listedSegments(
  input: ResolvedTelemetryInput,
  index: SegmentIndex,
  onWarning: ((message: string) => void) | undefined,
): Promise<{ segments: SegmentData[]; sessions: SessionListing[] }> {
  const { segments } = await index.loadSegments();
  if (onWarning !== undefined) for (const warning of segmentWarnings(input, segments)) onWarning(warning);
  return { segments, sessions: inputSessions(input, segments) };
}
