import {
  CAPABILITY_FOR_COUNTER,
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCapabilities,
  type MemoryCollector,
  type PhaseContextLike,
  type SampleResult,
} from "../collector/collector.js";
import { StormlogError } from "../runtime/errors.js";
import { MEMORY_COUNTER_FIELDS, type MemoryCounterField } from "../schema/schema.js";

/** Makes a fresh collector for one check; the suite closes it afterwards. */
export type CollectorFactory = () => MemoryCollector | Promise<MemoryCollector>;

/** What the collector under test should do where the suite runs. */
export interface CollectorContractOptions {
  /** The collector must say it is available (default true). False: it must say why it is not, in one line. */
  readonly available?: boolean;
  /** The kinds `sample()`, `readSync()` and `readOnDemand()` may return here (default: `["full"]`). */
  readonly kinds?: readonly SampleResult["kind"][];
  /** How many times `sample()` is called on one collector (default 3). */
  readonly samples?: number;
}

/**
 * The test functions of the framework the suite registers with: `describe` and `it` (or `test`) of
 * vitest, jest or `node:test`. The suite needs no assertion library: a test throws a
 * {@link CollectorContractError} listing what the collector did wrong.
 */
export interface ContractTestFunctions {
  readonly describe: (name: string, body: () => void) => unknown;
  readonly it: (name: string, body: () => Promise<void>) => unknown;
}

/** Options of {@link describeCollectorContract}: the test functions and what to expect. */
export interface CollectorContractSuiteOptions extends ContractTestFunctions, CollectorContractOptions {}

/** One broken rule: the check that found it and what is wrong, in one line. */
export interface ContractViolation {
  readonly check: string;
  readonly message: string;
}

/** Thrown by a test of {@link describeCollectorContract} when its check finds violations. */
export class CollectorContractError extends StormlogError {
  override readonly name: string = "CollectorContractError";
  /** What is wrong, one line each. */
  readonly violations: readonly string[];

  constructor(check: string, violations: readonly string[]) {
    super(`${check}:\n${violations.map((violation) => `  - ${violation}`).join("\n")}`);
    this.violations = violations;
  }
}

/**
 * The type of every v4 `memory_capabilities` key. Typed as a record over `MemoryCapabilities` so
 * that a key added to the interface without the schema (or the reverse) fails to compile here.
 */
const CAPABILITY_TYPES = {
  backend: "string",
  telemetry_collector: "string",
  sampling_source: "string",
  supports_allocator_allocated: "boolean",
  supports_allocator_reserved: "boolean",
  supports_allocator_active: "boolean",
  supports_allocator_inactive: "boolean",
  supports_device_used: "boolean",
  supports_device_free: "boolean",
  supports_device_total: "boolean",
  supports_native_allocator_history: "boolean",
  supports_fragmentation_analysis: "boolean",
  supports_allocator_attribution: "boolean",
  supports_bounded_profiling: "boolean",
} as const satisfies Record<keyof MemoryCapabilities, "string" | "boolean">;
const CAPABILITY_KEYS: ReadonlySet<string> = new Set(Object.keys(CAPABILITY_TYPES));
const COUNTER_FIELDS: ReadonlySet<string> = new Set(MEMORY_COUNTER_FIELDS);
const KINDS: ReadonlySet<string> = new Set(["full", "partial", "failure"]);

/** The phase context handed to `bindPhases()`: what the tracker passes, inside one phase. */
const PHASE_CONTEXT: PhaseContextLike = { currentPhasePath: () => "contract / phase" };

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/**
 * Checks one `sample()`, `readSync()` or `readOnDemand()` result against the collector's declared
 * capabilities; returns what is wrong (empty when nothing is). An unsupported counter must be absent
 * or null (never zero) and never listed missing; a supported one is a byte count unless listed
 * missing, in which case it is absent or null; a partial result says why; a failure carries an error.
 */
