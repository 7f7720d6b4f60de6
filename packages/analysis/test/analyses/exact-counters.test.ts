import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type JsonObject, stringifyJson, type TelemetryEvent } from "@stormlog/core";
import { seededRandom } from "@stormlog/phases/internal";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, MS, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { analyzeTelemetry } from "../../src/index.js";
import { goldenCases, loadEvents } from "../support/golden-helpers.js";

/**
 * Counters past 2^53 are analysed as the reference analyses them: with exact integers. The
 * expectations are computed here with bigints, and each case is built so that computing with the
 * nearest doubles would give another answer.
 */
const dir = mkdtempSync(join(tmpdir(), "stormlog-exact-counters-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Wide = Partial<Record<keyof TelemetryEvent, bigint>>;

/** Records with some counters replaced by exact integers, as a JSONL file (integers written exactly). */
function writeLines(name: string, records: readonly { event: TelemetryEvent; wide: Wide }[]): string {
  const path = join(dir, `${name}.jsonl`);
  const lines = records.map(({ event, wide }) => {
    const object: JsonObject = { ...(event as unknown as JsonObject), ...(wide as JsonObject) };
    return stringifyJson(object, { sortKeys: true });
  });
  writeFileSync(path, `${lines.join("\n")}\n`);
  return path;
}

describe("counters past 2^53", () => {
  it("are read, not refused, and the gap analysis computes with exact integers", async () => {
    const name = goldenCases("gap")[0]!;
    const next = seededRandom(7);
    const SCALE = 2n ** 24n;
    // Every counter of the case times 2^24 (past 2^53), plus a small odd part a double cannot hold.
    const records = loadEvents("gap", name).map((event) => {
      const wide: Wide = {};
      for (const field of [
        "allocator_allocated_bytes",
        "allocator_reserved_bytes",
        "device_used_bytes",
        "device_total_bytes",
      ] as const) {
        const value = event[field];
        if (value !== null) wide[field] = BigInt(value) * SCALE + BigInt(Math.floor(next() * 255));
      }
      // Device used stays within the total, as the schema requires.
      if (wide.device_used_bytes !== undefined && wide.device_total_bytes !== undefined) {
        if (wide.device_used_bytes > wide.device_total_bytes)
          wide.device_used_bytes = wide.device_total_bytes;
      }
      return { event, wide };
    });
    const path = writeLines("gap", records);
    for (const index of [false, true]) {
      const report = await analyzeTelemetry(path, { index });
      const drift = report.gap_analysis.find((finding) => finding.classification === "persistent_drift");
      const spike = report.gap_analysis.find((finding) => finding.classification === "transient_spike");
      expect(drift ?? spike).toBeDefined();
      // The reference's gaps: device used minus allocator reserved, exact, then a double.
      const usable = records.filter(
        ({ event, wide }) =>
          event.event_type === "sample" &&
          wide.device_total_bytes !== undefined &&
          wide.device_total_bytes > 0n &&
          wide.device_used_bytes !== undefined &&
          wide.allocator_reserved_bytes !== undefined,
      );
      const exactGaps = usable.map(({ wide }) =>
        Number(wide.device_used_bytes! - wide.allocator_reserved_bytes!),
      );
      const roundedGaps = usable.map(
        ({ wide }) => Number(wide.device_used_bytes!) - Number(wide.allocator_reserved_bytes!),
      );
      // The case tells exact from rounded arithmetic apart.
      expect(exactGaps).not.toEqual(roundedGaps);
      if (spike !== undefined)
        expect((spike.evidence as { max_gap_bytes: number }).max_gap_bytes).toBe(Math.max(...exactGaps));
      if (drift !== undefined) {
        const evidence = drift.evidence as { gap_start_bytes: number; gap_end_bytes: number };
        expect(evidence.gap_start_bytes).toBe(exactGaps[0]);
        expect(evidence.gap_end_bytes).toBe(exactGaps[exactGaps.length - 1]);
      }
    }
  });

  it("give the cross-rank analysis its exact growth (peak_delta_bytes as a bigint)", async () => {
    const base = 2n ** 60n + 100n;
    const growth = [2n ** 58n + 300n, 2n ** 58n + 200n];
    const records: { event: TelemetryEvent; wide: Wide }[] = [];
    for (const rank of [0, 1]) {
      // Rank 1 grows at the second sample, rank 0 at the third.
      const used =
        rank === 1 ? [base, base + growth[1]!, base + growth[1]!] : [base, base, base + growth[0]!];
      used.forEach((value, i) => {
        records.push({
          event: record("sample", BASE_NS + BigInt(i) * 100n * MS, {
            rank,
            world_size: 2,
            job_id: "job",
            session_id: "session-a",
            device_total_bytes: null,
          }),
          wide: { device_used_bytes: value },
        });
      });
    }
    const path = writeLines("cross-rank", records);
    for (const index of [false, true]) {
      const report = await analyzeTelemetry(path, { index });
      const suspects = report.cross_rank_analysis?.first_cause_suspects ?? [];
      expect(suspects.map((suspect) => suspect.rank)).toEqual([1, 0]);
      expect(suspects[0]!.peak_delta_bytes).toBe(growth[1]);
      expect(suspects[1]!.peak_delta_bytes).toBe(growth[0]);
      expect(suspects[0]!.evidence.device_used_delta_bytes).toBe(growth[1]);
      // What doubles would have said.
      expect(Number(base + growth[1]!) - Number(base)).not.toBe(Number(growth[1]!));
    }
  });
});
