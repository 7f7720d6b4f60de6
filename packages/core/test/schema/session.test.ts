import { describe, expect, it } from "vitest";
import type { Clock } from "../../src/runtime/clock.js";
import { InvalidConfigError, TelemetryValidationError } from "../../src/runtime/errors.js";
import {
  compareSessionsForSelection,
  createSessionSummary,
  finalizeSessionSummary,
  inferSessionSummaryFromEvents,
  NAMESPACE_URL,
  normalizeSessionStatus,
  type SessionEventLike,
  type SessionSummary,
  selectDefaultLoadedSession,
  selectDefaultSession,
  sessionSummaryFromJson,
  sessionSummaryToJson,
  sortSessions,
  stableLegacySessionId,
  updateSessionSummary,
  uuid5,
} from "../../src/schema/session.js";
import { type EncodedPart, fromBits, python } from "../python-fixtures.js";

const fixedClock = (ns: bigint): Clock => ({ nowNs: () => ns });

function summary(overrides: Partial<SessionSummary> & Pick<SessionSummary, "session_id">): SessionSummary {
  return {
    status: "completed",
    started_at_ns: 0n,
    ended_at_ns: null,
    host: "host-a",
    pid: 1,
    job_id: null,
    rank: 0,
    local_rank: 0,
    world_size: 1,
    source: "stormlog.test",
    ...overrides,
  };
}

describe("uuid5 and stableLegacySessionId", () => {
  it("match Python's uuid.uuid5(NAMESPACE_URL, name)", () => {
    for (const [name, expected] of python.uuid5_url) {
      expect(uuid5(NAMESPACE_URL, name)).toBe(expected);
    }
  });

  it("match the reference's stable_legacy_session_id for mixed parts", () => {
    const decode = (part: EncodedPart) => {
      if ("none" in part) return null;
      if ("bool" in part) return part.bool;
      if ("int" in part) return BigInt(part.int);
      if ("float" in part) {
        const value = fromBits(part.float);
        // An integral float must keep Python's ".0": pass it already printed.
        return Number.isInteger(value) ? `${value}.0` : value;
      }
      return part.str;
    };
    for (const [parts, expected] of python.stable_legacy_session_id) {
      expect(stableLegacySessionId(parts.map(decode))).toBe(expected);
    }
  });

  it("rejects a namespace that is not a UUID", () => {
    expect(() => uuid5("not-a-uuid", "x")).toThrow(InvalidConfigError);
  });
});

describe("session summaries", () => {
  it("fill defaults like create_session_summary", () => {
    const created = createSessionSummary({
      source: "stormlog.tracker",
      clock: fixedClock(42n),
      worldSize: 0,
    });
    expect(created.status).toBe("running");
    expect(created.started_at_ns).toBe(42n);
    expect(created.ended_at_ns).toBeNull();
    expect(created.session_id).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(created.host.length).toBeGreaterThan(0);
    expect(created.pid).toBe(process.pid);
    expect(created.world_size).toBe(1);
    expect(Object.keys(sessionSummaryToJson(created))).toEqual([
      "session_id",
      "status",
      "started_at_ns",
      "ended_at_ns",
      "host",
      "pid",
      "job_id",
      "rank",
      "local_rank",
      "world_size",
      "source",
    ]);
  });

  it("normalize statuses and reject unknown ones", () => {
    expect(normalizeSessionStatus(" Completed ")).toBe("completed");
    expect(() => normalizeSessionStatus("clean")).toThrow(/Unsupported session status: clean/);
    expect(() => normalizeSessionStatus("")).toThrow(InvalidConfigError);
    expect(() => createSessionSummary({ source: "x", status: "crashed" })).toThrow(InvalidConfigError);
  });

  it("can clear a terminal timestamp on update (test_update_session_summary_can_clear_terminal_timestamp)", () => {
    const completed = createSessionSummary({
      source: "stormlog.test",
      status: "completed",
      startedAtNs: 10n,
      endedAtNs: 20n,
    });
    const refreshed = updateSessionSummary(completed, { status: "running", endedAtNs: null });
    expect(refreshed.status).toBe("running");
    expect(refreshed.ended_at_ns).toBeNull();
    expect(updateSessionSummary(completed, { source: "other" }).ended_at_ns).toBe(20n);
  });

  it("finalize running as completed but keep degraded terminal states", () => {
    const running = createSessionSummary({ source: "t", startedAtNs: 1n });
    expect(finalizeSessionSummary(running, { endedAtNs: 5n })).toMatchObject({
      status: "completed",
      ended_at_ns: 5n,
    });
    const incomplete = updateSessionSummary(running, { status: "incomplete" });
    expect(finalizeSessionSummary(incomplete, { clock: fixedClock(9n) })).toMatchObject({
      status: "incomplete",
      ended_at_ns: 9n,
    });
  });

  it("round-trip through JSON and validate manifest entries", () => {
    const original = summary({ session_id: "s", started_at_ns: 1_700_000_000_000_000_001n, ended_at_ns: 2n });
    expect(sessionSummaryFromJson(sessionSummaryToJson(original))).toEqual(original);
    const loose = sessionSummaryFromJson({
      session_id: "s",
      status: "RUNNING",
      started_at_ns: 5,
      host: "h",
      source: "stormlog.telemetry_sink",
      world_size: 0,
    });
    expect(loose).toMatchObject({
      status: "running",
      started_at_ns: 5n,
      pid: -1,
      rank: 0,
      world_size: 1,
      job_id: null,
    });
    expect(() =>
      sessionSummaryFromJson({ session_id: "s", status: "running", host: "h", source: "x" }),
    ).toThrow(/started_at_ns must be present/);
    expect(() =>
      sessionSummaryFromJson({
        session_id: " ",
        status: "running",
        started_at_ns: 1,
        host: "h",
        source: "x",
      }),
    ).toThrow(TelemetryValidationError);
    expect(() =>
      sessionSummaryFromJson(
        { session_id: "s", status: "weird", started_at_ns: 1, host: "h", source: "x" },
        { location: { file: "manifest.json" } },
      ),
    ).toThrow(/Unsupported session status: weird.*manifest\.json/);
  });

  it("are inferred from events: completed at the last stop, else the fallback status", () => {
    const event = (timestamp_ns: bigint, event_type: string, host = "h"): SessionEventLike => ({
      timestamp_ns,
      event_type,
      host,
      pid: 7,
      job_id: "job",
      rank: 1,
      local_rank: 1,
      world_size: 2,
    });
    const inferred = inferSessionSummaryFromEvents({
      sessionId: "s",
      source: "artifact:x",
      events: [event(30n, "stop"), event(10n, "start", "first"), event(20n, "stop"), event(25n, "sample")],
    });
    expect(inferred).toMatchObject({
      session_id: "s",
      status: "completed",
      started_at_ns: 10n,
      ended_at_ns: 30n,
      host: "first",
      pid: 7,
      job_id: "job",
      rank: 1,
      local_rank: 1,
      world_size: 2,
    });
    const open = inferSessionSummaryFromEvents({
      sessionId: "o",
      source: "x",
      events: [event(5n, "sample")],
    });
    expect(open).toMatchObject({ status: "incomplete", ended_at_ns: null, started_at_ns: 5n });
    const empty = inferSessionSummaryFromEvents({
      sessionId: "e",
      source: "x",
      events: [],
      clock: fixedClock(3n),
    });
    expect(empty).toMatchObject({ status: "incomplete", started_at_ns: 3n, pid: process.pid });
  });
});

