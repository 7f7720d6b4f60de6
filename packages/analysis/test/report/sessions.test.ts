import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type TelemetryEvent } from "@stormlog/core";
import { summarizeTelemetrySessions } from "@stormlog/sink";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, MS, record, writeSink } from "../../../sink/test/support/telemetry-fixtures.js";
import {
  analyzeTelemetry,
  diagnoseTelemetry,
  findDistributedRankGroups,
  listTelemetrySessions,
} from "../../src/index.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-list-sessions-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** Samples of one session of job `job` (world size 2), one a millisecond, the n-th of rank `ranks[n % length]`. */
function rankSamples(
  sessionId: string,
  job: string | null,
  ranks: readonly number[],
  start = BASE_NS,
): TelemetryEvent[] {
  return Array.from({ length: 12 }, (_, i) =>
    record("sample", start + BigInt(i) * MS, {
      session_id: sessionId,
      job_id: job,
      world_size: 2,
      rank: ranks[i % ranks.length]!,
      device_used_bytes: 1000 + i,
    }),
  );
}

function writeJsonl(name: string, events: readonly TelemetryEvent[]): string {
  const path = join(temp, `${name}.jsonl`);
  writeFileSync(path, events.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""));
  return path;
}

const ids = (list: readonly { readonly summary: { readonly session_id: string } }[]): string[] =>
  list.map((session) => session.summary.session_id);

describe("listTelemetrySessions", () => {
  it("lists what the sink reader lists, and the rank group analyze and diagnose read", async () => {
    const dir = join(temp, "sink");
    writeSink(dir, [
      ...rankSamples("r0", "job", [0]),
      ...rankSamples("r1", "job", [1]),
      ...rankSamples("other", null, [0]),
    ]);
    const listed = await listTelemetrySessions(dir);
    expect(listed.sessions).toEqual(await summarizeTelemetrySessions(dir));
    expect(listed.rankGroups).toHaveLength(1);
    expect(ids(listed.rankGroups[0]!.members)).toEqual(["r0", "r1"]);
    const groupId = listed.rankGroups[0]!.summary.session_id;
    expect((await analyzeTelemetry(dir)).session.selected_session_id).toBe(groupId);
    expect((await diagnoseTelemetry(dir)).selection.sessionId).toBe(groupId);
  });

  it("lists a session the manifest names but no segment holds as the sink reader does, the input as given", async () => {
    const dir = join(temp, "manifest-only");
    writeSink(dir, rankSamples("r0", "job", [0]));
    const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) as {
      sessions: { session_id: string }[];
    };
    manifest.sessions.push({ ...manifest.sessions[0]!, session_id: "no-events" });
    writeFileSync(join(dir, "manifest.json"), JSON.stringify(manifest));
    const cwd = process.cwd();
    process.chdir(temp);
    try {
      const listed = await listTelemetrySessions("manifest-only");
      expect(listed.sessions).toEqual(await summarizeTelemetrySessions("manifest-only"));
      expect(listed.sessions.find((session) => session.summary.session_id === "no-events")?.sources).toEqual([
        "manifest-only",
      ]);
    } finally {
      process.chdir(cwd);
    }
  });

  it("takes a session as the ranks its events carry, as analyze does: one of two ranks is no rank of a group", async () => {
    // "both"'s events are of ranks 0 and 1 (its summary says 0): merged with "r1" as a rank group, rank 1 would count twice.
    const path = writeJsonl("two-ranks", [
      ...rankSamples("both", "job", [0, 1]),
      ...rankSamples("r1", "job", [1]),
    ]);
    const listed = await listTelemetrySessions(path);
    expect(ids(listed.sessions).sort()).toEqual(["both", "r1"]);
    expect(listed.rankGroups).toEqual([]);
    const analyzed = (await analyzeTelemetry(path)).session.selected_session_id;
    expect(ids(listed.sessions)).toContain(analyzed);
    expect((await diagnoseTelemetry(path)).selection.sessionId).toBe(analyzed);
    // The reference's rule, from the summaries alone, would have merged them.
    expect(findDistributedRankGroups(await summarizeTelemetrySessions(path))).toHaveLength(1);
  });

  it("groups ranks without a job id that ran at the same time, as analyze does", async () => {
    const path = writeJsonl("no-job", [
      ...rankSamples("a", null, [0]),
      ...rankSamples("b", null, [1], BASE_NS + 3n * MS),
    ]);
    const listed = await listTelemetrySessions(path);
    expect(listed.rankGroups.map((group) => ids(group.members))).toEqual([["a", "b"]]);
    expect((await analyzeTelemetry(path)).session.selected_session_id).toBe(
      listed.rankGroups[0]!.summary.session_id,
    );
  });

  it("reads a JSON document", async () => {
    const path = join(temp, "events.json");
    writeFileSync(
      path,
      `[${[...rankSamples("r0", "job", [0]), ...rankSamples("r1", "job", [1])].map((event) => encodeTelemetryRecord(event)).join(",")}]`,
    );
    const listed = await listTelemetrySessions(path);
    expect(ids(listed.sessions).sort()).toEqual(["r0", "r1"]);
    expect((await analyzeTelemetry(path)).session.selected_session_id).toBe(
      listed.rankGroups[0]!.summary.session_id,
    );
  });
});