export function checkSampleResult(collector: MemoryCollector, result: SampleResult): string[] {
  // Collectors written in JavaScript return whatever they like: check the shape before reading it.
  const shape: unknown = result;
  if (!isObject(shape) || typeof shape.kind !== "string" || !KINDS.has(shape.kind)) {
    return [
      `${String(isObject(shape) ? shape.kind : shape)} is not a result: expected kind full, partial or failure`,
    ];
  }
  if (result.kind === "failure") {
    return typeof result.error === "string" && result.error.trim().length > 0
      ? []
      : ["a failure without an error message"];
  }
  const out: string[] = [];
  if (!isObject(result.reading)) return [`${result.kind} result without a reading object`];
  const missing: readonly string[] = result.kind === "partial" ? result.missing : [];
  if (result.kind === "partial") {
    if (typeof result.reason !== "string" || result.reason.trim().length === 0) {
      out.push("a partial result without a reason");
    }
    if (!Array.isArray(result.missing) || result.missing.length === 0) {
      out.push("a partial result that names no missing counter");
    }
    for (const field of missing) {
      if (!COUNTER_FIELDS.has(field))
        out.push(`missing names ${String(field)}, which is not a counter field`);
    }
  }
  const capabilities = collector.capabilities;
  for (const field of MEMORY_COUNTER_FIELDS) {
    const flag = CAPABILITY_FOR_COUNTER[field];
    const value = result.reading[field];
    if (capabilities[flag] !== true) {
      // Never zero, never anything: an unsupported counter is absent or null.
      if (value !== undefined && value !== null)
        out.push(`${field} = ${String(value)} is reported, yet ${flag} is false`);
      if (missing.includes(field)) out.push(`${field} is listed missing, yet ${flag} is false`);
    } else if (missing.includes(field)) {
      if (value !== undefined && value !== null)
        out.push(`${field} = ${String(value)} is listed missing, yet reported`);
    } else if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
      out.push(`${field} = ${String(value)} is not a byte count (supported and not listed missing)`);
    }
  }
  const total = result.reading.device_total_bytes;
  if (typeof total === "number") {
    for (const field of ["device_used_bytes", "device_free_bytes"] as const) {
      const value = result.reading[field];
      if (typeof value === "number" && value > total)
        out.push(`${field} = ${value} exceeds device_total_bytes = ${total}`);
    }
  }
  if (result.metadata !== undefined) {
    if (!isObject(result.metadata) || Array.isArray(result.metadata)) {
      out.push("metadata is not an object");
    } else {
      try {
        // Metadata must survive JSON; bigints are fine, the core codec writes them.
        JSON.stringify(result.metadata, (_key, value: unknown) =>
          typeof value === "bigint" ? value.toString() : value,
        );
      } catch (error) {
        out.push(`metadata does not survive JSON: ${describeError(error)}`);
      }
    }
  }
  return out;
}

/** One check of the contract: a test of its own in {@link describeCollectorContract}. */
interface ContractCheck {
  readonly name: string;
  run(factory: CollectorFactory): Promise<string[]>;
}

/** Makes a collector, runs `body` on it and closes it; a throw anywhere is a violation. */
async function withCollector(
  factory: CollectorFactory,
  body: (collector: MemoryCollector) => Promise<string[]> | string[],
): Promise<string[]> {
  let collector: MemoryCollector;
  try {
    collector = await factory();
  } catch (error) {
    return [`the factory threw: ${describeError(error)}`];
  }
  const out: string[] = [];
  try {
    out.push(...(await body(collector)));
  } catch (error) {
    out.push(`threw: ${describeError(error)}`);
  }
  try {
    await collector.close?.();
  } catch (error) {
    out.push(`close() threw: ${describeError(error)}`);
  }
  return out;
}

/** Calls a reading method that must not throw; its result, or the violation. */
async function read(
  method: string,
  call: () => SampleResult | Promise<SampleResult>,
): Promise<SampleResult | string> {
  try {
    return await call();
  } catch (error) {
    return `${method} threw: ${describeError(error)}`;
  }
}

function checkKind(method: string, result: SampleResult, kinds: readonly string[]): string[] {
  if (kinds.includes(result.kind)) return [];
  const why = result.kind === "failure" ? ` (${result.error})` : "";
  return [`${method} returned a ${result.kind} result${why}; expected ${kinds.join(" or ")}`];
}

/** Checks a synchronous reading method: no promise, an allowed kind, honest counters. */
function checkSyncReading(
  collector: MemoryCollector,
  method: "readSync" | "readOnDemand",
  kinds: readonly string[],
): string[] {
  const call = collector[method];
  if (call === undefined) return [];
  let result: SampleResult;
  try {
    result = call.call(collector);
  } catch (error) {
    return [`${method}() threw: ${describeError(error)}`];
  }
  if (result instanceof Promise || typeof (result as { then?: unknown }).then === "function") {
    return [`${method}() returned a promise; it must read synchronously`];
  }
  return [...checkKind(`${method}()`, result, kinds), ...checkSampleResult(collector, result)];
}

/**
 * Checks `takeHighWater()`: synchronous, null or supported byte counts only, and null when called
 * again at once (nothing can have gone higher in between).
 */
