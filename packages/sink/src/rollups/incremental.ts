import { basename } from "node:path";
import { type Clock, type JsonObject, type SessionSummary, stringifyJson } from "@stormlog/core";
import { inferSessionSummaryFromEvents } from "@stormlog/core/internal";
import {
  type ResolvedTelemetryInput,
  resolveTelemetryInput,
  type TelemetryInputSegment,
} from "../reader/input.js";
import type { ReadOptions } from "../reader/reader.js";
import { rebuildTelemetryRollups } from "./full-rebuild.js";
import {
  type RolledSession,
  type RollupCoverage,
  rollupCoverageFromManifest,
  rollupPayload,
} from "./payload.js";
import { type RollupSegmentCacheMode, SegmentTallyCache, segmentFileStamp } from "./segment-cache.js";
import {
  cutLineMessage,
  type SegmentTally,
  segmentTallyFromData,
  segmentTallyToData,
  tallySegment,
} from "./segment-tally.js";
import { SessionTally } from "./tally.js";

/** Where a segment's tallies came from in a build. */
export type SegmentTallySource = "file" | "memory" | "disk";

export interface IncrementalRollupOptions extends ReadOptions {
  windowNs: bigint;
  coverage?: RollupCoverage;
  clock?: Clock;
  segmentCache: RollupSegmentCacheMode;
  onSegmentTally?: (segmentPath: string, from: SegmentTallySource) => void;
}

interface RetainedSegment {
  readonly segment: TelemetryInputSegment;
  readonly filename: string;
  readonly cache: SegmentTallyCache;
}

/**
 * The rollups of a sink (or a root of sinks) merged from per-segment tallies: a segment whose
 * tallies are cached for its current state is not read, so a build after a session close reads
 * only the segments written or changed since the last one. The result equals
 * `rebuildTelemetryRollups` (tested byte for byte). JSON documents are rebuilt from scratch.
 */
export async function buildRollupsIncrementally(
  path: string,
  options: IncrementalRollupOptions,
): Promise<JsonObject> {
  const input = await resolveTelemetryInput(path, (message) => options.onWarning?.(message));
  if (input.kind === "json") return rebuildTelemetryRollups(path, options);
  // The manifest as the input's rules read it (null when it is a link out of the input).
  const manifest = input.parts.find((part) => part.dir === input.path)?.manifest ?? null;
  const ledger = new Map<string, SessionSummary>();
  for (const part of input.parts) {
    for (const summary of part.manifest?.sessions ?? [])
      if (!ledger.has(summary.session_id)) ledger.set(summary.session_id, summary);
  }
  const caches = input.parts.map((part) => new SegmentTallyCache(part.dir, options.segmentCache));
  const retained: RetainedSegment[] = input.parts.flatMap((part, i) =>
    part.segments.map((segment) => ({ segment, filename: basename(segment.path), cache: caches[i]! })),
  );
  const decode = {
    strict: options.strict,
    permissiveLegacy: options.permissiveLegacy,
    upgradeTo: options.upgradeTo,
  };
  const keyOf = (segment: TelemetryInputSegment, stamp: string): string =>
    stringifyJson({
      stamp,
      window_ns: options.windowNs,
      hint: segment.hint,
      default_session_id: segment.defaultSessionId,
      strict: decode.strict !== false,
      permissive_legacy: decode.permissiveLegacy !== false,
      upgrade_to: decode.upgradeTo ?? 3,
    });

  const load = async (
    { segment, filename, cache }: RetainedSegment,
    startOf: (sessionId: string) => bigint | null,
    useCache: boolean,
  ): Promise<SegmentTally> => {
    const stamp = segmentFileStamp(segment.path);
    if (stamp !== null && useCache) {
      const hit = await cache.get(filename, keyOf(segment, stamp));
      if (hit !== null) {
        options.onSegmentTally?.(segment.path, hit.from);
        return segmentTallyFromData(hit.data);
      }
    }
    options.onSegmentTally?.(segment.path, "file");
    const tally = await tallySegment(segment, startOf, options.windowNs, decode);
    // Stored only when nothing wrote to the segment while it was read.
    if (stamp !== null && segmentFileStamp(segment.path) === stamp)
      await cache.put(filename, keyOf(segment, stamp), segmentTallyToData(tally));
    return tally;
  };

  const ledgerStart = (sessionId: string): bigint | null => ledger.get(sessionId)?.started_at_ns ?? null;
  const tallies: SegmentTally[] = [];
  for (const entry of retained) tallies.push(await load(entry, ledgerStart, true));
  let merged = mergeSegments(tallies, retained, ledger, input);
  // Windows count from the session's start: a segment counted from another start (a session the
  // ledger lacks, whose start is its earliest event anywhere) is read again with the right one.
  const finalStart = (sessionId: string): bigint | null =>
    merged.get(sessionId)?.summary.started_at_ns ?? null;
  const stale = tallies.flatMap((tally, ord) =>
    tally.sessions.some(
      (data) =>
        data.window_start_ns !== null &&
        BigInt(data.window_start_ns as number | bigint) !== finalStart(data.session_id as string),
    )
      ? [ord]
      : [],
  );
  if (stale.length > 0) {
    for (const ord of stale) tallies[ord] = await load(retained[ord]!, finalStart, false);
    merged = mergeSegments(tallies, retained, ledger, input);
  }
  tallies.forEach((tally, ord) => {
    if (tally.cutLine !== null)
      options.onWarning?.(cutLineMessage(retained[ord]!.segment.path, tally.cutLine));
  });
  for (const cache of caches) await cache.forgetRemovedSegments();
  return rollupPayload({
    manifest,
    windowNs: options.windowNs,
    coverage: options.coverage ?? rollupCoverageFromManifest(manifest),
    clock: options.clock,
    sessions: [...merged.values()],
  });
}

