import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { decodeTelemetryLine, stringifyJson, type TelemetryEvent } from "@stormlog/core";
import { judgeRetention, type RetentionInput } from "@stormlog/phases/internal";
import { afterEach, describe, expect, it, vi } from "vitest";
import { writeSink } from "../../../sink/test/support/telemetry-fixtures.js";
import { rankData } from "../../src/analyses/analysis.js";
import {
  IN_THREAD_JUDGE,
  leakJudgeFor,
  OFF_THREAD_OCCURRENCES,
  WorkerJudge,
} from "../../src/analyses/leak-judges.js";
import { birthSnapshots, LeakAccumulator } from "../../src/analyses/leaks.js";
import type { Occurrence } from "../../src/analyses/phase-stats.js";
import { analyzeTelemetry, reportToJson } from "../../src/index.js";
import { loadRanks, planDataset } from "../../src/input/dataset.js";
import { aggregateEvents } from "../../src/input/scan.js";
import { inMemorySegment } from "../../src/input/sessions.js";
import { WORKERS_FROM_CORES } from "../../src/threads.js";
import { trainingRun } from "../support/training-runs.js";

const LEAK_CASES = join(import.meta.dirname, "../../../../fixtures/golden/leaks");

/** Each session's rank of `events`: its occurrences and births, as the leak analysis gets them. */
function ranksOf(events: readonly TelemetryEvent[]): { occurrences: Occurrence[]; input: RetentionInput }[] {
  const segments = [inMemorySegment("<events>", null, aggregateEvents(events))];
  const sessionIds = [...new Set(events.map((event) => event.session_id))];
  const out: { occurrences: Occurrence[]; input: RetentionInput }[] = [];
  for (const loaded of loadRanks(planDataset(segments, sessionIds))) {
    const data = rankData(loaded);
    for (const series of data.series)
      out.push({
        occurrences: [...data.occurrences(series)],
        input: { lastSample: false, births: birthSnapshots(series.births) },
      });
  }
  return out;
}

