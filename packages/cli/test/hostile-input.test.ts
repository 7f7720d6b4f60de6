/**
 * Hostile input, as the `stormlog` commands print it: one line with what to do for a link loop, a
 * damaged or too deeply nested file (naming the file and the line); a warning for a link out of the
 * input; and no escape sequence or control character from the input reaching the terminal.
 */
import { execFileSync } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord } from "@stormlog/core";
import { afterAll, describe, expect, it } from "vitest";
import { deepJson, samples, Timeline, writeSink } from "../../sink/test/support/telemetry-fixtures.js";
import {
  type CliRun,
  expectOneLineError,
  finished,
  RAW_CONTROL,
  runCli,
  spawnCli,
  tempDir,
} from "./helpers.js";

const temp = tempDir("stormlog-hostile-");
afterAll(() => temp.remove());
let made = 0;
const fresh = (): string => join(temp.path, `case-${++made}`);

const COMMANDS = [["analyze"], ["analyze", "--no-index"], ["sessions"], ["diagnose"]] as const;

/** Runs each command on `path`. */
async function runAll(path: string): Promise<[string, CliRun][]> {
  const runs: [string, CliRun][] = [];
  for (const [name, ...flags] of COMMANDS) runs.push([name, await runCli([name, path, ...flags])]);
  return runs;
}

describe("link loops", () => {
  const LOOP = /symbolic link loop \(ELOOP\); remove or fix the looping link/;

  it("given as the input: one line with what to do, naming the link, and exit 1", async () => {
    const loop = join(fresh(), "loop");
    mkdirSync(join(loop, ".."));
    symlinkSync(loop, loop);
    for (const [name, run] of await runAll(loop)) {
      expectOneLineError(
        run,
        new RegExp(`^stormlog ${name}: Cannot read the telemetry input: ${LOOP.source} \\(${loop}\\)$`),
      );
      expect(run.stderr).not.toContain("internal error");
    }
  });

  it("inside the input (a rank directory, a segment): the same", async () => {
    for (const name of ["rank-1", "rank-0/segment-000002.jsonl"]) {
      const root = fresh();
      writeSink(join(root, "rank-0"), samples(3, { sessionId: "s" }));
      const loop = join(root, name);
      symlinkSync(loop, loop);
      for (const [command, run] of await runAll(root)) {
        expectOneLineError(run, new RegExp(`^stormlog ${command}: .*${LOOP.source} \\(${loop}\\)$`));
      }
    }
  });
});

describe("a manifest linking out of the input", () => {
  it("is not read: its sessions are not listed, analysed or diagnosed, and each command says why", async () => {
    const outside = fresh();
    writeSink(outside, samples(4, { sessionId: "outside-session" }));
    const input = fresh();
    writeSink(input, samples(3, { sessionId: "own-session" }), { manifest: false });
    const link = join(input, "manifest.json");
    symlinkSync(join(outside, "manifest.json"), link);
    const warning = `${link} not read: it is a symbolic link that leads out of the input`;
    for (const [name, run] of await runAll(input)) {
      expect(run.code, name).toBe(0);
      expect(run.stdout).toContain("own-session");
      expect(run.stdout + run.stderr).not.toContain("outside-session");
    }
    const sessions = await runCli(["sessions", input]);
    expect(sessions.stderr).toBe(
      `stormlog sessions: warning: ${warning} (to ${join(outside, "manifest.json")}); links are not followed out of it\n`,
    );
    expect((await runCli(["analyze", input])).stdout).toContain(`  - ${warning}`);
    expect((await runCli(["diagnose", input])).stdout).toContain(`Warning: ${warning}`);
  });
});

