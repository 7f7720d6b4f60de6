import { describe, expect, it } from "vitest";
import { type BirthEvidence, risingTrend } from "../src/internal.js";
import { describeBirths, describeKept, describeKeptInside, formatCount } from "../src/retention/describe.js";

const MiB = 2 ** 20;

describe("the leak wording shared by the analysis and the tracker", () => {
  it("says what a phase keeps per occurrence of its unit", () => {
    const parts = { tensorsPer: null, bytesPer: MiB, unitPath: "train", shortfall: null };
    expect(describeKept("train / backward", parts)).toBe(
      "`train / backward` keeps 1.00 MB per `train`, still held as it comes around again",
    );
    expect(describeKept("train", { ...parts, tensorsPer: 1.5, unitPath: "train" }, " (all 2 ranks)")).toBe(
      "`train` keeps 1.5 tensors, 1.00 MB per occurrence, still held as it comes around again (all 2 ranks)",
    );
    expect(describeKept("train / forward", { ...parts, shortfall: "train / backward" })).toBe(
      "`train / forward` keeps 1.00 MB per `train`, still held as it comes around again; or `train / backward` " +
        "frees less than `train / forward` allocated and keeps its own: counters cannot tell these apart " +
        "(tfjs birth-phase attribution can)",
    );
    expect(describeKeptInside("train / backward")).toBe("; the growth is kept inside `train / backward`");
    expect([formatCount(3), formatCount(0.25)]).toEqual(["3", "0.3"]);
  });

  it("says where surviving tensors were born and how long they live", () => {
    const births: BirthEvidence = {
      birth_phase: "train / backward",
      unit_path: "train",
      tensors_per_occurrence: 1,
      bytes_per_occurrence: 16 * MiB,
      live_tensors: 31,
      live_bytes: 31 * 16 * MiB,
      alive_for_occurrences: 30,
      largest: [{ dtype: "float32", shape: [2048, 2048], bytes: 31 * 16 * MiB, count: 31 }],
      p_rising: 1e-9,
    };
    expect(describeBirths("train / backward", births)).toBe(
      "`train / backward`: 1 tensor (16.00 MB, float32 [2048, 2048]) born here per step is still alive 30 steps " +
        "later (step: `train`); 31 alive now (496.00 MB), largest: 31 x float32 [2048, 2048] (496.00 MB)",
    );
    const own = { ...births, unit_path: "train / backward", tensors_per_occurrence: 2, largest: [] };
    expect(describeBirths("train / backward", own, " (rank 1 of 4)")).toBe(
      "`train / backward`: 2 tensors (16.00 MB) born here per occurrence are still alive 30 occurrences later; " +
        "31 alive now (496.00 MB) (rank 1 of 4)",
    );
  });
});

describe("risingTrend's Theil-Sen slope", () => {
  /** The median of every pairwise slope, sorted: the definition. */
  function sortedSlope(values: readonly number[]): number {
    const slopes: number[] = [];
    for (let i = 0; i < values.length; i++)
      for (let j = i + 1; j < values.length; j++) slopes.push((values[j]! - values[i]!) / (j - i));
    slopes.sort((a, b) => a - b);
    const mid = slopes.length >> 1;
    return slopes.length % 2 === 1 ? slopes[mid]! : (slopes[mid - 1]! + slopes[mid]!) / 2;
  }

  it("is the median of the pairwise slopes, ties and constant series included", () => {
    let seed = 3;
    const random = () => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed / 2 ** 32;
    };
    for (let round = 0; round < 300; round++) {
      const n = 3 + Math.floor(random() * 300);
      const kind = round % 4;
      const values = Array.from({ length: n }, (_, i) =>
        kind === 0
          ? random() * 1e6
          : kind === 1
            ? Math.floor(random() * 3)
            : kind === 2
              ? 7
              : i * 4096 + Math.round(random() * 65536),
      );
      expect(risingTrend(Float64Array.from(values)).slope).toBe(sortedSlope(values));
    }
  });
});
