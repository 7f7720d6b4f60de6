import type { JsonObject, TelemetryEvent } from "@stormlog/core";
import { PhaseReplayIndex } from "@stormlog/phases";
import { seededRandom } from "@stormlog/phases/internal";
import { describe, expect, it } from "vitest";
import { BASE_NS, MiB, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { analyzeEvents, analyzeGaps } from "../../src/index.js";
import { summarizeCrossRankEvents } from "../oracles/cross-rank-events.js";
import {
  canonical,
  goldenCases,
  loadEvents,
  loadExpected,
  sortedByTimestamp,
} from "../support/golden-helpers.js";

describe("the report's cross-rank analysis equals the Python reference (golden cases)", () => {
  const cases = goldenCases("cross-rank");

  it.each(cases)("%s", (name) => {
    const events = loadEvents("cross-rank", name);
    const report = analyzeEvents(events);
    expect(report.cross_rank_analysis).not.toBeNull();
    expect(canonical(report.cross_rank_analysis)).toEqual(canonical(loadExpected("cross-rank", name)));
  });

  it("has the golden cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(24);
  });
});

describe("the report's gap analysis is gap.ts on each rank's samples (golden cases)", () => {
  it.each(goldenCases("gap"))("%s", (name) => {
    const events = loadEvents("gap", name);
    const report = analyzeEvents(events);
    const expected = analyzeGaps(sortedByTimestamp(events), {
      phaseResolver: PhaseReplayIndex.fromEvents(events),
    });
    expect(report.gap_analysis.map(({ rank: _r, session_id: _s, ...finding }) => finding)).toEqual(expected);
    const golden = (loadExpected("gap", name) as JsonObject).gap_analysis as JsonObject[];
    expect(report.gap_analysis.map((finding) => finding.classification)).toEqual(
      golden.map((finding) => finding.classification),
    );
    expect(canonical(report.gap_analysis.map((finding) => finding.evidence_timestamp_ns))).toEqual(
      canonical(golden.map((finding) => finding.evidence_timestamp_ns)),
    );
  });
});

