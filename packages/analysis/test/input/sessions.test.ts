import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  encodeTelemetryRecord,
  parseJson,
  stringifyJson,
  type TelemetryEvent,
  type TelemetryRecordV3,
} from "@stormlog/core";
import { stableLegacySessionId } from "@stormlog/core/internal";
import { SessionNotFoundError } from "@stormlog/sink";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, GiB, MS, Timeline, writeSink } from "../../../sink/test/support/telemetry-fixtures.js";
import { analyzeTelemetry, loadDistributedEvents } from "../../src/index.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-merge-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** One rank's run written as its own sink directory under `root`. */
function rankRun(
  root: string,
  rank: number,
  identity: Partial<TelemetryRecordV3>,
  options: { start?: bigint; spikeAt?: number; status?: "completed" | "interrupted" } = {},
): string {
  const sessionId = identity.session_id ?? `session-r${rank}`;
  const t = new Timeline(
    { rank, session_id: sessionId, pid: 100 + rank, ...identity },
    options.start ?? BASE_NS + BigInt(rank) * MS,
  );
  t.event("start");
  for (let i = 0; i < 30; i++) {
    if (i === (options.spikeAt ?? 20)) t.gap += 2 * GiB;
    t.sample();
  }
  t.event("stop");
  writeSink(join(root, `rank-${rank}-${sessionId}`), t.events, { status: options.status ?? "completed" });
  return sessionId;
}

describe("per-rank sessions of one job are merged into one distributed view", () => {
  const root = join(temp, "job");
  const job = { job_id: "job-7", world_size: 4 };
  const ids = [0, 1, 2].map((rank) => rankRun(root, rank, job, { spikeAt: rank === 1 ? 10 : 20 }));
  const groupId = stableLegacySessionId(["distributed.rank_group", "job-7", 4, ...[...ids].sort()]);

  it("selects the rank group by default, with the reference's synthetic id", async () => {
    const report = await analyzeTelemetry(root, { index: false });
    expect(report.session).toMatchObject({
      selected_session_id: groupId,
      merged_session_ids: ids,
      status: "completed",
      job_id: "job-7",
      world_size: 4,
    });
    expect([...report.session.discovered_session_ids].sort()).toEqual([...ids].sort());
    expect(report.summary.ranks).toEqual([0, 1, 2]);
    expect(report.cross_rank_analysis).toMatchObject({
      participating_ranks: [0, 1, 2],
      missing_ranks: [3],
      world_size: 4,
    });
    expect(report.cross_rank_analysis?.first_cause_suspects[0]?.rank).toBe(1);
  });

  it("analyses one member alone when its id is given, and the group by its id", async () => {
    const single = await analyzeTelemetry(root, { index: false, sessionId: ids[2] });
    expect(single.session.selected_session_id).toBe(ids[2]);
    expect(single.session.merged_session_ids).toBeUndefined();
    expect(single.summary.ranks).toEqual([2]);
    expect(single.cross_rank_analysis).toBeNull();
    const group = await analyzeTelemetry(root, { index: false, sessionId: groupId });
    expect(group.session.merged_session_ids).toEqual(ids);
  });

  it("names the ids there are for an unknown session", async () => {
    const error = await analyzeTelemetry(root, { index: false, sessionId: "nope" }).catch((e: unknown) => e);
    expect(SessionNotFoundError.isInstance(error)).toBe(true);
    expect((error as SessionNotFoundError).availableSessionIds).toContain(groupId);
  });

  it("keeps the preferred session of a restarted rank and says so", async () => {
    const restarted = join(temp, "restarted");
    for (const rank of [0, 1]) rankRun(restarted, rank, job);
    // Rank 1 crashed once before (an older, interrupted session).
    rankRun(
      restarted,
      1,
      { ...job, session_id: "session-r1-old" },
      { start: BASE_NS - 10n ** 12n, status: "interrupted" },
    );
    const report = await analyzeTelemetry(restarted, { index: false });
    expect(report.session.merged_session_ids).toEqual(["session-r0", "session-r1"]);
    expect(report.notes.some((note) => note.includes("session-r1-old"))).toBe(true);
  });
});