describe("damaged content", () => {
  it("JSON nested 5,000 deep: one line naming the file and line, with or without the index", async () => {
    const dir = fresh();
    const [segment] = writeSink(dir, samples(4, { sessionId: "s" }));
    const lines = readFileSync(segment!, "utf8").split("\n");
    lines[1] = lines[1]!.replace('"metadata": {}', `"metadata": {"x": ${deepJson(5000)}}`);
    writeFileSync(segment!, lines.join("\n"));
    for (const [name, run] of await runAll(dir)) {
      expectOneLineError(
        run,
        new RegExp(
          `^stormlog ${name}: Invalid JSON .*nested deeper than 512 levels.* \\(${segment}:2\\) \\(hint: `,
        ),
      );
    }
  });

  it("a bad timestamp in a JSON document: one line naming the file and line", async () => {
    const path = join(fresh(), "events.json");
    mkdirSync(join(path, ".."));
    const records = samples(3, { sessionId: "s" }).map((event) => encodeTelemetryRecord(event));
    records[2] = records[2]!.replace(/"timestamp_ns": \d+/, '"timestamp_ns": 1.5');
    writeFileSync(path, `[\n${records.join(",\n")}\n]\n`);
    for (const [name, run] of await runAll(path)) {
      expectOneLineError(run, new RegExp(`^stormlog ${name}: .*timestamp_ns.* \\(${path}:4\\)`));
    }
  });
});

describe("values past what a date or a table can hold", () => {
  it("a timestamp past the year 275,760: its nanoseconds shown, no internal error", async () => {
    const dir = fresh();
    writeSink(dir, samples(3, { sessionId: "far", start: 10n ** 22n }));
    for (const [name, run] of await runAll(dir)) {
      expect(run.stderr, name).not.toContain("internal error");
      expect(run.code === 0 || (name === "diagnose" && run.code === 2), `${name}: ${run.stderr}`).toBe(true);
    }
    const listed = await runCli(["sessions", dir]);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain("10000000000000000000000 ns");
  });

  it("a world_size of 300,000 lists its missing ranks; one of a billion is left out with a warning", async () => {
    /** `diagnose` on one job of three samples that say `worldSize`. */
    const diagnoseWorld = async (worldSize: number) => {
      const dir = fresh();
      writeSink(
        dir,
        samples(3, { sessionId: "job" }).map((event) => ({ ...event, job_id: "j", world_size: worldSize })),
      );
      const run = await runCli(["diagnose", dir]);
      expect(run.stderr).not.toContain("internal error");
      return run;
    };
    expect((await diagnoseWorld(300_000)).stdout.split("\n").length).toBeGreaterThan(300_000);
    const absurd = await diagnoseWorld(1e9);
    expect(absurd.stdout + absurd.stderr).toContain("world_size 1000000000 left out");
  });
});

