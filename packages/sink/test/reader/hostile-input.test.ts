/**
 * Hostile input, read by the sink's loaders: links that lead out of the input are not followed
 * (and a warning says so), link loops and other file-system refusals are one-line typed errors
 * naming the path, and every error about a file's content names the file and the line.
 */
import { execFileSync } from "node:child_process";
import {
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  encodeTelemetryRecord,
  JsonlDecodeError,
  parseJson,
  stringifyJson,
  type TelemetryEvent,
  TelemetryValidationError,
} from "@stormlog/core";
import { JsonTooDeepError, readJsonlLines } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import {
  buildTelemetryRollups,
  iterateTelemetryEvents,
  loadTelemetrySessions,
  summarizeTelemetrySessions,
  TelemetryInputAccessError,
  TelemetrySourceError,
} from "../../src/index.js";
import { tempDir } from "../helpers.js";
import { deepJson, samples, writeSink } from "../support/telemetry-fixtures.js";

/** The sessions `path` holds, and the warnings reading it gave. */
async function read(path: string): Promise<{ ids: string[]; events: number; warnings: string[] }> {
  const warnings: string[] = [];
  const sessions = await loadTelemetrySessions(path, { onWarning: (message) => warnings.push(message) });
  return {
    ids: sessions.map((session) => session.summary.session_id).sort(),
    events: sessions.reduce((sum, session) => sum + session.eventCount, 0),
    warnings,
  };
}

/** What a loader threw. */
async function thrown(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected the read to fail");
}

/** Checks a one-line `TelemetryInputAccessError` with `code` about `path`. */
function expectAccessError(error: unknown, code: string, path: string): void {
  expect(TelemetryInputAccessError.isInstance(error)).toBe(true);
  expect(TelemetrySourceError.isInstance(error)).toBe(true);
  const access = error as TelemetryInputAccessError;
  expect(access.code).toBe(code);
  expect(access.path).toBe(path);
  expect(access.message).not.toContain("\n");
  expect(access.message).toContain(`(${code})`);
  expect(access.message).toContain(path);
}

const LEADS_OUT = "symbolic link that leads out of the input";

