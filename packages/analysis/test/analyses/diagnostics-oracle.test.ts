import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  decodeTelemetryJsonl,
  encodeTelemetryRecord,
  type JsonObject,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { PhaseReplayIndex } from "@stormlog/phases";
import { seededRandom } from "@stormlog/phases/internal";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, GiB, MiB, MS, record, settle } from "../../../sink/test/support/telemetry-fixtures.js";
import {
  analyzeTelemetry,
  buildDistributedDiagnostics,
  type CollectiveAttributionLike,
  type DiagnosticsOptions,
  diagnoseTelemetry,
  reportToJson,
} from "../../src/index.js";
import { DETAIL_CAP } from "../../src/input/aggregate.js";
import { buildDiagnosticsFromEvents, diagnoseFromEvents } from "../oracles/diagnostics-events.js";
import { goldenCases, loadEvents } from "../support/golden-helpers.js";

/**
 * The diagnostics read the dataset only; the record-by-record oracle checks them on what the
 * dataset once could not hold exactly (and the event version had to read instead): samples with
 * phase attribution hints, a rank with several sessions, more alerts than the index keeps, sample
 * records spelled otherwise than `sample`, event types named like Object.prototype members.
 */
const dir = mkdtempSync(join(tmpdir(), "stormlog-diagnostics-oracle-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface JobShape {
  readonly ranks: number;
  /** Sessions per rank (a restarted process writes a second one, overlapping in time). */
  readonly sessions: number;
  /** Phase attribution hints on some samples (threads and scopes, one float-marked). */
  readonly hints: boolean;
  /** Sample records spelled as the reference's rules read them, or not. */
  readonly spellings: readonly string[];
  /** Alerts per session (a few at identical timestamps across sessions). */
  readonly alerts: number;
  /** Records whose type is named like an Object.prototype member. */
  readonly protoTypes: boolean;
}

const SPELLINGS = ["sample", "Sample", " sample\t", "SAMPLE", "\u017fample", "\u00a0Sample ", "samples"];

/** A random job of the given shape: phases on two threads, drifting and spiking hidden memory. */
function job(seed: number, shape: JobShape): TelemetryEvent[] {
  const next = seededRandom(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const out: TelemetryEvent[] = [];
  for (let rank = 0; rank < shape.ranks; rank++) {
    for (let s = 0; s < shape.sessions; s++) {
      const session = `job-r${rank}-s${s}`;
      const identity = {
        session_id: session,
        rank,
        world_size: shape.ranks + (next() < 0.2 ? 1 : 0),
        job_id: "job",
        pid: 100 + rank * 10 + s,
        device_total_bytes: 16 * GiB,
      };
      // The second session starts inside the first one's span, on the same millisecond grid.
      let now = BASE_NS + BigInt(s * 40 + Math.floor(next() * 5)) * MS;
      let sequence = 0;
      const open: { thread: number; scope: JsonObject }[] = [];
      let reserved = 2 * GiB;
      let allocated = GiB;
      let gap = 64 * MiB;
      const counters = () => ({
        allocator_allocated_bytes: allocated,
        allocator_reserved_bytes: reserved,
        device_used_bytes: reserved + gap,
      });
      const boundary = (action: "enter" | "exit", thread: number, scope: JsonObject) => {
        sequence++;
        out.push(
          record(`phase_${action}`, now, {
            ...identity,
            ...counters(),
            metadata: {
              ...(next() < 0.5 ? { phase_counters: "boundary_read" } : {}),
              phase_scope: { ...scope, action, sequence, thread_id: thread, thread_name: `t${thread}` },
            },
          }),
        );
      };
      for (let step = 0; step < 60; step++) {
        now += BigInt(1 + Math.floor(next() * 3)) * MS;
        const roll = next();
        if (roll < 0.15 && open.length < 4) {
          const thread = next() < 0.5 ? 1 : 2;
          const parent = [...open].reverse().find((entry) => entry.thread === thread);
          const name = pick(["train", "forward", "backward", "eval"]);
          const path = [...((parent?.scope.path as string[] | undefined) ?? []), name];
          const scope: JsonObject = {
            name,
            path,
            depth: path.length,
            scope_id: `${session}:${sequence + 1}`,
            parent_scope_id: (parent?.scope.scope_id as string | undefined) ?? null,
          };
          boundary("enter", thread, scope);
          open.push({ thread, scope });
        } else if (roll < 0.27 && open.length > 0) {
          const entry = open.pop()!;
          boundary("exit", entry.thread, entry.scope);
        } else if (roll < 0.27 + shape.alerts / 60) {
          const type = pick(["warning", "critical", "error"]);
          // Now and then at the other session's time exactly (ties go by storage order).
          const at = next() < 0.3 ? BASE_NS + BigInt(step) * 4n * MS : now;
          out.push(
            record(type, at, {
              ...identity,
              ...counters(),
              context: `${type} ${step}`,
              metadata: shape.hints && next() < 0.5 ? { origin_thread_id: 2 } : {},
            }),
          );
        } else {
          allocated += Math.floor(next() * 8) * MiB;
          reserved = Math.max(reserved, allocated + Math.floor(next() * 64) * MiB);
          gap += next() < 0.08 ? 2 * GiB : Math.floor(next() * 12) * MiB;
          if (gap > 3 * GiB) gap = 64 * MiB;
          const metadata: JsonObject = {};
          if (shape.hints && next() < 0.4) {
            const hint = open.length > 0 && next() < 0.5 ? open[0]! : null;
            if (hint !== null) metadata.origin_phase_scope_id = hint.scope.scope_id as string;
            else {
              metadata.origin_thread_id = next() < 0.5 ? 1 : 2;
              if (next() < 0.2) markFloat(metadata, "origin_thread_id");
            }
          }
          const sample = record(pick(shape.spellings), now, { ...identity, ...counters(), metadata });
          // Schema v4 writes a counter it could not read as null.
          const unread = { schema_version: 4, allocator_allocated_bytes: null, allocator_change_bytes: null };
          out.push(next() < 0.1 ? ({ ...sample, ...unread } as unknown as TelemetryEvent) : sample);
        }
        if (shape.protoTypes && next() < 0.03) {
          out.push(record(pick(["constructor", "toString", "__proto__", "hasOwnProperty"]), now, identity));
        }
      }
    }
  }
  // Not in time order: the diagnostics sort (stably) as the reference's loader does.
  const order = out.map((event, i) => ({ event, key: next(), i }));
  order.sort((a, b) => a.key - b.key);
  return order.map(({ event }) => event);
}

const PLAIN: JobShape = {
  ranks: 3,
  sessions: 1,
  hints: false,
  spellings: ["sample"],
  alerts: 3,
  protoTypes: false,
};

const SHAPES: Record<string, JobShape> = {
  "phase attribution hints": { ...PLAIN, hints: true },
  "several sessions per rank": { ...PLAIN, sessions: 2 },
  "sample records spelled otherwise": { ...PLAIN, spellings: SPELLINGS },
  "types named like Object.prototype members": { ...PLAIN, protoTypes: true },
  "all of them": { ranks: 4, sessions: 3, hints: true, spellings: SPELLINGS, alerts: 6, protoTypes: true },
};

/** The adapter (events, then the dataset) equals the oracle, with the options given to both. */
function expectAdapterEqualsOracle(events: readonly TelemetryEvent[], options: DiagnosticsOptions = {}) {
  const result = buildDistributedDiagnostics(events, options);
  expect(result).toEqual(buildDiagnosticsFromEvents(events, options));
  return result;
}

function writeJsonl(name: string, events: readonly TelemetryEvent[]): string {
  const path = join(dir, `${name}.jsonl`);
  writeFileSync(path, events.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""));
  return path;
}

describe("buildDistributedDiagnostics equals the event oracle", () => {
  for (const [name, shape] of Object.entries(SHAPES)) {
    it(`on generated jobs: ${name}`, () => {
      let anomalies = 0;
      for (let seed = 1; seed <= 6; seed++) {
        const events = job(seed * 97 + name.length, shape);
        const result = expectAdapterEqualsOracle(events, { includeTimelines: true });
        anomalies += result.anomalies.length;
        expectAdapterEqualsOracle(events, { selectedRanks: new Set([0, 2, 9]) });
        expectAdapterEqualsOracle(events, { phaseResolver: null });
      }
      // The jobs hold something to find.
      expect(anomalies).toBeGreaterThan(6);
    });
  }

  it("with a given resolver and collective attributions", () => {
    const events = job(5, SHAPES["all of them"]!);
    const collective: CollectiveAttributionLike[] = [
      {
        rank: 1,
        interval_start_ns: BASE_NS,
        classification: "collective_confident",
        confidence: 0.91,
        reason_codes: ["b", "a"],
      },
      {
        rank: 3,
        interval_start_ns: BASE_NS + 90n * MS,
        classification: "collective_suspect",
        confidence: 0.65,
        reason_codes: [],
        phase_attribution: null,
      },
    ];
    const result = expectAdapterEqualsOracle(events, {
      phaseResolver: PhaseReplayIndex.fromEvents(events),
      collectiveAttributions: collective,
      selectedRanks: new Set([1, 3]),
    });
    expect(result.anomalies.filter((anomaly) => anomaly.signal.startsWith("collective:"))).toHaveLength(2);
  });

  it("attributes phases by the samples' hints, as the oracle does", () => {
    // A sample while thread 1 is in `train` and thread 2 in `eval`: its hint decides.
    const scope = (action: string, thread: number, name: string, id: string) => ({
      metadata: {
        phase_scope: {
          action,
          name,
          path: [name],
          depth: 1,
          scope_id: id,
          parent_scope_id: null,
          sequence: 1,
          thread_id: thread,
          thread_name: `t${thread}`,
        },
      },
    });
    const used = (i: number) => ({
      allocator_reserved_bytes: GiB,
      allocator_allocated_bytes: GiB,
      device_used_bytes: GiB + (i === 3 ? 4 * GiB : 0),
      device_total_bytes: 16 * GiB,
    });
    const events = [
      record("phase_enter", BASE_NS, scope("enter", 1, "train", "a")),
      record("phase_enter", BASE_NS + MS, scope("enter", 2, "eval", "b")),
      ...[0, 1, 2, 3, 4].map((i) =>
        record("sample", BASE_NS + BigInt(2 + i) * MS, { ...used(i), metadata: { origin_thread_id: 2 } }),
      ),
      record("phase_exit", BASE_NS + 9n * MS, scope("exit", 2, "eval", "b")),
      record("phase_exit", BASE_NS + 10n * MS, scope("exit", 1, "train", "a")),
    ];
    const result = expectAdapterEqualsOracle(events);
    const breach = result.anomalies.find((anomaly) => anomaly.signal === "gap_ratio_breach");
    expect(breach?.phase_path).toBe("eval");
  });

  it("on every golden cross-rank and gap case", () => {
    for (const set of ["cross-rank", "gap"] as const) {
      for (const name of goldenCases(set)) {
        const events = loadEvents(set, name);
        expectAdapterEqualsOracle(events, { includeTimelines: true });
        expectAdapterEqualsOracle(events, { phaseResolver: PhaseReplayIndex.fromEvents(events) });
      }
    }
  });
});

describe("diagnoseTelemetry equals the event oracle", () => {
  it("on generated jobs written as files, each session chosen too", async () => {
    for (const [name, shape] of Object.entries(SHAPES)) {
      const events = job(11 + name.length, shape);
      const path = writeJsonl(name.replaceAll(/\W+/g, "-"), events);
      for (const options of [{ index: false, includeTimelines: true }, { cacheDir: join(dir, "cache") }]) {
        const { index: _index, ...indexed } = await diagnoseTelemetry(path, options);
        expect(indexed).toEqual(await diagnoseFromEvents(path, options));
      }
      const sessionId = events.find((event) => event.rank === 1)!.session_id;
      const { index: _index, ...one } = await diagnoseTelemetry(path, { sessionId, index: false });
      expect(one).toEqual(await diagnoseFromEvents(path, { sessionId }));
    }
  }, 60_000);

  it("with more alerts on a rank than the index keeps", async () => {
    const events: TelemetryEvent[] = [];
    const count = DETAIL_CAP + 150;
    for (let i = 0; i < count; i++) {
      const at = BASE_NS + BigInt(i) * MS;
      events.push(record("sample", at, { device_used_bytes: i === count - 1 ? 20 * GiB : GiB }));
      events.push(record(i % 3 === 0 ? "critical" : "warning", at, { context: `alert ${i}` }));
    }
    // The last alerts are the earliest: a diagnosis from the first DETAIL_CAP would miss them.
    events.push(record("error", BASE_NS - MS, { context: "earliest" }));
    const path = writeJsonl("many-alerts", events);
    const cacheDir = join(dir, "cache-alerts");
    // Cold, then from the index's files (a result with timelines is not stored), then without an index.
    for (const options of [{ cacheDir }, { cacheDir, includeTimelines: true }, { index: false }]) {
      const { index, ...indexed } = await diagnoseTelemetry(path, options);
      expect(indexed).toEqual(await diagnoseFromEvents(path, options));
      expect(indexed.diagnostics.anomalies.filter((a) => a.signal.startsWith("alert:"))).toHaveLength(
        count + 1,
      );
      expect(indexed.diagnostics.indicators[0]).toMatchObject({ details: "earliest" });
      if (options.index !== false) expect(index?.status).not.toBe("disabled");
    }
    // The report reads every alert as well, with the index or without.
    const withIndex = reportToJson(await analyzeTelemetry(path, { cacheDir }));
    const without = reportToJson(await analyzeTelemetry(path, { index: false }));
    expect(withIndex.alerts).toEqual(without.alerts);
    expect(withIndex.summary).toMatchObject({ per_rank: [{ alert_count: count + 1 }] });
  }, 60_000);
});

describe("counters past 2^53", () => {
  it("give exact changes and hidden gaps, a bigint only past 2^53, in memory, from a file and stored", async () => {
    const next = seededRandom(3);
    const SCALE = 2n ** 24n;
    // Each counter times 2^24 (past 2^53) plus a small part the nearest double loses.
    const wide = (value: number): bigint => BigInt(value) * SCALE + BigInt(Math.floor(next() * 255));
    const lines: string[] = [];
    const readings = new Map<number, { allocated: bigint; reserved: bigint; used: bigint }[]>();
    for (const rank of [0, 1]) {
      const list: { allocated: bigint; reserved: bigint; used: bigint }[] = [];
      readings.set(rank, list);
      for (let i = 0; i < 40; i++) {
        const counters = {
          allocated: wide(GiB + i * MiB),
          reserved: wide(2 * GiB + i * MiB),
          used: wide(2 * GiB + i * MiB + (i % 7 === 3 ? GiB : 16 * MiB)),
        };
        list.push(counters);
        const identity = { session_id: `wide-${rank}`, rank, world_size: 2, job_id: "wide", pid: 10 + rank };
        const base = record("sample", BASE_NS + BigInt(i * 10 + rank) * MS, identity);
        const object: JsonObject = {
          ...(base as unknown as JsonObject),
          allocator_allocated_bytes: counters.allocated,
          allocator_reserved_bytes: counters.reserved,
          device_used_bytes: counters.used,
          device_total_bytes: wide(16 * GiB),
        };
        lines.push(stringifyJson(object, { sortKeys: true }));
        if (i % 9 === 4) lines.push(encodeTelemetryRecord(record("warning", base.timestamp_ns, identity)));
      }
    }
    const text = `${lines.join("\n")}\n`;
    const path = join(dir, "wide.jsonl");
    writeFileSync(path, text);
    const events = decodeTelemetryJsonl(text).map((line) => line.record as TelemetryEvent);

    const result = expectAdapterEqualsOracle(events);
    const exactOf = (value: bigint): number | bigint =>
      value > BigInt(Number.MAX_SAFE_INTEGER) || value < -BigInt(Number.MAX_SAFE_INTEGER)
        ? value
        : Number(value);
    let differs = false;
    for (const row of result.rows) {
      const list = readings.get(row.rank)!;
      const first = list[0]!;
      const last = list.at(-1)!;
      const gaps = list.map(({ used, reserved }) => used - reserved);
      expect(row.allocated_delta_bytes).toBe(exactOf(last.allocated - first.allocated));
      expect(row.reserved_delta_bytes).toBe(exactOf(last.reserved - first.reserved));
      expect(row.device_used_delta_bytes).toBe(exactOf(last.used - first.used));
      expect(row.hidden_gap_latest_bytes).toBe(exactOf(gaps.at(-1)!));
      expect(row.hidden_gap_peak_abs_bytes).toBe(
        exactOf([...gaps].sort((a, b) => (a < b ? 1 : a > b ? -1 : 0))[0]!),
      );
      // Past 2^53 the peak is a bigint; the nearest doubles would give other changes.
      expect(typeof row.hidden_gap_peak_abs_bytes).toBe("bigint");
      if (row.allocated_delta_bytes !== Number(last.allocated) - Number(first.allocated)) differs = true;
    }
    expect(differs).toBe(true);
    expect(result.anomalies.some((anomaly) => anomaly.signal === "gap_ratio_breach")).toBe(true);

    // From the file: without an index, cold, and the stored result read back (bigints kept).
    await settle();
    const cacheDir = join(dir, "cache-wide");
    for (const options of [{ index: false }, { cacheDir }, { cacheDir }]) {
      const { index: _index, ...indexed } = await diagnoseTelemetry(path, options);
      expect(indexed).toEqual(await diagnoseFromEvents(path, options));
      expect(indexed.diagnostics.rows).toEqual(result.rows);
    }
    const { index } = await diagnoseTelemetry(path, { cacheDir });
    expect(index?.report_reused).toBe(true);
  }, 30_000);

  it("judge a gap ratio at the threshold by the exact quotient, as Python's int / int", () => {
    // 2^51 / (20 * 2^51 + 1) rounds to just under 0.05; over the total's nearest double it is 0.05.
    const total = 20n * 2n ** 51n + 1n;
    expect(2 ** 51 / Number(total)).toBe(0.05);
    const sample = record("sample", BASE_NS, {
      allocator_allocated_bytes: 2 ** 52,
      allocator_reserved_bytes: 2 ** 52,
      device_used_bytes: 2 ** 52 + 2 ** 51,
    });
    const text = stringifyJson(
      { ...(sample as unknown as JsonObject), device_total_bytes: total },
      { sortKeys: true },
    );
    const events = decodeTelemetryJsonl(`${text}\n`).map((line) => line.record as TelemetryEvent);
    expect(expectAdapterEqualsOracle(events).anomalies).toEqual([]);
  });
});
