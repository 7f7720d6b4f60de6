/**
 * A segment's digest: what session listing, session selection and the cross-rank analysis's job
 * choice need, without the samples. Small enough to keep for every segment of a large sink (and to
 * store in the index catalog), so that sample data is loaded one rank at a time.
 */
import { CASEFOLD_SAMPLE, SAMPLE_EVENT_TYPE, STRIP_LOWER_SAMPLE } from "@stormlog/core/internal";
import type { RankPart, SegmentAggregate, SessionEvidence } from "./aggregate.js";

/** One rank of one session in a segment. */
export interface RankDigest {
  readonly rank: number;
  readonly eventCount: number;
  /** Sample records, of any reference rule. */
  readonly sampleCount: number;
  /** Sample records the cross-rank analysis takes (`event_type.casefold() == "sample"`). */
  readonly crossRankSampleCount: number;
  /** Largest positive `world_size` over the rank's events (0: none), and whether several were seen. */
  readonly worldSizeMax: number;
  readonly worldSizeMixed: boolean;
  /** Whether a sample (to the diagnostics' rule, `strip().lower()`) has both allocator counters. */
  readonly allocatorSamples: boolean;
  /**
   * Per truthy `job_id`, over the cross-rank analysis's samples with device used memory: count, and the first such sample's
   * timestamp and line (the cross-rank analysis keeps the most common job, the first seen on ties).
   */
  readonly jobs: readonly {
    readonly jobId: string;
    readonly count: number;
    readonly firstTs: bigint;
    readonly firstLine: number;
  }[];
}

/** One session in a segment. */
export interface SessionDigest {
  readonly sessionId: string;
  readonly eventCount: number;
  readonly eventTypes: ReadonlyMap<string, number>;
  /** Earliest event (first seen on ties) and latest `stop` (last seen on ties). */
  readonly first: SessionEvidence | null;
  readonly lastTs: bigint | null;
  readonly lastStop: SessionEvidence | null;
  readonly ranks: readonly RankDigest[];
}

/** A segment's digest. */
export interface SegmentDigest {
  readonly lineCount: number;
  readonly eventCount: number;
  readonly sessions: readonly SessionDigest[];
  readonly warnings: readonly { readonly message: string; readonly sessionId: string | null }[];
  readonly minTs: bigint | null;
  readonly maxTs: bigint | null;
}

/** The digest of an aggregate. */
export function digestOf(aggregate: SegmentAggregate): SegmentDigest {
  const sessions: SessionDigest[] = [];
  for (const session of aggregate.sessions.values()) {
    const ranks: RankDigest[] = [];
    for (const part of session.ranks.values()) {
      const { allocatorSamples, crossRankSampleCount, jobs } = sampleDigestOf(part);
      ranks.push({
        rank: part.rank,
        eventCount: part.eventCount,
        sampleCount: part.samples.count,
        crossRankSampleCount,
        worldSizeMax: part.worldSizeMax,
        worldSizeMixed: part.worldSizeMixed,
        allocatorSamples,
        jobs: jobs.map((job) => ({
          jobId: job.jobId,
          count: job.count,
          firstTs: part.timestampOf(job.firstT),
          firstLine: job.firstLine,
        })),
      });
    }
    sessions.push({
      sessionId: session.sessionId,
      eventCount: session.eventCount,
      eventTypes: session.eventTypes,
      first: session.first,
      lastTs: session.lastTs,
      lastStop: session.lastStop,
      ranks,
    });
  }
  return {
    lineCount: aggregate.lineCount,
    eventCount: aggregate.eventCount,
    sessions,
    warnings: aggregate.warnings,
    minTs: aggregate.minTs,
    maxTs: aggregate.maxTs,
  };
}

interface JobSamples {
  readonly jobId: string;
  count: number;
  firstT: number;
  firstLine: number;
}

/**
 * What the digest reads of a rank part's samples, in one pass. A function of its own: the pass is
 * the hot loop, and the optimizing compiler then compiles this small function once instead of all
 * of `digestOf` around it (which it compiled again and again in a cold process: up to 300 ms of a
 * second core's time while the scan needed it).
 */
