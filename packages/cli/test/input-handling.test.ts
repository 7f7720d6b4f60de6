import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type JsonObject,
  type MemoryCollector,
  noCapabilities,
  parseJson,
} from "@stormlog/core";
import { MemoryTracker } from "@stormlog/tracker";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { samples, writeSink } from "../../sink/test/support/telemetry-fixtures.js";
import { expectOneLineError, RAW_CONTROL, runCli, tempDir } from "./helpers.js";

// What a newcomer meets in the first hour: an OOM dump folder, a segment cut by a crash, a manifest
// that is garbage. Every input here is written by the real tracker (its sink and its OOM recorder).

/** A device whose allocated bytes grow by 1 MiB a sample. */
function growingCollector(): MemoryCollector {
  let bytes = 64 * 2 ** 20;
  const read = () => ({ kind: "full" as const, reading: { allocator_allocated_bytes: bytes } });
  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: "stormlog.test_device",
    deviceId: 0,
    capabilities: {
      ...noCapabilities("cuda", "stormlog.test_device", "test"),
      supports_allocator_allocated: true,
    },
    availability: () => ({ available: true }),
    sample: () => {
      bytes += 2 ** 20;
      return read();
    },
    readSync: read,
  };
}

/** A tracked run that ends in an OOM: its sink directory and the OOM recorder's dump folder. */
async function trackedRunWithOOM(root: string): Promise<{ sink: string; dump: string }> {
  const sink = join(root, "sink");
  const tracker = new MemoryTracker({
    collectors: [growingCollector()],
    sink: { rootDir: sink, handleProcessExit: false, writeRollups: false },
    sinkThread: "main",
    oom: { enabled: true, dumpDir: join(root, "oom_dumps") },
    env: false,
    handleProcessExit: false,
    registerGlobal: false,
    logger: { warn: () => undefined },
  });
  await tracker.start();
  for (let i = 0; i < 40; i++) await tracker.sampleNow();
  expect(() =>
    tracker.captureOOM(() => {
      throw new Error("CUDA out of memory. Tried to allocate 2.00 GiB");
    }),
  ).toThrow(/out of memory/);
  await tracker.stop();
  const dump = tracker.getStatistics().lastOomDumpPath;
  if (typeof dump !== "string") throw new Error("the OOM recorder wrote no dump");
  return { sink, dump };
}

function json(text: string): JsonObject {
  return parseJson(text) as JsonObject;
}

function segmentOf(sink: string): string {
  const name = readdirSync(sink).find((entry) => entry.startsWith("segment-") && entry.endsWith(".jsonl"));
  if (name === undefined) throw new Error(`no segment in ${sink}`);
  return join(sink, name);
}

function manifestCount(sink: string, segment: string): number {
  const manifest = json(readFileSync(join(sink, "manifest.json"), "utf8"));
  const entry = (manifest.segments as JsonObject[]).find(
    (item) => join(sink, String(item.filename)) === segment,
  );
  return Number(entry?.event_count);
}

async function eventCount(path: string): Promise<number> {
  const run = await runCli(["analyze", path, "--format", "json", "--no-index"]);
  expect(run.code).toBe(0);
  return Number((json(run.stdout).summary as JsonObject).event_count);
}

let dir: ReturnType<typeof tempDir>;
let pristine: { sink: string; dump: string };
beforeAll(async () => {
  dir = tempDir("stormlog-input-");
  pristine = await trackedRunWithOOM(join(dir.path, "run"));
});
afterAll(() => dir.remove());

let n = 0;
/** A fresh tracked run for tests that damage it. */
async function freshRun(): Promise<{ sink: string; dump: string }> {
  return trackedRunWithOOM(join(dir.path, `damaged-${n++}`));
}

