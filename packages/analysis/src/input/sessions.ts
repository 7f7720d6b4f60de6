/**
 * Sessions of an input and the one an analysis looks at. The session list follows the sink
 * reader's rules (ledger from the manifests, else inferred from the events; the reference's order).
 * Per-rank sessions of one distributed job (same non-null `job_id`, `world_size > 1`, one rank
 * each, distinct ranks, no more than `world_size`) are merged into one rank-group view, as the
 * reference's TUI does, and that view is chosen unless a single session is asked for.
 */
import { compareSessionsForSelection, type SessionSummary } from "@stormlog/core";
import {
  createSessionSummary,
  inferSessionSummaryFromEvents,
  stableLegacySessionId,
} from "@stormlog/core/internal";
import { comparePythonStrings } from "@stormlog/phases/internal";
import { type LoadedSession, type SessionInfo, SessionNotFoundError } from "@stormlog/sink";
import type { ResolvedTelemetryInput, TelemetryInputSegment } from "@stormlog/sink/internal";
import type { SegmentAggregate, SessionEvidence } from "./aggregate.js";
import { digestOf, type SegmentDigest } from "./digest.js";

/** A session as the analysis lists it: the sink reader's `SessionInfo` plus the ranks it holds. */
export interface SessionListing extends SessionInfo {
  /** Ranks its events carry, ascending. */
  ranks: number[];
}

/** A listing as the sink reader's `SessionInfo` (its ranks left out). */
export function sessionInfo({ ranks: _ranks, ...info }: SessionListing): SessionInfo {
  return info;
}

/** Sessions the sink reader loaded, listed with the ranks their events carry (ascending). */
export function loadedListings(loaded: readonly LoadedSession[]): SessionListing[] {
  return loaded.map(({ events, ...info }) => ({
    ...info,
    ranks: [...new Set(events.map((event) => event.rank))].sort((a, b) => a - b),
  }));
}

/** One segment, in reading order: where it came from, its digest, and its aggregate or where to load it. */
export interface SegmentData {
  /** The segment file (or the input itself for in-memory and JSON inputs). */
  readonly source: string;
  /** The manifest's session for the segment (listed as a source of it even when empty). */
  readonly hint: string | null;
  readonly digest: SegmentDigest;
  /** The aggregate when held in memory; else `file` has it. */
  readonly aggregate: SegmentAggregate | null;
  /** The aggregate's index file and the stamp it must carry, when not held in memory. */
  readonly file: { readonly path: string; readonly stamp: string } | null;
  /** The segment itself, scanned again should its index file turn out unreadable. */
  readonly segment?: TelemetryInputSegment;
  /**
   * A big segment scanned and stored in pieces (`pieces.ts`), in its order: then `aggregate` and
   * `file` are null, and `digest` is the whole segment's.
   */
  readonly pieces?: readonly SegmentPiece[];
}

/** A byte range of a big segment, scanned and stored on its own. */
export interface SegmentPiece {
  /** Its bytes: from `start` to `end` (`Infinity`: the end of the file). */
  readonly start: number;
  readonly end: number;
  /** Lines of the segment before it: its line n (its aggregate numbers them from 1) is the segment's `lineOffset + n`. */
  readonly lineOffset: number;
  /** Its own digest (its lines numbered from 1): which sessions' ranks it holds. */
  readonly digest: SegmentDigest;
  /** Its aggregate when held in memory; else `file` has it. */
  readonly aggregate: SegmentAggregate | null;
  readonly file: { readonly path: string; readonly stamp: string } | null;
}

/** A segment held in memory (its digest made from it). */
export function inMemorySegment(
  source: string,
  hint: string | null,
  aggregate: SegmentAggregate,
): SegmentData {
  return { source, hint, digest: digestOf(aggregate), aggregate, file: null };
}

