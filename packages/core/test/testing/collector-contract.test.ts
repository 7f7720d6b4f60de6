import { spawnSync } from "node:child_process";
import { join } from "node:path";
import {
  CollectorContractError,
  type CollectorContractOptions,
  type CollectorFactory,
  type ContractTestFunctions,
  checkCollectorContract,
  checkSampleResult,
  describeCollectorContract,
} from "@stormlog/core/testing";
import { describe, expect, it } from "vitest";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCapabilities,
  type MemoryCollector,
  noCapabilities,
  type SampleResult,
} from "../../src/collector/collector.js";
import { StormlogError } from "../../src/runtime/errors.js";

const NODE_TEST_SUITE = join(import.meta.dirname, "support/node-test-contract.ts");

const CAPABILITIES: MemoryCapabilities = {
  ...noCapabilities("fake", "stormlog.fake_tracker", "fake"),
  supports_allocator_allocated: true,
  supports_device_used: true,
  supports_device_free: true,
  supports_device_total: true,
};
const READING = {
  allocator_allocated_bytes: 1024,
  device_used_bytes: 100,
  device_free_bytes: 900,
  device_total_bytes: 1000,
};

/** A collector that keeps every rule: what the broken ones below start from. */
function wellBehaved(): MemoryCollector {
  let closed = false;
  const read = (): SampleResult =>
    closed
      ? { kind: "failure", error: "closed" }
      : { kind: "full", reading: { ...READING }, metadata: { n: 1 } };
  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: "stormlog.fake_tracker",
    deviceId: 0,
    capabilities: { ...CAPABILITIES },
    availability: () => ({ available: true }),
    sample: async () => read(),
    readSync: read,
    readOnDemand: read,
    takeHighWater: () => null,
    bindPhases: () => undefined,
    close: () => {
      closed = true;
    },
  };
}

/** A well-behaved collector with some members replaced. */
function broken(change: (collector: MemoryCollector) => Partial<MemoryCollector>): CollectorFactory {
  return () => {
    const base = wellBehaved();
    return { ...base, ...change(base) };
  };
}

function withCapabilities(extra: Record<string, unknown>, drop?: keyof MemoryCapabilities): CollectorFactory {
  return broken(() => {
    const caps: Record<string, unknown> = { ...CAPABILITIES, ...extra };
    if (drop !== undefined) delete caps[drop];
    return { capabilities: caps as unknown as MemoryCapabilities };
  });
}

function returning(result: SampleResult): CollectorFactory {
  return broken(() => {
    let closed = false;
    // Fails after close() like a well-behaved collector, so only the checks of `result` see it.
    const read = (): SampleResult => (closed ? { kind: "failure", error: "closed" } : result);
    return {
      sample: read,
      readSync: read,
      readOnDemand: read,
      close: () => {
        closed = true;
      },
    };
  });
}

describeCollectorContract("a well-behaved collector", wellBehaved, { describe, it });
describeCollectorContract(
  "an unavailable collector",
  broken(() => ({
    availability: () => ({ available: false, reason: "no device here" }),
    sample: () => ({ kind: "failure", error: "no device here" }),
    readSync: undefined,
    readOnDemand: undefined,
  })),
  { describe, it, available: false, kinds: ["failure"] },
);

