import { InvalidConfigError } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import {
  mergePhaseAttributions,
  type PhaseSpan,
  phaseAttributionToPayload,
  summarizePhaseAttribution,
  summarizePhaseResolution,
} from "../src/index.js";
import { comparePythonStrings } from "../src/internal.js";
import { attributeActiveSpans, createPhaseAttribution, formatPhasePath } from "../src/policy.js";

function span(path: string[], sequence: number, threadId = 1, scopeId = `s:${sequence}`): PhaseSpan {
  return {
    sessionId: "s",
    rank: 0,
    threadId,
    threadName: `thread-${threadId}`,
    scopeId,
    path,
    phasePath: formatPhasePath(path),
    depth: path.length,
    startNs: 0n,
    endNs: 10n,
    sequence,
    syntheticEnd: false,
  };
}

describe("phase attribution helpers (reference tests/test_phases.py)", () => {
  it("keeps the same label from two threads ambiguous when merging", () => {
    const merged = mergePhaseAttributions(
      createPhaseAttribution({
        phaseResolution: "unique",
        phasePath: "train / step",
        phasePaths: ["train / step"],
        scopeId: "scope-1",
        threadId: 11,
        threadName: "thread-11",
      }),
      createPhaseAttribution({
        phaseResolution: "unique",
        phasePath: "train / step",
        phasePaths: ["train / step"],
        scopeId: "scope-2",
        threadId: 12,
        threadName: "thread-12",
      }),
    );
    expect(merged?.phaseResolution).toBe("ambiguous");
    expect(merged?.phasePaths).toEqual(["train / step"]);
    expect(merged?.phasePath).toBeNull();
  });

  it("marks an ambiguous single label", () => {
    expect(
      summarizePhaseAttribution(
        createPhaseAttribution({ phaseResolution: "ambiguous", phasePaths: ["train / step"] }),
      ),
    ).toBe("(ambiguous) train / step");
  });

  it("prefers the heuristic summary when present", () => {
    expect(
      summarizePhaseAttribution(
        createPhaseAttribution({
          phaseResolution: "ambiguous",
          phasePaths: ["evaluate", "train"],
          phaseSummary: { phasePath: "evaluate", source: "heuristic" },
        }),
      ),
    ).toBe("(likely) evaluate");
  });

  it("omits phase_summary from the payload when not needed", () => {
    const payload = phaseAttributionToPayload(
      createPhaseAttribution({
        phaseResolution: "unique",
        phaseSource: "thread_local",
        phasePath: "train",
        phasePaths: ["train"],
        scopeId: "scope-1",
        threadId: 11,
        threadName: "thread-11",
      }),
    );
    expect(payload?.phase_source).toBe("thread_local");
    expect(payload).not.toHaveProperty("phase_summary");
  });
});

describe("attributeActiveSpans", () => {
  it("returns null without spans and rejects unknown strategies", () => {
    expect(attributeActiveSpans([])).toBeNull();
    expect(() =>
      attributeActiveSpans([span(["a"], 1)], { strategy: "latest" as unknown as "deepest_per_thread" }),
    ).toThrow(InvalidConfigError);
  });

  it("uses an origin scope only when exactly one span matches", () => {
    const spans = [span(["a"], 1, 1, "dup"), span(["b"], 2, 2, "dup"), span(["c"], 3, 3, "x")];
    expect(attributeActiveSpans(spans, { originPhaseScopeId: "x" })?.phaseSource).toBe("exact");
    const fallback = attributeActiveSpans(spans, { originPhaseScopeId: "dup" });
    expect(fallback?.phaseResolution).toBe("ambiguous");
    expect(fallback?.phasePaths).toEqual(["a", "b", "c"]);
  });

  it("takes the most recent span of the origin thread, not the deepest", () => {
    const spans = [span(["a", "deep"], 1, 7), span(["b"], 5, 7), span(["c"], 9, 8)];
    const attribution = attributeActiveSpans(spans, { originThreadId: 7 });
    expect(attribution?.phaseSource).toBe("thread_local");
    expect(attribution?.phasePath).toBe("b");
    // An origin thread without spans falls through to the heuristic.
    expect(attributeActiveSpans(spans, { originThreadId: 99 })?.phaseResolution).toBe("ambiguous");
  });

  it("is ambiguous when one thread has two deepest spans with different paths", () => {
    const attribution = attributeActiveSpans([span(["t", "fwd"], 2), span(["t", "bwd"], 3), span(["t"], 1)]);
    expect(attribution?.phaseResolution).toBe("ambiguous");
    expect(attribution?.phasePaths).toEqual(["t / bwd", "t / fwd"]);
    expect(attribution?.phaseSummary).toEqual({ phasePath: "t / bwd", source: "heuristic" });
  });

  it("keeps one label without a summary when two threads agree on it", () => {
    const attribution = attributeActiveSpans([span(["train"], 1, 1), span(["train"], 2, 2)]);
    expect(attribution?.phaseResolution).toBe("ambiguous");
    expect(attribution?.phasePaths).toEqual(["train"]);
    expect(attribution?.phaseSummary).toBeNull();
    expect(summarizePhaseAttribution(attribution)).toBe("(ambiguous) train");
  });

  it("picks the deepest span of a single thread, latest (sequence, scope_id) on equal labels", () => {
    const attribution = attributeActiveSpans([
      span(["t"], 1),
      span(["t", "x"], 4, 1, "s:4b"),
      span(["t", "x"], 4, 1, "s:4c"),
    ]);
    expect(attribution?.phaseSource).toBe("heuristic");
    expect(attribution?.scopeId).toBe("s:4c");
  });
});

