import type { PhaseThreadId } from "@stormlog/phases";
import {
  type BirthSnapshot,
  judgeRetention,
  packRetention,
  type RetentionOccurrence,
  unpackRetention,
} from "@stormlog/phases/internal";
import { describe, expect, it } from "vitest";

const MiB = 1024 * 1024;

/** `steps` steps of `train / forward, backward` on one rank; forward keeps `leak` bytes a step. */
function steps(options: {
  steps: number;
  leak: number;
  startNs?: bigint;
  threadId?: PhaseThreadId;
  rank?: number;
  openLast?: boolean;
}): RetentionOccurrence[] {
  const out: RetentionOccurrence[] = [];
  const threadId = options.threadId ?? 1;
  const rank = options.rank ?? 0;
  let t = options.startNs ?? 1_700_000_000_000_000_000n;
  let allocated = 512 * MiB;
  let tensors = 100;
  const span = (path: string[], startNs: bigint, endNs: bigint, syntheticEnd = false) => ({
    rank,
    threadId,
    path,
    phasePath: path.join(" / "),
    startNs,
    endNs,
    syntheticEnd,
  });
  for (let step = 0; step < options.steps; step++) {
    const stepStart = t;
    const stepEnter = allocated;
    const stepTensors = tensors;
    const forwardEnter = allocated;
    allocated += 256 * MiB + options.leak;
    tensors += 40 + (options.leak > 0 ? 1 : 0);
    out.push({
      span: span(["train", "forward"], t + 1n, t + 10n),
      enterAllocated: forwardEnter,
      exitAllocated: allocated,
      enterUsed: forwardEnter + MiB,
      exitUsed: allocated + MiB,
      enterTensors: stepTensors,
      exitTensors: tensors,
    });
    const backwardEnter = allocated;
    const backwardTensors = tensors;
    allocated -= 256 * MiB;
    tensors -= 40;
    out.push({
      span: span(["train", "backward"], t + 11n, t + 20n),
      enterAllocated: backwardEnter,
      exitAllocated: allocated,
      enterUsed: Number.NaN,
      exitUsed: Number.NaN,
      enterTensors: backwardTensors,
      exitTensors: tensors,
    });
    const last = options.openLast === true && step === options.steps - 1;
    out.push({
      span: span(["train"], stepStart, t + 21n, last),
      enterAllocated: stepEnter,
      exitAllocated: last ? Number.NaN : allocated,
      enterUsed: Number.NaN,
      exitUsed: Number.NaN,
      enterTensors: stepTensors,
      exitTensors: last ? Number.NaN : tensors,
    });
    t += 100n;
  }
  return out;
}

function births(count: number): BirthSnapshot[] {
  return Array.from({ length: count }, (_, k) => ({
    timestampNs: 1_700_000_000_000_000_000n + BigInt(k * 100 + 50),
    phases: new Map([["train / forward", { tensors: 10 + k, bytes: 4096 * (10 + k), largest: [] }]]),
  }));
}

describe("packed retention input (judged on another thread)", () => {
  const cases: [string, RetentionOccurrence[], BirthSnapshot[]][] = [
    ["a leaking forward", steps({ steps: 30, leak: 4 * MiB }), []],
    ["a clean run, its last step never closed", steps({ steps: 30, leak: 0, openLast: true }), []],
    ["bigint thread ids", steps({ steps: 12, leak: MiB, threadId: 2n ** 60n }), []],
    // Times past 64 bits are sent as bigints, not wrapped.
    ["times past 2^63 ns", steps({ steps: 12, leak: MiB, startNs: 2n ** 64n + 5n }), []],
    ["negative times", steps({ steps: 12, leak: MiB, startNs: -(2n ** 40n) }), []],
    ["birth-phase snapshots", steps({ steps: 30, leak: MiB }), births(30)],
    [
      "two ranks' occurrences",
      [...steps({ steps: 8, leak: 0, rank: 3 }), ...steps({ steps: 8, leak: 0, rank: 5 })],
      [],
    ],
    ["no occurrences", [], []],
  ];

  for (const [name, occurrences, snapshots] of cases) {
    it(`${name}: the same occurrences and verdicts after a structured clone`, () => {
      const input = { lastSample: false, births: snapshots };
      // As postMessage sends it.
      const packed = structuredClone(packRetention(occurrences, input));
      const unpacked = unpackRetention(packed);
      expect(unpacked.occurrences.length).toBe(occurrences.length);
      unpacked.occurrences.forEach((occurrence, i) => {
        const original = occurrences[i]!;
        expect({ ...occurrence, span: { ...occurrence.span } }).toEqual({
          ...original,
          span: { ...original.span },
        });
      });
      expect(unpacked.input.births).toEqual(snapshots);
      expect(judgeRetention(unpacked.occurrences, unpacked.input)).toEqual(
        judgeRetention(occurrences, input),
      );
    });
  }

  it("keeps the last-sample flag and defaults births to none", () => {
    const occurrences = steps({ steps: 10, leak: 0 });
    const unpacked = unpackRetention(structuredClone(packRetention(occurrences, { lastSample: true })));
    expect(unpacked.input).toEqual({ lastSample: true, births: [] });
    expect(judgeRetention(unpacked.occurrences, unpacked.input)).toEqual(
      judgeRetention(occurrences, { lastSample: true }),
    );
  });

  it("sends each path and thread once, however many occurrences share them", () => {
    const packed = packRetention(steps({ steps: 50, leak: 0 }), { lastSample: false });
    expect(packed.paths.map((path) => path.phasePath)).toEqual([
      "train / forward",
      "train / backward",
      "train",
    ]);
    expect(packed.threads).toEqual([1]);
    expect(packed.pathOf.length).toBe(150);
    expect(packed.startsNs).toBeInstanceOf(BigInt64Array);
  });
});