describe("an OOM dump folder as input", () => {
  let metadata: JsonObject;
  let bundle: JsonObject;
  beforeEach(() => {
    metadata = json(readFileSync(join(pristine.dump, "metadata.json"), "utf8"));
    bundle = json(readFileSync(join(pristine.dump, "manifest.json"), "utf8"));
  });

  it("is analyzed as its events.json, and the text says it is an OOM dump, why and when", async () => {
    const fromFolder = await runCli(["analyze", pristine.dump]);
    expect(fromFolder.code).toBe(0);
    expect(fromFolder.stderr).toBe("");
    const note = fromFolder.stdout.split("\n").find((line) => line.includes("OOM flight recorder dump"));
    expect(note).toBeDefined();
    expect(note).toContain(pristine.dump);
    expect(note).toContain(String(bundle.reason));
    expect(note).toContain(`written ${String(bundle.created_at_utc)}`);
    expect(note).toContain(String(metadata.exception_message));
    expect(note).toContain(`the ${String(bundle.event_count)} records`);

    const folder = json((await runCli(["analyze", pristine.dump, "--format", "json"])).stdout);
    const file = json(
      (await runCli(["analyze", join(pristine.dump, "events.json"), "--format", "json"])).stdout,
    );
    expect(folder.summary).toEqual(file.summary);
    expect(folder.session).toEqual(file.session);
    expect(Number((folder.summary as JsonObject).event_count)).toBe(Number(bundle.event_count));
    expect((folder.sink as JsonObject).warnings).toEqual([
      expect.stringContaining("OOM flight recorder dump"),
    ]);
    // The dump's error event is there: the recorder kept the records up to the failure.
    expect((folder.alerts as JsonObject).total_count).toBe(1);
    // Read, never written into (no index beside a JSON document).
    expect(readdirSync(pristine.dump).sort()).toEqual([
      "environment.json",
      "events.json",
      "manifest.json",
      "metadata.json",
    ]);
  });

  it("is read by sessions, export and diagnose too, each saying what it is", async () => {
    const sessions = await runCli(["sessions", pristine.dump, "--format", "json"]);
    expect(sessions.code).toBe(0);
    const listed = json(sessions.stdout).sessions as JsonObject[];
    expect(listed.map((session) => session.session_id)).toEqual([bundle.session_id]);
    expect(sessions.stderr).toMatch(/^stormlog sessions: warning: .* is an OOM flight recorder dump/);

    const exported = await runCli(["export", pristine.dump, "--format", "jsonl"]);
    const direct = await runCli(["export", join(pristine.dump, "events.json"), "--format", "jsonl"]);
    expect(exported.code).toBe(0);
    expect(exported.stdout).toBe(direct.stdout);
    expect(exported.stdout.trim().split("\n")).toHaveLength(Number(bundle.event_count));
    expect(exported.stderr).toMatch(/^stormlog export: warning: .* is an OOM flight recorder dump/);
    expect(direct.stderr).toBe("");

    const diagnosed = await runCli(["diagnose", pristine.dump, "--format", "json"]);
    expect(diagnosed.code).toBe(2);
    expect(json(diagnosed.stdout).warnings).toContainEqual(
      expect.stringContaining("OOM flight recorder dump"),
    );
  });

  it("a folder of dumps is refused naming the newest dump to pass", async () => {
    const dumps = join(pristine.dump, "..");
    const run = await runCli(["analyze", dumps]);
    expectOneLineError(run, /holds 1 OOM flight recorder dump; pass one of them, e.g. the newest: /);
    expect(run.stderr).toContain(pristine.dump);
  });

  it("a dump beside sinks under a root is left out with a warning, the sinks read", async () => {
    const { sink, dump } = await freshRun();
    // The dumps' folder now also holds the run's sink, as a root of sinks would.
    const root = join(dump, "..");
    renameSync(sink, join(root, "rank-0"));
    const run = await runCli(["sessions", root, "--format", "json"]);
    expect(run.code).toBe(0);
    expect(run.stderr).toContain(`${dump} not read: it is an OOM flight recorder dump, not a sink`);
    const listed = json(run.stdout).sessions as JsonObject[];
    expect(listed).toHaveLength(1);
    expect(listed[0]!.event_count).toBe(manifestCount(join(root, "rank-0"), segmentOf(join(root, "rank-0"))));
  });
});

