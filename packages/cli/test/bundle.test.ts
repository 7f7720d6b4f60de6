import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Options } from "tsup";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import configs from "../tsup.config.js";

const PACKAGE_DIR = join(dirname(fileURLToPath(import.meta.url)), "..");
let outDir: string;
let cacheDir: string;

/** The executable as the package's build makes it, from the workspace's sources (no prior build). */
beforeAll(async () => {
  // Inside the package, so that what stays external (the NVML adapter) resolves as once installed.
  outDir = mkdtempSync(join(PACKAGE_DIR, ".test-bundle-"));
  cacheDir = mkdtempSync(join(tmpdir(), "stormlog-bundle-cache-"));
  // The executable (launcher, bundle, workers), then the stored answer the launcher loads first.
  for (const config of (configs as Options[]).slice(1)) {
    const entry = Object.fromEntries(
      Object.entries(config.entry as Record<string, string>).map(([name, path]) => [
        name,
        join(PACKAGE_DIR, path),
      ]),
    );
    await build({
      ...config,
      entry,
      config: false,
      silent: true,
      sourcemap: false,
      outDir,
      clean: false,
      esbuildOptions(options, context) {
        config.esbuildOptions?.(options, context);
        options.conditions = ["@stormlog/source", ...(options.conditions ?? [])];
        options.absWorkingDir = PACKAGE_DIR;
      },
    });
  }
}, 60_000);

afterAll(() => {
  rmSync(outDir, { recursive: true, force: true });
  rmSync(cacheDir, { recursive: true, force: true });
});

