#!/usr/bin/env node
// `pnpm demo`: the main job. A thin launcher: it builds the packages (turbo; cached when nothing changed) and
// runs the tracked TensorFlow.js training example, which prints its analysis and writes its HTML report
// (stormlog-report.html beside the sink; it prints the path). Until that example exists it
// says so and shows what the repository has. Usage: pnpm demo [--skip-build] [-- args for the example]
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const EXAMPLE_DIR = join(ROOT, "examples/tfjs-training");
const ENV = { ...process.env, TURBO_TELEMETRY_DISABLED: "1", DO_NOT_TRACK: "1" };

function run(cmd, args) {
  const res = spawnSync(cmd, args, { cwd: ROOT, env: ENV, stdio: "inherit" });
  if (res.error) throw res.error;
  return res.status ?? 1;
}

function packagesState() {
  const dir = join(ROOT, "packages");
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(join(dir, e.name, "package.json")))
    .map((e) => {
      const pkgDir = join(dir, e.name);
      const { name, description } = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
      const hasSource = existsSync(join(pkgDir, "src/index.ts"));
      const built = existsSync(join(pkgDir, "dist"));
      return { name, description, hasSource, built };
    });
}

function main(argv) {
  const sep = argv.indexOf("--");
  const own = sep === -1 ? argv : argv.slice(0, sep);
  const passThrough = sep === -1 ? [] : argv.slice(sep + 1);
  const skipBuild = own.includes("--skip-build");

  console.log("Stormlog demo: where the memory of a TensorFlow.js training job goes, phase by phase.\n");

  const manifestPath = join(EXAMPLE_DIR, "package.json");
  if (existsSync(manifestPath)) {
    const example = JSON.parse(readFileSync(manifestPath, "utf8"));
    if (!skipBuild) {
      console.log("▶ building the packages (pnpm build; cached when nothing changed)");
      const build = spawnSync(
        join(ROOT, "node_modules/.bin/turbo"),
        ["run", "build", "--output-logs=errors-only"],
        {
          cwd: ROOT,
          env: ENV,
          encoding: "utf8",
        },
      );
      if (build.status !== 0) {
        process.stderr.write(`${build.stdout ?? ""}${build.stderr ?? ""}`);
        console.error("demo: the build failed; see above.");
        return build.status ?? 1;
      }
    }
    console.log(`\n▶ pnpm --filter ${example.name} start`);
    return run("pnpm", ["--filter", example.name, "start", ...passThrough]);
  }

  console.log("The tracked training example (examples/tfjs-training) does not exist yet; once it does, this");
  console.log(
    "command builds the packages, trains a small model under the tracker and prints the analysis.\n",
  );
  console.log("What the repository has now:");
  for (const p of packagesState()) {
    const state = p.hasSource ? (p.built ? "built" : "source, not built") : "not started";
    console.log(`  ${p.name.padEnd(32)} ${state.padEnd(18)} ${p.description ?? ""}`);
  }
  const bin = join(ROOT, "packages/cli/dist/launch.cjs");
  if (existsSync(bin)) {
    console.log("\n▶ stormlog --help");
    return run(process.execPath, [bin, "--help"]);
  }
  console.log("\nRun `pnpm build && pnpm test` to build and test what exists.");
  return 0;
}

process.exitCode = main(process.argv.slice(2));
