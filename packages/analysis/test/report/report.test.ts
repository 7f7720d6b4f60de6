import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { formatBytes, type JsonObject, parseJson, stringifyJson } from "@stormlog/core";
import { isoTimestampNs } from "@stormlog/core/internal";
import { SessionNotFoundError, TelemetrySourceError } from "@stormlog/sink";
import { afterAll, describe, expect, it } from "vitest";
import {
  BASE_NS,
  GiB,
  MiB,
  MS,
  record,
  Timeline,
  writeSink,
} from "../../../sink/test/support/telemetry-fixtures.js";
import { analyzeEvents, analyzeTelemetry, formatReportText, reportToJson } from "../../src/index.js";
import { formatDuration } from "../../src/report/text.js";
import { goldenCases, loadEvents } from "../support/golden-helpers.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-report-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

const distributed = analyzeEvents(loadEvents("cross-rank", goldenCases("cross-rank")[0]!), {
  path: "job.jsonl",
  sessionId: "session-11-0",
});

describe("reportToJson", () => {
  it("has the report keys, cross-rank included with several ranks", () => {
    const json = reportToJson(distributed);
    expect(Object.keys(json)).toEqual([
      "session",
      "summary",
      "phases",
      "leaks",
      "gap_analysis",
      "cross_rank_analysis",
      "collector_health",
      "alerts",
      "sink",
      "notes",
    ]);
    expect(Object.keys(json.session as JsonObject)).toEqual(
      expect.arrayContaining(["selected_session_id", "discovered_session_ids"]),
    );
  });

  it("leaves cross_rank_analysis out for one rank", () => {
    const t = new Timeline();
    for (let i = 0; i < 5; i++) t.sample();
    expect("cross_rank_analysis" in reportToJson(analyzeEvents(t.events))).toBe(false);
  });

  it("writes integers exactly and floats as floats", () => {
    const text = stringifyJson(reportToJson(distributed), { indent: 2 });
    const onset = distributed.cross_rank_analysis!.cluster_onset_timestamp_ns;
    expect(onset).not.toBeNull();
    expect(text).toContain(`"cluster_onset_timestamp_ns": ${onset}`);
    expect(typeof onset).toBe("bigint");
    expect(onset! > BigInt(Number.MAX_SAFE_INTEGER)).toBe(true);
    const parsed = parseJson(text) as JsonObject;
    expect((parsed.cross_rank_analysis as JsonObject).cluster_onset_timestamp_ns).toBe(onset);
    expect(text).toMatch(/"duration_s": \d+\.\d+/);
    expect(text).not.toMatch(/NaN|Infinity/);
  });
});

