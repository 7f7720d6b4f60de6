import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject, stringifyJson } from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import { BASE_NS, GiB, MS, record, Timeline } from "../../../sink/test/support/telemetry-fixtures.js";
import { decodeAggregate, encodeAggregate } from "../../src/index/index-format.js";
import { DETAIL_CAP } from "../../src/input/aggregate.js";
import type { BoundaryEntry } from "../../src/input/boundary-log.js";
import { DatasetLoader, originAt, planDataset } from "../../src/input/dataset.js";
import { digestOf } from "../../src/input/digest.js";
import { aggregateEvents, scanSegmentSync } from "../../src/input/scan.js";

/** Two ranks with many phases (their rows span several JSON chunks), alerts and health transitions. */
function events() {
  const all = [];
  for (const rank of [0, 1]) {
    const t = new Timeline({ rank, world_size: 2, job_id: "job-f", session_id: `s-${rank}`, pid: 10 + rank });
    t.tensors = 5;
    for (let step = 0; step < 400; step++) {
      t.enter("train").enter("forward").sample();
      t.allocated += 4096;
      t.exit().exit();
      if (step % 50 === 0) t.event("warning", { context: `step ${step}`, metadata: { origin_thread_id: 1 } });
      if (step % 100 === 0) t.event("collector_degraded", { metadata: { collector_last_error: "nvml" } });
    }
    t.gap += GiB;
    t.sample();
    all.push(...t.events);
  }
  return all;
}

describe("aggregate files", () => {
  const aggregate = aggregateEvents(events());
  const bytes = encodeAggregate(aggregate, "stamp-1");

  it("read back equal to what was written, rows cut into several small JSON texts", () => {
    const part = aggregate.sessions.get("s-1")!.ranks.get(1)!;
    expect(part.boundaries.length).toBe(1600);
    // The rows alone are far above one chunk (32 KB), so the file holds several.
    expect(JSON.stringify(part.boundaries.map((b) => b.scope)).length).toBeGreaterThan(64 * 1024);
    const decoded = decodeAggregate(bytes, "stamp-1")!;
    expect(decoded).toBeDefined();
    for (const [sessionId, session] of aggregate.sessions) {
      for (const [rank, written] of session.ranks) {
        const read = decoded.sessions.get(sessionId)!.ranks.get(rank)!;
        expect(read.boundaries.map((b) => ({ ...b }))).toEqual(written.boundaries.map((b) => ({ ...b })));
        expect(read.alerts).toEqual(written.alerts);
        expect(read.health).toEqual(written.health);
        expect(read.alerts.length).toBeGreaterThan(0);
        expect(read.health.length).toBeGreaterThan(0);
        // What the Perfetto export reads: instant records (metadata exact), hosts, the first job id.
        const exact = (part: typeof read) =>
          part.instants.map((instant) => ({ ...instant, metadata: stringifyJson(instant.metadata) }));
        expect(exact(read)).toEqual(exact(written));
        expect(read.instants.length).toBe(read.alerts.length + read.health.length);
        expect(read.hosts).toEqual(written.hosts);
        expect([read.job, read.jobT]).toEqual([written.job, written.jobT]);
        expect(read.job?.jobId).toBe("job-f");
        expect([...read.samples.used.subarray(0, read.samples.count)]).toEqual([
          ...written.samples.used.subarray(0, written.samples.count),
        ]);
      }
    }
  });

  it("is refused when cut short or stamped otherwise", () => {
    expect(decodeAggregate(bytes, "stamp-2")).toBeUndefined();
    expect(decodeAggregate(bytes.subarray(0, bytes.length - 10), "stamp-1")).toBeUndefined();
  });
});

