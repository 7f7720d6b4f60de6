import {
  CAPABILITY_FOR_COUNTER,
  COLLECTOR_SPECIFICATION_VERSION,
  MEMORY_COUNTER_FIELDS,
  type MemoryCollector,
  type SampleResult,
} from "@stormlog/core";
import { describe, expect, it } from "vitest";

/** The v4 `memory_capabilities` keys, exactly. */
const CAPABILITY_KEYS = [
  "backend",
  "telemetry_collector",
  "sampling_source",
  "supports_allocator_allocated",
  "supports_allocator_reserved",
  "supports_allocator_active",
  "supports_allocator_inactive",
  "supports_device_used",
  "supports_device_free",
  "supports_device_total",
  "supports_native_allocator_history",
  "supports_fragmentation_analysis",
  "supports_allocator_attribution",
  "supports_bounded_profiling",
].sort();

/** Options of {@link describeCollectorContract}. */
export interface ContractOptions {
  /** The collector must say it is available (default true). False: it must say why it is not. */
  readonly available?: boolean;
  /** The kinds `sample()` may return here (default: full only). */
  readonly kinds?: readonly SampleResult["kind"][];
}

/** Checks one result against the collector's declared capabilities. */
export function expectResultHonoursCapabilities(collector: MemoryCollector, result: SampleResult): void {
  expect(["full", "partial", "failure"]).toContain(result.kind);
  if (result.kind === "failure") {
    expect(typeof result.error).toBe("string");
    expect(result.error.length).toBeGreaterThan(0);
    return;
  }
  const missing = result.kind === "partial" ? result.missing : [];
  if (result.kind === "partial") {
    expect(result.reason.length).toBeGreaterThan(0);
    expect(missing.length).toBeGreaterThan(0);
  }
  for (const field of MEMORY_COUNTER_FIELDS) {
    const supported = collector.capabilities[CAPABILITY_FOR_COUNTER[field]] === true;
    const value = result.reading[field];
    if (!supported) {
      // Never zero, never anything: an unsupported counter is absent or null.
      expect(value ?? null, `${field} is unsupported yet reported`).toBeNull();
      expect(missing).not.toContain(field);
    } else if (missing.includes(field)) {
      expect(value ?? null, `${field} is listed missing yet reported`).toBeNull();
    } else {
      expect(Number.isSafeInteger(value), `${field} = ${String(value)} is not a byte count`).toBe(true);
      expect(value as number).toBeGreaterThanOrEqual(0);
    }
  }
  const total = result.reading.device_total_bytes;
  if (typeof total === "number") {
    for (const field of ["device_used_bytes", "device_free_bytes"] as const) {
      const value = result.reading[field];
      if (typeof value === "number") expect(value).toBeLessThanOrEqual(total);
    }
  }
  if (result.metadata !== undefined) {
    expect(typeof result.metadata).toBe("object");
    // Metadata must survive JSON (bigint aside, which the core codec handles).
    expect(() =>
      JSON.stringify(result.metadata, (_k, v) => (typeof v === "bigint" ? v.toString() : v)),
    ).not.toThrow();
  }
}

/**
 * The collector contract every adapter must pass: versioned, capabilities are exactly the v4 keys,
 * unsupported counters are never reported, `sample()` never throws, `readSync()` is synchronous,
 * `close()` is idempotent.
 */
export function describeCollectorContract(
  label: string,
  factory: () => MemoryCollector | Promise<MemoryCollector>,
  options: ContractOptions = {},
): void {
  const available = options.available ?? true;
  const kinds = options.kinds ?? ["full"];

  describe(`collector contract: ${label}`, () => {
    const withCollector = async (body: (collector: MemoryCollector) => Promise<void> | void) => {
      const collector = await factory();
      try {
        await body(collector);
      } finally {
        await collector.close?.();
      }
    };

    it("declares the contract version, a name and a device id", () =>
      withCollector((collector) => {
        expect(collector.specificationVersion).toBe(COLLECTOR_SPECIFICATION_VERSION);
        expect(collector.name.trim().length).toBeGreaterThan(0);
        expect(Number.isInteger(collector.deviceId)).toBe(true);
        expect(collector.deviceId).toBeGreaterThanOrEqual(-1);
      }));

    it("declares exactly the v4 capability keys, consistently", () =>
      withCollector((collector) => {
        const caps = collector.capabilities;
        expect(Object.keys(caps).sort()).toEqual(CAPABILITY_KEYS);
        for (const key of ["backend", "telemetry_collector", "sampling_source"] as const) {
          expect(caps[key].trim().length).toBeGreaterThan(0);
        }
        for (const key of CAPABILITY_KEYS.filter((k) => k.startsWith("supports_"))) {
          expect(typeof caps[key as keyof typeof caps]).toBe("boolean");
        }
        expect(caps.telemetry_collector).toBe(collector.name);
        // The reference's invariant: a collector measures allocated or device-used memory.
        expect(caps.supports_allocator_allocated || caps.supports_device_used).toBe(true);
        if (caps.supports_fragmentation_analysis || caps.supports_allocator_attribution) {
          expect(caps.supports_allocator_allocated && caps.supports_allocator_reserved).toBe(true);
        }
      }));

    it(available ? "says it is available" : "says why it is unavailable, in one line", () =>
      withCollector((collector) => {
        const availability = collector.availability();
        expect(availability.available).toBe(available);
        if (!availability.available) {
          expect(availability.reason.trim().length).toBeGreaterThan(0);
          expect(availability.reason).not.toContain("\n");
        }
      }),
    );

    it("samples without throwing and reports only supported counters", () =>
      withCollector(async (collector) => {
        for (let i = 0; i < 3; i += 1) {
          const result = await collector.sample();
          expect(kinds).toContain(result.kind);
          expectResultHonoursCapabilities(collector, result);
        }
      }));

    it("reads synchronously at boundaries when it offers readSync()", () =>
      withCollector((collector) => {
        if (collector.readSync === undefined) return;
        const result = collector.readSync();
        expect(result).not.toBeInstanceOf(Promise);
        expect(kinds).toContain(result.kind);
        expectResultHonoursCapabilities(collector, result);
      }));

    it("closes idempotently and reports failure, not zeros, afterwards", async () => {
      const collector = await factory();
      await collector.close?.();
      await collector.close?.();
      const result = await collector.sample();
      expect(result.kind).toBe("failure");
    });
  });
}
