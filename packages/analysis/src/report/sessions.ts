/**
 * `stormlog sessions`: an input's sessions and rank groups, read through the index that analyses,
 * diagnoses and exports share (built on first use), so that listing costs what one analysis's scan
 * does (nothing more once an analysis has run), and the groups listed are the ones they read.
 */
import { loadTelemetrySessions, type SessionInfo } from "@stormlog/sink";
import { resolveTelemetryInput } from "@stormlog/sink/internal";
import { ranksOfEvents } from "../analyses/diagnostics.js";
import { SegmentIndex, segmentIndexOptions } from "../index/index-cache.js";
import {
  inputSessions,
  type RankGroupSession,
  rankGroupSession,
  rankGroupsOf,
  type SessionListing,
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
  if (input.kind === "json") {
    const loaded = await loadTelemetrySessions(path);
    const ranks = ranksOfEvents(loaded);
    listings = loaded.map(({ events: _events, ...info }) => ({
      ...info,
      ranks: ranks.get(info.summary.session_id)!,
    }));
  } else {
    const index = await SegmentIndex.open(input, segmentIndexOptions(options));
    try {
      const { segments } = await index.loadSegments();
      if (options.onWarning !== undefined)
        for (const warning of segmentWarnings(input, segments)) options.onWarning(warning);
      listings = inputSessions(input, segments);
    } finally {
      index.dispose();
    }
  }
  return {
    sessions: listings.map(({ ranks: _ranks, ...info }) => info),
    rankGroups: rankGroupsOf(listings).map(rankGroupSession),
  };
}
