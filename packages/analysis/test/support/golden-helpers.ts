import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { decodeTelemetryJsonl, type JsonValue, parseJson, type TelemetryEvent } from "@stormlog/core";

const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden");

/** Case directories of a golden set copied from the Python reference (see fixtures/README.md). */
export function goldenCases(set: "cross-rank" | "gap"): string[] {
  return readdirSync(join(FIXTURES, set))
    .filter((name) => !name.startsWith("."))
    .sort();
}

/** The case's events, decoded losslessly and validated by core, in file order. */
export function loadEvents(set: string, name: string): TelemetryEvent[] {
  const text = readFileSync(join(FIXTURES, set, name, "input.jsonl"), "utf8");
  return decodeTelemetryJsonl(text).map((line) => line.record as TelemetryEvent);
}

/** The case's expected.json (integers beyond 2^53 as bigint). */
export function loadExpected(set: string, name: string): JsonValue {
  return parseJson(readFileSync(join(FIXTURES, set, name, "expected.json"), "utf8"));
}

/** Python's `sorted(events, key=timestamp_ns)`: stable. */
export function sortedByTimestamp(events: readonly TelemetryEvent[]): TelemetryEvent[] {
  return [...events].sort((a, b) =>
    a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0,
  );
}

/**
 * A value with every integer in one representation (bigint where exact integers matter, so that
 * `1760938487438189000n` from our result equals the parsed expected value whatever its JS type).
 */
export function canonical(value: unknown): unknown {
  if (typeof value === "bigint") return value;
  if (typeof value === "number") return Number.isSafeInteger(value) ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[key] = canonical(item);
    return out;
  }
  return value;
}