function stormlog(args: string[]) {
  const result = spawnSync(process.execPath, [join(outDir, "launch.cjs"), ...args], {
    encoding: "utf8",
    env: { ...process.env, NODE_DISABLE_COMPILE_CACHE: "", STORMLOG_CACHE_DIR: cacheDir },
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** A sink `stormlog track` records (every 20 ms) of a child that runs `ms`, in `outDir/name`. */
function trackedSink(name: string, ms: number): string {
  const sink = join(outDir, name);
  const args = ["track", "--no-gpu", "--interval", "0.02", "--telemetry-sink-dir", sink, "--"];
  expect(stormlog([...args, process.execPath, "-e", `setTimeout(() => {}, ${ms})`]).status).toBe(0);
  return sink;
}

/** `stormlog <args>` whose output's reader is gone before anything is written (`stormlog ... | head -0`). */
async function withReaderGone(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [join(outDir, "launch.cjs"), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, STORMLOG_CACHE_DIR: cacheDir },
  });
  child.stdout.destroy();
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const code = await new Promise<number | null>((done) => child.on("close", done));
  return { code, stderr };
}

describe("the built stormlog executable (launcher + bundle)", () => {
  // `track` loads child_process (and the NVML adapter) lazily: from the code cache too, on the second start.
  it("tracks a command, passes its exit code through, with and without a code cache", () => {
    for (const run of [1, 2]) {
      const sink = join(outDir, `sink-${run}`);
      const result = stormlog([
        "track",
        "--no-gpu",
        "--interval",
        "0.05",
        "--telemetry-sink-dir",
        sink,
        "--",
        process.execPath,
        "-e",
        "setTimeout(() => process.exit(3), 200)",
      ]);
      expect(result.stderr).toContain("(completed)");
      expect(result.status).toBe(3);
      const sessions = stormlog(["sessions", sink, "--format", "json"]);
      expect(sessions.status).toBe(0);
      expect(JSON.parse(sessions.stdout).sessions).toHaveLength(1);
    }
  });

  // `analyze` and the other commands that end once `main` resolves end the process at once: their
  // output must still reach the reader whole, and a reader gone early must not make them fail.
  it("ends `analyze` at once with its whole output written, also to a reader that went away", async () => {
    const sink = trackedSink("sink-analyze", 300);
    const whole = stormlog(["analyze", sink, "--format", "json"]);
    expect(whole.status).toBe(0);
    expect(whole.stderr).toBe("");
    expect(JSON.parse(whole.stdout).summary.event_count).toBeGreaterThan(2);
    const text = stormlog(["analyze", sink]);
    expect(text.status).toBe(0);
    expect(text.stdout.endsWith("\n")).toBe(true);

    expect(await withReaderGone(["analyze", sink])).toEqual({ code: 0, stderr: "" });
  });

  /** A sink whose files are a minute old: not racy, so the index keeps what it read and rendered. */
  function settledSink(name: string): string {
    const sink = trackedSink(name, 200);
    const old = new Date(Date.now() - 60_000);
    for (const entry of readdirSync(sink)) utimesSync(join(sink, entry), old, old);
    return sink;
  }

  /** What a command loaded: built-in modules, and the files it required (the bundle is required without the code cache). */
  function probed(
    entry: string,
    args: string[],
    env: NodeJS.ProcessEnv = {},
  ): { status: number | null; output: string; builtIns: string[]; files: string[] } {
    const probe = join(outDir, "loaded.cjs");
    const loaded = join(outDir, "loaded.json");
    writeFileSync(
      probe,
      `process.on("exit", () => require("node:fs").writeFileSync(${JSON.stringify(loaded)}, JSON.stringify([process.moduleLoadList, Object.keys(require.cache)])));\n`,
    );
    const result = spawnSync(process.execPath, ["--require", probe, join(outDir, entry), ...args], {
      encoding: "utf8",
      env: { ...process.env, STORMLOG_CACHE_DIR: cacheDir, ...env },
    });
    const [builtIns, files] = JSON.parse(readFileSync(loaded, "utf8")) as [string[], string[]];
    return { status: result.status, output: result.stdout + result.stderr, builtIns, files };
  }

  // A warm `analyze` reads one stored file: the launcher prints it without reading and compiling the
  // CLI's bundle (~50 ms of a ~110 ms run), from the first run after the one that analysed.
  it("answers a warm `analyze` from the index without loading the CLI's bundle", () => {
    const sink = settledSink("sink-stored");
    const report = join(outDir, "stored-report.txt");
    const args = ["analyze", sink, "--output", report];
    const bundleRequired = { STORMLOG_COMPILE_CACHE: "0" };
    const cold = probed("launch.cjs", args, bundleRequired);
    expect(cold.status).toBe(0);
    expect(cold.files.some((file) => file.endsWith("bin.cjs"))).toBe(true);
    const computed = readFileSync(report, "utf8");
    expect(computed).toContain("Basic Analysis:");
    for (let run = 0; run < 2; run++) {
      rmSync(report);
      const warm = probed("launch.cjs", args, bundleRequired);
      expect(warm.status).toBe(0);
      expect(warm.output).toBe("");
      expect(readFileSync(report, "utf8")).toBe(computed);
      expect(warm.files.some((file) => file.endsWith("stored-answer.cjs"))).toBe(true);
      expect(warm.files.some((file) => file.endsWith("bin.cjs"))).toBe(false);
    }
    // To stdout, and as JSON: the same answers the bundle gives.
    const json = stormlog(["analyze", sink, "--format", "json"]);
    expect(json.status).toBe(0);
    const storedJson = probed("launch.cjs", ["analyze", sink, "--format", "json"], bundleRequired);
    expect(storedJson.output).toBe(json.stdout);
    expect(storedJson.files.some((file) => file.endsWith("bin.cjs"))).toBe(false);
    // An output that cannot be written: the CLI runs the command again and says why, once.
    const unwritable = join(outDir, "no-such-dir", "r.txt");
    const failed = probed("launch.cjs", ["analyze", sink, "--output", unwritable], bundleRequired);
    expect(failed.status).toBe(1);
    expect(failed.files.some((file) => file.endsWith("bin.cjs"))).toBe(true);
    expect(failed.output.trim().split("\n")).toHaveLength(1);
    expect(failed.output).toContain(unwritable);
    // A changed input, a usage error, `--help`: the CLI runs, and says what it says.
    utimesSync(
      join(sink, readdirSync(sink).find((entry) => entry.endsWith(".jsonl"))!),
      new Date(),
      new Date(),
    );
    const changed = probed("launch.cjs", args, bundleRequired);
    expect(changed.status).toBe(0);
    expect(changed.files.some((file) => file.endsWith("bin.cjs"))).toBe(true);
    expect(readFileSync(report, "utf8")).toBe(computed);
    const wrong = stormlog(["analyze", sink, "--format", "xml"]);
    expect(wrong.status).toBe(1);
    expect(wrong.stderr).toContain("invalid --format 'xml'");
    expect(stormlog(["analyze", "--help"]).stdout).toContain("Usage: stormlog analyze");
  });

  // Built-in modules cost a start ~10 ms between them (child_process brings the socket and stream modules,
  // worker_threads the messaging ones): a warm analysis must not load what it does not use.
  it("loads no built-in module a warm `analyze --output` does not use, with or without the bundle", () => {
    const sink = settledSink("sink-warm");
    const report = join(outDir, "warm-report.txt");
    const args = ["analyze", sink, "--output", report];
    expect(probed("launch.cjs", args).status).toBe(0);
    const first = readFileSync(report, "utf8");
    // The launcher's stored answer, and the bundle's own reading of the index (run without the launcher).
    for (const entry of ["launch.cjs", "bin.cjs"]) {
      const warm = probed(entry, args);
      expect(warm.status).toBe(0);
      expect(warm.output).toBe("");
      expect(readFileSync(report, "utf8")).toBe(first);
      // The probe saw what was loaded (fs is), so the absences below mean something.
      expect(warm.builtIns).toContain("NativeModule fs");
      for (const unused of ["child_process", "worker_threads", "crypto", "stream", "net", "fs/promises"])
        expect(warm.builtIns).not.toContain(`NativeModule ${unused}`);
    }
  });

  it("stops quietly (exit 0, nothing on stderr) when the reader of its output goes away", async () => {
    expect(await withReaderGone(["--help"])).toEqual({ code: 0, stderr: "" });
  });
});