describe("aggregate files of a scanned segment", () => {
  it("keep each boundary's phase_scope text as read, and read back equal", () => {
    const dir = mkdtempSync(join(tmpdir(), "stormlog-format-"));
    try {
      // Rank 1 has no tensor counts and an unknown device total (null counters in the rows).
      const lines = events()
        .map((event) =>
          event.rank === 1 && event.event_type.startsWith("phase_")
            ? {
                ...event,
                device_total_bytes: null,
                device_free_bytes: null,
                metadata: { phase_scope: event.metadata.phase_scope! },
              }
            : event,
        )
        .map((event) => `${encodeTelemetryRecord(event)}\n`);
      const path = join(dir, "segment-000001.jsonl");
      writeFileSync(path, lines.join(""));
      const scanned = scanSegmentSync({ path, hint: null, defaultSessionId: "x" }, () => undefined, {
        buf: null,
      });
      const decoded = decodeAggregate(encodeAggregate(scanned, "stamp"), "stamp")!;
      const plain = (b: BoundaryEntry) => ({ ...b, scopeJson: null });
      for (const [sessionId, session] of scanned.sessions) {
        for (const [rank, written] of session.ranks) {
          expect(written.boundaries.length).toBe(1600);
          for (const b of written.boundaries) expect(JSON.parse(b.scopeJson!)).toEqual(b.scope);
          const read = decoded.sessions.get(sessionId)!.ranks.get(rank)!.boundaries;
          expect(read.map(plain)).toEqual(written.boundaries.map(plain));
          expect(written.boundaries.some((b) => Number.isNaN(b.tensors))).toBe(rank === 1);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("aggregate files of scopes JSON cannot carry as they are", () => {
  it("keep a float-marked value exact (the scope stored as exact text)", () => {
    const events = eventsWithFloatScope();
    const aggregate = aggregateEvents(events);
    const decoded = decodeAggregate(encodeAggregate(aggregate, "s"), "s")!;
    const written = aggregate.sessions.get("s-0")!.ranks.get(0)!.boundaries;
    const read = decoded.sessions.get("s-0")!.ranks.get(0)!.boundaries;
    expect(read.length).toBe(written.length);
    // `1.0` stays a float: the text written again is the same, mark included.
    expect(read.map((b) => stringifyJson(b.scope))).toEqual(written.map((b) => stringifyJson(b.scope)));
    expect(stringifyJson(read[0]!.scope)).toContain('"lr": 1.0');
  });
});

function eventsWithFloatScope() {
  const t = new Timeline({ rank: 0, world_size: 1, session_id: "s-0", pid: 1 });
  t.enter("train").sample().exit();
  for (const event of t.events) {
    const scope = event.metadata.phase_scope as JsonObject | undefined;
    if (scope === undefined) continue;
    const attributes: JsonObject = { lr: 1 };
    markFloat(attributes, "lr");
    scope.attributes = attributes;
  }
  return t.events;
}

describe("samples' phase attribution hints", () => {
  it("are kept per sample, float marks included, by the scan's general path and through the index", () => {
    const hinted: JsonObject = { origin_thread_id: 7, other: 1 };
    const floatHint: JsonObject = { origin_thread_id: 3 };
    markFloat(floatHint, "origin_thread_id");
    const events = [
      record("sample", BASE_NS),
      record("sample", BASE_NS + MS, { metadata: hinted }),
      record("sample", BASE_NS + 2n * MS, { metadata: { origin_phase_scope_id: "s:1" } }),
      record("sample", BASE_NS + 3n * MS, { metadata: floatHint }),
    ];
    const dir = mkdtempSync(join(tmpdir(), "stormlog-origins-"));
    try {
      const path = join(dir, "segment-000001.jsonl");
      writeFileSync(path, events.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""));
      const scanned = scanSegmentSync({ path, hint: null, defaultSessionId: "x" });
      for (const aggregate of [
        aggregateEvents(events),
        scanned,
        decodeAggregate(encodeAggregate(scanned, "s"), "s")!,
      ]) {
        const origins = aggregate.sessions.get("session-a")!.ranks.get(0)!.origins!;
        expect([...origins.keys()]).toEqual([2, 3, 4]);
        expect(stringifyJson(origins.get(2)!)).toBe('{"origin_thread_id": 7}');
        expect(stringifyJson(origins.get(3)!)).toBe('{"origin_phase_scope_id": "s:1"}');
        // Python's 3.0 is no thread id: the mark travels with the hint.
        expect(stringifyJson(origins.get(4)!)).toBe('{"origin_thread_id": 3.0}');
        const segment = { source: path, hint: null, digest: digestOf(aggregate), aggregate, file: null };
        const plan = planDataset([segment], ["session-a"]);
        const series = new DatasetLoader(plan).load(plan.ranks[0]!.series[0]!);
        expect([0, 1, 2, 3].map((i) => originAt(series, i) === undefined)).toEqual([
          true,
          false,
          false,
          false,
        ]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("alerts and health transitions past DETAIL_CAP", () => {
  // Past the cap for each kind.
  const count = 2 * (DETAIL_CAP + 5);
  const events = Array.from({ length: count }, (_, i) =>
    record(i % 2 === 0 ? "warning" : "collector_degraded", BASE_NS + BigInt(i) * MS, { context: `#${i}` }),
  );

  it("are all kept in memory, and the index stores DETAIL_CAP of each with a mark", () => {
    const aggregate = aggregateEvents([...events, ...events.map((e) => ({ ...e, event_type: "error" }))]);
    const part = aggregate.sessions.get("session-a")!.ranks.get(0)!;
    expect(part.alerts).toHaveLength(count + count / 2);
    expect(part.detailsCut).toBe(false);
    const read = decodeAggregate(encodeAggregate(aggregate, "s"), "s")!
      .sessions.get("session-a")!
      .ranks.get(0)!;
    expect(read.alerts).toEqual(part.alerts.slice(0, DETAIL_CAP));
    expect(read.health).toEqual(part.health.slice(0, DETAIL_CAP));
    expect(read.detailsCut).toBe(true);
  });

  it("are read whole again from the segment when its stored part was cut", () => {
    const dir = mkdtempSync(join(tmpdir(), "stormlog-cap-"));
    try {
      const path = join(dir, "segment-000001.jsonl");
      writeFileSync(path, events.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""));
      const input = { path, hint: null, defaultSessionId: "x" };
      const scanned = scanSegmentSync(input);
      const file = join(dir, "seg.agg");
      writeFileSync(file, encodeAggregate(scanned, "stamp"));
      const segment = {
        source: path,
        hint: null,
        digest: digestOf(scanned),
        aggregate: null,
        file: { path: file, stamp: "stamp" },
        segment: input,
      };
      const plan = planDataset([segment], ["session-a"]);
      const series = new DatasetLoader(plan).load(plan.ranks[0]!.series[0]!);
      expect(series.alerts).toHaveLength(count / 2);
      expect(series.health).toHaveLength(count / 2);
      expect(series.alerts.map((alert) => alert.context)).toEqual(
        events.filter((event) => event.event_type === "warning").map((event) => event.context),
      );
      expect([...series.alertOrder]).toEqual(series.alerts.map((alert) => alert.line));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