describe("special files inside the input", () => {
  it("a FIFO or a directory where the manifest should be: no command waits on it, a warning names it", async () => {
    for (const make of [(path: string) => execFileSync("mkfifo", [path]), mkdirSync]) {
      const dir = fresh();
      writeSink(dir, samples(3, { sessionId: "s" }));
      rmSync(join(dir, "manifest.json"));
      make(join(dir, "manifest.json"));
      for (const [, run] of await runAll(dir)) {
        // On stderr, or in the report's notes.
        expect(run.stderr + run.stdout).toMatch(
          /manifest\.json is not a usable sink manifest \((not a regular file|a directory)/,
        );
        expect(run.stderr).not.toContain("internal error");
        // The segments beside it are read.
        expect(run.code === 0 || run.code === 2).toBe(true);
      }
    }
  });

  it("a device or a JSON document too large to read whole: one line each, no internal error", async () => {
    for (const [name, run] of await runAll("/dev/zero")) {
      expectOneLineError(run, new RegExp(`^stormlog ${name}: .*not a regular file.*\\(/dev/zero\\)`));
    }
    const huge = join(fresh(), "events.json");
    mkdirSync(join(huge, ".."));
    // Sparse: 300 MiB of size, no disk.
    writeFileSync(huge, "");
    truncateSync(huge, 300 * 2 ** 20);
    for (const [name, run] of await runAll(huge)) {
      expectOneLineError(run, new RegExp(`^stormlog ${name}: 300 MiB .*write records as JSONL`));
    }
  });

  it("a line longer than 64 MiB: one line naming the file and line, no internal error", async () => {
    const dir = fresh();
    mkdirSync(dir);
    const segment = join(dir, "segment-000001.jsonl");
    // Sparse: 70 MiB without a line break, no disk.
    writeFileSync(segment, "");
    truncateSync(segment, 70 * 2 ** 20);
    for (const [name, run] of await runAll(segment)) {
      expectOneLineError(run, new RegExp(`^stormlog ${name}: a line longer than 64 MiB.*\\(${segment}:1\\)`));
    }
  });

  it("a FIFO where rollups or the index should be: the analysis goes on without it", async () => {
    const dir = fresh();
    writeSink(dir, samples(3, { sessionId: "s" }));
    expect((await runCli(["analyze", dir])).code).toBe(0);
    const index = join(dir, ".stormlog-index");
    for (const name of readdirSync(index)) {
      const path = join(index, name);
      if (!statSync(path).isFile()) continue;
      rmSync(path);
      execFileSync("mkfifo", [path]);
    }
    execFileSync("mkfifo", [join(dir, "rollups.json")]);
    for (const [name, run] of await runAll(dir)) {
      expect(run.code === 0 || (name === "diagnose" && run.code === 2), `${name}: ${run.stderr}`).toBe(true);
    }
  });
});

describe("an index directory that is a link out of the input", () => {
  it("is not written through: the analysis goes on, the link's target stays untouched", async () => {
    const dir = fresh();
    writeSink(dir, samples(3, { sessionId: "s" }));
    const victim = `${dir}-victim`;
    mkdirSync(victim);
    writeFileSync(join(victim, "seg-keep.agg"), "not ours");
    symlinkSync(victim, join(dir, ".stormlog-index"));
    // The user cache directory takes the index instead: one of the test's own.
    const cache = `${dir}-cache`;
    const before = process.env.XDG_CACHE_HOME;
    process.env.XDG_CACHE_HOME = cache;
    try {
      const run = await runCli(["analyze", dir]);
      expect(run.code, run.stderr).toBe(0);
    } finally {
      if (before === undefined) delete process.env.XDG_CACHE_HOME;
      else process.env.XDG_CACHE_HOME = before;
    }
    expect(readdirSync(victim)).toEqual(["seg-keep.agg"]);
  });
});

describe("a result that cannot be written", () => {
  it("to standard output on a full device: one line, exit 1, no stack trace", async () => {
    const dir = fresh();
    writeSink(dir, samples(3, { sessionId: "s" }));
    const full = openSync("/dev/full", "w");
    try {
      const run = await finished(spawnCli(["sessions", dir], { stdout: full }));
      expect(run.code).toBe(1);
      expect(run.stderr).toBe(
        "stormlog: cannot write to standard output: no space left on device (ENOSPC) (hint: free some space)\n",
      );
    } finally {
      closeSync(full);
    }
  });

  it("to --output on a full device: one line naming the file", async () => {
    const dir = fresh();
    writeSink(dir, samples(3, { sessionId: "s" }));
    const run = await runCli(["analyze", dir, "--format", "json", "--output", "/dev/full"]);
    expectOneLineError(run, /^stormlog analyze: cannot access \/dev\/full: .*\(ENOSPC\)/);
  });
});

describe("hostile text in the input", () => {
  const TITLE = "\u001b]0;owned\u0007job";
  const CLEAR = "fwd\u001b[2J";
  const LINK = "\u001b]8;;https://evil.example\u001b\\click\u001b]8;;\u001b\\";
  const C1 = "run\u009b31m";
  const ROW = "ctx\nFAKE ROW";

  it("reaches no terminal: control characters escaped, one line per row, long values cut", async () => {
    const dir = fresh();
    const t = new Timeline({ session_id: C1, job_id: TITLE, host: `${C1}${CLEAR}` });
    t.tensors = 4;
    for (let step = 0; step < 40; step++) {
      t.sample();
      t.enter("train").enter(CLEAR);
      t.allocated += 1 << 20;
      t.tensors += 1;
      t.sample();
      t.exit().enter(LINK).sample().exit().exit();
      if (step === 20) t.event("critical", { context: ROW });
      if (step === 30) t.event("warning", { context: "x".repeat(5000) });
    }
    writeSink(dir, t.events);
    const out = (await runAll(dir)).map(([name, run]) => {
      expect(run.code === 0 || (name === "diagnose" && run.code === 2), `${name}: ${run.stderr}`).toBe(true);
      expect(run.stdout + run.stderr, name).not.toMatch(RAW_CONTROL);
      // A newline in a value never starts a row of its own.
      expect(run.stdout, name).not.toMatch(/^FAKE ROW/m);
      for (const line of run.stdout.split("\n")) expect(line.length, name).toBeLessThan(1200);
      return run.stdout;
    });
    const all = out.join("\n");
    // Shown, escaped.
    expect(all).toContain("\\x1b]0;owned\\x07job");
    expect(all).toContain("fwd\\x1b[2J");
    expect(all).toContain("\\x1b]8;;https://evil.example\\x1b\\click");
    expect(all).toContain("run\\x9b31m");
    expect(all).toContain("ctx\\nFAKE ROW");
    expect(all).toMatch(/x{100}…\(\+\d+ chars\)/);
  });
});

describe("hostile text in a result shown on a terminal", () => {
  const TITLE = "\u001b]0;owned\u0007job";
  const C1 = "host\u009b31m";
  const BIDI = "phase\u202eevil";

  /** A sink whose job id, host and phase name hold escapes. */
  function hostileSink(): string {
    const dir = fresh();
    const t = new Timeline({ session_id: "s", job_id: TITLE, host: C1 });
    t.sample().enter(BIDI).sample().exit().sample();
    writeSink(dir, t.events);
    return dir;
  }

  it("CSV on a terminal (export, query): every cell escaped; a pipe or a file gets the exact bytes", async () => {
    const sink = hostileSink();
    const runs = [
      ["export", sink, "--format", "csv", "--no-index"],
      ["query", "SELECT host, job_id FROM samples", sink, "--format", "csv", "--no-index"],
    ];
    for (const argv of runs) {
      const terminal = await runCli(argv, { stdoutTty: true });
      expect(terminal.code, terminal.stderr).toBe(0);
      expect(terminal.stdout, argv[0]).not.toMatch(RAW_CONTROL);
      expect(terminal.stdout, argv[0]).not.toContain("\u202e");
      expect(terminal.stdout).toContain("host\\x9b31m,\\x1b]0;owned\\x07job");
      const pipe = await runCli(argv);
      expect(pipe.stdout).toContain(`${C1},${TITLE}`);
    }
    const file = join(fresh(), "events.csv");
    mkdirSync(join(file, ".."));
    expect((await runCli([...runs[0]!, "-o", file], { stdoutTty: true })).code).toBe(0);
    expect(readFileSync(file, "utf8")).toContain(BIDI);
  });

  it("an output name with control characters is echoed escaped (report, export --format parquet)", async () => {
    const sink = hostileSink();
    const out = fresh();
    mkdirSync(out);
    const page = join(out, "page\u001b[2J.html");
    const report = await runCli(["report", sink, "-o", page, "--no-index"], { stdoutTty: true });
    expect(report.code, report.stderr).toBe(0);
    expect(report.stdout + report.stderr).not.toMatch(RAW_CONTROL);
    expect(report.stderr).toContain("page\\x1b[2J.html");
    expect(report.stdout).toBe(`${join(out, "page\\x1b[2J.html")}\n`);
    // Piped, the path is printed exactly, for a script to open.
    expect((await runCli(["report", sink, "-o", page, "--no-index"])).stdout).toBe(`${page}\n`);
    const dataset = await runCli(["export", sink, "--format", "parquet", "-o", join(out, "data\u009b1m")]);
    expect(dataset.code, dataset.stderr).toBe(0);
    expect(dataset.stderr).not.toMatch(RAW_CONTROL);
    expect(dataset.stderr).toContain("data\\x9b1m");
  });
});
