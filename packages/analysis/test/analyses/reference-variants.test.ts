import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type JsonObject, type JsonValue, parseJson, stringifyJson } from "@stormlog/core";
import { afterAll, describe, expect, it } from "vitest";
import { analyzeTelemetry } from "../../src/index.js";
import { canonical } from "../support/golden-helpers.js";

/**
 * The golden cases with sample records respelled and counters past 2^53, against what the Python
 * reference's analyses returned for them (`fixtures/reference-analysis/`, written by
 * `scripts/python-interop/analysis_variants.py`): each case keeps only its edits of the golden input.
 */
const FIXTURES = join(import.meta.dirname, "../../../../fixtures");
type Kind = "cross-rank" | "gap";

const variants = (kind: Kind): string[] =>
  readdirSync(join(FIXTURES, "reference-analysis", kind))
    .filter((name) => !name.startsWith("."))
    .sort();

const readJson = (path: string): JsonValue => parseJson(readFileSync(path, "utf8"));
const editsOf = (kind: Kind, name: string) =>
  readJson(join(FIXTURES, "reference-analysis", kind, name, "edits.json")) as Record<string, JsonObject>;

/** The golden input with the case's edits (line numbers count its non-blank lines from 1). */
function editedInput(kind: Kind, name: string): string {
  const edits = editsOf(kind, name);
  const lines = readFileSync(join(FIXTURES, "golden", kind, name, "input.jsonl"), "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "");
  return `${lines
    .map((line, i) => {
      const edit = edits[String(i + 1)];
      // Edited in place: the parsed record keeps its floats marked (a copy would lose the marks).
      return edit === undefined ? line : stringifyJson(Object.assign(parseJson(line) as JsonObject, edit));
    })
    .join("\n")}\n`;
}

const dir = mkdtempSync(join(tmpdir(), "stormlog-reference-variants-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The case's edited input as a file, analysed as `stormlog analyze` analyses it. */
async function analyzeVariant(kind: Kind, name: string, index: boolean) {
  const path = join(dir, `${kind}-${name}-${index ? "indexed" : "plain"}.jsonl`);
  writeFileSync(path, editedInput(kind, name));
  return analyzeTelemetry(path, { index });
}

describe("respelled samples and counters past 2^53 give the Python reference's results", () => {
  it.each(variants("cross-rank"))("cross-rank %s", async (name) => {
    const expected = canonical(
      readJson(join(FIXTURES, "reference-analysis", "cross-rank", name, "expected.json")),
    );
    for (const index of [false, true]) {
      const report = await analyzeVariant("cross-rank", name, index);
      expect(canonical(report.cross_rank_analysis)).toEqual(expected);
    }
  });

  it.each(variants("gap"))("gap %s", async (name) => {
    const expected = readJson(
      join(FIXTURES, "reference-analysis", "gap", name, "expected.json"),
    ) as JsonObject;
    for (const index of [false, true]) {
      const report = await analyzeVariant("gap", name, index);
      // Our prose is written for tfjs, onnxruntime and NVML users (see fixtures/golden/README.md).
      const findings = report.gap_analysis.map(
        ({
          rank: _rank,
          session_id: _session,
          description: _description,
          remediation: _remediation,
          ...finding
        }) => finding,
      );
      expect(canonical(findings)).toEqual(canonical(expected.gap_analysis));
    }
  });

  it("has variants of every golden case that respell samples and lift counters past 2^53", () => {
    for (const kind of ["cross-rank", "gap"] as const) {
      const golden = readdirSync(join(FIXTURES, "golden", kind)).filter((name) => !name.startsWith("."));
      expect(variants(kind)).toEqual(golden.sort());
      for (const name of variants(kind)) {
        const edits = Object.values(editsOf(kind, name));
        expect(edits.some((edit) => typeof edit.event_type === "string")).toBe(true);
        expect(edits.some((edit) => typeof edit.device_used_bytes === "bigint")).toBe(true);
      }
    }
  });
});
