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
function launch(args: string[] = [], env: NodeJS.ProcessEnv = {}) {
  const result = spawnSync(process.execPath, [join(dir, "launch.cjs"), ...args], {
    encoding: "utf8",
    env: { ...process.env, NODE_DISABLE_COMPILE_CACHE: "", STORMLOG_CACHE_DIR: cacheDir, ...env },
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
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

/** A stand-in bundle that says which trim threshold it runs with, and ends with `$EXIT_CODE`. */
const TRIM_BUNDLE = `#!/usr/bin/env node
process.stdout.write(\`trim \${process.env.MALLOC_TRIM_THRESHOLD_ ?? "unset"}\\n\`);
if (process.env.WAIT_FOR_SIGNAL) {
  if (process.env.WAIT_FOR_SIGNAL === "handle")
    process.on("SIGTERM", () => { process.stdout.write("got SIGTERM\\n"); process.exit(4); });
  setInterval(() => {}, 1000);
  process.stdout.write("ready\\n");
}
process.exitCode = Number(process.env.EXIT_CODE ?? 0);
`;

/** The machine the command below re-runs on: glibc's settings mean nothing elsewhere. */
const glibc =
  process.platform === "linux" &&
  typeof (process.report.getReport() as { header?: { glibcVersionRuntime?: unknown } }).header
    ?.glibcVersionRuntime === "string";

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

  it.runIf(glibc)("runs in a child with glibc's trim threshold fixed, which ends it as it ends", () => {
    const result = launch(["analyze", big, "--format", "json"], { EXIT_CODE: "7" });
    expect(result.stdout).toBe("trim 1048576\n");
    expect(result.stderr).toBe("");
    expect(result.status).toBe(7);
  });

  it("runs here for a small file, another command, an index beside the file, or the user's settings", () => {
    const small = join(dir, "small.jsonl");
    writeFileSync(small, "{}\n");
    expect(launch(["analyze", small]).stdout).toBe("trim unset\n");
    expect(launch(["track", "--sink", big, "--", "true"]).stdout).toBe("trim unset\n");
    expect(launch(["analyze", big], { MALLOC_ARENA_MAX: "2" }).stdout).toBe("trim unset\n");
    expect(launch(["analyze", big], { MALLOC_TRIM_THRESHOLD_: "4096" }).stdout).toBe("trim 4096\n");
    mkdirSync(join(dir, "job", ".stormlog-index"));
    expect(launch(["analyze", big]).stdout).toBe("trim unset\n");
  });

  it.runIf(glibc)("relays a signal to the child, and ends as the child ends", async () => {
    const run = async (mode: string) => {
      const child = spawn(process.execPath, [join(dir, "launch.cjs"), "diagnose", big], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, STORMLOG_CACHE_DIR: cacheDir, WAIT_FOR_SIGNAL: mode },
      });
      let stdout = "";
      const ready = new Promise<void>((done) =>
        child.stdout.on("data", (chunk: Buffer) => {
          stdout += chunk.toString();
          if (stdout.includes("ready")) done();
        }),
      );
      const ended = new Promise<[number | null, NodeJS.Signals | null]>((done) =>
        child.on("close", (code, signal) => done([code, signal])),
      );
      await ready;
      child.kill("SIGTERM");
      const [code, signal] = await ended;
      return { stdout, code, signal };
    };
    // The child handles it: the launcher ends with the child's code.
    expect(await run("handle")).toEqual({
      stdout: "trim 1048576\nready\ngot SIGTERM\n",
      code: 4,
      signal: null,
    });
    // The child dies of it: so does the launcher.
    expect(await run("default")).toEqual({ stdout: "trim 1048576\nready\n", code: null, signal: "SIGTERM" });
  });
});