/**
 * The sessions of the scanned segments, as `summarizeTelemetrySessions` lists them: per session the
 * ledger summary (first manifest that has it) or one inferred from its earliest event and last
 * `stop`; event counts, time range, sources and read warnings; sorted in the reference's order.
 */
export function listSessions(
  segments: readonly SegmentData[],
  ledger: ReadonlyMap<string, SessionSummary>,
  defaultSource: string,
  defaultSourcePath: string,
): SessionListing[] {
  interface Tally {
    count: number;
    first: SessionEvidence | null;
    last: bigint | null;
    lastStop: SessionEvidence | null;
    sources: Set<string>;
    warnings: string[];
    ranks: Set<number>;
  }
  const tallies = new Map<string, Tally>();
  const of = (sessionId: string): Tally => {
    let tally = tallies.get(sessionId);
    if (tally === undefined) {
      tally = {
        count: 0,
        first: null,
        last: null,
        lastStop: null,
        sources: new Set(),
        warnings: [],
        ranks: new Set(),
      };
      tallies.set(sessionId, tally);
    }
    return tally;
  };
  for (const segment of segments) {
    const digest = segment.digest;
    for (const part of digest.sessions) {
      const tally = of(part.sessionId);
      tally.count += part.eventCount;
      if (part.eventCount > 0) tally.sources.add(segment.source);
      if (
        part.first !== null &&
        (tally.first === null || part.first.timestamp_ns < tally.first.timestamp_ns)
      ) {
        tally.first = part.first;
      }
      if (part.lastTs !== null && (tally.last === null || part.lastTs > tally.last)) tally.last = part.lastTs;
      if (
        part.lastStop !== null &&
        (tally.lastStop === null || part.lastStop.timestamp_ns >= tally.lastStop.timestamp_ns)
      ) {
        tally.lastStop = part.lastStop;
      }
      for (const rank of part.ranks) tally.ranks.add(rank.rank);
    }
    if (digest.eventCount === 0 && segment.hint !== null) of(segment.hint).sources.add(segment.source);
    for (const warning of digest.warnings) {
      if (warning.sessionId !== null) of(warning.sessionId).warnings.push(warning.message);
    }
  }
  const ids = new Set([...tallies.keys(), ...ledger.keys()]);
  const sessions: SessionListing[] = [];
  for (const sessionId of ids) {
    const tally = tallies.get(sessionId);
    let summary = ledger.get(sessionId);
    if (summary === undefined) {
      const evidence = tally?.first ? [tally.first, ...(tally.lastStop ? [tally.lastStop] : [])] : [];
      summary = inferSessionSummaryFromEvents({ sessionId, events: evidence, source: defaultSource });
    }
    sessions.push({
      summary,
      eventCount: tally?.count ?? 0,
      firstTimestampNs: tally?.first?.timestamp_ns ?? null,
      lastTimestampNs: tally?.last ?? null,
      sources: tally && tally.sources.size > 0 ? [...tally.sources].sort() : [defaultSourcePath],
      warnings: tally?.warnings ?? [],
      ranks: [...(tally?.ranks ?? [])].sort((a, b) => a - b),
    });
  }
  return sessions.sort((a, b) => compareSessionsForSelection(a.summary, b.summary));
}

/**
 * `listSessions` for a resolved input: the ledger is its manifests' sessions (the first manifest
 * that lists a session has it).
 */
export function inputSessions(
  input: ResolvedTelemetryInput,
  segments: readonly SegmentData[],
): SessionListing[] {
  const ledger = new Map<string, SessionSummary>();
  for (const part of input.parts) {
    for (const summary of part.manifest?.sessions ?? [])
      if (!ledger.has(summary.session_id)) ledger.set(summary.session_id, summary);
  }
  return listSessions(segments, ledger, input.defaultSource, input.defaultSourcePath);
}