describe("formatReportText", () => {
  it("starts with the reference's summary lines", () => {
    const crossRank = distributed.cross_rank_analysis!;
    const top = crossRank.first_cause_suspects[0]!;
    const text = formatReportText(distributed);
    const lines = text.split("\n");
    expect(lines.slice(0, 5)).toEqual([
      "Analyzing profiling results from: job.jsonl",
      "",
      "Basic Analysis:",
      "Input file: job.jsonl",
      "File size: 0 bytes (0 B)",
    ]);
    expect(lines).toContain(`Gap findings: ${distributed.gap_analysis.length}`);
    expect(lines).toContain("Distributed Analysis:");
    expect(lines).toContain(`Participating ranks: ${crossRank.participating_ranks.join(", ")}`);
    expect(lines).toContain(`Missing ranks: ${crossRank.missing_ranks.join(", ") || "none"}`);
    expect(lines).toContain(`Top first-cause suspect: rank ${top.rank} (${top.confidence})`);
    expect(lines).toContain(
      `Evidence: timestamp_ns=${top.first_spike_timestamp_ns} (${isoTimestampNs(top.first_spike_timestamp_ns)}), aligned_timestamp_ns=${top.aligned_first_spike_timestamp_ns}, lead_ns=${top.lead_over_cluster_onset_ns} (${formatDuration(top.lead_over_cluster_onset_ns)}), delta=${formatBytes(top.peak_delta_bytes)}`,
    );
    const onset = crossRank.cluster_onset_timestamp_ns as bigint;
    expect(lines).toContain(`Cluster onset (aligned ns): ${onset} (${isoTimestampNs(onset)})`);
    expect(lines).toContain(`Notes: ${crossRank.notes.join(" ")}`);
    expect(lines.some((line) => line.startsWith("Telemetry session selected: session-11-0 ("))).toBe(true);
  });

  it("says when reserved and device used are the process's resident memory (a CPU run), and when the session started", () => {
    const samples = (device: number, collector: string) =>
      [10, 20, 30].map((ms, i) =>
        record("sample", BASE_NS + BigInt(ms) * MS, {
          device_id: device,
          collector,
          allocator_allocated_bytes: 1000 * (i + 1),
          allocator_reserved_bytes: 300 * MiB,
          device_used_bytes: 300 * MiB,
        }),
      );
    const rowsOf = (text: string) => text.split("\n").filter((line) => /^ {2}Peak /.test(line));
    const host = rowsOf(
      formatReportText(analyzeEvents(samples(-1, "stormlog.tfjs_tracker+stormlog.cpu_tracker"))),
    );
    expect(host).toHaveLength(3);
    expect(host[0]).toMatch(/^ {2}Peak allocated +2\.93 KB {2}rank 0, \+[\d.]+ s$/);
    for (const line of host.slice(1))
      expect(line).toMatch(/\(the process's resident memory \(RSS\): a CPU run\)$/);
    // tfjs alone on the CPU (its reserved figure is not RSS), and a GPU's figures: no such note.
    for (const [device, collector] of [
      [-1, "stormlog.tfjs_tracker"],
      [0, "stormlog.nvml_tracker+stormlog.cpu_tracker"],
    ] as const) {
      const rows = rowsOf(formatReportText(analyzeEvents(samples(device, collector))));
      expect(rows).toHaveLength(3);
      for (const line of rows) expect(line).not.toContain("RSS");
    }
    // The report names the collector of each peak's record.
    expect(
      analyzeEvents(samples(-1, "stormlog.cpu_tracker")).summary.peaks.device_used_bytes?.collector,
    ).toBe("stormlog.cpu_tracker");

    const started = distributed.session.started_at_ns;
    expect(started).not.toBeNull();
    expect(formatReportText(distributed)).toContain(
      `started ${isoTimestampNs(started as bigint)}, started_at_ns=${started}).`,
    );
  });

  it("uses colour only when asked", () => {
    expect(formatReportText(distributed)).not.toContain("\u001b[");
    expect(formatReportText(distributed, { color: true })).toContain("\u001b[1mSession:");
  });

  it("aligns the phase table", () => {
    const t = new Timeline();
    t.tensors = 1;
    for (let i = 0; i < 8; i++)
      t.enter("train")
        .enter("forward")
        .sample()
        .exit()
        .enter("a-much-longer-phase-name")
        .sample()
        .exit()
        .exit();
    const lines = formatReportText(analyzeEvents(t.events)).split("\n");
    const start = lines.indexOf("Phases:");
    const table = lines.slice(start + 1, start + 5);
    expect(table[0]).toMatch(
      /^ {2}PHASE +OCCURRENCES +RANKS +MEAN +MAX +PEAK ALLOCATED +NET\/OCC +TENSORS\/OCC$/,
    );
    // Right-aligned numeric columns end at the same column on every row.
    const end = table[0]!.indexOf("OCCURRENCES") + "OCCURRENCES".length;
    for (const row of table.slice(1)) expect(row.slice(end - 1, end)).toMatch(/\d/);
    expect(table[1]).toMatch(/^ {2}train /);
    expect(table[2]).toMatch(/^ {4}a-much-longer-phase-name /);
  });

  it("formats durations for people", () => {
    expect(
      [850n, 12_300n, 4_560_000n, 12_340_000_000n, 185_000_000_000n].map((ns) => formatDuration(ns)),
    ).toEqual(["850 ns", "12.3 us", "4.56 ms", "12.34 s", "3 min 05 s"]);
  });
});

describe("analyzeTelemetry inputs and errors", () => {
  const events = (() => {
    const t = new Timeline({ device_total_bytes: 8 * GiB });
    t.event("start");
    for (let i = 0; i < 10; i++) t.sample();
    t.event("stop");
    return t.events;
  })();

  it("reads a JSON document (not indexed)", async () => {
    const path = join(temp, "events.json");
    writeFileSync(path, stringifyJson({ events: events.map((e) => ({ ...e }) as unknown as JsonObject) }));
    const report = await analyzeTelemetry(path);
    expect(report.input).toMatchObject({ kind: "json", path });
    expect(report.summary.sample_count).toBe(10);
    expect(report.index?.status).toBe("disabled");
    expect(report.session.selected_session_id).toBe("session-a");
  });

  it("reads a single segment file with its directory's manifest", async () => {
    const dir = join(temp, "single");
    const [segment] = writeSink(dir, events);
    const report = await analyzeTelemetry(segment!, { index: false });
    expect(report.input.kind).toBe("jsonl");
    expect(report.summary.event_count).toBe(12);
    expect(report.session.status).toBe("completed");
  });

  it("throws typed errors for a missing path, a directory without sinks and an unknown session", async () => {
    await expect(analyzeTelemetry(join(temp, "missing"))).rejects.toSatisfy((e: unknown) =>
      TelemetrySourceError.isInstance(e),
    );
    mkdirSync(join(temp, "empty"));
    await expect(analyzeTelemetry(join(temp, "empty"))).rejects.toSatisfy((e: unknown) =>
      TelemetrySourceError.isInstance(e),
    );
    const dir = join(temp, "one");
    writeSink(dir, events);
    await expect(analyzeTelemetry(dir, { sessionId: "other", index: false })).rejects.toSatisfy(
      (e: unknown) => SessionNotFoundError.isInstance(e),
    );
  });

  it("reports progress while scanning", async () => {
    const dir = join(temp, "progress");
    writeSink(dir, events, { segmentSize: 4 });
    const seen: string[] = [];
    await analyzeTelemetry(dir, {
      index: false,
      onProgress: (p) => seen.push(`${p.phase}:${p.done}/${p.total}`),
    });
    expect(seen.some((entry) => entry.startsWith("scan:"))).toBe(true);
    expect(seen[seen.length - 1]).toBe("analyze:1/1");
  });
});