/** A random distributed job exercising every rule of the cross-rank analysis. */
function randomJob(seed: number): TelemetryEvent[] {
  const next = seededRandom(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const worldSize = 2 + Math.floor(next() * 10);
  const events: TelemetryEvent[] = [];
  const perRankSessions = next() < 0.5;
  for (let rank = 0; rank < worldSize; rank++) {
    if (next() < 0.15) continue; // missing rank
    const sessionId = perRankSessions ? `s-${seed}-${rank}` : `s-${seed}`;
    const count = pick([0, 1, 2, 5, 20, 40]);
    const offset = BigInt(Math.floor((next() - 0.3) * (next() < 0.2 ? 5e9 : 5e6)));
    const interval = BigInt(pick([1, 50, 100, 100, 100]) * 1_000_000);
    let used = Math.floor(next() * 8 * 1024) * MiB;
    let ts = BASE_NS + offset;
    const jobId = next() < 0.1 ? pick([null, "", "job-b"]) : "job-a";
    const declared = next() < 0.2 ? pick([1, worldSize + 2]) : worldSize;
    let thread = 1;
    let sequence = 0;
    const open: { scopeId: string; path: string[]; thread: number }[] = [];
    for (let i = 0; i < count; i++) {
      if (next() < 0.6) ts += interval + BigInt(Math.floor(next() * 1000));
      if (next() < 0.25) used += Math.floor(next() * 1.5 * 1024) * MiB;
      else used = Math.max(0, used + Math.floor((next() - 0.6) * 300) * MiB);
      const v4 = next() < 0.05;
      events.push(
        record("sample", ts, {
          session_id: sessionId,
          rank,
          world_size: Math.max(declared, 1),
          job_id: jobId,
          pid: next() < 0.1 ? 2000 + rank : 1000 + rank,
          host: next() < 0.1 ? "host-b" : "host-a",
          sampling_interval_ms: Number(interval / 1_000_000n),
          device_used_bytes: used,
          allocator_reserved_bytes: Math.floor(used * 0.9),
          allocator_allocated_bytes: Math.floor(used * 0.8),
          ...(v4 ? ({ schema_version: 4, device_used_bytes: null } as unknown as object) : {}),
        }),
      );
      // Phases: nested, on two threads, some never closed.
      if (next() < 0.2 && open.length < 3) {
        sequence++;
        if (next() < 0.2) thread = thread === 1 ? 2 : 1;
        const parent = open.filter((scope) => scope.thread === thread).pop();
        const name = pick(["train", "forward", "backward"]);
        const scope = {
          scopeId: `${sessionId}:${rank}:${sequence}`,
          path: parent ? [...parent.path, name] : [name],
          thread,
        };
        open.push(scope);
        events.push(phaseEvent("enter", scope, sequence, ts, sessionId, rank));
      } else if (next() < 0.15 && open.length > 0 && next() < 0.8) {
        const scope = open.pop()!;
        sequence++;
        events.push(phaseEvent("exit", scope, sequence, ts, sessionId, rank));
      }
      if (next() < 0.05)
        events.push(record("warning", ts, { session_id: sessionId, rank, world_size: declared }));
    }
  }
  // Shuffle: storage order must not matter beyond ties.
  for (let i = events.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [events[i], events[j]] = [events[j]!, events[i]!];
  }
  return events;
}

function phaseEvent(
  action: "enter" | "exit",
  scope: { scopeId: string; path: string[]; thread: number },
  sequence: number,
  ts: bigint,
  sessionId: string,
  rank: number,
): TelemetryEvent {
  return record(action === "enter" ? "phase_enter" : "phase_exit", ts, {
    session_id: sessionId,
    rank,
    metadata: {
      phase_scope: {
        action,
        name: scope.path[scope.path.length - 1]!,
        path: scope.path,
        depth: scope.path.length,
        scope_id: scope.scopeId,
        parent_scope_id: null,
        thread_id: scope.thread,
        thread_name: `thread-${scope.thread}`,
        sequence,
      },
    },
  });
}

describe("the rank-at-a-time cross-rank analysis equals the event-by-event oracle", () => {
  it("on 300 random jobs (missing ranks, skew, ties, v4 nulls, several job ids and sessions)", () => {
    let withSuspects = 0;
    const notes = new Set<string>();
    for (let seed = 1; seed <= 300; seed++) {
      const events = randomJob(seed);
      if (new Set(events.map((event) => event.rank)).size < 2) continue;
      const reference = summarizeCrossRankEvents(sortedByTimestamp(events), {
        phaseResolver: PhaseReplayIndex.fromEvents(events),
      });
      expect(canonical(analyzeEvents(events).cross_rank_analysis), `seed ${seed}`).toEqual(
        canonical(reference),
      );
      if (reference.first_cause_suspects.length > 0) withSuspects++;
      for (const note of reference.notes) notes.add(note.replace(/-?\d+(?:, \d+)*/g, "N"));
    }
    expect(withSuspects).toBeGreaterThan(50);
    // The random jobs reach every note of the analysis.
    expect([...notes].sort()).toEqual([
      "At least two ranks are required for cross-rank first-cause analysis.",
      "Ignored non-sample events during cross-rank analysis.",
      "Ignored samples without device-used memory during cross-rank analysis.",
      "Missing rank data for ranks: N.",
      "Multiple job_id values were observed; filtering to the most common value.",
      "No qualifying cross-rank spikes were detected.",
      "Only one rank produced a qualifying spike; confidence is limited.",
      "Rank N starts N ns from the anchor; first-sample alignment may be approximate.",
      "Some ranks have fewer than two samples and cannot contribute to spike detection: N.",
    ]);
  });

  it("breaks equal-timestamp ties within a rank by (pid, host), as the oracle", () => {
    const events: TelemetryEvent[] = [];
    for (const rank of [0, 1]) {
      for (let i = 0; i < 6; i++) {
        const ts = BASE_NS + BigInt(Math.floor(i / 2)) * 100_000_000n;
        events.push(
          record("sample", ts, {
            rank,
            world_size: 2,
            pid: i % 2 === 0 ? 20 : 10,
            host: i % 3 === 0 ? "b" : "a",
            device_used_bytes: (i % 2 === 0 ? 100 : 900) * MiB,
          }),
        );
      }
    }
    expect(canonical(analyzeEvents(events).cross_rank_analysis)).toEqual(
      canonical(summarizeCrossRankEvents(sortedByTimestamp(events))),
    );
  });
});
