import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type TelemetryEvent } from "@stormlog/core";
import { PhaseReplayIndex } from "@stormlog/phases";
import { seededRandom } from "@stormlog/phases/internal";
import { afterAll, describe, expect, it } from "vitest";
import { analyzeEvents, analyzeGaps, analyzeTelemetry } from "../../src/index.js";
import { summarizeCrossRankEvents } from "../oracles/cross-rank-events.js";
import { canonical, goldenCases, loadEvents, sortedByTimestamp } from "../support/golden-helpers.js";

/**
 * Sample records spelled as other producers spell them. The reference's cross-rank analysis takes
 * `event_type.casefold() == "sample"`, its gap analysis `str(event_type).strip().lower() == "sample"`:
 * each variant below is a sample to one rule, both, or neither.
 */
const SPELLINGS = [
  "sample",
  "Sample",
  "SAMPLE",
  " Sample ",
  "sample\t",
  "\u017fample",
  "\ufeffsample",
  "samples",
];

/** The case's events with sample types respelled at random (seeded). */
function respelled(events: readonly TelemetryEvent[], seed: number): TelemetryEvent[] {
  const next = seededRandom(seed);
  return events.map((event) =>
    event.event_type === "sample" && next() < 0.5
      ? { ...event, event_type: SPELLINGS[Math.floor(next() * SPELLINGS.length)]! }
      : event,
  );
}

const dir = mkdtempSync(join(tmpdir(), "stormlog-sample-rule-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The events as a JSONL file, analysed as `stormlog analyze` does (scan, index, columns). */
async function analyzeAsFile(name: string, events: readonly TelemetryEvent[], index: boolean) {
  const path = join(dir, `${name}-${index ? "indexed" : "plain"}.jsonl`);
  writeFileSync(path, `${events.map((event) => encodeTelemetryRecord(event)).join("\n")}\n`);
  return analyzeTelemetry(path, { index });
}

describe("each analysis tells samples by the reference's rule for it", () => {
  it.each(goldenCases("cross-rank").slice(0, 8))("cross-rank %s, respelled", async (name) => {
    const events = respelled(loadEvents("cross-rank", name), name.length * 7919);
    expect(events.some((event) => event.event_type !== "sample" && event.event_type.length >= 6)).toBe(true);
    // The event implementation is the reference's algorithm over its own rule (the oracle).
    const expected = canonical(
      summarizeCrossRankEvents(sortedByTimestamp(events), {
        phaseResolver: PhaseReplayIndex.fromEvents(events),
      }),
    );
    expect(canonical(analyzeEvents(events).cross_rank_analysis)).toEqual(expected);
    for (const index of [false, true]) {
      const report = await analyzeAsFile(name, events, index);
      expect(canonical(report.cross_rank_analysis)).toEqual(expected);
    }
  });

  it.each(goldenCases("gap").slice(0, 8))("gap %s, respelled", async (name) => {
    const events = respelled(loadEvents("gap", name), name.length * 104729);
    const expected = analyzeGaps(sortedByTimestamp(events), {
      phaseResolver: PhaseReplayIndex.fromEvents(events),
    });
    const strip = ({ rank: _rank, session_id: _session, ...finding }: { rank: number; session_id: string }) =>
      finding;
    expect(analyzeEvents(events).gap_analysis.map(strip)).toEqual(expected);
    for (const index of [false, true]) {
      const report = await analyzeAsFile(name, events, index);
      expect(report.gap_analysis.map(strip)).toEqual(expected);
    }
  });

  it("counts a sample of either rule in the summary, and no other record", async () => {
    const events = loadEvents("gap", goldenCases("gap")[0]!);
    const samples = events.filter((event) => event.event_type === "sample");
    const spelled = events.map((event, i) =>
      event.event_type === "sample" ? { ...event, event_type: SPELLINGS[i % SPELLINGS.length]! } : event,
    );
    const taken = samples.filter((_, k) => {
      const i = events.indexOf(samples[k]!);
      return !["\ufeffsample", "samples"].includes(SPELLINGS[i % SPELLINGS.length]!);
    }).length;
    const report = await analyzeAsFile("summary", spelled, false);
    expect(report.summary.sample_count).toBe(taken);
    expect(taken).toBeLessThan(samples.length);
  });
});