describe("a segment shorter than its manifest says", () => {
  it("is reported with both counts, in the text and in the JSON report's sink warnings", async () => {
    const { sink } = await freshRun();
    const segment = segmentOf(sink);
    const written = manifestCount(sink, segment);
    const lines = readFileSync(segment, "utf8").split("\n");
    expect(lines.length - 1).toBe(written);
    // A crash mid-write: the file ends inside a line in its middle.
    const keep = Math.floor(written / 2);
    truncateSync(
      segment,
      Buffer.byteLength(`${lines.slice(0, keep).join("\n")}\n${lines[keep]!.slice(0, 10)}`),
    );
    const expected = `${segment}: ${keep} of the ${written} events its manifest says were written could be read (${written - keep} missing`;

    const text = await runCli(["analyze", sink]);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(expected);
    const report = json((await runCli(["analyze", sink, "--format", "json"])).stdout);
    expect((report.summary as JsonObject).event_count).toBe(keep);
    expect((report.sink as JsonObject).warnings).toContainEqual(expect.stringContaining(expected));

    const sessions = await runCli(["sessions", sink]);
    expect(sessions.stderr).toContain(expected);
    const exported = await runCli(["export", sink, "--format", "jsonl"]);
    expect(exported.stdout.trim().split("\n")).toHaveLength(keep);
    expect(exported.stderr).toContain(expected);
    const diagnosed = json((await runCli(["diagnose", sink, "--format", "json"])).stdout);
    expect(diagnosed.warnings).toContainEqual(expect.stringContaining(expected));
  });

  it("is not reported for an intact sink", async () => {
    const run = await runCli(["analyze", pristine.sink, "--format", "json", "--no-index"]);
    expect((json(run.stdout).sink as JsonObject).warnings).toEqual([]);
  });
});

describe("a manifest.json that is garbage", () => {
  const cases: [string, string, RegExp][] = [
    ["not JSON", '{"schema_version": 2, "sessions": [', /\(not JSON: [^)]+\)/],
    ["empty", "", /\(empty\)/],
    ["JSON of another kind", "[1, 2, 3]", /\(the JSON is a list, not an object\)/],
    [
      "JSON of the wrong shape",
      '{"schema_version": 2, "sessions": 5, "segments": "segment-000001.jsonl"}',
      /\("segments" is a string, not a list; "sessions" is a number, not a list\)/,
    ],
  ];

  for (const [what, text, problem] of cases) {
    it(`(${what}) is named in a warning and the segments' events are all read, exit code 0`, async () => {
      const { sink } = await freshRun();
      const before = await eventCount(sink);
      const manifest = join(sink, "manifest.json");
      writeFileSync(manifest, text);

      const run = await runCli(["analyze", sink, "--format", "json"]);
      expect(run.code).toBe(0);
      const report = json(run.stdout);
      expect((report.summary as JsonObject).event_count).toBe(before);
      const warnings = (report.sink as JsonObject).warnings as string[];
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(`${manifest} is not a usable sink manifest`);
      expect(warnings[0]).toMatch(problem);
      expect(warnings[0]).toContain("the segment-*.jsonl files beside it are read without it");

      const textRun = await runCli(["analyze", sink, "--no-index"]);
      expect(textRun.stdout).toContain(`${manifest} is not a usable sink manifest`);
      const sessions = await runCli(["sessions", sink]);
      expect(sessions.code).toBe(0);
      expect(sessions.stderr).toMatch(
        /^stormlog sessions: warning: .*manifest\.json is not a usable sink manifest/,
      );
    });
  }

  it("with no segment beside it is an error: there is nothing to read (exit code 1)", async () => {
    const { sink } = await freshRun();
    writeFileSync(join(sink, "manifest.json"), "not a manifest");
    for (const name of readdirSync(sink)) if (name.startsWith("segment-")) unlinkSync(join(sink, name));
    for (const command of ["analyze", "sessions", "diagnose"]) {
      expectOneLineError(
        await runCli([command, sink]),
        /Nothing to read: .*manifest\.json is not a sink manifest \(not JSON: .*\) and there is no segment-\*\.jsonl beside it/,
      );
    }
  });
});

describe("the index flags of export and diagnose", () => {
  it("--no-index leaves the sink untouched, --cache-dir keeps the index there", async () => {
    const { sink } = await freshRun();
    const before = readdirSync(sink).sort();
    // diagnose exits 2: the run ended in an OOM, a memory risk.
    for (const [command, code] of [
      [["export", sink, "--format", "csv", "--no-index"], 0],
      [["diagnose", sink, "--no-index"], 2],
    ] as const) {
      expect((await runCli(command)).code).toBe(code);
      expect(readdirSync(sink).sort()).toEqual(before);
    }
    const cache = join(dir.path, "cache");
    mkdirSync(cache);
    const exported = await runCli(["export", sink, "--format", "jsonl", "--cache-dir", cache]);
    expect(exported.code).toBe(0);
    expect(readdirSync(sink).sort()).toEqual(before);
    expect(readdirSync(cache, { recursive: true }).length).toBeGreaterThan(0);
    expect(existsSync(join(sink, ".stormlog-index"))).toBe(false);
  });
});

