import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { analyzeTelemetry } from "@stormlog/analysis";
import { encodeTelemetryRecord } from "@stormlog/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GiB, MiB, settle, Timeline, writeSink } from "../../sink/test/support/telemetry-fixtures.js";
import { DATASET_MANIFEST, exportParquet, queryParquet } from "../src/index.js";

let dir = "";
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-parquet-edge-"));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** One rank's run: `steps` of `train / forward` with samples inside, allocated growing 1 MiB a step. */
function run(identity: ConstructorParameters<typeof Timeline>[0], steps: number): Timeline {
  const t = new Timeline(identity);
  t.tensors = 10;
  t.enter("train");
  for (let step = 0; step < steps; step++) {
    t.enter("forward").sample().sample();
    t.allocated += MiB;
    t.tensors += 1;
    t.sample().exit();
  }
  t.exit().sample();
  return t;
}

describe("exportParquet on edge cases", () => {
  it("a job without a job id, a sample without a tensor count and a counter past 2^53, read back exactly", async () => {
    const t = run({ session_id: "solo", job_id: null }, 6);
    // A sample without a tensor count, and one whose device total is past 2^53.
    t.events.push({ ...t.events[t.events.length - 1]!, timestamp_ns: t.now + 1_000_000n, metadata: {} });
    const sink = join(dir, "solo");
    writeSink(sink, t.events);
    const big = 2n ** 60n + 7n;
    const segment = join(sink, "segment-000001.jsonl");
    const lines = readFileSync(segment, "utf8").trimEnd().split("\n");
    const last = encodeTelemetryRecord({
      ...t.events[0]!,
      event_type: "sample",
      timestamp_ns: t.now + 2_000_000n,
    }).replace(`"device_total_bytes": ${80 * GiB}`, `"device_total_bytes": ${big}`);
    writeFileSync(segment, `${[...lines, last].join("\n")}\n`);
    await settle();
    const out = join(dir, "solo-dataset");
    const result = await exportParquet(sink, out);
    expect(result.jobId).toBeNull();
    const report = await analyzeTelemetry(sink);
    expect(result.tables.samples.rows).toBe(report.summary.sample_count);
    const rows = await queryParquet(
      out,
      `SELECT job_id, count(*), count(tfjs_num_tensors), max(device_total_bytes), min(timestamp_ns)
       FROM samples GROUP BY job_id`,
    );
    // Hive's null partition (__HIVE_DEFAULT_PARTITION__): DuckDB, Spark and Trino read NULL.
    expect(rows.rows).toEqual([
      [
        null,
        BigInt(report.summary.sample_count),
        BigInt(report.summary.sample_count - 1),
        big,
        t.events.find((event) => event.event_type === "sample")!.timestamp_ns,
      ],
    ]);
    const phases = await queryParquet(
      out,
      "SELECT phase_path, count(*), max(net_allocated_bytes), max(net_tensors) FROM phase_occurrences GROUP BY 1 ORDER BY 1",
    );
    expect(phases.rows).toEqual([
      ["train", 1n, BigInt(6 * MiB), 6n],
      ["train / forward", 6n, BigInt(MiB), 1n],
    ]);
  });

  it("a 300-character job id: names within 255 bytes, two such jobs apart, queries read the whole id", async () => {
    const out = join(dir, "long-job-ids");
    const ids = ["j".repeat(300), `${"j".repeat(299)}k`];
    for (const [n, jobId] of ids.entries()) {
      const sink = join(dir, `long-job-${n}`);
      writeSink(sink, run({ session_id: `long-${n}`, job_id: jobId }, 2).events);
      const result = await exportParquet(sink, out, { index: false });
      expect(result.jobId).toBe(jobId);
    }
    for (const table of readdirSync(out).filter((name) => !name.startsWith("_")))
      for (const name of readdirSync(join(out, table)))
        expect(Buffer.byteLength(name)).toBeLessThanOrEqual(255);
    const rows = await queryParquet(out, "SELECT job_id, count(*) FROM sessions GROUP BY 1 ORDER BY 1");
    expect(rows.rows).toEqual([
      [ids[0], 1n],
      [ids[1], 1n],
    ]);
  });

  it("holds several jobs: each export replaces its own job's parts and keeps the others'", async () => {
    const out = join(dir, "fleet");
    const jobA = join(dir, "job-a");
    const jobB = join(dir, "job-b");
    const world = (job: string, ranks: number) =>
      Array.from(
        { length: ranks },
        (_, rank) =>
          run(
            {
              session_id: `${job}-r${rank}`,
              job_id: job,
              rank,
              local_rank: rank,
              world_size: ranks,
              pid: 100 + rank,
            },
            4 + rank,
          ).events,
      );
    for (const [rank, events] of world("job-a", 2).entries()) writeSink(join(jobA, `rank-${rank}`), events);
    for (const [rank, events] of world("team/b c", 3).entries())
      writeSink(join(jobB, `rank-${rank}`), events);
    await settle();
    const a = await exportParquet(jobA, out);
    const b = await exportParquet(jobB, out);
    expect([a.jobId, b.jobId]).toEqual(["job-a", "team/b c"]);
    const byJob = async () =>
      (
        await queryParquet(
          out,
          "SELECT job_id, count(DISTINCT rank), count(*) FROM samples GROUP BY 1 ORDER BY 1",
        )
      ).rows;
    // The job id with a slash and a space is percent-encoded in its directory; DuckDB decodes it.
    const both = await byJob();
    expect(both.map((row) => row.slice(0, 2))).toEqual([
      ["job-a", 2n],
      ["team/b c", 3n],
    ]);
    const again = await exportParquet(jobA, out);
    expect(again.filesRemoved).toBe(0);
    expect(await byJob()).toEqual(both);
    const manifest = JSON.parse(readFileSync(join(out, DATASET_MANIFEST), "utf8")) as {
      jobs: Record<string, unknown>;
    };
    expect(Object.keys(manifest.jobs).sort()).toEqual(["job-a", "team%2Fb%20c"]);
  });
});
