import type { JsonObject, JsonValue } from "../codec/json.js";
import { InvalidConfigError } from "../runtime/errors.js";
import type { DistributedIdentity } from "./schema.js";

/** Identity values given explicitly (tracker options, or a record's own fields). Null means "not given". */
export interface DistributedIdentityInput {
  jobId?: JsonValue | undefined;
  rank?: JsonValue | undefined;
  localRank?: JsonValue | undefined;
  worldSize?: JsonValue | undefined;
}

/**
 * Where missing identity values are looked up, after the explicit ones. The reference reads
 * `metadata` when loading legacy records and `env` when tracking; it never reads the environment
 * while loading.
 */
export interface DistributedIdentitySources {
  /** Legacy records carry `job_id`/`rank`/`local_rank`/`world_size` in metadata. */
  metadata?: JsonObject | undefined;
  /** Usually `process.env`. Omit it to ignore the environment. */
  env?: Readonly<Record<string, string | undefined>> | undefined;
}

/** Launcher variables, by group: torchrun, Open MPI, Slurm. The first complete group wins. */
export const RANK_ENV_GROUPS = [
  { rank: "RANK", localRank: "LOCAL_RANK", worldSize: "WORLD_SIZE" },
  {
    rank: "OMPI_COMM_WORLD_RANK",
    localRank: "OMPI_COMM_WORLD_LOCAL_RANK",
    worldSize: "OMPI_COMM_WORLD_SIZE",
  },
  { rank: "SLURM_PROCID", localRank: "SLURM_LOCALID", worldSize: "SLURM_NTASKS" },
] as const;
/** Variables a job id is read from, first non-blank wins. */
export const JOB_ID_ENV_KEYS = ["TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"] as const;

type Field = "job_id" | "rank" | "local_rank" | "world_size";

interface Candidate {
  value: JsonValue;
  /** Where the value came from, for error messages. */
  origin: string;
}

type Raw = Record<Field, Candidate | undefined>;

function present(value: JsonValue | undefined): value is JsonValue {
  return value !== undefined && value !== null;
}

function firstEnvValue(env: Readonly<Record<string, string | undefined>>): Candidate | undefined {
  for (const key of JOB_ID_ENV_KEYS) {
    const value = env[key];
    if (value === undefined) continue;
    const stripped = value.trim();
    if (stripped !== "") return { value: stripped, origin: `${key} in the environment` };
  }
  return undefined;
}

function describeValue(value: JsonValue): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "object")
    return Array.isArray(value) ? "an array" : value === null ? "null" : "an object";
  return String(value);
}

/** Python's `int(text.strip())` for a launcher variable (`+3`, `007`, `1_0` are integers). */
function envInt(text: string, field: Field, key: string): number {
  const trimmed = text.trim();
  if (/^[+-]?\d+(?:_\d+)*$/.test(trimmed)) {
    const value = Number(trimmed.replace(/_/g, ""));
    if (Number.isSafeInteger(value)) return value;
  }
  throw new InvalidConfigError(
    field,
    `${field} must be an integer, got ${key}=${JSON.stringify(text)} in the environment; ` +
      `set ${key} to a whole number or pass ${field} explicitly`,
  );
}

function inferFromEnv(env: Readonly<Record<string, string | undefined>> | undefined): Raw {
  if (env === undefined)
    return { job_id: undefined, rank: undefined, local_rank: undefined, world_size: undefined };
  const jobId = firstEnvValue(env);
  for (const group of RANK_ENV_GROUPS) {
    const rankText = env[group.rank];
    const worldSizeText = env[group.worldSize];
    // A group needs both its rank and its world size; a partial group is skipped.
    if (rankText === undefined || worldSizeText === undefined) continue;
    let localRankText = env[group.localRank];
    let localRankKey: string = group.localRank;
    if (localRankText === undefined || localRankText.trim() === "") {
      localRankText = rankText;
      localRankKey = group.rank;
    }
    const rank = envInt(rankText, "rank", group.rank);
    const localRank = envInt(localRankText, "local_rank", localRankKey);
    const worldSize = envInt(worldSizeText, "world_size", group.worldSize);
    const origin = (key: string) => `${key} in the environment`;
    // Checked here, as the reference does, even for values an explicit argument later overrides.
    nonNegative({ value: rank, origin: origin(group.rank) }, "rank");
    nonNegative({ value: localRank, origin: origin(localRankKey) }, "local_rank");
    positive({ value: worldSize, origin: origin(group.worldSize) }, "world_size");
    return {
      job_id: jobId,
      rank: { value: rank, origin: origin(group.rank) },
      local_rank: { value: localRank, origin: origin(localRankKey) },
      world_size: { value: worldSize, origin: origin(group.worldSize) },
    };
  }
  return { job_id: jobId, rank: undefined, local_rank: undefined, world_size: undefined };
}

function integer(candidate: Candidate, field: Field): number {
  const { value } = candidate;
  if (typeof value === "number" && Number.isSafeInteger(value)) return value;
  if (
    typeof value === "bigint" &&
    value <= BigInt(Number.MAX_SAFE_INTEGER) &&
    value >= -BigInt(Number.MAX_SAFE_INTEGER)
  ) {
    return Number(value);
  }
  throw new InvalidConfigError(
    field,
    `${field} must be an integer, got ${describeValue(value)} from ${candidate.origin}`,
  );
}

function nonNegative(candidate: Candidate, field: Field): number {
  const value = integer(candidate, field);
  if (value < 0) {
    throw new InvalidConfigError(field, `${field} must be >= 0, got ${value} from ${candidate.origin}`);
  }
  return value;
}

