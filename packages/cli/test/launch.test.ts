import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

const LAUNCHER_SOURCE = join(dirname(fileURLToPath(import.meta.url)), "../src/launch.ts");

/** A stand-in for the bundled CLI: needs a relative require, reads argv, sets the exit code. */
const BUNDLE = `#!/usr/bin/env node
const { answer } = require("./answer.cjs");
process.stdout.write(\`answer \${answer} from \${require("node:path").basename(__filename)}\\n\`);
process.exitCode = Number(process.argv[2] ?? 0);
`;

let dir: string;
let cacheDir: string;

/** Runs the launcher (compiled to CommonJS as tsup does) beside the stand-in bundle. */
/** This environment without allocator settings (some CI images set `MALLOC_ARENA_MAX`): the launcher keeps a user's. */
function plainEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("MALLOC_") && name !== "GLIBC_TUNABLES"),
  );
}

function launch(args: string[] = [], env: NodeJS.ProcessEnv = {}, nodeArgs: string[] = []) {
  const result = spawnSync(process.execPath, [...nodeArgs, join(dir, "launch.cjs"), ...args], {
    encoding: "utf8",
    cwd: dir,
    env: { ...plainEnv(), NODE_DISABLE_COMPILE_CACHE: "", STORMLOG_CACHE_DIR: cacheDir, ...env },
  });
  return { status: result.status, signal: result.signal, stdout: result.stdout, stderr: result.stderr };
}

const cacheFiles = () => {
  try {
    return readdirSync(join(cacheDir, "compile-cache")).sort();
  } catch {
    return [];
  }
};

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-launch-"));
  cacheDir = join(dir, "cache");
  const compiled = ts.transpileModule(readFileSync(LAUNCHER_SOURCE, "utf8"), {
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2022,
      esModuleInterop: true,
    },
  }).outputText;
  writeFileSync(join(dir, "launch.cjs"), compiled);
  writeFileSync(join(dir, "bin.cjs"), BUNDLE);
  writeFileSync(join(dir, "answer.cjs"), "exports.answer = 42;\n");
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

// Node >= 22.1 caches compiled code itself; the launcher's own cache is what runs on Node 20.
const ownCache = !("enableCompileCache" in (await import("node:module")).default);

describe("the stormlog launcher", () => {
  it("runs the bundle with its arguments, require and exit code", () => {
    const result = launch(["3"]);
    expect(result.stderr).toBe("");
    expect(result.stdout).toBe("answer 42 from bin.cjs\n");
    expect(result.status).toBe(3);
  });

  it.runIf(ownCache)("writes the code cache once and reuses it", () => {
    expect(launch().stdout).toBe("answer 42 from bin.cjs\n");
    const [name] = cacheFiles();
    expect(name).toMatch(new RegExp(`^bin-${process.version}-${process.arch}-\\d+-\\d+-\\d+\\.cache$`));
    const file = join(cacheDir, "compile-cache", name!);
    const written = readFileSync(file);
    expect(written.length).toBeGreaterThan(0);
    // Accepted data is not written again.
    writeFileSync(file, written);
    expect(launch().stdout).toBe("answer 42 from bin.cjs\n");
    expect(readFileSync(file).equals(written)).toBe(true);
    expect(cacheFiles()).toEqual([name]);
  });

  it.runIf(ownCache)("replaces data V8 rejects, and still runs the command", () => {
    launch();
    const [name] = cacheFiles();
    const file = join(cacheDir, "compile-cache", name!);
    writeFileSync(file, Buffer.from("not a code cache"));
    const result = launch(["0"]);
    expect(result.stdout).toBe("answer 42 from bin.cjs\n");
    expect(result.status).toBe(0);
    expect(readFileSync(file).toString()).not.toBe("not a code cache");
  });

  it.runIf(ownCache)("keys the cache by the bundle, and keeps only the newest entries", () => {
    const names: string[] = [];
    for (let build = 0; build < 6; build++) {
      writeFileSync(join(dir, "bin.cjs"), `${BUNDLE}// build ${"x".repeat(build)}\n`);
      expect(launch().stdout).toBe("answer 42 from bin.cjs\n");
      const added = cacheFiles().filter((name) => !names.includes(name));
      expect(added).toHaveLength(1);
      names.push(added[0]!);
    }
    // Four builds kept (the newest), so two alternating installs do not evict each other.
    expect(cacheFiles()).toEqual(names.slice(2).sort());
  });

  it("runs without a cache when it is turned off or cannot be written", () => {
    expect(launch([], { STORMLOG_COMPILE_CACHE: "0" }).stdout).toBe("answer 42 from bin.cjs\n");
    expect(cacheFiles()).toEqual([]);
    // A cache root that is a file: nothing can be created under it.
    mkdirSync(dirname(cacheDir), { recursive: true });
    writeFileSync(cacheDir, "");
    chmodSync(cacheDir, 0o444);
    const result = launch(["5"]);
    expect(result.stdout).toBe("answer 42 from bin.cjs\n");
    expect(result.stderr).toBe("");
    expect(result.status).toBe(5);
  });
});