/** Per-rank sessions of one job, seen as one distributed session. */
export interface RankGroup {
  /** `stableLegacySessionId(["distributed.rank_group", job_id, world_size, ...sorted ids])`. */
  readonly sessionId: string;
  /** Null for ranks without a job id grouped because they ran at the same time (`findRankGroups`). */
  readonly jobId: string | null;
  readonly worldSize: number;
  /** One session per rank, by rank. */
  readonly members: readonly SessionListing[];
  /** Sessions of the job left out because another session of the same rank was preferred. */
  readonly skipped: readonly SessionListing[];
  readonly summary: SessionSummary;
}

function commonString(values: Iterable<string | null>): string | null {
  const distinct = new Set<string>();
  for (const value of values) if (value !== null) distinct.add(value);
  return distinct.size === 1 ? [...distinct][0]! : null;
}

/** The reference TUI's merged summary of a rank group (`_create_merged_session_summary`). */
function mergedSummary(
  members: readonly SessionListing[],
  jobId: string | null,
  worldSize: number,
): SessionSummary {
  const summaries = members.map((member) => member.summary);
  const ids = summaries.map((summary) => summary.session_id).sort(comparePythonStrings);
  const allCompleted = summaries.every((summary) => summary.status === "completed");
  const ends = summaries.map((summary) => summary.ended_at_ns).filter((end): end is bigint => end !== null);
  let started = summaries[0]!.started_at_ns;
  for (const summary of summaries) if (summary.started_at_ns < started) started = summary.started_at_ns;
  let ended: bigint | null = null;
  if (allCompleted) for (const end of ends) if (ended === null || end > ended) ended = end;
  const pids = new Set(summaries.map((summary) => summary.pid));
  return createSessionSummary({
    source: "stormlog.diagnostics.distributed",
    status: allCompleted ? "completed" : "incomplete",
    sessionId: stableLegacySessionId([
      jobId === null ? "distributed.rank_group.concurrent" : "distributed.rank_group",
      jobId,
      worldSize,
      ...ids,
    ]),
    startedAtNs: started,
    endedAtNs: ended,
    host: commonString(summaries.map((summary) => summary.host)) || "multiple",
    pid: pids.size === 1 ? summaries[0]!.pid : -1,
    jobId: commonString(summaries.map((summary) => summary.job_id)),
    rank: Math.min(...summaries.map((summary) => summary.rank)),
    localRank: Math.min(...summaries.map((summary) => summary.local_rank)),
    worldSize: Math.max(...summaries.map((summary) => summary.world_size)),
  });
}

/**
 * The rank groups among `sessions` (given in selection order): sessions with `world_size > 1` and
 * events of exactly one rank, grouped by job and world size. Sessions without a `job_id` (ranks
 * launched without torchrun or Slurm, e.g. sharing one sink directory) are grouped by world size and
 * time, when their listings `withEventRanks` (in the same order) say which ranks their events carry:
 * ranks whose events overlap in time ran as one job (the reference groups only by job id). A rank
 * with several sessions (a restarted process) keeps the first in selection order. Groups of at
 * least two ranks, no more than `world_size`, in the order of their best member.
 */