function goldenCase(name: string): TelemetryEvent[] {
  return readFileSync(join(LEAK_CASES, name, "input.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((line) => decodeTelemetryLine(line) as TelemetryEvent);
}

const multiRank = (): TelemetryEvent[] =>
  [0, 1, 2, 3].flatMap((rank) =>
    trainingRun({
      seed: rank + 1,
      noise: 256 * 1024,
      keep: rank === 2 ? { backward: () => 16 * 1024 * 1024 } : {},
      identity: { rank, world_size: 4, session_id: `rank-${rank}`, job_id: "job" },
    }),
  );

/** A worker that replies to nothing and ends at once. */
const endingWorker = (): Worker =>
  new Worker(`require("node:worker_threads").parentPort.once("message", () => process.exit(3));`, {
    eval: true,
  });

/** A worker that says judging failed for every rank. */
const failingWorker = (): Worker =>
  new Worker(
    `const { parentPort } = require("node:worker_threads");
     parentPort.on("message", ({ id }) => parentPort.postMessage({ id, failed: true }));`,
    { eval: true },
  );

const judges: WorkerJudge[] = [];
function started(startWorker?: () => Worker): WorkerJudge {
  const judge = WorkerJudge.start(startWorker);
  if (judge === null) throw new Error("no judge worker started");
  judges.push(judge);
  return judge;
}

afterEach(async () => {
  for (const judge of judges.splice(0)) await judge.close();
});

describe("the leak judge worker", () => {
  const cases = readdirSync(LEAK_CASES).filter((name) => !name.endsWith(".md"));

  for (const name of cases) {
    it(`judges golden case ${name} as this thread does`, async () => {
      const judge = started();
      const ranks = ranksOf(goldenCase(name));
      expect(ranks.length).toBeGreaterThan(0);
      const verdicts = await Promise.all(ranks.map((rank) => judge.judge(rank.occurrences, rank.input)));
      verdicts.forEach((got, k) => {
        expect(got).toEqual(judgeRetention(ranks[k]!.occurrences, ranks[k]!.input));
      });
    });
  }

  it("pools a job's ranks into the same leak report as this thread", async () => {
    const events = multiRank();
    const here = new LeakAccumulator();
    const there = new LeakAccumulator(started());
    for (const { occurrences, input } of ranksOf(events)) {
      here.addSession(occurrences, input.births);
      there.addSession(occurrences, input.births);
    }
    expect(() => there.finish()).toThrow(/await settled\(\) first/);
    await there.settled();
    const report = there.finish();
    expect(report).toEqual(here.finish());
    expect(report.find((leak) => leak.phase_path === "train / backward")).toMatchObject({
      verdict: "leaking",
      leaking_ranks: [2],
    });
  });

  it("keeps its worker for the next analysis of the process, and ends one it cannot keep", async () => {
    const [rank] = ranksOf(multiRank());
    const first = started();
    await first.judge(rank!.occurrences, rank!.input);
    await first.close();
    // Closing twice changes nothing: the kept worker is not ended.
    await first.close();
    const second = started();
    expect(second.threadId).toBe(first.threadId);
    expect(await second.judge(rank!.occurrences, rank!.input)).toEqual(
      judgeRetention(rank!.occurrences, rank!.input),
    );
    // One worker is kept at a time: a third judge beside the second gets a fresh one, ended at close.
    const third = started();
    expect(third.threadId).not.toBe(second.threadId);
    await second.close();
    await third.close();
    expect(started().threadId).toBe(second.threadId);
  });

  it("judges here the ranks a worker that ended left unanswered", async () => {
    const judge = started(endingWorker);
    const ranks = ranksOf(multiRank());
    const verdicts = await Promise.all(ranks.map((rank) => judge.judge(rank.occurrences, rank.input)));
    verdicts.forEach((got, k) => {
      expect(got).toEqual(judgeRetention(ranks[k]!.occurrences, ranks[k]!.input));
    });
    // Once it is gone, later ranks are judged at once.
    const later = judge.judge(ranks[0]!.occurrences, ranks[0]!.input);
    expect(later).toBeInstanceOf(Map);
  });

  it("judges here a rank whose judging failed on the worker, and throws this thread's error", async () => {
    const judge = started(failingWorker);
    const [rank] = ranksOf(multiRank());
    expect(await judge.judge(rank!.occurrences, rank!.input)).toEqual(
      judgeRetention(rank!.occurrences, rank!.input),
    );
    // An input that throws here too: its error reaches `settled`.
    const broken = rank!.occurrences.map((occurrence) => ({ ...occurrence }));
    const births = [{ timestampNs: 0n, phases: null as unknown as Map<string, never> }];
    const leaks = new LeakAccumulator(judge);
    leaks.addSession(broken, [...births, ...births, ...births, ...births, ...births, ...births]);
    let thrown: unknown = null;
    try {
      judgeRetention(broken, {
        lastSample: false,
        births: [...births, ...births, ...births, ...births, ...births, ...births],
      });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(Error);
    await expect(leaks.settled()).rejects.toThrow((thrown as Error).message);
  });

  it("is used only for enough occurrences, where workers help, and not with STORMLOG_SCAN_THREADS=1", async () => {
    const previous = process.env.STORMLOG_SCAN_THREADS;
    try {
      process.env.STORMLOG_SCAN_THREADS = "2";
      expect(leakJudgeFor(OFF_THREAD_OCCURRENCES - 1)).toBe(IN_THREAD_JUDGE);
      const judge = leakJudgeFor(OFF_THREAD_OCCURRENCES);
      expect(judge).toBeInstanceOf(WorkerJudge);
      await judge.close();
      process.env.STORMLOG_SCAN_THREADS = "1";
      expect(leakJudgeFor(OFF_THREAD_OCCURRENCES)).toBe(IN_THREAD_JUDGE);
      // Unset: from WORKERS_FROM_CORES cores.
      delete process.env.STORMLOG_SCAN_THREADS;
      const byCores = leakJudgeFor(OFF_THREAD_OCCURRENCES);
      expect(byCores instanceof WorkerJudge).toBe(availableParallelism() >= WORKERS_FROM_CORES);
      await byCores.close();
    } finally {
      if (previous === undefined) delete process.env.STORMLOG_SCAN_THREADS;
      else process.env.STORMLOG_SCAN_THREADS = previous;
    }
  });
});

describe("an analysis with its leaks judged on the worker", () => {
  it("reports what the one-thread analysis reports", async () => {
    const dir = mkdtempSync(join(tmpdir(), "stormlog-judge-"));
    const previous = process.env.STORMLOG_SCAN_THREADS;
    try {
      // Enough phase occurrences for the judge worker: 12 ranks of 120 steps, 4 phases a step.
      const events = Array.from({ length: 12 }, (_, rank) =>
        trainingRun({
          steps: 120,
          seed: rank + 1,
          noise: 64 * 1024,
          keep: rank % 5 === 1 ? { forward: () => 8 * 1024 * 1024 } : {},
          identity: { rank, world_size: 12, session_id: `rank-${rank}`, job_id: "job" },
        }),
      ).flat();
      expect(events.filter((event) => event.event_type === "phase_enter").length).toBeGreaterThanOrEqual(
        OFF_THREAD_OCCURRENCES,
      );
      writeSink(dir, events, { segmentSize: 5000 });
      const reports: string[] = [];
      const starts = vi.spyOn(WorkerJudge, "start");
      for (const threads of ["2", "1"]) {
        process.env.STORMLOG_SCAN_THREADS = threads;
        const report = await analyzeTelemetry(dir, { index: false });
        if (threads === "2") {
          expect(starts).toHaveBeenCalledTimes(1);
          expect(starts.mock.results[0]?.value).toBeInstanceOf(WorkerJudge);
          expect(report.leaks.find((leak) => leak.phase_path === "train / forward")?.leaking_ranks).toEqual([
            1, 6, 11,
          ]);
        }
        const { index: _index, ...json } = reportToJson(report);
        reports.push(stringifyJson(json));
      }
      expect(starts).toHaveBeenCalledTimes(1);
      starts.mockRestore();
      expect(reports[0]).toBe(reports[1]);
    } finally {
      if (previous === undefined) delete process.env.STORMLOG_SCAN_THREADS;
      else process.env.STORMLOG_SCAN_THREADS = previous;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