function sampleDigestOf(part: RankPart): {
  allocatorSamples: boolean;
  crossRankSampleCount: number;
  jobs: JobSamples[];
} {
  const samples = part.samples;
  const jobs = new Map<string, JobSamples>();
  const identities = part.identities;
  let allocatorSamples = false;
  const rules = samples.rules;
  let crossRankSampleCount = 0;
  for (let i = 0; i < samples.count; i++) {
    const bits = rules === null ? CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE : rules[i]!;
    if (
      !allocatorSamples &&
      (bits & STRIP_LOWER_SAMPLE) !== 0 &&
      !Number.isNaN(samples.allocated[i]!) &&
      !Number.isNaN(samples.reserved[i]!)
    )
      allocatorSamples = true;
    if ((bits & CASEFOLD_SAMPLE) === 0) continue;
    crossRankSampleCount++;
    if (Number.isNaN(samples.used[i]!)) continue;
    const jobId = identities[samples.identity === null ? 0 : samples.identity[i]!]!.job_id;
    if (!jobId) continue;
    const t = samples.t[i]!;
    const entry = jobs.get(jobId);
    if (entry === undefined) jobs.set(jobId, { jobId, count: 1, firstT: t, firstLine: samples.line[i]! });
    else {
      entry.count++;
      if (t < entry.firstT) {
        entry.firstT = t;
        entry.firstLine = samples.line[i]!;
      }
    }
  }
  return { allocatorSamples, crossRankSampleCount, jobs: [...jobs.values()] };
}

/** A digest of a piece of a segment (see `pieces.ts`) whose lines follow `lineOffset` earlier ones. */
export interface PieceDigest {
  readonly digest: SegmentDigest;
  readonly lineOffset: number;
}

/**
 * The digest of a segment scanned in pieces, from theirs (in the segment's order): the digest a
 * scan of the whole segment gives, orders and ties included.
 */
export function mergeDigests(pieces: readonly PieceDigest[]): SegmentDigest {
  interface SessionSum {
    sessionId: string;
    eventCount: number;
    eventTypes: Map<string, number>;
    samples: number;
    first: SessionEvidence | null;
    lastTs: bigint | null;
    lastStop: SessionEvidence | null;
    ranks: Map<number, RankSum>;
  }
  type JobSum = { jobId: string; count: number; firstTs: bigint; firstLine: number };
  type RankSum = { -readonly [K in keyof Omit<RankDigest, "jobs">]: RankDigest[K] } & {
    jobs: Map<string, JobSum>;
  };
  const sessions = new Map<string, SessionSum>();
  const warnings: SegmentDigest["warnings"][number][] = [];
  let lineCount = 0;
  let eventCount = 0;
  let minTs: bigint | null = null;
  let maxTs: bigint | null = null;
  for (const { digest, lineOffset } of pieces) {
    lineCount += digest.lineCount;
    eventCount += digest.eventCount;
    warnings.push(...digest.warnings);
    if (digest.minTs !== null && (minTs === null || digest.minTs < minTs)) minTs = digest.minTs;
    if (digest.maxTs !== null && (maxTs === null || digest.maxTs > maxTs)) maxTs = digest.maxTs;
    for (const piece of digest.sessions) {
      let sum = sessions.get(piece.sessionId);
      if (sum === undefined) {
        sum = {
          sessionId: piece.sessionId,
          eventCount: 0,
          eventTypes: new Map(),
          samples: 0,
          first: null,
          lastTs: null,
          lastStop: null,
          ranks: new Map(),
        };
        sessions.set(piece.sessionId, sum);
      }
      sum.eventCount += piece.eventCount;
      for (const [type, count] of piece.eventTypes) {
        // A scan counts exact `sample` records apart and adds them last (`SessionPart.finish`).
        if (type === SAMPLE_EVENT_TYPE) sum.samples += count;
        else sum.eventTypes.set(type, (sum.eventTypes.get(type) ?? 0) + count);
      }
      // Later pieces' lines come later: they win ties for the latest stop, not for the earliest event.
      if (piece.first !== null && (sum.first === null || piece.first.timestamp_ns < sum.first.timestamp_ns))
        sum.first = piece.first;
      if (piece.lastTs !== null && (sum.lastTs === null || piece.lastTs > sum.lastTs))
        sum.lastTs = piece.lastTs;
      if (
        piece.lastStop !== null &&
        (sum.lastStop === null || piece.lastStop.timestamp_ns >= sum.lastStop.timestamp_ns)
      )
        sum.lastStop = piece.lastStop;
      for (const rank of piece.ranks) {
        const known = sum.ranks.get(rank.rank);
        const jobs = known?.jobs ?? new Map<string, JobSum>();
        for (const job of rank.jobs) {
          const entry = jobs.get(job.jobId);
          if (entry === undefined) jobs.set(job.jobId, { ...job, firstLine: lineOffset + job.firstLine });
          else {
            entry.count += job.count;
            if (job.firstTs < entry.firstTs) {
              entry.firstTs = job.firstTs;
              entry.firstLine = lineOffset + job.firstLine;
            }
          }
        }
        if (known === undefined) {
          sum.ranks.set(rank.rank, { ...rank, jobs });
          continue;
        }
        known.eventCount += rank.eventCount;
        known.sampleCount += rank.sampleCount;
        known.crossRankSampleCount += rank.crossRankSampleCount;
        // Mixed: two different positive world sizes were seen (`RankPart.worldSize`).
        known.worldSizeMixed ||=
          rank.worldSizeMixed ||
          (known.worldSizeMax > 0 && rank.worldSizeMax > 0 && known.worldSizeMax !== rank.worldSizeMax);
        known.worldSizeMax = Math.max(known.worldSizeMax, rank.worldSizeMax);
        known.allocatorSamples ||= rank.allocatorSamples;
      }
    }
  }
  return {
    lineCount,
    eventCount,
    warnings,
    minTs,
    maxTs,
    sessions: [...sessions.values()].map((sum) => {
      if (sum.samples > 0) sum.eventTypes.set(SAMPLE_EVENT_TYPE, sum.samples);
      return {
        sessionId: sum.sessionId,
        eventCount: sum.eventCount,
        eventTypes: sum.eventTypes,
        first: sum.first,
        lastTs: sum.lastTs,
        lastStop: sum.lastStop,
        ranks: [...sum.ranks.values()].map((rank) => ({ ...rank, jobs: [...rank.jobs.values()] })),
      };
    }),
  };
}

