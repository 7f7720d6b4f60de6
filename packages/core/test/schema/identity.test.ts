import { describe, expect, it } from "vitest";
import { InvalidConfigError } from "../../src/runtime/errors.js";
import { resolveDistributedIdentity } from "../../src/schema/identity.js";

describe("resolveDistributedIdentity (ported from test_telemetry_v2.py)", () => {
  it("uses the torchrun environment", () => {
    const identity = resolveDistributedIdentity(
      {},
      { env: { RANK: "3", LOCAL_RANK: "1", WORLD_SIZE: "8", TORCHELASTIC_RUN_ID: "train-42" } },
    );
    expect(identity).toEqual({ job_id: "train-42", rank: 3, local_rank: 1, world_size: 8 });
  });

  it("prefers explicit overrides", () => {
    const identity = resolveDistributedIdentity(
      { jobId: "manual-job", rank: 5, localRank: 2, worldSize: 16 },
      { env: { RANK: "3", LOCAL_RANK: "1", WORLD_SIZE: "8" } },
    );
    expect(identity).toEqual({ job_id: "manual-job", rank: 5, local_rank: 2, world_size: 16 });
  });

  it("lets explicit overrides bypass a partial environment", () => {
    const identity = resolveDistributedIdentity(
      { rank: 5, localRank: 2, worldSize: 16 },
      { env: { WORLD_SIZE: "8" } },
    );
    expect(identity).toEqual({ job_id: null, rank: 5, local_rank: 2, world_size: 16 });
  });

  it("reads the job id without parsing rank variables when the identity is complete", () => {
    const identity = resolveDistributedIdentity(
      { rank: 5, localRank: 2, worldSize: 16 },
      { env: { RANK: "oops", WORLD_SIZE: "8", TORCHELASTIC_RUN_ID: "train-42" } },
    );
    expect(identity).toEqual({ job_id: "train-42", rank: 5, local_rank: 2, world_size: 16 });
  });

  it("skips a partial environment group", () => {
    const identity = resolveDistributedIdentity(
      {},
      { env: { WORLD_SIZE: "8", TORCHELASTIC_RUN_ID: "train-42" } },
    );
    expect(identity).toEqual({ job_id: "train-42", rank: 0, local_rank: 0, world_size: 1 });
  });

  it("keeps an inferred local rank next to explicit rank and world size", () => {
    const identity = resolveDistributedIdentity(
      { rank: 7, worldSize: 16 },
      { env: { RANK: "3", LOCAL_RANK: "1", WORLD_SIZE: "8" } },
    );
    expect(identity).toEqual({ job_id: null, rank: 7, local_rank: 1, world_size: 16 });
  });
});

describe("resolveDistributedIdentity sources", () => {
  it("defaults to a single process", () => {
    expect(resolveDistributedIdentity()).toEqual({ job_id: null, rank: 0, local_rank: 0, world_size: 1 });
  });

  it("uses the rank as local rank when none is given", () => {
    expect(resolveDistributedIdentity({ rank: 3, worldSize: 4 })).toEqual({
      job_id: null,
      rank: 3,
      local_rank: 3,
      world_size: 4,
    });
    expect(resolveDistributedIdentity({ rank: 3n, worldSize: 4n, jobId: "j" })).toEqual({
      job_id: "j",
      rank: 3,
      local_rank: 3,
      world_size: 4,
    });
  });

  it("reads Open MPI and Slurm groups, the first complete group winning", () => {
    expect(
      resolveDistributedIdentity(
        {},
        {
          env: {
            OMPI_COMM_WORLD_RANK: "2",
            OMPI_COMM_WORLD_LOCAL_RANK: "0",
            OMPI_COMM_WORLD_SIZE: "4",
            SLURM_PROCID: "9",
            SLURM_NTASKS: "16",
          },
        },
      ),
    ).toEqual({ job_id: null, rank: 2, local_rank: 0, world_size: 4 });
    expect(
      resolveDistributedIdentity(
        {},
        {
          env: { RANK: "1", SLURM_PROCID: "5", SLURM_LOCALID: "1", SLURM_NTASKS: "8", SLURM_JOB_ID: " 777 " },
        },
      ),
    ).toEqual({ job_id: "777", rank: 5, local_rank: 1, world_size: 8 });
  });

  it("uses the rank as local rank when the local rank variable is missing or blank", () => {
    expect(resolveDistributedIdentity({}, { env: { RANK: "3", WORLD_SIZE: "4" } })).toEqual({
      job_id: null,
      rank: 3,
      local_rank: 3,
      world_size: 4,
    });
    expect(
      resolveDistributedIdentity({}, { env: { RANK: "2", LOCAL_RANK: " ", WORLD_SIZE: "4" } }).local_rank,
    ).toBe(2);
  });

  it("parses launcher integers as Python's int() does", () => {
    expect(resolveDistributedIdentity({}, { env: { RANK: " +1 ", WORLD_SIZE: "0_4" } })).toMatchObject({
      rank: 1,
      world_size: 4,
    });
  });

  it("prefers TORCHELASTIC_RUN_ID and skips blank job ids", () => {
    const env = { TORCHELASTIC_RUN_ID: "  ", SLURM_JOB_ID: "slurm-1" };
    expect(resolveDistributedIdentity({}, { env }).job_id).toBe("slurm-1");
  });

  it("falls back to metadata before the environment, never reading env without it", () => {
    const metadata = { job_id: "meta-job", rank: 1, world_size: 2 };
    expect(
      resolveDistributedIdentity({}, { metadata, env: { LOCAL_RANK: "0", RANK: "0", WORLD_SIZE: "8" } }),
    ).toEqual({
      job_id: "meta-job",
      rank: 1,
      local_rank: 0,
      world_size: 2,
    });
    expect(resolveDistributedIdentity({ rank: null }, { metadata })).toEqual({
      job_id: "meta-job",
      rank: 1,
      local_rank: 1,
      world_size: 2,
    });
  });
});