describe("ranks without a job id that run at the same time (a shared sink directory)", () => {
  it("are read as one job, with a note that says why", async () => {
    const root = join(temp, "no-job-concurrent");
    const ids = [0, 1, 2, 3].map((rank) => rankRun(root, rank, { job_id: null, world_size: 4 }));
    // An earlier run of the same ranks in the same directory, over before this one began.
    for (const rank of [0, 1])
      rankRun(
        root,
        rank,
        { job_id: null, world_size: 4, session_id: `earlier-r${rank}` },
        {
          start: BASE_NS - 3600n * 1000n * MS,
        },
      );
    const report = await analyzeTelemetry(root, { index: false });
    expect(report.session.merged_session_ids).toEqual(ids);
    expect(report.summary.ranks).toEqual([0, 1, 2, 3]);
    expect(report.notes).toContainEqual(
      expect.stringContaining("Ranks 0, 1, 2, 3 of world size 4 have no job_id"),
    );
    // The earlier run is a group of its own, picked by its id.
    const earlierId = stableLegacySessionId([
      "distributed.rank_group.concurrent",
      4,
      "earlier-r0",
      "earlier-r1",
    ]);
    const earlier = await analyzeTelemetry(root, { index: false, sessionId: earlierId });
    expect(earlier.session.merged_session_ids).toEqual(["earlier-r0", "earlier-r1"]);
  });
});

describe("two jobs without a job id at the same time (one rank running twice at once)", () => {
  it("are no rank group: the ranks cannot be told apart", async () => {
    const root = join(temp, "no-job-two-jobs");
    for (const run of ["a", "b"])
      for (const rank of [0, 1])
        rankRun(root, rank, { job_id: null, world_size: 2, session_id: `${run}-r${rank}` });
    const report = await analyzeTelemetry(root, { index: false });
    expect(report.session.merged_session_ids).toBeUndefined();
    expect(report.summary.ranks).toHaveLength(1);
    // A JSON document of the same: the event readers (diagnose's, the exports') agree.
    const one = join(temp, "no-job-concurrent-doc.json");
    const events: TelemetryEvent[] = [];
    for (const rank of [0, 1, 2]) {
      const t = new Timeline(
        { rank, session_id: `doc-r${rank}`, pid: 100 + rank, job_id: null, world_size: 3 },
        BASE_NS + BigInt(rank) * MS,
      );
      for (let i = 0; i < 10; i++) t.sample();
      events.push(...t.events);
    }
    writeFileSync(one, stringifyJson(events.map((event) => parseJson(encodeTelemetryRecord(event)))));
    const { selection } = await loadDistributedEvents(one);
    expect(selection.memberSessionIds).toEqual(["doc-r0", "doc-r1", "doc-r2"]);
    expect((await analyzeTelemetry(one)).summary.ranks).toEqual([0, 1, 2]);
  });
});

describe("sessions that are not one job's ranks stay apart", () => {
  it.each([
    ["no job id, one after the other", { job_id: null, world_size: 4 }],
    ["world size 1", { job_id: "job", world_size: 1 }],
  ])("%s", async (_label, identity) => {
    const root = join(temp, `apart-${_label.replaceAll(" ", "-")}`);
    // With world size 1 both processes are rank 0 (two single-process runs). Without a job id, the
    // second rank starts an hour after the first ended.
    for (const rank of [0, 1])
      rankRun(
        root,
        rank,
        { ...identity, rank: identity.world_size === 1 ? 0 : rank },
        { start: BASE_NS + BigInt(rank) * 3600n * 1000n * MS },
      );
    const report = await analyzeTelemetry(root, { index: false });
    expect(report.session.merged_session_ids).toBeUndefined();
    expect(report.session.discovered_session_ids).toHaveLength(2);
    expect(report.summary.ranks).toHaveLength(1);
  });

  it("more ranks than the world size", async () => {
    const root = join(temp, "too-many");
    for (const rank of [0, 1, 2])
      rankRun(root, rank, { job_id: "job", world_size: 2 + (rank === 2 ? 1 : 0) });
    const report = await analyzeTelemetry(root, { index: false });
    // Ranks 0 and 1 declare world size 2 and form a group; rank 2 (world size 3) stays apart.
    expect(report.session.merged_session_ids).toEqual(["session-r0", "session-r1"]);
  });
});
