import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "fixtures");

function casesIn(set: string): string[] {
  return readdirSync(join(FIXTURES, set))
    .filter((name) => name.startsWith("case-"))
    .sort()
    .map((name) => `${set}/${name}`);
}

/**
 * The cases, as `<set>/<case>` under fixtures/: `golden/` (the 16 public cases recorded from the Python
 * reference) and `recorded/` (more cases of the same kinds, recorded from the same reference with
 * scripts/reference/record_case.py).
 */
export const CASES = [...casesIn("golden"), ...casesIn("recorded")];

export interface ExpectedCase {
  calls: Record<string, unknown>[];
  files_written: string[];
  raised: string | null;
  loaded_event_count?: number;
}

export function expectedOf(name: string): ExpectedCase {
  return JSON.parse(readFileSync(join(FIXTURES, name, "expected.json"), "utf8")) as ExpectedCase;
}

/** A fresh copy of the case's `input/` (the export writes into it); removed by the returned function. */
export function copyCaseInput(name: string): { dir: string; input: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-wandb-test-"));
  const input = join(dir, "input");
  cpSync(join(FIXTURES, name, "input"), input, { recursive: true });
  return { dir, input, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** JSON round trip: bigints as numbers, so that calls compare as the reference's JSON does. */
export function plain(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, (_key, item) => (typeof item === "bigint" ? Number(item) : item)));
}
