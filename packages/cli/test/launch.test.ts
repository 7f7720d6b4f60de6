import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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
