import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject, stringifyJson } from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import type { BoundaryEntry } from "../src/aggregate.js";
import { decodeAggregate, encodeAggregate } from "../src/index-format.js";
import { aggregateEvents, scanSegmentSync } from "../src/scan.js";
import { GiB, Timeline } from "./report-helpers.js";

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