export function findRankGroups(
  sessions: readonly SessionListing[],
  withEventRanks: readonly SessionListing[] = [],
): RankGroup[] {
  const byJob = new Map<
    string,
    {
      jobId: string | null;
      worldSize: number;
      byRank: Map<number, SessionListing>;
      skipped: SessionListing[];
    }
  >();
  const join = (key: string, jobId: string | null, worldSize: number, session: SessionListing) => {
    let group = byJob.get(key);
    if (group === undefined) {
      group = { jobId, worldSize, byRank: new Map(), skipped: [] };
      byJob.set(key, group);
    }
    const rank = session.ranks[0]!;
    if (group.byRank.has(rank)) group.skipped.push(session);
    else group.byRank.set(rank, session);
  };
  const single = (session: SessionListing) =>
    session.summary.world_size > 1 && session.eventCount > 0 && session.ranks.length === 1;
  for (const session of sessions) {
    const { job_id: jobId, world_size: worldSize } = session.summary;
    if (jobId !== null && single(session)) join(`${worldSize}\u0000${jobId}`, jobId, worldSize, session);
  }
  const withoutJob = withEventRanks.filter((session) => session.summary.job_id === null && single(session));
  concurrentRuns(withoutJob).forEach((run, i) => {
    for (const session of run)
      join(`${session.summary.world_size}\u0001${i}`, null, session.summary.world_size, session);
  });
  const groups: RankGroup[] = [];
  for (const group of byJob.values()) {
    if (group.byRank.size < 2 || group.byRank.size > group.worldSize) continue;
    const members = [...group.byRank.entries()].sort((a, b) => a[0] - b[0]).map(([, session]) => session);
    const summary = mergedSummary(members, group.jobId, group.worldSize);
    groups.push({
      sessionId: summary.session_id,
      jobId: group.jobId,
      worldSize: group.worldSize,
      members,
      skipped: group.skipped,
      summary,
    });
  }
  // Groups in the order of their best member (sessions come in selection order).
  const position = new Map(sessions.map((session, index) => [session.summary.session_id, index]));
  const best = (group: RankGroup): number =>
    Math.min(
      ...group.members.map((member) => position.get(member.summary.session_id) ?? Number.MAX_SAFE_INTEGER),
    );
  return groups.sort((a, b) => best(a) - best(b));
}

/**
 * Sessions without a job id, in runs: same world size, and events that overlap in time (each run
 * in selection order). A session without timestamps joins none; a run where one rank ran twice at
 * once (two jobs at the same time, which no rank group can tell apart) is none.
 */
function concurrentRuns(sessions: readonly SessionListing[]): SessionListing[][] {
  const order = new Map(sessions.map((session, index) => [session, index]));
  const timed = sessions
    .filter((session) => session.firstTimestampNs !== null && session.lastTimestampNs !== null)
    .sort(
      (a, b) =>
        a.summary.world_size - b.summary.world_size || compareNs(a.firstTimestampNs!, b.firstTimestampNs!),
    );
  const runs: SessionListing[][] = [];
  let run: SessionListing[] = [];
  let end = 0n;
  let twice = false;
  /** Each rank's latest end in the run (a restarted rank's sessions follow each other). */
  const rankEnds = new Map<number, bigint>();
  const close = () => {
    if (run.length > 0 && !twice) runs.push(run.sort((a, b) => order.get(a)! - order.get(b)!));
    run = [];
    twice = false;
    rankEnds.clear();
  };
  for (const session of timed) {
    const first = session.firstTimestampNs!;
    const last = session.lastTimestampNs!;
    if (run.length === 0 || session.summary.world_size !== run[0]!.summary.world_size || first > end) {
      close();
      end = last;
    }
    const rank = session.ranks[0]!;
    const rankEnd = rankEnds.get(rank);
    if (rankEnd !== undefined && first <= rankEnd) twice = true;
    if (rankEnd === undefined || last > rankEnd) rankEnds.set(rank, last);
    run.push(session);
    if (last > end) end = last;
  }
  close();
  return runs;
}