/**
 * Per session, the segments' tallies merged in reading order, with what the loaders would say of
 * it: its summary (the ledger's, else inferred from its first event and last `stop`), its
 * sources and the cut lines charged to it.
 */
function mergeSegments(
  tallies: readonly SegmentTally[],
  retained: readonly RetainedSegment[],
  ledger: ReadonlyMap<string, SessionSummary>,
  input: ResolvedTelemetryInput,
): Map<string, RolledSession> {
  const figures = new Map<string, { tally: SessionTally; sources: Set<string>; warnings: string[] }>();
  const of = (sessionId: string) => {
    let found = figures.get(sessionId);
    if (found === undefined) {
      found = { tally: new SessionTally(sessionId), sources: new Set(), warnings: [] };
      figures.set(sessionId, found);
    }
    return found;
  };
  tallies.forEach((segmentTally, ord) => {
    const path = retained[ord]!.segment.path;
    for (const data of segmentTally.sessions) {
      const session = of(data.session_id as string);
      session.tally.absorb(data, ord);
      if (data.sourced === true) session.sources.add(path);
    }
    const cut = segmentTally.cutLine;
    if (cut !== null && cut.sessionId !== null) of(cut.sessionId).warnings.push(cutLineMessage(path, cut));
  });
  for (const sessionId of ledger.keys()) of(sessionId);
  const sessions = new Map<string, RolledSession>();
  for (const [sessionId, { tally, sources, warnings }] of figures) {
    let summary = ledger.get(sessionId);
    if (summary === undefined) {
      const first = tally.firstEvent?.value;
      const stop = tally.lastStop?.value;
      const evidence = first ? [first, ...(stop ? [stop] : [])] : [];
      summary = inferSessionSummaryFromEvents({ sessionId, events: evidence, source: input.defaultSource });
    }
    sessions.set(sessionId, {
      summary,
      sources: sources.size > 0 ? [...sources] : [input.defaultSourcePath],
      warnings,
      tally,
    });
  }
  return sessions;
}