describe("session ordering", () => {
  it("ranks by status priority, then recency of end (or start), then start, then id", () => {
    const sessions = [
      summary({ session_id: "running", status: "running", started_at_ns: 100n }),
      summary({ session_id: "weird", status: "unknown" as SessionSummary["status"], started_at_ns: 500n }),
      summary({ session_id: "incomplete", status: "incomplete", started_at_ns: 90n }),
      summary({ session_id: "interrupted", status: "interrupted", started_at_ns: 1n, ended_at_ns: 2n }),
      summary({ session_id: "old-completed", started_at_ns: 10n, ended_at_ns: 20n }),
      summary({ session_id: "new-completed", started_at_ns: 5n, ended_at_ns: 50n }),
      summary({ session_id: "b-tie", started_at_ns: 5n, ended_at_ns: 20n }),
      summary({ session_id: "a-tie", started_at_ns: 5n, ended_at_ns: 20n }),
      // ended_at_ns 0 is falsy in Python: the start time is used.
      summary({ session_id: "zero-end", started_at_ns: 30n, ended_at_ns: 0n }),
    ];
    expect(sortSessions(sessions).map((s) => s.session_id)).toEqual([
      "new-completed",
      "zero-end",
      "old-completed",
      "a-tie",
      "b-tie",
      "interrupted",
      "incomplete",
      "running",
      "weird",
    ]);
  });

  it("orders ids by code point as Python does", () => {
    const high = summary({ session_id: "\u{1F600}" });
    const bmp = summary({ session_id: "\uFF21" });
    expect(compareSessionsForSelection(bmp, high)).toBeLessThan(0);
    expect("\u{1F600}" < "\uFF21").toBe(true); // UTF-16 order would get it wrong
  });

  it("selects the default session from summaries or loaded wrappers", () => {
    const running = summary({ session_id: "running", status: "running", started_at_ns: 10n });
    const completed = summary({ session_id: "completed", started_at_ns: 9n, ended_at_ns: 30n });
    expect(selectDefaultSession([running, completed])).toBe(completed);
    const wrapped = [{ summary: running }, { summary: completed }];
    expect(selectDefaultSession(wrapped)).toBe(wrapped[1]);
    expect(selectDefaultSession([])).toBeUndefined();
  });

  it("prefers a non-empty session over an empty completed one when loading", () => {
    const emptyCompleted = {
      summary: summary({ session_id: "completed-empty", ended_at_ns: 50n }),
      events: [],
    };
    const live = { summary: summary({ session_id: "running-live", status: "running" }), events: [1] };
    expect(selectDefaultLoadedSession([emptyCompleted, live])).toBe(live);
    expect(selectDefaultLoadedSession([emptyCompleted])).toBe(emptyCompleted);
  });
});