describe("links in the input", () => {
  it("does not follow a manifest.json that links to another sink's manifest, and says so", async () => {
    const outside = join(tempDir(), "outside");
    writeSink(outside, samples(4, { sessionId: "outside-session" }));
    const input = join(tempDir(), "input");
    writeSink(input, samples(3, { sessionId: "own-session" }), { manifest: false });
    const link = join(input, "manifest.json");
    symlinkSync(join(outside, "manifest.json"), link);
    for (const path of [input, link]) {
      const { ids, warnings } = await read(path);
      expect(ids).toEqual(["own-session"]);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(`${link} not read: it is a ${LEADS_OUT}`);
      expect(warnings[0]).toContain(join(outside, "manifest.json"));
    }
  });

  it("builds rollups without the outside manifest a manifest.json links to", async () => {
    const outside = join(tempDir(), "outside");
    writeSink(outside, samples(4, { sessionId: "outside-session" }));
    const input = join(tempDir(), "input");
    writeSink(input, samples(3, { sessionId: "own-session" }), { manifest: false });
    symlinkSync(join(outside, "manifest.json"), join(input, "manifest.json"));
    const rollups = await buildTelemetryRollups(input, { segmentCache: "off" });
    expect(rollups.source_manifest).toBeNull();
    expect(stringifyJson(rollups)).not.toContain("outside-session");
  });

  it("does not follow a rank directory that links to a sink outside the root, and says so", async () => {
    const outside = join(tempDir(), "outside");
    writeSink(outside, samples(4, { sessionId: "outside-session" }));
    const root = tempDir();
    writeSink(join(root, "rank-0"), samples(5, { sessionId: "rank-0-session" }));
    symlinkSync(outside, join(root, "rank-1"));
    const { ids, warnings } = await read(root);
    expect(ids).toEqual(["rank-0-session"]);
    expect(warnings).toEqual([
      expect.stringContaining(`${join(root, "rank-1")} not read: it is a ${LEADS_OUT}`),
    ]);
    // The streaming readers skip it too.
    const streamed: string[] = [];
    for await (const event of iterateTelemetryEvents(root)) streamed.push(event.session_id);
    expect(new Set(streamed)).toEqual(new Set(["rank-0-session"]));
  });

  it("reads segment and rank links that stay inside the input; skips a segment linking out, with a warning", async () => {
    const root = tempDir();
    const sink = join(root, "rank-0");
    writeSink(sink, samples(3, { sessionId: "live" }));
    // Not a segment name: the archive is no sink directory of its own.
    const [written] = writeSink(join(sink, "archive"), samples(2, { sessionId: "archived" }), {
      manifest: false,
    });
    const kept = join(sink, "archive", "kept.jsonl");
    renameSync(written!, kept);
    symlinkSync(kept, join(sink, "segment-000002.jsonl"));
    symlinkSync(sink, join(root, "rank-9"));
    const outside = join(tempDir(), "outside");
    const [far] = writeSink(outside, samples(4, { sessionId: "outside-session" }), { manifest: false });
    symlinkSync(far!, join(sink, "segment-000003.jsonl"));
    const { ids, events, warnings } = await read(sink);
    expect(ids).toEqual(["archived", "live"]);
    expect(events).toBe(5);
    expect(warnings).toEqual([
      expect.stringContaining(`${join(sink, "segment-000003.jsonl")} not read: it is a ${LEADS_OUT}`),
    ]);
    // From the root, the link to rank-0 is a directory inside it: read (as the reference reads it).
    const fromRoot = await read(root);
    expect(fromRoot.ids).toEqual(["archived", "live"]);
    expect(fromRoot.events).toBe(2 * 5);
  });

  it("refuses a link loop given as the input with a one-line ELOOP error naming it", async () => {
    const loop = join(tempDir(), "loop");
    symlinkSync(loop, loop);
    expectAccessError(await thrown(loadTelemetrySessions(loop)), "ELOOP", loop);
    expectAccessError(await thrown(summarizeTelemetrySessions(loop)), "ELOOP", loop);
    expect(((await thrown(loadTelemetrySessions(loop))) as Error).message).toMatch(
      /^Cannot read the telemetry input: symbolic link loop \(ELOOP\); remove or fix the looping link \(/,
    );
  });

  it.each([
    ["a rank directory", "rank-1"],
    ["a segment", "rank-0/segment-000002.jsonl"],
    ["a manifest", "rank-0/manifest.json"],
  ])("refuses a link loop inside the input (%s) with the same error", async (_, name) => {
    const root = tempDir();
    writeSink(join(root, "rank-0"), samples(3, { sessionId: "rank-0-session" }), {
      manifest: !name.endsWith("manifest.json"),
    });
    const loop = join(root, name);
    symlinkSync(loop, loop);
    expectAccessError(await thrown(loadTelemetrySessions(root)), "ELOOP", loop);
  });
});

const mkfifo = (path: string) => execFileSync("mkfifo", [path]);

describe("special and oversized files in the input", () => {
  it("refuses a FIFO given as a .jsonl file at once, from every loader (no wait for a writer)", async () => {
    const fifo = join(tempDir(), "run.jsonl");
    mkfifo(fifo);
    expectAccessError(await thrown(summarizeTelemetrySessions(fifo)), "EFTYPE", fifo);
    expectAccessError(await thrown(loadTelemetrySessions(fifo)), "EFTYPE", fifo);
    const lines = readJsonlLines(fifo);
    await expect(lines.next()).rejects.toMatchObject({ code: "EFTYPE", path: fifo });
  });

  it("reads the segments beside a manifest.json that is a directory, a FIFO or too large, and says why", async () => {
    for (const make of [
      (path: string) => mkdirSync(path),
      mkfifo,
      (path: string) => {
        writeFileSync(path, "{}");
        truncateSync(path, 300 * 2 ** 20); // sparse: no disk used
      },
    ]) {
      const dir = join(tempDir(), "sink");
      writeSink(dir, samples(3, { sessionId: "kept" }), { manifest: false });
      const manifest = join(dir, "manifest.json");
      make(manifest);
      const { ids, events, warnings } = await read(dir);
      expect(ids).toEqual(["kept"]);
      expect(events).toBe(3);
      expect(warnings).toEqual([
        expect.stringMatching(
          /manifest\.json is not a usable sink manifest \((a directory|not a regular file|300 MiB)/,
        ),
      ]);
    }
  });

  it("says so when a segment's name holds a directory or a FIFO, listed or not", async () => {
    const dir = join(tempDir(), "sink");
    const [first, second] = writeSink(dir, samples(4, { sessionId: "s" }), { segmentSize: 2 });
    rmSync(first!);
    mkdirSync(first!);
    rmSync(second!);
    mkfifo(second!);
    mkfifo(join(dir, "segment-000009.jsonl"));
    const { events, warnings } = await read(dir);
    expect(events).toBe(0);
    for (const path of [first!, second!, join(dir, "segment-000009.jsonl")])
      expect(warnings).toContain(
        `${path}: a directory or special file (a FIFO, a device), not a segment file: not read`,
      );
  });
});

describe("an OOM dump folder's files", () => {
  /** A dump folder as the flight recorder writes it (`events.json`, `metadata.json`). */
  function dumpFolder(): string {
    const dir = join(tempDir(), "oom_dump_20260131T120000Z_1_cuda_0");
    mkdirSync(dir);
    writeFileSync(join(dir, "events.json"), '[{"timestamp": 1.0, "memory_allocated": 10, "type": "sample"}]');
    writeFileSync(join(dir, "metadata.json"), '{"reason": "message_pattern:out of memory"}');
    return dir;
  }

  it("are not read through links that lead out of the folder", async () => {
    const outside = tempDir();
    writeFileSync(
      join(outside, "events.json"),
      '[{"timestamp": 1.0, "memory_allocated": 1, "context": "OUTSIDE"}]',
    );
    const dump = dumpFolder();
    rmSync(join(dump, "events.json"));
    symlinkSync(join(outside, "events.json"), join(dump, "events.json"));
    const warnings: string[] = [];
    const error = await thrown(loadTelemetrySessions(dump, { onWarning: (m) => warnings.push(m) }));
    expect(TelemetrySourceError.isInstance(error)).toBe(true);
    expect((error as Error).message).toContain("events.json leads out of its folder");
    expect(warnings).toContainEqual(
      expect.stringContaining(`${join(dump, "events.json")} not read: it is a ${LEADS_OUT}`),
    );

    writeFileSync(join(outside, "meta.json"), '{"reason": "SECRET"}');
    const other = dumpFolder();
    rmSync(join(other, "metadata.json"));
    symlinkSync(join(outside, "meta.json"), join(other, "metadata.json"));
    const seen: string[] = [];
    await thrown(loadTelemetrySessions(other, { onWarning: (m) => seen.push(m) }));
    expect(seen.join("\n")).not.toContain("SECRET");
    expect(seen).toContainEqual(
      expect.stringContaining(`${join(other, "metadata.json")} not read: it is a ${LEADS_OUT}`),
    );
  });

  it("never wait on a FIFO or read a file too large to be the recorder's", async () => {
    const fifo = dumpFolder();
    rmSync(join(fifo, "metadata.json"));
    mkfifo(join(fifo, "metadata.json"));
    const big = dumpFolder();
    truncateSync(join(big, "metadata.json"), 300 * 2 ** 20);
    for (const [dump, why] of [
      [fifo, "not a regular file"],
      [big, "larger than any dump writes"],
    ] as const) {
      const warnings: string[] = [];
      // Without a readable metadata.json (and no bundle manifest) the folder is no dump: a typed refusal.
      expect(
        TelemetrySourceError.isInstance(
          await thrown(loadTelemetrySessions(dump, { onWarning: (m) => warnings.push(m) })),
        ),
      ).toBe(true);
      expect(warnings).toContain(`${join(dump, "metadata.json")} not read: ${why}`);
    }
  });
});

describe("errors about content name the file and the line", () => {
  it("a bad timestamp in a segment", async () => {
    const dir = tempDir();
    const [segment] = writeSink(dir, samples(5, { sessionId: "s" }));
    const lines = readFileSync(segment!, "utf8").split("\n");
    lines[2] = lines[2]!.replace(/"timestamp_ns": \d+/, '"timestamp_ns": "yesterday"');
    writeFileSync(segment!, lines.join("\n"));
    const error = await thrown(loadTelemetrySessions(dir));
    expect(TelemetryValidationError.isInstance(error)).toBe(true);
    expect((error as Error).message).toContain(`timestamp_ns`);
    expect((error as Error).message).toContain(`(${segment}:3)`);
  });

  it("bytes that are not UTF-8, in a segment and in a JSON document; a final line cut inside a character is dropped", async () => {
    const dir = tempDir();
    const [segment] = writeSink(dir, samples(5, { sessionId: "s" }));
    const bytes = readFileSync(segment!);
    const lines = bytes.toString("latin1").split("\n");
    // Line 3's context: two bytes that start no UTF-8 character (a U+FFFD written as text stays legal).
    lines[2] = lines[2]!.replace('"context": null', '"context": "ab\xff\xfe \ufffd"');
    writeFileSync(segment!, Buffer.from(lines.join("\n"), "latin1"));
    for (const load of [loadTelemetrySessions, summarizeTelemetrySessions]) {
      const error = await thrown(load(dir));
      expect(JsonlDecodeError.isInstance(error)).toBe(true);
      expect((error as Error).message).toBe(
        `bytes that are not UTF-8: telemetry is UTF-8 text; fix or remove the line (${segment}:3)`,
      );
    }
    const file = join(tempDir(), "events.json");
    writeFileSync(
      file,
      Buffer.from('[{"timestamp": 1.5,\n "memory_allocated": 10, "context": "\xff"}]', "latin1"),
    );
    expect(((await thrown(loadTelemetrySessions(file))) as Error).message).toContain(`(${file}:2)`);
    // A crash cut the last line inside a two-byte character: dropped as cut short, as any cut line.
    const cut = Buffer.concat([bytes, Buffer.from('{"context": "caf\xc3', "latin1")]);
    writeFileSync(segment!, cut);
    const { events, warnings } = await read(dir);
    expect(events).toBe(5);
    expect(warnings).toEqual([expect.stringContaining(`${segment}:6: dropped a final line cut short`)]);
    // A complete last record without its newline, bytes that are not UTF-8 inside: refused all the same.
    const whole = lines[0]!.replace('"context": null', '"context": "\xff"');
    writeFileSync(segment!, Buffer.concat([bytes, Buffer.from(whole, "latin1")]));
    expect(((await thrown(loadTelemetrySessions(dir))) as Error).message).toContain(
      `bytes that are not UTF-8: telemetry is UTF-8 text; fix or remove the line (${segment}:6)`,
    );
  });

  /** A JSON document of `records` (2-space indent), as a list or under `events`. */
  function document(records: object[], under: boolean): string {
    const parsed = records.map((event) => parseJson(encodeTelemetryRecord(event as TelemetryEvent)));
    return `${stringifyJson(under ? { events: parsed } : parsed, { indent: 2 })}\n`;
  }

  /** The 1-based line on which the `index`-th record of `text` starts (its `"allocator_active_bytes"` key). */
  function recordLine(text: string, index: number): number {
    let at = -1;
    for (let i = 0; i <= index; i++) at = text.indexOf('"allocator_active_bytes"', at + 1);
    return text.slice(0, at).split("\n").length - 1;
  }

  it.each([
    ["a list", false],
    ["an object's events", true],
  ])("a bad timestamp in a JSON document (%s)", async (_, under) => {
    const path = join(tempDir(), "events.json");
    const records: object[] = samples(6, { sessionId: "s" });
    records[4] = { ...records[4], timestamp_ns: -5 };
    const text = document(records, under);
    writeFileSync(path, text);
    const error = await thrown(loadTelemetrySessions(path));
    expect(TelemetryValidationError.isInstance(error)).toBe(true);
    const line = recordLine(text, 4);
    expect(line).toBeGreaterThan(4 * 20);
    expect((error as Error).message).toMatch(new RegExp(`timestamp_ns.*\\(${path}:${line}\\)$`));
  });

  it("a record of a JSON document that is not an object", async () => {
    const path = join(tempDir(), "events.json");
    const text = document(samples(3, { sessionId: "s" }), true).replace(
      /\n {4}\{\n(?:.*\n)*? {4}\}\n/,
      "\n    17\n",
    );
    writeFileSync(path, text);
    const error = await thrown(loadTelemetrySessions(path));
    expect(TelemetrySourceError.isInstance(error)).toBe(true);
    expect((error as Error).message).toBe(`Event at index 0 (line 3) must be an object (${path})`);
  });

  it("JSON a document cannot parse: the line, and the column in it", async () => {
    const path = join(tempDir(), "events.json");
    writeFileSync(path, '[\n  {"a": 1},\n  {"b": 2,, "c": 3}\n]\n');
    const error = await thrown(loadTelemetrySessions(path));
    expect(JsonlDecodeError.isInstance(error)).toBe(true);
    expect((error as Error).message).toBe(`Invalid JSON at column 11: expected a string key (${path}:3)`);
  });

  it("JSON nested 5,000 deep in a segment (canonical and other lines) and in a document", async () => {
    const dir = tempDir();
    const [segment] = writeSink(dir, samples(4, { sessionId: "s" }));
    const lines = readFileSync(segment!, "utf8").split("\n");
    for (const [line, text] of [
      // Canonical: the fast decoder's layout, deep metadata.
      [2, lines[1]!.replace('"metadata": {}', `"metadata": {"x": ${deepJson(5000)}}`)],
      // Not canonical: a key first, out of order.
      [3, `{"zzz": ${deepJson(5000)}, ${lines[2]!.slice(1)}`],
    ] as const) {
      const copy = [...lines];
      copy[line - 1] = text;
      writeFileSync(segment!, copy.join("\n"));
      const error = await thrown(loadTelemetrySessions(dir));
      expect(JsonlDecodeError.isInstance(error)).toBe(true);
      expect((error as Error).message).toMatch(
        new RegExp(`nested deeper than 512 levels.*\\(${segment}:${line}\\)$`),
      );
    }
    const path = join(tempDir(), "deep.json");
    writeFileSync(path, `[\n  {"a": 1},\n  {"b": ${deepJson(5000)}}\n]\n`);
    const error = await thrown(loadTelemetrySessions(path));
    expect(JsonlDecodeError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(new RegExp(`nested deeper than 512 levels.*\\(${path}:3\\)$`));
  });

  it("a final line without newline nested 600 deep: refused when its brackets close, dropped when cut short", async () => {
    const dir = tempDir();
    const [segment] = writeSink(dir, samples(4, { sessionId: "s" }));
    const lines = readFileSync(segment!, "utf8")
      .split("\n")
      .filter((line) => line !== "");
    // Whole JSON the reference parses (its limit is Python's recursion limit): refused, as with a newline.
    const whole = `{"zzz": ${deepJson(600)}, ${lines[3]!.slice(1)}`;
    writeFileSync(segment!, [...lines.slice(0, 3), whole].join("\n"));
    const error = await thrown(loadTelemetrySessions(dir));
    expect(JsonTooDeepError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(
      new RegExp(`nested deeper than 512 levels.*\\(${segment}:4\\)$`),
    );
    // The same line cut inside its nesting by a crash: dropped with a warning, the lines before it kept.
    writeFileSync(segment!, [...lines.slice(0, 3), whole.slice(0, 700)].join("\n"));
    const warnings: string[] = [];
    const sessions = await loadTelemetrySessions(dir, { onWarning: (message) => warnings.push(message) });
    expect(sessions[0]!.events).toHaveLength(3);
    expect(warnings).toContainEqual(expect.stringContaining(`${segment}:4: dropped a final line cut short`));
  });
});