describe("payloads, summaries and merges", () => {
  it("writes the payload keys in the reference's order", () => {
    const unique = phaseAttributionToPayload(attributeActiveSpans([span(["a", "b"], 3, 5)]));
    expect(Object.keys(unique ?? {})).toEqual([
      "phase_resolution",
      "phase_paths",
      "phase_source",
      "phase_path",
      "scope_id",
      "thread_id",
      "thread_name",
    ]);
    expect(unique).toEqual({
      phase_resolution: "unique",
      phase_paths: ["a / b"],
      phase_source: "heuristic",
      phase_path: "a / b",
      scope_id: "s:3",
      thread_id: 5,
      thread_name: "thread-5",
    });
    const ambiguous = phaseAttributionToPayload(attributeActiveSpans([span(["a"], 1, 1), span(["b"], 2, 2)]));
    expect(ambiguous).toEqual({
      phase_resolution: "ambiguous",
      phase_paths: ["a", "b"],
      phase_summary: { phase_path: "b", source: "heuristic" },
    });
    expect(Object.keys(ambiguous ?? {})).toEqual(["phase_resolution", "phase_paths", "phase_summary"]);
    expect(phaseAttributionToPayload(null)).toBeNull();
    expect(
      phaseAttributionToPayload(
        createPhaseAttribution({ phaseResolution: "ambiguous", phasePaths: ["", "x"] }),
      )?.phase_paths,
    ).toEqual(["x"]);
  });

  it("summarizes resolutions without hiding ambiguity", () => {
    expect(summarizePhaseResolution("unique", null, ["only"])).toBe("only");
    expect(summarizePhaseResolution("unique", null, ["a", "b"])).toBeNull();
    expect(summarizePhaseResolution("ambiguous", null, ["a", "", "b"])).toBe("(ambiguous) a | b");
    expect(summarizePhaseResolution("ambiguous", null, [])).toBeNull();
    expect(summarizePhaseAttribution(null)).toBeNull();
    expect(
      summarizePhaseAttribution(
        createPhaseAttribution({
          phaseResolution: "ambiguous",
          phasePaths: ["a", "b"],
          phaseSummary: { phasePath: "a", source: "exact" },
        }),
      ),
    ).toBe("a");
  });

  it("merges without inventing a unique path", () => {
    const a = attributeActiveSpans([span(["a"], 1)]);
    const b = attributeActiveSpans([span(["b"], 2)]);
    expect(mergePhaseAttributions(a, null)).toBe(a);
    expect(mergePhaseAttributions(null, b)).toBe(b);
    expect(mergePhaseAttributions(a, a)).toBe(a);
    expect(mergePhaseAttributions(b, a)?.phasePaths).toEqual(["a", "b"]);
    const empty = createPhaseAttribution({ phaseResolution: "ambiguous" });
    expect(mergePhaseAttributions(empty, b)).toBe(b);
    expect(mergePhaseAttributions(a, empty)).toBe(a);
  });

  it("orders strings by code point like Python", () => {
    // U+FF5E (BMP) sorts before U+1F600 (astral) in Python; UTF-16 order says the opposite.
    expect(["\u{1F600}", "\uFF5E", "b", "a"].sort(comparePythonStrings)).toEqual([
      "a",
      "b",
      "\uFF5E",
      "\u{1F600}",
    ]);
    expect(comparePythonStrings("ab", "a")).toBeGreaterThan(0);
  });
});