/** A stand-in bundle that says which trim threshold it runs with, and ends as its environment asks. */
const TRIM_BUNDLE = `#!/usr/bin/env node
process.stdout.write(\`trim \${process.env.MALLOC_TRIM_THRESHOLD_ ?? "unset"}\\n\`);
if (process.env.PRINT_EXEC_ARGV) process.stdout.write(\`execArgv \${process.execArgv.join(" ")}\\n\`);
if (process.env.PRINT_TUNABLES) process.stdout.write(\`tunables \${process.env.GLIBC_TUNABLES ?? "unset"}\\n\`);
if (process.env.SELF_KILL) process.kill(process.pid, process.env.SELF_KILL);
if (process.env.WAIT_FOR_SIGNAL) {
  if (process.env.WAIT_FOR_SIGNAL === "handle")
    process.on("SIGTERM", () => { process.stdout.write("got SIGTERM\\n"); process.exit(4); });
  setInterval(() => {}, 1000);
  process.stdout.write(\`ready \${process.pid}\\n\`);
}
process.exitCode = Number(process.env.EXIT_CODE ?? 0);
`;

/** The machine the command below re-runs on: glibc's settings mean nothing elsewhere. */
const glibc =
  process.platform === "linux" &&
  typeof (process.report.getReport() as { header?: { glibcVersionRuntime?: unknown } }).header
    ?.glibcVersionRuntime === "string";

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("a first scan of a big file", () => {
  let big: string;
  beforeEach(() => {
    writeFileSync(join(dir, "bin.cjs"), TRIM_BUNDLE);
    mkdirSync(join(dir, "job"));
    big = join(dir, "job", "run.jsonl");
    // Sparse: 600 MiB long, no blocks written.
    writeFileSync(big, "");
    truncateSync(big, 600 * 1024 * 1024);
  });

  /** The launcher (waiting in its child), its output so far once the child is ready, and its end. */
  async function waiting(mode: string) {
    const launcher = spawn(process.execPath, [join(dir, "launch.cjs"), "diagnose", big], {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...plainEnv(), STORMLOG_CACHE_DIR: cacheDir, WAIT_FOR_SIGNAL: mode },
    });
    let stdout = "";
    const ready = new Promise<number>((done) =>
      launcher.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
        const pid = /ready (\d+)/.exec(stdout);
        if (pid !== null) done(Number(pid[1]));
      }),
    );
    const ended = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
      launcher.on("close", (code, signal) => done({ code, signal })),
    );
    const childPid = await ready;
    return { launcher, childPid, ended, output: () => stdout };
  }

  it.runIf(glibc)("runs in a child with glibc's trim threshold fixed, which ends it as it ends", () => {
    const result = launch(["analyze", big, "--format", "json"], { EXIT_CODE: "7" });
    expect(result.stdout).toBe("trim 1048576\n");
    expect(result.stderr).toBe("");
    expect(result.status).toBe(7);
    // Node's own options reach the child.
    const withOptions = launch(["export", big], { PRINT_EXEC_ARGV: "1" }, ["--max-old-space-size=300"]);
    expect(withOptions.stdout).toBe("trim 1048576\nexecArgv --max-old-space-size=300\n");
    // glibc asks for transparent huge pages there too, beside the user's other tunables.
    expect(launch(["analyze", big], { PRINT_TUNABLES: "1" }).stdout).toBe(
      "trim 1048576\ntunables glibc.malloc.hugetlb=1\n",
    );
    expect(
      launch(["analyze", big], { PRINT_TUNABLES: "1", GLIBC_TUNABLES: "glibc.pthread.rseq=0" }).stdout,
    ).toBe("trim 1048576\ntunables glibc.pthread.rseq=0:glibc.malloc.hugetlb=1\n");
    // A small file runs here, with the environment as it is.
    const small = join(dir, "small.jsonl");
    writeFileSync(small, "{}\n");
    expect(launch(["analyze", small], { PRINT_TUNABLES: "1" }).stdout).toBe("trim unset\ntunables unset\n");
  });

  it("runs here for a small file, another command, its index beside it, a debugger, or the user's settings", () => {
    const small = join(dir, "small.jsonl");
    writeFileSync(small, "{}\n");
    expect(launch(["analyze", small]).stdout).toBe("trim unset\n");
    expect(launch(["track", "--sink", big, "--", "true"]).stdout).toBe("trim unset\n");
    expect(launch(["analyze", big], { MALLOC_ARENA_MAX: "2" }).stdout).toBe("trim unset\n");
    expect(launch(["analyze", big], { MALLOC_TRIM_THRESHOLD_: "4096" }).stdout).toBe("trim 4096\n");
    expect(launch(["analyze", big], { NODE_OPTIONS: "--inspect-port=0" }).stdout).toBe("trim unset\n");
    mkdirSync(join(dir, "job", ".stormlog-index"));
    // Another file's index beside it is not this one's.
    writeFileSync(join(dir, "job", ".stormlog-index", "index-other.jsonl.json"), "{}");
    if (glibc) expect(launch(["analyze", big]).stdout).toBe("trim 1048576\n");
    writeFileSync(join(dir, "job", ".stormlog-index", "index-run.jsonl.json"), "{}");
    expect(launch(["analyze", big]).stdout).toBe("trim unset\n");
  });

  it.runIf(glibc)("ends as its child ends when a signal ends the child", () => {
    // Killed: so is the launcher.
    const killed = launch(["analyze", big], { SELF_KILL: "SIGKILL" });
    expect([killed.stdout, killed.status, killed.signal]).toEqual(["trim 1048576\n", null, "SIGKILL"]);
    // A core dump's signal: the launcher exits 128 + its number (the child's dump is the one kept).
    const aborted = launch(["analyze", big], { SELF_KILL: "SIGABRT" });
    expect([aborted.stdout, aborted.status, aborted.signal]).toEqual(["trim 1048576\n", 134, null]);
  });

  it.runIf(glibc)("relays a signal to the child, and ends as the child ends", async () => {
    // The child handles it: the launcher ends with the child's code.
    const handled = await waiting("handle");
    handled.launcher.kill("SIGTERM");
    expect(await handled.ended).toEqual({ code: 4, signal: null });
    expect(handled.output()).toBe(`trim 1048576\nready ${handled.childPid}\ngot SIGTERM\n`);
    // The child dies of it: so does the launcher.
    const died = await waiting("default");
    died.launcher.kill("SIGTERM");
    expect(await died.ended).toEqual({ code: null, signal: "SIGTERM" });
  });

  it.runIf(glibc)("ends its child when the launcher is killed", async () => {
    const { launcher, childPid, ended } = await waiting("default");
    expect(alive(childPid)).toBe(true);
    launcher.kill("SIGKILL");
    expect(await ended).toEqual({ code: null, signal: "SIGKILL" });
    const deadline = Date.now() + 10_000;
    while (alive(childPid) && Date.now() < deadline) await new Promise((done) => setTimeout(done, 20));
    expect(alive(childPid)).toBe(false);
  });
});
