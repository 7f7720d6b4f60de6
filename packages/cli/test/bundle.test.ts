import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
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
    const sink = join(outDir, "sink-analyze");
    expect(
      stormlog([
        "track",
        "--no-gpu",
        "--interval",
        "0.02",
        "--telemetry-sink-dir",
        sink,
        "--",
        process.execPath,
        "-e",
        "setTimeout(() => {}, 300)",
      ]).status,
    ).toBe(0);
    const whole = stormlog(["analyze", sink, "--format", "json"]);
    expect(whole.status).toBe(0);
    expect(whole.stderr).toBe("");
    expect(JSON.parse(whole.stdout).summary.event_count).toBeGreaterThan(2);
    const text = stormlog(["analyze", sink]);
    expect(text.status).toBe(0);
    expect(text.stdout.endsWith("\n")).toBe(true);

    expect(await withReaderGone(["analyze", sink])).toEqual({ code: 0, stderr: "" });
  });

  it("stops quietly (exit 0, nothing on stderr) when the reader of its output goes away", async () => {
    expect(await withReaderGone(["--help"])).toEqual({ code: 0, stderr: "" });
  });
});
