import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject, stringifyJson } from "@stormlog/core";
import { loadTelemetryEvents, summarizeTelemetrySessions } from "@stormlog/sink";
import { resolveTelemetryInput } from "@stormlog/sink/internal";
import { afterAll, describe, expect, it } from "vitest";
import {
  BASE_NS,
  GiB,
  MiB,
  record,
  Timeline,
  writeSink,
} from "../../../sink/test/support/telemetry-fixtures.js";
import { analyzeEvents, analyzeTelemetry, reportToJson } from "../../src/index.js";
import { scanSegment } from "../../src/input/scan.js";
import { inMemorySegment, listSessions, type SegmentData } from "../../src/input/sessions.js";

const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden", "python-sink");
const temp = mkdtempSync(join(tmpdir(), "stormlog-scan-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** Sessions as the analysis scan lists them. */
async function scannedSessions(path: string) {
  const input = await resolveTelemetryInput(path);
  const segments: SegmentData[] = [];
  for (const part of input.parts) {
    for (const segment of part.segments)
      segments.push(inMemorySegment(segment.path, segment.hint, await scanSegment(segment)));
  }
  const ledger = new Map();
  for (const part of input.parts)
    for (const summary of part.manifest?.sessions ?? [])
      if (!ledger.has(summary.session_id)) ledger.set(summary.session_id, summary);
  return listSessions(segments, ledger, input.defaultSource, input.absolute);
}

function comparable(
  sessions: readonly {
    summary: unknown;
    eventCount: number;
    firstTimestampNs: bigint | null;
    lastTimestampNs: bigint | null;
    sources: string[];
    warnings: string[];
  }[],
) {
  return sessions.map(({ summary, eventCount, firstTimestampNs, lastTimestampNs, sources, warnings }) => ({
    summary,
    eventCount,
    firstTimestampNs,
    lastTimestampNs,
    sources,
    warnings,
  }));
}

describe("the scan lists sessions exactly as the sink reader does", () => {
  const cases = readdirSync(FIXTURES).sort();

  it.each(cases)("Python reference sink %s", async (name) => {
    const dir = join(FIXTURES, name, "sink");
    const ours = await scannedSessions(dir);
    expect(comparable(ours)).toEqual(comparable(await summarizeTelemetrySessions(dir)));
    const expected = JSON.parse(readFileSync(join(FIXTURES, name, "expected.json"), "utf8")) as {
      sessions: JsonObject[];
    };
    expect(
      ours.map((s) => ({
        session_id: s.summary.session_id,
        status: s.summary.status,
        event_count: s.eventCount,
        first_timestamp_ns: String(s.firstTimestampNs),
        last_timestamp_ns: String(s.lastTimestampNs),
      })),
    ).toEqual(
      expected.sessions.map((s) => ({
        session_id: s.session_id,
        status: s.status,
        event_count: s.event_count,
        first_timestamp_ns: String(s.first_timestamp_ns),
        last_timestamp_ns: String(s.last_timestamp_ns),
      })),
    );
  });

  it("has the golden cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(5);
  });
});

/** A sink whose lines take every path of the scan: canonical, compact, legacy, blank, CRLF, a cut tail. */
function messySink(dir: string): void {
  const first = new Timeline({
    session_id: "run-1",
    host: "trainer",
    pid: 7,
    job_id: "job-x",
    device_total_bytes: 16 * GiB,
  });
  first.tensors = 10;
  first.event("start");
  for (let step = 0; step < 12; step++) {
    first.enter("train");
    first.sample().enter("forward");
    first.allocated += 4 * MiB;
    first.tensors += 2;
    first.sample().exit().enter("backward");
    first.allocated -= 3 * MiB;
    first.tensors -= 1;
    first.gap += step === 6 ? 2 * GiB : 0;
    first.sample().exit().exit();
    if (step === 6) first.gap -= 2 * GiB;
  }
  first.event("warning", { context: "WARNING: Memory usage at 91%", metadata: { oom_reason: "test" } });
  first.event("collector_degraded", {
    metadata: { collector_health_status: "degraded", collector_last_error: "NVML timeout" },
  });
  first.sample().sample();
  first.event("collector_recovered", { metadata: { collector_health_status: "healthy" } });
  first.event("stop");
  writeSink(dir, first.events, { segmentSize: 40 });
  // Lines the fast path declines: compact separators, a float in phase metadata, a non-ASCII host, CRLF, blanks.
  const second = new Timeline({ session_id: "run-2", host: "nöde", pid: 8 }, BASE_NS + 10n ** 12n);
  for (let i = 0; i < 8; i++) second.enter("eval").sample().exit();
  const lines = second.events.map((event, i) => {
    const line = encodeTelemetryRecord(event);
    if (i % 5 === 1) return line.replaceAll(", ", ",");
    if (i % 5 === 2 && event.event_type === "phase_enter")
      return line.replace('"sequence": ', '"weight": 0.5, "sequence": ');
    return line;
  });
  writeFileSync(join(dir, "segment-000100.jsonl"), `${lines.join("\r\n")}\r\n\n   \n`);
  // A legacy (v2, sessionless) record and a final line cut short.
  const legacy = {
    ...record("sample", BASE_NS + 2n * 10n ** 12n, { allocator_allocated_bytes: 5, device_used_bytes: 9 }),
    schema_version: 2,
  } as JsonObject;
  delete legacy.session_id;
  appendFileSync(
    join(dir, "segment-000101.jsonl"),
    `${stringifyJson(legacy, { sortKeys: true })}\n{"allocator_active_bytes": nu`,
  );
}

describe("the fast path and the general path read the same", () => {
  const dir = join(temp, "messy");
  messySink(dir);

  it("lists the sessions of a messy sink like the reader", async () => {
    expect(comparable(await scannedSessions(dir))).toEqual(comparable(await summarizeTelemetrySessions(dir)));
  });

  it.each(["run-1", "run-2"])(
    "analyses session %s like analyzeEvents on the reader's events",
    async (sessionId) => {
      const fromSink = reportToJson(await analyzeTelemetry(dir, { sessionId, index: false }));
      const fromEvents = reportToJson(analyzeEvents(await loadTelemetryEvents(dir, { sessionId })));
      for (const key of [
        "phases",
        "leaks",
        "gap_analysis",
        "cross_rank_analysis",
        "collector_health",
        "alerts",
      ]) {
        expect(stringifyJson(fromSink[key] ?? null), key).toBe(stringifyJson(fromEvents[key] ?? null));
      }
      const { sink: _a, ...summary } = fromSink.summary as JsonObject;
      const { sink: _b, ...expected } = fromEvents.summary as JsonObject;
      expect(stringifyJson(summary)).toBe(stringifyJson(expected));
      expect((fromSink.summary as JsonObject).event_count).toBeGreaterThan(10);
      expect((fromSink.phases as JsonObject[]).length).toBeGreaterThan(0);
    },
  );

  it("finds the leak, the hidden-memory spike, the alert and the health episode of run-1", async () => {
    const report = await analyzeTelemetry(dir, { index: false, sessionId: "run-1" });
    const forward = report.leaks.find((leak) => leak.phase_path === "train / forward");
    expect(forward?.verdict).toBe("leaking");
    expect(forward?.bytes_per_occurrence).toBe(MiB);
    expect(forward?.tensors_per_occurrence).toBe(1);
    expect(report.leaks.find((leak) => leak.phase_path === "train / backward")?.verdict).toBe("stable");
    expect(report.gap_analysis.map((finding) => finding.classification)).toContain("transient_spike");
    expect(report.alerts.items[0]).toMatchObject({ event_type: "warning", oom_reason: "test" });
    expect(report.collector_health).toMatchObject({
      degraded_count: 1,
      recovered_count: 1,
      degraded_time_ns: 21_000_000n,
      last_status: "healthy",
    });
  });

  it("reports the dropped final line as the reader does", async () => {
    const report = await analyzeTelemetry(dir, { index: false, sessionId: "run-1" });
    expect(report.sink.warnings.some((warning) => warning.includes("dropped a final line cut short"))).toBe(
      true,
    );
  });
});