describe("checkCollectorContract", () => {
  it("finds nothing wrong with a collector that keeps every rule", async () => {
    expect(await checkCollectorContract(wellBehaved)).toEqual([]);
    expect(await checkCollectorContract(wellBehaved, { samples: 1 })).toEqual([]);
  });

  const cases: [string, CollectorFactory, string, CollectorContractOptions?][] = [
    [
      "a zero for an unsupported counter",
      returning({ kind: "full", reading: { ...READING, allocator_reserved_bytes: 0 } }),
      "allocator_reserved_bytes = 0 is reported, yet supports_allocator_reserved is false",
    ],
    [
      "a supported counter neither reported nor listed missing",
      returning({ kind: "full", reading: { ...READING, device_free_bytes: null } }),
      "device_free_bytes = null is not a byte count",
    ],
    [
      "a negative count",
      returning({ kind: "full", reading: { ...READING, allocator_allocated_bytes: -1 } }),
      "allocator_allocated_bytes = -1 is not a byte count",
    ],
    [
      "a fractional count",
      returning({ kind: "full", reading: { ...READING, allocator_allocated_bytes: 1.5 } }),
      "allocator_allocated_bytes = 1.5 is not a byte count",
    ],
    [
      "used memory beyond the total",
      returning({ kind: "full", reading: { ...READING, device_used_bytes: 2000 } }),
      "device_used_bytes = 2000 exceeds device_total_bytes = 1000",
    ],
    [
      "a counter listed missing yet reported",
      returning({ kind: "partial", reading: READING, missing: ["device_used_bytes"], reason: "busy" }),
      "device_used_bytes = 100 is listed missing, yet reported",
    ],
    [
      "an unsupported counter listed missing",
      returning({
        kind: "partial",
        reading: { ...READING, device_used_bytes: null },
        missing: ["device_used_bytes", "allocator_reserved_bytes"],
        reason: "busy",
      }),
      "allocator_reserved_bytes is listed missing, yet supports_allocator_reserved is false",
    ],
    [
      "a partial result without a reason",
      returning({
        kind: "partial",
        reading: { ...READING, device_used_bytes: null },
        missing: ["device_used_bytes"],
        reason: " ",
      }),
      "a partial result without a reason",
    ],
    [
      "a partial result that names nothing missing",
      returning({ kind: "partial", reading: READING, missing: [], reason: "busy" }),
      "a partial result that names no missing counter",
    ],
    [
      "a failure without a message",
      returning({ kind: "failure", error: "" }),
      "a failure without an error message",
    ],
    [
      "metadata that JSON cannot hold",
      broken(() => {
        const loop: Record<string, unknown> = {};
        loop.self = loop;
        return { sample: () => ({ kind: "full", reading: READING, metadata: loop as never }) };
      }),
      "metadata does not survive JSON",
    ],
    [
      "a kind this place does not allow",
      returning({ kind: "partial", reading: {}, missing: ["device_used_bytes"], reason: "x" }),
      "sample() returned a partial result; expected full",
    ],
    [
      "capabilities outside the v4 keys",
      withCapabilities({ supports_magic: true }),
      "keys outside the v4 schema: supports_magic",
    ],
    [
      "a v4 capability left out",
      withCapabilities({}, "supports_bounded_profiling"),
      "capabilities lacks supports_bounded_profiling",
    ],
    [
      "a flag that is not a boolean",
      withCapabilities({ supports_device_free: "yes" }),
      'supports_device_free = "yes" is not a boolean',
    ],
    ["an empty backend", withCapabilities({ backend: " " }), "capabilities.backend is empty"],
    [
      "a telemetry_collector that is not the name",
      withCapabilities({ telemetry_collector: "other" }),
      "is not the name",
    ],
    [
      "a collector that measures neither allocated nor device used",
      withCapabilities({ supports_allocator_allocated: false, supports_device_used: false }),
      "supports neither allocator_allocated nor device_used",
    ],
    [
      "attribution without reserved",
      withCapabilities({ supports_allocator_attribution: true }),
      "fragmentation analysis or attribution without both allocator allocated and reserved",
    ],
    [
      "another contract version",
      broken(() => ({ specificationVersion: "v0" as never })),
      'specificationVersion is "v0", expected "v1"',
    ],
    ["an empty name", broken(() => ({ name: "" })), "the name is empty"],
    ["a device id below -1", broken(() => ({ deviceId: -2 })), "deviceId = -2 is not a device index or -1"],
    [
      "unavailable where it should be available",
      broken(() => ({ availability: () => ({ available: false, reason: "nope" }) })),
      "availability() says available: false (nope); expected true",
    ],
    [
      "a reason on two lines",
      broken(() => ({ availability: () => ({ available: false, reason: "no device\nreally" }) })),
      "the reason is not one line",
      { available: false },
    ],
    [
      "an unavailable collector without a reason",
      broken(() => ({ availability: () => ({ available: false, reason: "" }) })),
      "unavailable without a reason",
      { available: false },
    ],
    [
      "sample() that throws",
      broken(() => ({
        sample: () => {
          throw new Error("boom");
        },
      })),
      "sample() threw: Error: boom",
    ],
    [
      "sample() that rejects",
      broken(() => ({ sample: () => Promise.reject(new Error("late boom")) })),
      "sample() threw: Error: late boom",
    ],
    [
      "readSync() that returns a promise",
      broken((base) => ({ readSync: (() => Promise.resolve(base.readSync!())) as never })),
      "readSync() returned a promise",
    ],
    [
      "readOnDemand() that throws",
      broken(() => ({
        readOnDemand: () => {
          throw new Error("no file");
        },
      })),
      "readOnDemand() threw: Error: no file",
    ],
    [
      "bindPhases() that throws",
      broken(() => ({
        bindPhases: () => {
          throw new Error("no hooks");
        },
      })),
      "bindPhases() threw: Error: no hooks",
    ],
    [
      "a second close() that throws",
      broken(() => {
        let closes = 0;
        return {
          close: () => {
            closes += 1;
            if (closes > 1) throw new Error("already closed");
          },
        };
      }),
      "the second close() threw: Error: already closed",
    ],
    [
      "a high-water mark of a counter it does not support",
      broken(() => ({ takeHighWater: () => ({ allocator_reserved_bytes: 5 }) })),
      "takeHighWater() reports allocator_reserved_bytes, which the collector does not support",
    ],
    [
      "a high-water mark that is not a byte count",
      broken(() => ({ takeHighWater: () => ({ allocator_allocated_bytes: -3 }) })),
      "takeHighWater() gives allocator_allocated_bytes = -3, not a byte count",
    ],
    [
      "a high-water mark given again for the same window",
      broken(() => ({ takeHighWater: () => ({ allocator_allocated_bytes: 4096 }) })),
      "takeHighWater() called twice in a row returned a peak the second time",
    ],
    [
      "a high-water mark that throws",
      broken(() => ({
        takeHighWater: () => {
          throw new Error("engine gone");
        },
      })),
      "takeHighWater() threw: Error: engine gone",
    ],
    [
      "zeros after close()",
      broken(() => ({
        sample: () => ({ kind: "full", reading: { ...READING, allocator_allocated_bytes: 0 } }),
      })),
      "sample() after close() returned a full result, not a failure",
    ],
    [
      "a factory that throws",
      () => {
        throw new Error("no driver");
      },
      "the factory threw: Error: no driver",
    ],
  ];

  it.each(cases)("reports %s", async (_name, factory, expected, options) => {
    const violations = await checkCollectorContract(factory, options);
    expect(violations.map((violation) => violation.message).join("\n")).toContain(expected);
    for (const violation of violations) expect(violation.check.length).toBeGreaterThan(0);
  });

  it("reports a fault once per check however many samples repeat it", async () => {
    const violations = await checkCollectorContract(
      returning({ kind: "full", reading: { ...READING, allocator_reserved_bytes: 0 } }),
      { samples: 5 },
    );
    const message = "allocator_reserved_bytes = 0 is reported, yet supports_allocator_reserved is false";
    expect(violations.filter((violation) => violation.check.startsWith("samples"))).toEqual([
      { check: "samples without throwing and reports only supported counters", message },
    ]);
    // readSync, readOnDemand and the sample after bindPhases() see it too.
    expect(violations.filter((violation) => violation.message === message)).toHaveLength(4);
  });

  it("rejects a sample count that is not a positive integer", async () => {
    await expect(checkCollectorContract(wellBehaved, { samples: 0 })).rejects.toThrow(RangeError);
  });
});