function compareNs(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A rank group as users see it: the per-rank sessions of one job, merged into one view. */
export interface RankGroupSession {
  /** The merged view's summary (`stormlog.diagnostics.distributed`), with the reference's synthetic id. */
  readonly summary: SessionSummary;
  /** One session per rank, by rank. */
  readonly members: readonly SessionInfo[];
  /** Each member's rank, in the same order (the rank its records carry where they were read). */
  readonly ranks: readonly number[];
  /** Further sessions of an already-present rank (a restarted process), left out of the view. */
  readonly skipped: readonly SessionInfo[];
}

/**
 * What an analysis, a diagnosis or an export reads: one session, or a rank group. The one
 * selection type of the package (the report's `session`, `diagnoseTelemetry` and the exports).
 */
export interface SessionSelection {
  /** The selected id: a session's, or a rank group's synthetic id; null for empty input. */
  readonly sessionId: string | null;
  /** The selected session's summary, or the rank group's merged one; null for empty input. */
  readonly summary: SessionSummary | null;
  /** The sessions whose records are read (one, or a rank group's members). */
  readonly memberSessionIds: readonly string[];
  /** The rank group, when one is selected. */
  readonly rankGroup: RankGroupSession | null;
  /** What the selection left out, and why. */
  readonly notes: readonly string[];
}

/** A rank group's public view (its members as the reader lists them). */
export function rankGroupSession(group: RankGroup): RankGroupSession {
  return {
    summary: group.summary,
    members: group.members.map(sessionInfo),
    ranks: group.members.map((member) => member.ranks[0]!),
    skipped: group.skipped.map(sessionInfo),
  };
}

/**
 * The rank groups among `sessions`, each session taken as the ranks its events carry (job-less
 * ranks that ran together included): the one rule of every command.
 */
export function rankGroupsOf(sessions: readonly SessionListing[]): RankGroup[] {
  return findRankGroups(sessions, sessions);
}

/** The view an analysis, a diagnosis or an export reads: `selectSession` over `rankGroupsOf`. */
export function chooseView(
  sessions: readonly SessionListing[],
  sessionId: string | undefined,
  source: string,
): SessionSelection {
  return selectSession(sessions, rankGroupsOf(sessions), sessionId, source);
}

/**
 * Chooses what to analyse: `sessionId` when given (a session's id or a rank group's), else the
 * first rank group, else the reader's default (the first session with events, else the first).
 * An unknown id throws `SessionNotFoundError` listing the ids there are.
 */
export function selectSession(
  sessions: readonly SessionListing[],
  groups: readonly RankGroup[],
  sessionId: string | undefined,
  source: string,
): SessionSelection {
  const ofGroup = (group: RankGroup): SessionSelection => {
    const notes: string[] = [];
    if (group.jobId === null)
      notes.push(
        `Ranks ${group.members.map((member) => member.ranks[0]).join(", ")} of world size ${group.worldSize} have no job_id; ` +
          "read as one job because their events overlap in time (set TORCHELASTIC_RUN_ID or SLURM_JOB_ID, or the tracker's jobId, to name it).",
      );
    for (const skipped of group.skipped) {
      const rank = skipped.ranks[0];
      notes.push(
        `Rank ${rank} of ${group.jobId === null ? "ranks run at the same time without a job id" : `job ${group.jobId}`} has more than one session; merged ${group.members.find((m) => m.ranks[0] === rank)?.summary.session_id} and left out ${skipped.summary.session_id}.`,
      );
    }
    return {
      sessionId: group.sessionId,
      summary: group.summary,
      memberSessionIds: group.members.map((member) => member.summary.session_id),
      rankGroup: rankGroupSession(group),
      notes,
    };
  };
  const ofSession = (session: SessionListing): SessionSelection => ({
    sessionId: session.summary.session_id,
    summary: session.summary,
    memberSessionIds: [session.summary.session_id],
    rankGroup: null,
    notes: [],
  });
  if (sessionId !== undefined) {
    const group = groups.find((candidate) => candidate.sessionId === sessionId);
    if (group !== undefined) return ofGroup(group);
    const session = sessions.find((candidate) => candidate.summary.session_id === sessionId);
    if (session === undefined) {
      throw new SessionNotFoundError(
        sessionId,
        [
          ...groups.map((candidate) => candidate.sessionId),
          ...sessions.map((candidate) => candidate.summary.session_id),
        ],
        source,
      );
    }
    return ofSession(session);
  }
  if (groups.length > 0) return ofGroup(groups[0]!);
  const session = sessions.find((candidate) => candidate.eventCount > 0) ?? sessions[0];
  if (session === undefined)
    return { sessionId: null, summary: null, memberSessionIds: [], rankGroup: null, notes: [] };
  return ofSession(session);
}
