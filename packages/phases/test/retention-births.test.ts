import { describe, expect, it } from "vitest";
import { type BirthSnapshot, judgeBirths } from "../src/internal.js";

const STEP_NS = 50_000_000n;

/** `steps` steps of `unit`, a reading per step, `count(step)` tensors alive from `phase`. */
function run(
  steps: number,
  phase: string,
  count: (step: number) => number,
): {
  snapshots: BirthSnapshot[];
  starts: bigint[];
} {
  const snapshots: BirthSnapshot[] = [];
  const starts: bigint[] = [];
  for (let step = 0; step < steps; step++) {
    starts.push(BigInt(step) * STEP_NS);
    const tensors = count(step);
    snapshots.push({
      timestampNs: BigInt(step) * STEP_NS + STEP_NS / 2n,
      phases: new Map([[phase, { tensors, bytes: tensors * 4096, largest: [] }]]),
    });
  }
  return { snapshots, starts };
}

describe("judgeBirths", () => {
  it("judges a run of hours (130 000 readings) without running out of stack", () => {
    const { snapshots, starts } = run(130_000, "step / forward", (step) => step % 7);
    const verdicts = judgeBirths(snapshots, () => ({ path: "step", startsNs: starts }));
    expect(verdicts.get("step / forward")?.leaking).toBe(false);
  });

  it("counts survivors per step from where they began to accumulate", () => {
    const { snapshots, starts } = run(40, "train / backward", (step) => (step < 10 ? 0 : step - 10));
    const verdict = judgeBirths(snapshots, () => ({ path: "train", startsNs: starts })).get(
      "train / backward",
    )!;
    expect(verdict.leaking).toBe(true);
    expect(verdict.evidence.tensors_per_occurrence).toBeCloseTo(1, 1);
    expect(verdict.evidence.alive_for_occurrences).toBe(29);
  });
});
