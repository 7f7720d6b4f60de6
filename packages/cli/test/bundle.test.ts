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
  const executable = (configs as Options[])[1]!;
  const entry = Object.fromEntries(
    Object.entries(executable.entry as Record<string, string>).map(([name, path]) => [
      name,
      join(PACKAGE_DIR, path),
    ]),
  );
  await build({
    ...executable,
    entry,
    config: false,
    silent: true,
    sourcemap: false,
    outDir,
    clean: false,
    esbuildOptions(options, context) {
      executable.esbuildOptions?.(options, context);
      options.conditions = ["@stormlog/source", ...(options.conditions ?? [])];
      options.absWorkingDir = PACKAGE_DIR;
    },
  });
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

  // Built-in modules cost a start ~10 ms between them (child_process brings the socket and stream modules,
  // crypto ~20 modules of its own): a warm `analyze` to a file loads none of them.
  it("loads no built-in module a warm `analyze --output` does not use", () => {
    const sink = trackedSink("sink-warm", 200);
    // Its files a minute old: not racy, so the index keeps what it read and rendered.
    const old = new Date(Date.now() - 60_000);
    for (const name of readdirSync(sink)) utimesSync(join(sink, name), old, old);
    const report = join(outDir, "warm-report.txt");
    const probe = join(outDir, "loaded.cjs");
    const loaded = join(outDir, "loaded.json");
    writeFileSync(
      probe,
      `process.on("exit", () => require("node:fs").writeFileSync(${JSON.stringify(loaded)}, JSON.stringify(process.moduleLoadList)));\n`,
    );
    const analyze = (nodeArgs: string[] = []) =>
      spawnSync(
        process.execPath,
        [...nodeArgs, join(outDir, "launch.cjs"), "analyze", sink, "--output", report],
        {
          encoding: "utf8",
          env: { ...process.env, STORMLOG_CACHE_DIR: cacheDir },
        },
      );
    // Built, stored, then rendered from the store: the third run is the warm one.
    for (let run = 0; run < 2; run++) expect(analyze().status).toBe(0);
    const first = readFileSync(report, "utf8");
    const warm = analyze(["--require", probe]);
    expect(warm.status).toBe(0);
    expect(warm.stdout + warm.stderr).toBe("");
    expect(readFileSync(report, "utf8")).toBe(first);
    const modules = JSON.parse(readFileSync(loaded, "utf8")) as string[];
    expect(modules).toContain("NativeModule vm");
    for (const unused of ["child_process", "worker_threads", "crypto", "stream", "net", "fs/promises"])
      expect(modules).not.toContain(`NativeModule ${unused}`);
  });

  it("stops quietly (exit 0, nothing on stderr) when the reader of its output goes away", async () => {
    expect(await withReaderGone(["--help"])).toEqual({ code: 0, stderr: "" });
  });
});
