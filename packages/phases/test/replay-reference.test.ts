import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type JsonObject, parseJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { type PhaseEventLike, PhaseReplayIndex, phaseAttributionToPayload } from "../src/index.js";

const DIR = join(import.meta.dirname, "fixtures", "reference-crosscheck");
const cases = readdirSync(DIR)
  .filter((name) => name.endsWith(".json"))
  .sort();

function bigintOf(value: unknown): bigint {
  return typeof value === "bigint" ? value : BigInt(value as number);
}

/** Integers in one representation so parsed expectations compare with our bigint timestamps. */
function canonical(value: unknown): unknown {
  if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, canonical(item)]));
  }
  return value;
}

describe("PhaseReplayIndex agrees with the Python reference on random records", () => {
  it("has the cases", () => {
    expect(cases.length).toBe(6);
  });

  it.each(cases)("%s", (name) => {
    const data = parseJson(readFileSync(join(DIR, name), "utf8")) as JsonObject;
    const index = PhaseReplayIndex.fromEvents(data.events as PhaseEventLike[]);

    for (const [sessionId, spans] of Object.entries(data.spans as JsonObject)) {
      const ours = index
        .spansFor(sessionId)
        .map((s) => [s.rank, s.threadId, s.scopeId, s.path, s.startNs, s.endNs, s.sequence, s.syntheticEnd]);
      expect(canonical(ours), `spans of ${sessionId}`).toEqual(canonical(spans));
    }

    for (const query of data.queries as JsonObject[]) {
      const got = phaseAttributionToPayload(
        index.resolve(
          bigintOf(query.timestamp_ns),
          query.session_id as string,
          query.rank as number | null,
          query.origin_thread_id as number | null,
          query.origin_phase_scope_id as string | null,
        ),
      );
      expect(
        got,
        JSON.stringify({ ...query, expected: undefined, timestamp_ns: String(query.timestamp_ns) }),
      ).toEqual(query.expected);
      if (got) expect(Object.keys(got)).toEqual(Object.keys(query.expected as JsonObject));
    }
  });
});
