// Each sink written by the Python reference (fixtures/golden/python-sink at the repo root)
// loads with the sessions, order, statuses, event counts and first/last timestamps of its expected.json.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type JsonObject, parseJson } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { parseManifest } from "../../src/directory/manifest.js";
import {
  iterateTelemetryEvents,
  loadTelemetryEvents,
  loadTelemetrySessions,
  summarizeTelemetrySessions,
} from "../../src/index.js";
import { serializeManifest } from "../../src/internal.js";

const ROOT = join(import.meta.dirname, "../../../../fixtures/golden/python-sink");
const CASES = readdirSync(ROOT).sort();

interface ExpectedSession {
  session_id: string;
  status: string;
  event_count: number | bigint;
  first_timestamp_ns: bigint | number | null;
  last_timestamp_ns: bigint | number | null;
}

function expectedOf(name: string): ExpectedSession[] {
  const parsed = parseJson(readFileSync(join(ROOT, name, "expected.json"), "utf8")) as JsonObject;
  return parsed.sessions as unknown as ExpectedSession[];
}

function asBigint(value: bigint | number | null): bigint | null {
  return value === null ? null : BigInt(value);
}

describe("golden Python sinks", () => {
  it("has cases", () => {
    expect(CASES.length).toBeGreaterThanOrEqual(5);
  });

  describe.each(CASES)("%s", (name) => {
    const sinkDir = join(ROOT, name, "sink");
    const expected = expectedOf(name);
    const want = expected.map((session) => ({
      id: session.session_id,
      status: session.status,
      count: Number(session.event_count),
      first: asBigint(session.first_timestamp_ns),
      last: asBigint(session.last_timestamp_ns),
    }));

    it("summarizes as the reference loads it (streaming)", async () => {
      const sessions = await summarizeTelemetrySessions(sinkDir);
      expect(
        sessions.map((s) => ({
          id: s.summary.session_id,
          status: s.summary.status,
          count: s.eventCount,
          first: s.firstTimestampNs,
          last: s.lastTimestampNs,
        })),
      ).toEqual(want);
    });

    it("loads events sorted by timestamp with the same figures", async () => {
      const sessions = await loadTelemetrySessions(sinkDir);
      expect(sessions.map((s) => s.summary.session_id)).toEqual(want.map((w) => w.id));
      for (const [index, session] of sessions.entries()) {
        expect(session.events).toHaveLength(want[index]!.count);
        expect(session.events[0]?.timestamp_ns ?? null).toBe(want[index]!.first);
        expect(session.events.at(-1)?.timestamp_ns ?? null).toBe(want[index]!.last);
        for (let i = 1; i < session.events.length; i++) {
          expect(session.events[i - 1]!.timestamp_ns <= session.events[i]!.timestamp_ns).toBe(true);
        }
      }
    });

    it("loads the same through manifest.json", async () => {
      const sessions = await summarizeTelemetrySessions(join(sinkDir, "manifest.json"));
      expect(sessions.map((s) => [s.summary.session_id, s.summary.status, s.eventCount])).toEqual(
        want.map((w) => [w.id, w.status, w.count]),
      );
    });

    it("picks the first session with events by default", async () => {
      const events = await loadTelemetryEvents(sinkDir);
      const first = want.find((w) => w.count > 0)!;
      expect(events).toHaveLength(first.count);
      expect(events.every((event) => event.session_id === first.id)).toBe(true);
    });

    it("streams every event in storage order", async () => {
      let count = 0;
      for await (const event of iterateTelemetryEvents(sinkDir)) {
        expect(event.schema_version).toBe(3);
        count++;
      }
      expect(count).toBe(want.reduce((sum, w) => sum + w.count, 0));
    });

    it("re-serializes the manifest byte for byte", () => {
      const text = readFileSync(join(sinkDir, "manifest.json"), "utf8");
      const manifest = parseManifest(text)!;
      expect(serializeManifest(manifest.sessions, manifest.segments)).toBe(text);
    });
  });
});
