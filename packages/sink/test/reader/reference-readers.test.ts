// Odd and hostile JSONL files, read as the Python reference's loader read them (fixtures/reference-readers):
// the same sessions and counts, or an error naming the same line.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadTelemetrySessions } from "../../src/index.js";

const ROOT = join(import.meta.dirname, "../../../../fixtures/reference-readers");
const CASES = join(ROOT, "cases");

type Expected =
  | { readonly sessions: readonly (readonly [string, number, string])[] }
  | { readonly error: string; readonly line: number | null };
const expected = JSON.parse(readFileSync(join(ROOT, "expected.json"), "utf8")) as Record<string, Expected>;

/** Where we read on purpose what the reference refuses (docs/python-interop.md). */
const READ_HERE: Record<string, number> = {
  // Schema v4 is read (v2, v3 and v4).
  schema_4: 1,
  // U+2028 and U+0085 inside a JSON string: the reference's splitlines breaks the line there.
  u2028_in_string: 3,
  u2028_last: 2,
  nel_in_string: 3,
};

async function outcome(name: string): Promise<Expected> {
  try {
    const sessions = await loadTelemetrySessions(join(CASES, `${name}.jsonl`));
    return {
      sessions: sessions.map((s) => [s.summary.session_id, s.events.length, s.summary.status] as const),
    };
  } catch (error) {
    const message = (error as Error).message;
    const line = new RegExp(`${name}\\.jsonl:(\\d+)`).exec(message)?.[1];
    return { error: message, line: line === undefined ? null : Number(line) };
  }
}

/** Sessions as `[id, events, status]`, ids made from a path cut to their prefix (they differ between machines). */
function comparable(list: readonly (readonly [string, number, string])[]) {
  return list.map(([id, count, status]) => [id.startsWith("legacy-") ? "legacy-" : id, count, status]);
}

describe("odd JSONL, as the reference's loader reads it", () => {
  const names = readdirSync(CASES)
    .filter((file) => file.endsWith(".jsonl"))
    .map((file) => file.slice(0, -".jsonl".length))
    .sort();

  it("has a reference outcome for every case", () => {
    expect(names).toEqual(Object.keys(expected).sort());
    expect(names.length).toBeGreaterThanOrEqual(60);
  });

  it.each(names.filter((name) => !(name in READ_HERE)))("%s", async (name) => {
    const theirs = expected[name]!;
    const ours = await outcome(name);
    if ("sessions" in theirs) {
      expect(ours).toHaveProperty("sessions");
      const sessions = (ours as { sessions: (readonly [string, number, string])[] }).sessions;
      expect(comparable(sessions)).toEqual(comparable(theirs.sessions));
    } else {
      expect(ours, theirs.error).toHaveProperty("error");
      // The line the reference names (when it names one) is the line ours names.
      if (theirs.line !== null)
        expect((ours as { line: number | null }).line, (ours as { error: string }).error).toBe(theirs.line);
    }
  });

  it.each(Object.entries(READ_HERE))("%s: refused there, read here (%i events)", async (name, events) => {
    expect(expected[name]).toHaveProperty("error");
    const ours = await outcome(name);
    expect(ours).toEqual({ sessions: [["bench-session-000", events, "incomplete"]] });
  });
});

describe("odd sink directories, as the reference's loader reads them", () => {
  const sinks = JSON.parse(readFileSync(join(ROOT, "expected-sinks.json"), "utf8")) as Record<
    string,
    { sessions: [string, number, string][] }
  >;

  it("has a reference outcome for every directory", () => {
    expect(readdirSync(join(ROOT, "sinks")).sort()).toEqual(Object.keys(sinks).sort());
  });

  // Sessions in the reference's order (status, then newest), with its statuses and counts.
  it.each(Object.keys(sinks).sort())("%s", async (name) => {
    const sessions = await loadTelemetrySessions(join(ROOT, "sinks", name));
    expect(sessions.map((s) => [s.summary.session_id, s.events.length, s.summary.status])).toEqual(
      sinks[name]!.sessions,
    );
  });
});

describe("odd JSON documents, as the reference's loader reads them", () => {
  const documents = JSON.parse(readFileSync(join(ROOT, "expected-documents.json"), "utf8")) as Record<
    string,
    Expected
  >;

  it("has a reference outcome for every document", () => {
    const names = readdirSync(join(ROOT, "documents")).map((file) => file.slice(0, -".json".length));
    expect(names.sort()).toEqual(Object.keys(documents).sort());
  });

  it.each(Object.keys(documents).sort())("%s", async (name) => {
    const theirs = documents[name]!;
    let ours: readonly (readonly [string, number, string])[] | Error;
    try {
      const sessions = await loadTelemetrySessions(join(ROOT, "documents", `${name}.json`));
      ours = sessions.map((s) => [s.summary.session_id, s.events.length, s.summary.status] as const);
    } catch (error) {
      ours = error as Error;
    }
    if ("sessions" in theirs) {
      expect(ours).not.toBeInstanceOf(Error);
      expect(comparable(ours as (readonly [string, number, string])[])).toEqual(comparable(theirs.sessions));
    } else expect(ours, theirs.error).toBeInstanceOf(Error);
  });
});