type EvidenceJson = (Omit<SessionEvidence, "timestamp_ns"> & { t: string }) | null;

/** The digest as plain JSON (timestamps as decimal strings), for the index catalog. */
export interface DigestJson {
  lineCount: number;
  eventCount: number;
  minTs: string | null;
  maxTs: string | null;
  warnings: { message: string; sessionId: string | null }[];
  sessions: {
    sessionId: string;
    eventCount: number;
    eventTypes: [string, number][];
    first: EvidenceJson;
    lastTs: string | null;
    lastStop: EvidenceJson;
    ranks: {
      rank: number;
      eventCount: number;
      sampleCount: number;
      /** Cross-rank samples, when not `sampleCount`. */
      crs?: number;
      /** [largest positive world_size, several seen (0/1), a sample with allocator counters (0/1)]. */
      ws: [number, number, number];
      jobs: [string, number, string, number][];
    }[];
  }[];
}

const evidenceOut = (evidence: SessionEvidence | null): EvidenceJson => {
  if (evidence === null) return null;
  const { timestamp_ns, ...rest } = evidence;
  return { ...rest, t: timestamp_ns.toString() };
};

const evidenceIn = (json: EvidenceJson): SessionEvidence | null => {
  if (json === null) return null;
  const { t, ...rest } = json;
  return { ...rest, timestamp_ns: BigInt(t) };
};

/** The digest's JSON form. */
export function digestToJson(digest: SegmentDigest): DigestJson {
  return {
    lineCount: digest.lineCount,
    eventCount: digest.eventCount,
    minTs: digest.minTs?.toString() ?? null,
    maxTs: digest.maxTs?.toString() ?? null,
    warnings: digest.warnings.map((warning) => ({ ...warning })),
    sessions: digest.sessions.map((session) => ({
      sessionId: session.sessionId,
      eventCount: session.eventCount,
      eventTypes: [...session.eventTypes.entries()],
      first: evidenceOut(session.first),
      lastTs: session.lastTs?.toString() ?? null,
      lastStop: evidenceOut(session.lastStop),
      ranks: session.ranks.map((rank) => ({
        rank: rank.rank,
        eventCount: rank.eventCount,
        sampleCount: rank.sampleCount,
        ...(rank.crossRankSampleCount === rank.sampleCount ? {} : { crs: rank.crossRankSampleCount }),
        ws: [rank.worldSizeMax, rank.worldSizeMixed ? 1 : 0, rank.allocatorSamples ? 1 : 0],
        jobs: rank.jobs.map((job): [string, number, string, number] => [
          job.jobId,
          job.count,
          job.firstTs.toString(),
          job.firstLine,
        ]),
      })),
    })),
  };
}

/** A digest read back from its JSON form. */
export function digestFromJson(json: DigestJson): SegmentDigest {
  return {
    lineCount: json.lineCount,
    eventCount: json.eventCount,
    minTs: json.minTs === null ? null : BigInt(json.minTs),
    maxTs: json.maxTs === null ? null : BigInt(json.maxTs),
    warnings: json.warnings,
    sessions: json.sessions.map((session) => ({
      sessionId: session.sessionId,
      eventCount: session.eventCount,
      eventTypes: new Map(session.eventTypes),
      first: evidenceIn(session.first),
      lastTs: session.lastTs === null ? null : BigInt(session.lastTs),
      lastStop: evidenceIn(session.lastStop),
      ranks: session.ranks.map((rank) => ({
        rank: rank.rank,
        eventCount: rank.eventCount,
        sampleCount: rank.sampleCount,
        crossRankSampleCount: rank.crs ?? rank.sampleCount,
        worldSizeMax: rank.ws[0],
        worldSizeMixed: rank.ws[1] === 1,
        allocatorSamples: rank.ws[2] === 1,
        jobs: rank.jobs.map(([jobId, count, firstTs, firstLine]) => ({
          jobId,
          count,
          firstTs: BigInt(firstTs),
          firstLine,
        })),
      })),
    })),
  };
}