describe("checkSampleResult", () => {
  it("accepts an honest partial result and a failure", () => {
    const collector = wellBehaved();
    expect(
      checkSampleResult(collector, {
        kind: "partial",
        reading: { ...READING, device_free_bytes: null },
        missing: ["device_free_bytes"],
        reason: "the driver did not answer",
      }),
    ).toEqual([]);
    expect(checkSampleResult(collector, { kind: "failure", error: "gone" })).toEqual([]);
  });

  it("rejects what is not a result, and names outside the counters in missing", () => {
    const collector = wellBehaved();
    expect(checkSampleResult(collector, undefined as never)).toEqual([
      "undefined is not a result: expected kind full, partial or failure",
    ]);
    expect(checkSampleResult(collector, { kind: "zero" } as never)).toHaveLength(1);
    expect(
      checkSampleResult(collector, {
        kind: "partial",
        reading: { ...READING, device_free_bytes: null },
        missing: ["device_free_bytes", "heap_bytes" as never],
        reason: "busy",
      }),
    ).toEqual(["missing names heap_bytes, which is not a counter field"]);
  });
});

describe("describeCollectorContract", () => {
  /** Test functions that record what the suite registers, to run the tests by hand. */
  function recorder() {
    const groups: string[] = [];
    const tests: { name: string; body: () => Promise<void> }[] = [];
    const api: ContractTestFunctions = {
      describe: (name, body) => {
        groups.push(name);
        body();
      },
      it: (name, body) => {
        tests.push({ name, body });
      },
    };
    return { api, groups, tests };
  }

  it("registers one test per check in a group named after the label", () => {
    const { api, groups, tests } = recorder();
    describeCollectorContract("fake", wellBehaved, api);
    expect(groups).toEqual(["collector contract: fake"]);
    expect(tests.map((test) => test.name)).toEqual([
      "declares the contract version, a name and a device id",
      "declares exactly the v4 capability keys, consistently",
      "says it is available",
      "samples without throwing and reports only supported counters",
      "reads synchronously at boundaries when it offers readSync()",
      "reads synchronously on demand when it offers readOnDemand()",
      "takes its high-water mark synchronously when it offers takeHighWater()",
      "takes the phase context without throwing when it offers bindPhases()",
      "closes idempotently and reports failure, not zeros, afterwards",
    ]);
  });

  it("fails the broken check's test with a CollectorContractError listing the violations, and only that one", async () => {
    const { api, tests } = recorder();
    describeCollectorContract(
      "zeros",
      returning({
        kind: "full",
        reading: { ...READING, allocator_reserved_bytes: 0, allocator_active_bytes: 0 },
      }),
      { ...api, samples: 1 },
    );
    const outcomes = await Promise.all(
      tests.map((test) =>
        test.body().then(
          () => null,
          (error: unknown) => error,
        ),
      ),
    );
    const failed = outcomes.flatMap((error, i) => (error === null ? [] : [{ name: tests[i]!.name, error }]));
    expect(failed.map((failure) => failure.name)).toEqual([
      "samples without throwing and reports only supported counters",
      "reads synchronously at boundaries when it offers readSync()",
      "reads synchronously on demand when it offers readOnDemand()",
      "takes the phase context without throwing when it offers bindPhases()",
    ]);
    const error = failed[0]!.error;
    expect(error).toBeInstanceOf(CollectorContractError);
    expect(StormlogError.isInstance(error)).toBe(true);
    expect((error as CollectorContractError).violations).toEqual([
      "allocator_reserved_bytes = 0 is reported, yet supports_allocator_reserved is false",
      "allocator_active_bytes = 0 is reported, yet supports_allocator_active is false",
    ]);
    expect((error as Error).message).toContain("  - allocator_reserved_bytes = 0 is reported");
  });

  it("calls the factory only inside the tests (after the framework's beforeAll hooks)", () => {
    let made = 0;
    const { api } = recorder();
    describeCollectorContract(
      "lazy",
      () => {
        made += 1;
        return wellBehaved();
      },
      api,
    );
    expect(made).toBe(0);
  });

  it("runs under node:test: passes a collector that keeps the rules, fails one that reports a zero", () => {
    const run = (zeros: boolean) => {
      const child = spawnSync(
        process.execPath,
        [
          "--conditions=@stormlog/source",
          "--import",
          "tsx",
          "--test",
          "--test-reporter=tap",
          NODE_TEST_SUITE,
        ],
        {
          cwd: join(import.meta.dirname, "../.."),
          encoding: "utf8",
          timeout: 60_000,
          env: { ...process.env, NODE_OPTIONS: "", CONTRACT_ZEROS: zeros ? "1" : "0" },
        },
      );
      const count = (what: string) => Number(new RegExp(`^# ${what} (\\d+)$`, "m").exec(child.stdout)?.[1]);
      return { status: child.status, pass: count("pass"), fail: count("fail"), out: child.stdout };
    };
    const good = run(false);
    expect(good, good.out).toMatchObject({ status: 0, pass: 9, fail: 0 });
    const zeros = run(true);
    expect(zeros, zeros.out).toMatchObject({ status: 1, pass: 8, fail: 1 });
    expect(zeros.out).toContain("device_used_bytes = 0 is reported, yet supports_device_used is false");
  });
});
