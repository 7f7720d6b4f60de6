import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DiagnoseTelemetryOptions, diagnoseTelemetry } from "../../src/index.js";
import { diagnoseFromEvents } from "../oracles/diagnostics-events.js";
import { goldenCases } from "../support/golden-helpers.js";

const ROOT = join(import.meta.dirname, "../../../..");
const GENERATOR = join(ROOT, "bench/generate-multirank.mjs");
const GOLDEN = join(ROOT, "fixtures/golden");

/** The indexed diagnosis equals the oracle's, record by record over every event loaded. */
async function expectSame(path: string, options: DiagnoseTelemetryOptions = {}) {
  const { index, ...indexed } = await diagnoseTelemetry(path, options);
  expect(indexed).toEqual(await diagnoseFromEvents(path, options));
  return index;
}

let dir = "";
let cache = "";
let job = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-diagnose-"));
  cache = join(dir, "cache");
  job = join(dir, "job");
  // 6 ranks, phases, alerts, a spike, a drifting gap; small segments so ranks span several.
  execFileSync(
    process.execPath,
    ["--import", "tsx", GENERATOR, job, "--ranks", "6", "--samples", "1200", "--rollover-events", "500"],
    { cwd: ROOT, stdio: "ignore" },
  );
  // Past the index's two-second window for recent writes, so that the index and stored result are used.
  await new Promise((done) => setTimeout(done, 2100));
}, 60_000);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("diagnoseTelemetry", () => {
  it("equals the event oracle on a generated multi-rank sink, cold, warm and without an index", async () => {
    const cold = await expectSame(job);
    expect(cold?.status).toBe("built");
    const warm = await expectSame(job);
    expect(warm).toMatchObject({ status: "reused", report_reused: true });
    const none = await expectSame(job, { index: false });
    expect(none?.status).toBe("disabled");
  }, 60_000);

  it("equals the event version with a rank filter, timelines and a single session", async () => {
    await expectSame(job, { ranks: "0,2-3,17" });
    await expectSame(job, { includeTimelines: true, index: false });
    await expectSame(job, { sessionId: "bench-session-005", index: false });
  }, 60_000);

  it("reads every rank of the generated job, one row each with its samples", async () => {
    const { diagnostics, selection } = await diagnoseTelemetry(job, { index: false });
    expect(selection.rankGroup).not.toBeNull();
    expect(diagnostics.present_ranks).toEqual([0, 1, 2, 3, 4, 5]);
    expect(diagnostics.rows.map((row) => row.samples)).toEqual([1200, 1200, 1200, 1200, 1200, 1200]);
  });

  for (const set of ["cross-rank", "gap"] as const) {
    it(`equals the event version on every golden ${set} case`, async () => {
      for (const name of goldenCases(set)) {
        const input = join(GOLDEN, set, name, "input.jsonl");
        await expectSame(input, { cacheDir: cache });
        await expectSame(input, { index: false, includeTimelines: true });
      }
    }, 60_000);
  }

  it("takes the event version for what the columns do not keep (sample phase hints)", async () => {
    const path = join(dir, "hints.jsonl");
    const lines: string[] = [];
    const scope = (action: string) =>
      `{"phase_scope": {"action": "${action}", "depth": 1, "name": "step", "parent_scope_id": null, "path": ["step"], "scope_id": "s1", "sequence": 1, "thread_id": 1, "thread_name": "main"}}`;
    const record = (t: number, type: string, metadata: string, used: number) =>
      `{"allocator_active_bytes": null, "allocator_allocated_bytes": 100, "allocator_change_bytes": 0, "allocator_inactive_bytes": null, "allocator_reserved_bytes": 100, "collector": "c", "context": null, "device_free_bytes": null, "device_id": 0, "device_total_bytes": 10000, "device_used_bytes": ${used}, "event_type": "${type}", "host": "h", "job_id": null, "local_rank": 0, "metadata": ${metadata}, "pid": 1, "rank": 0, "sampling_interval_ms": 10, "schema_version": 3, "session_id": "s", "timestamp_ns": ${1_700_000_000_000_000_000n + BigInt(t)}, "world_size": 1}`;
    lines.push(record(0, "phase_enter", scope("enter"), 100));
    for (let t = 1; t < 6; t++) lines.push(record(t, "sample", '{"origin_thread_id": 7}', 100 + 200 * t));
    lines.push(record(9, "phase_exit", scope("exit"), 100));
    writeFileSync(path, `${lines.join("\n")}\n`);
    const { index: _index, ...indexed } = await diagnoseTelemetry(path, { index: false });
    expect(indexed).toEqual(await diagnoseFromEvents(path));
    expect(indexed.diagnostics.anomalies.length).toBeGreaterThan(0);
  });
});