describe("a manifest.json with entries of the wrong shape", () => {
  it("says one warning per skipped entry, naming the manifest and the entry, and reads the rest", async () => {
    // A directory name with an escape sequence: the warnings print it escaped.
    const sink = join(dir.path, "odd-entries\u001b[2J");
    writeSink(sink, samples(5, { sessionId: "s" }));
    const manifest = join(sink, "manifest.json");
    const document = JSON.parse(readFileSync(manifest, "utf8")) as {
      segments: unknown[];
      sessions: unknown[];
    };
    const { session_id: _, ...withoutId } = document.sessions[0] as Record<string, unknown>;
    document.segments.push(42, { filename: 7 });
    document.sessions.push("session", withoutId);
    writeFileSync(manifest, JSON.stringify(document));
    const shown = join(dir.path, "odd-entries\\x1b[2J", "manifest.json");
    const entries = [
      "sessions[1] skipped (a string, not an object): ",
      "sessions[2] skipped (session_id must be a non-empty string): ",
      "segments[1] skipped (a number, not an object): ",
      'segments[2] skipped ("filename" is a number): ',
    ];

    const sessions = await runCli(["sessions", sink, "--format", "json"]);
    expect(sessions.code).toBe(0);
    expect(sessions.stderr).not.toMatch(RAW_CONTROL);
    const lines = sessions.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(entries.length);
    for (const [i, entry] of entries.entries())
      expect(lines[i]).toContain(`stormlog sessions: warning: ${shown}: manifest entry ${entry}`);
    expect((json(sessions.stdout).sessions as JsonObject[]).map((s) => s.event_count)).toEqual([5]);

    // analyze lists them in the report's notes (json: sink.warnings), and reads every event.
    const report = json((await runCli(["analyze", sink, "--format", "json", "--no-index"])).stdout);
    expect((report.summary as JsonObject).event_count).toBe(5);
    const warnings = (report.sink as JsonObject).warnings as string[];
    expect(warnings).toHaveLength(entries.length);
    for (const [i, entry] of entries.entries())
      expect(warnings[i]).toContain(`${manifest}: manifest entry ${entry}`);
  });
});

describe("a telemetry file of another encoding or name", () => {
  const record = () => readFileSync(segmentOf(pristine.sink), "utf8");

  it("a UTF-8 byte order mark: one line saying so and how to remove it, naming the file and line 1", async () => {
    for (const name of ["bom.jsonl", "bom.json"]) {
      const file = join(dir.path, name);
      const text = name.endsWith(".jsonl") ? record() : `[${record().trimEnd().split("\n").join(",")}]`;
      writeFileSync(file, `\ufeff${text}`);
      for (const argv of [["analyze"], ["analyze", "--no-index"], ["sessions"], ["diagnose"]]) {
        expectOneLineError(
          await runCli([argv[0]!, file, ...argv.slice(1)]),
          new RegExp(
            `^stormlog ${argv[0]}: A UTF-8 byte order mark \\(BOM\\) starts the line; .*save the file as UTF-8 ` +
              `without BOM, e\\.g\\. tail -c \\+4 FILE > FIXED .*\\(${file}:1\\)$`,
          ),
        );
      }
    }
  });

  it("JSONL in a file not named .jsonl: one line saying so and to rename it", async () => {
    const file = join(dir.path, "run.log");
    writeFileSync(file, record());
    for (const command of ["analyze", "sessions", "diagnose"]) {
      expectOneLineError(
        await runCli([command, file]),
        new RegExp(
          `^stormlog ${command}: Holds one JSON object per line \\(JSONL\\), but only \\*\\.jsonl files are read ` +
            `line by line .*: rename it to end in \\.jsonl \\(${file}\\)`,
        ),
      );
    }
    renameSync(file, `${file}.jsonl`);
    expect((await runCli(["sessions", `${file}.jsonl`])).code).toBe(0);
  });
});