describe("resolveDistributedIdentity errors", () => {
  const cases: [string, () => unknown, RegExp][] = [
    [
      "rank >= world_size",
      () => resolveDistributedIdentity({ rank: 8, worldSize: 8 }),
      /rank must be < world_size/,
    ],
    [
      "local rank >= world_size",
      () => resolveDistributedIdentity({ rank: 0, localRank: 2, worldSize: 2 }),
      /local_rank must be < world_size/,
    ],
    ["rank without world size", () => resolveDistributedIdentity({ rank: 1 }), /rank must be < world_size/],
    ["negative rank", () => resolveDistributedIdentity({ rank: -1, worldSize: 2 }), /rank must be >= 0/],
    ["zero world size", () => resolveDistributedIdentity({ worldSize: 0 }), /world_size must be >= 1/],
    [
      "non-integer rank",
      () => resolveDistributedIdentity({ rank: 1.5, worldSize: 4 }),
      /rank must be an integer/,
    ],
    [
      "boolean rank",
      () => resolveDistributedIdentity({ rank: true, worldSize: 4 }),
      /rank must be an integer/,
    ],
    ["string rank", () => resolveDistributedIdentity({ rank: "1", worldSize: 4 }), /rank must be an integer/],
    ["empty job id", () => resolveDistributedIdentity({ jobId: " " }), /job_id must be a non-empty string/],
    ["numeric job id", () => resolveDistributedIdentity({ jobId: 5 }), /job_id must be a string/],
    [
      "bad env rank",
      () => resolveDistributedIdentity({}, { env: { RANK: "oops", WORLD_SIZE: "8" } }),
      /rank must be an integer, got RANK="oops"/,
    ],
    [
      "negative env world size",
      () => resolveDistributedIdentity({}, { env: { RANK: "0", WORLD_SIZE: "-1" } }),
      /world_size must be >= 1, got -1 from WORLD_SIZE in the environment/,
    ],
    [
      "env rank beyond env world size",
      () => resolveDistributedIdentity({}, { env: { RANK: "4", WORLD_SIZE: "4" } }),
      /rank 4 from RANK in the environment, world_size 4 from WORLD_SIZE in the environment/,
    ],
    [
      "bad metadata world size",
      () => resolveDistributedIdentity({}, { metadata: { world_size: "metadata-world-size" } }),
      /world_size must be an integer, got "metadata-world-size" from metadata.world_size/,
    ],
  ];
  for (const [name, run, message] of cases) {
    it(`rejects ${name} with InvalidConfigError`, () => {
      let thrown: unknown;
      try {
        run();
      } catch (error) {
        thrown = error;
      }
      expect(InvalidConfigError.isInstance(thrown)).toBe(true);
      expect((thrown as Error).message).toMatch(message);
    });
  }

  it("names the option", () => {
    try {
      resolveDistributedIdentity({ localRank: 3, worldSize: 2 });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidConfigError);
      expect((error as InvalidConfigError).option).toBe("local_rank");
    }
  });
});