function positive(candidate: Candidate, field: Field): number {
  const value = integer(candidate, field);
  if (value <= 0) {
    throw new InvalidConfigError(field, `${field} must be >= 1, got ${value} from ${candidate.origin}`);
  }
  return value;
}

function pick(explicit: JsonValue | undefined, metadata: JsonObject, key: Field): Candidate | undefined {
  if (present(explicit)) return { value: explicit, origin: "the explicit value" };
  const fromMetadata = metadata[key];
  if (present(fromMetadata)) return { value: fromMetadata, origin: `metadata.${key}` };
  return undefined;
}

function smallInt(value: JsonValue | undefined): value is number | null | undefined {
  return value === undefined || value === null || (typeof value === "number" && Number.isSafeInteger(value));
}

/**
 * The identity from explicit values alone when they are well formed (every record of a load takes
 * this path); undefined sends the caller through the full resolution, which explains any error.
 */
function explicitOnly(input: DistributedIdentityInput): DistributedIdentity | undefined {
  const { jobId, rank, localRank, worldSize } = input;
  if (!smallInt(rank) || !smallInt(localRank) || !smallInt(worldSize)) return undefined;
  if (jobId !== undefined && jobId !== null && (typeof jobId !== "string" || jobId.trim() === ""))
    return undefined;
  const resolvedRank = rank ?? 0;
  const resolvedLocalRank = localRank ?? resolvedRank;
  const resolvedWorldSize = worldSize ?? 1;
  if (resolvedRank < 0 || resolvedLocalRank < 0 || resolvedWorldSize < 1) return undefined;
  if (resolvedRank >= resolvedWorldSize || resolvedLocalRank >= resolvedWorldSize) return undefined;
  return {
    job_id: jobId ?? null,
    rank: resolvedRank,
    local_rank: resolvedLocalRank,
    world_size: resolvedWorldSize,
  };
}

/**
 * The job id, rank, local rank and world size of this process (or of a legacy record), with the
 * reference's precedence and checks (`resolve_distributed_identity`):
 *
 * 1. explicit values, then `sources.metadata` for those missing;
 * 2. if rank, local rank or world size is still missing and `sources.env` is given: the first
 *    launcher group (torchrun `RANK/LOCAL_RANK/WORLD_SIZE`, Open MPI `OMPI_COMM_WORLD_*`, Slurm
 *    `SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS`) that has both a rank and a world size, job id from
 *    `TORCHELASTIC_RUN_ID` or `SLURM_JOB_ID`; with all three given, only the job id is read from env;
 * 3. defaults: world size 1, rank 0, local rank = rank.
 *
 * Throws `InvalidConfigError` (naming the value and where it came from) unless rank and local rank
 * are integers in `[0, world_size)` (so both are 0 when world size is 1), world size >= 1, and the
 * job id is null or a non-blank string.
 */
export function resolveDistributedIdentity(
  input: DistributedIdentityInput = {},
  sources: DistributedIdentitySources = {},
): DistributedIdentity {
  if (sources.metadata === undefined && sources.env === undefined) {
    const fast = explicitOnly(input);
    if (fast !== undefined) return fast;
  }
  const metadata = sources.metadata ?? {};
  const raw: Raw = {
    job_id: pick(input.jobId, metadata, "job_id"),
    rank: pick(input.rank, metadata, "rank"),
    local_rank: pick(input.localRank, metadata, "local_rank"),
    world_size: pick(input.worldSize, metadata, "world_size"),
  };

  if (raw.rank === undefined || raw.local_rank === undefined || raw.world_size === undefined) {
    const inferred = inferFromEnv(sources.env);
    raw.rank ??= inferred.rank;
    raw.local_rank ??= inferred.local_rank;
    raw.world_size ??= inferred.world_size;
    raw.job_id ??= inferred.job_id;
  } else if (raw.job_id === undefined && sources.env !== undefined) {
    raw.job_id = firstEnvValue(sources.env);
  }

  const worldSizeCandidate = raw.world_size ?? { value: 1, origin: "the default" };
  const rankCandidate = raw.rank ?? { value: 0, origin: "the default" };
  const localRankCandidate = raw.local_rank ?? {
    ...rankCandidate,
    origin: `${rankCandidate.origin} (as rank)`,
  };

  let jobId: string | null = null;
  if (raw.job_id !== undefined) {
    const value = raw.job_id.value;
    if (typeof value !== "string") {
      throw new InvalidConfigError(
        "job_id",
        `job_id must be a string, got ${describeValue(value)} from ${raw.job_id.origin}`,
      );
    }
    if (value.trim() === "") {
      throw new InvalidConfigError(
        "job_id",
        `job_id must be a non-empty string, got ${describeValue(value)} from ${raw.job_id.origin}; pass null for no job`,
      );
    }
    jobId = value;
  }
  const rank = nonNegative(rankCandidate, "rank");
  const localRank = nonNegative(localRankCandidate, "local_rank");
  const worldSize = positive(worldSizeCandidate, "world_size");

  const detail = (field: Field, value: number, candidate: Candidate) =>
    `${field} ${value} from ${candidate.origin}, world_size ${worldSize} from ${worldSizeCandidate.origin}`;
  if (rank >= worldSize) {
    throw new InvalidConfigError(
      "rank",
      `rank must be < world_size (${detail("rank", rank, rankCandidate)}); ranks count from 0`,
    );
  }
  if (localRank >= worldSize) {
    throw new InvalidConfigError(
      "local_rank",
      `local_rank must be < world_size (${detail("local_rank", localRank, localRankCandidate)})`,
    );
  }
  return { job_id: jobId, rank, local_rank: localRank, world_size: worldSize };
}