function checkHighWater(collector: MemoryCollector): string[] {
  const take = collector.takeHighWater;
  if (take === undefined) return [];
  const out: string[] = [];
  for (const call of ["first", "second"] as const) {
    let taken: unknown;
    try {
      taken = take.call(collector);
    } catch (error) {
      return [...out, `takeHighWater() threw: ${describeError(error)}`];
    }
    if (taken === null) continue;
    if (!isObject(taken) || typeof (taken as { then?: unknown }).then === "function") {
      out.push(`takeHighWater() returned ${String(taken)}; expected null or a reading, synchronously`);
      continue;
    }
    if (call === "second") out.push("takeHighWater() called twice in a row returned a peak the second time");
    for (const [field, value] of Object.entries(taken)) {
      if (!COUNTER_FIELDS.has(field))
        out.push(`takeHighWater() names ${field}, which is not a counter field`);
      else if (collector.capabilities[CAPABILITY_FOR_COUNTER[field as MemoryCounterField]] !== true)
        out.push(`takeHighWater() reports ${field}, which the collector does not support`);
      else if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0)
        out.push(`takeHighWater() gives ${field} = ${String(value)}, not a byte count`);
    }
  }
  return out;
}

function contractChecks(options: CollectorContractOptions): ContractCheck[] {
  const available = options.available ?? true;
  const kinds: readonly string[] = options.kinds ?? ["full"];
  const samples = options.samples ?? 3;
  if (!Number.isInteger(samples) || samples < 1) {
    throw new RangeError(`samples must be a positive integer, got ${String(samples)}`);
  }
  return [
    {
      name: "declares the contract version, a name and a device id",
      run: (factory) =>
        withCollector(factory, (collector) => {
          const out: string[] = [];
          if (collector.specificationVersion !== COLLECTOR_SPECIFICATION_VERSION) {
            out.push(
              `specificationVersion is ${JSON.stringify(collector.specificationVersion)}, expected "${COLLECTOR_SPECIFICATION_VERSION}"`,
            );
          }
          if (typeof collector.name !== "string" || collector.name.trim().length === 0)
            out.push("the name is empty");
          if (!Number.isInteger(collector.deviceId) || collector.deviceId < -1) {
            out.push(`deviceId = ${String(collector.deviceId)} is not a device index or -1`);
          }
          return out;
        }),
    },
    {
      name: "declares exactly the v4 capability keys, consistently",
      run: (factory) =>
        withCollector(factory, (collector) => {
          const caps: unknown = collector.capabilities;
          if (!isObject(caps)) return ["capabilities is not an object"];
          const out: string[] = [];
          const keys = Object.keys(caps);
          const extra = keys.filter((key) => !CAPABILITY_KEYS.has(key)).sort();
          const absent = [...CAPABILITY_KEYS].filter((key) => !(key in caps));
          if (extra.length > 0) out.push(`capabilities has keys outside the v4 schema: ${extra.join(", ")}`);
          if (absent.length > 0) out.push(`capabilities lacks ${absent.join(", ")}`);
          for (const [key, type] of Object.entries(CAPABILITY_TYPES)) {
            const value = caps[key];
            if (!(key in caps)) continue;
            if (typeof value !== type)
              out.push(`capabilities.${key} = ${JSON.stringify(value)} is not a ${type}`);
            else if (type === "string" && (value as string).trim().length === 0)
              out.push(`capabilities.${key} is empty`);
          }
          if (caps.telemetry_collector !== collector.name) {
            out.push(
              `capabilities.telemetry_collector = ${JSON.stringify(caps.telemetry_collector)} is not the name ${JSON.stringify(collector.name)}`,
            );
          }
          // The reference's invariant: a collector measures allocated or device-used memory.
          if (caps.supports_allocator_allocated !== true && caps.supports_device_used !== true) {
            out.push("supports neither allocator_allocated nor device_used");
          }
          if (
            (caps.supports_fragmentation_analysis === true || caps.supports_allocator_attribution === true) &&
            (caps.supports_allocator_allocated !== true || caps.supports_allocator_reserved !== true)
          ) {
            out.push("fragmentation analysis or attribution without both allocator allocated and reserved");
          }
          return out;
        }),
    },
    {
      name: available ? "says it is available" : "says why it is unavailable, in one line",
      run: (factory) =>
        withCollector(factory, (collector) => {
          const availability = collector.availability();
          if (availability.available !== available) {
            const why = availability.available ? "" : ` (${availability.reason})`;
            return [
              `availability() says available: ${String(availability.available)}${why}; expected ${available}`,
            ];
          }
          if (availability.available) return [];
          const reason: unknown = availability.reason;
          if (typeof reason !== "string" || reason.trim().length === 0)
            return ["unavailable without a reason"];
          return /[\r\n]/.test(reason) ? [`the reason is not one line: ${JSON.stringify(reason)}`] : [];
        }),
    },
    {
      name: "samples without throwing and reports only supported counters",
      run: (factory) =>
        withCollector(factory, async (collector) => {
          const out: string[] = [];
          for (let i = 0; i < samples; i += 1) {
            const result = await read("sample()", () => collector.sample());
            if (typeof result === "string") return [...out, result];
            out.push(...checkKind("sample()", result, kinds), ...checkSampleResult(collector, result));
          }
          return out;
        }),
    },
    {
      name: "reads synchronously at boundaries when it offers readSync()",
      run: (factory) => withCollector(factory, (collector) => checkSyncReading(collector, "readSync", kinds)),
    },
    {
      name: "reads synchronously on demand when it offers readOnDemand()",
      run: (factory) =>
        withCollector(factory, (collector) => checkSyncReading(collector, "readOnDemand", kinds)),
    },
    {
      name: "takes its high-water mark synchronously when it offers takeHighWater()",
      run: (factory) => withCollector(factory, (collector) => checkHighWater(collector)),
    },
    {
      name: "takes the phase context without throwing when it offers bindPhases()",
      run: (factory) =>
        withCollector(factory, async (collector) => {
          if (collector.bindPhases === undefined) return [];
          try {
            collector.bindPhases(PHASE_CONTEXT);
          } catch (error) {
            return [`bindPhases() threw: ${describeError(error)}`];
          }
          const result = await read("sample() after bindPhases()", () => collector.sample());
          if (typeof result === "string") return [result];
          return [
            ...checkKind("sample() after bindPhases()", result, kinds),
            ...checkSampleResult(collector, result),
          ];
        }),
    },
    {
      name: "closes idempotently and reports failure, not zeros, afterwards",
      run: async (factory) => {
        let collector: MemoryCollector;
        try {
          collector = await factory();
        } catch (error) {
          return [`the factory threw: ${describeError(error)}`];
        }
        for (const time of ["first", "second"]) {
          try {
            await collector.close?.();
          } catch (error) {
            return [`the ${time} close() threw: ${describeError(error)}`];
          }
        }
        const result = await read("sample() after close()", () => collector.sample());
        if (typeof result === "string") return [result];
        if (result.kind !== "failure")
          return [`sample() after close() returned a ${result.kind} result, not a failure`];
        return checkSampleResult(collector, result);
      },
    },
  ];
}

/** A check's violations, each once (three samples with the same fault report it once). */
async function runCheck(check: ContractCheck, factory: CollectorFactory): Promise<string[]> {
  return [...new Set(await check.run(factory))];
}

/**
 * Runs the collector contract without a test framework: every check, each on a fresh collector from
 * `factory`. Resolves with the violations found, empty when the collector passes.
 *
 * @example
 * const violations = await checkCollectorContract(() => myCollector());
 * if (violations.length > 0) console.error(violations);
 */
export async function checkCollectorContract(
  factory: CollectorFactory,
  options: CollectorContractOptions = {},
): Promise<ContractViolation[]> {
  const out: ContractViolation[] = [];
  for (const check of contractChecks(options)) {
    for (const message of await runCheck(check, factory)) out.push({ check: check.name, message });
  }
  return out;
}

/**
 * Registers the collector contract as tests of your framework, one per check, in a group named
 * `collector contract: <label>`: versioned, capabilities exactly the v4 keys, unsupported counters
 * never reported (not even as zero), missing counters honest, `sample()` never throws,
 * `readSync()`/`readOnDemand()` synchronous, availability reasons one line, `close()` idempotent
 * with failures (not zeros) afterwards. Each test makes a fresh collector with `factory` (called
 * inside the test, after your `beforeAll` hooks) and closes it.
 *
 * @example
 * import { describe, it } from "vitest"; // or "node:test", or jest's globals
 * describeCollectorContract("my collector", () => myCollector(), { describe, it });
 */
export function describeCollectorContract(
  label: string,
  factory: CollectorFactory,
  options: CollectorContractSuiteOptions,
): void {
  const checks = contractChecks(options);
  options.describe(`collector contract: ${label}`, () => {
    for (const check of checks) {
      options.it(check.name, async () => {
        const violations = await runCheck(check, factory);
        if (violations.length > 0) throw new CollectorContractError(check.name, violations);
      });
    }
  });
}
