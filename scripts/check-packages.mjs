#!/usr/bin/env node
// `pnpm check:packages [filter...]`: checks what we would publish.
//  1. builds the packages (turbo; cached when nothing changed),
//  2. packs each one with `pnpm pack` (which rewrites `workspace:*` ranges to real versions),
//  3. runs publint and @arethetypeswrong/cli (profile node16) on each tarball,
//  4. installs all tarballs together into an empty temporary project with npm, and
//  5. loads each package, and each of its subpath exports, there once with `import` (ESM) and once with
//     `require` (CJS), and runs its bins with --help, and
//  6. with @stormlog/tracker: tracks into a sink from each build, which starts the sink worker from the
//     installed package's own files,
//  7. checks each tarball's LICENSE (the root LICENSE's text) and repository/homepage/bugs/keywords, and
//  8. installs each tarball alone into a fresh project and reports the tarball's and the install's size
//     against SIZE_BUDGETS.
import { spawn, spawnSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const BIN = join(ROOT, "node_modules/.bin");
const SCOPE = "@stormlog/";
const REPOSITORY_URL = "git+https://github.com/stormlog/stormlog-ts.git";

const MB = 1_000_000;
/**
 * Size budgets in bytes (decimal MB, as npm prints them): `tarball` is the packed .tgz, `install` the
 * node_modules of a fresh project that installs the tarball alone with its dependencies. Our packages are
 * pure JavaScript; each budget is about 1.5 times today's size, room to grow but not for a native
 * dependency: koffi's prebuilt binaries alone are 28.8 MB (a 38.8 MB CLI install), so native bindings
 * must stay optional peers.
 */
export const SIZE_BUDGETS = {
  // core, phases, sink and the adapters.
  default: { tarball: 0.5 * MB, install: 4 * MB },
  "@stormlog/tracker": { tarball: 0.75 * MB, install: 7 * MB },
  "@stormlog/analysis": { tarball: 1 * MB, install: 8 * MB },
  // The analysis and uPlot (0.6 MB), whose script and style sheet the HTML report inlines.
  "@stormlog/report": { tarball: 0.5 * MB, install: 10 * MB },
  // The analysis and the Parquet encoder (DuckDB, for `queryParquet`, is an optional peer: not installed).
  "@stormlog/parquet": { tarball: 0.5 * MB, install: 10 * MB },
  // core, sink and protobufjs (3.05 MB), which encodes the W&B records: 9.22 MB in all when first
  // measured, 10.0 MB on 2026-11-29 (core and sink grew).
  "@stormlog/wandb": { tarball: 0.5 * MB, install: 12 * MB },
  // Everything above but the tfjs and onnxruntime adapters: 20.5 MB measured with the report, Parquet and W&B
  // exports (protobufjs 3.05 MB is the heaviest); DuckDB, koffi and OpenTelemetry's SDK (~15 MB, for
  // `track --prometheus-port`) are optional peers.
  "@stormlog/cli": { tarball: 1.75 * MB, install: 26 * MB },
};

const USAGE = `usage: pnpm check:packages [filter...] [--skip-build] [--keep]
  filter        check only packages whose name contains one of these strings (their @stormlog
                dependencies are packed and installed too)
  --skip-build  use the existing dist/ folders
  --keep        keep the temporary folder (tarballs and the test project) and print its path`;

// A clean environment for the child processes: no source condition or loaders from NODE_OPTIONS, no telemetry.
const CHILD_ENV = { ...process.env, TURBO_TELEMETRY_DISABLED: "1", DO_NOT_TRACK: "1", NO_COLOR: "1" };
delete CHILD_ENV.NODE_OPTIONS;

function parseArgs(argv) {
  const opts = { build: true, keep: false, filters: [] };
  for (const arg of argv) {
    if (arg === "--skip-build") opts.build = false;
    else if (arg === "--keep") opts.keep = true;
    else if (arg === "--help" || arg === "-h") opts.help = true;
    else if (arg === "--") continue;
    else if (arg.startsWith("-")) throw new Error(`unknown option ${arg}\n${USAGE}`);
    else opts.filters.push(arg);
  }
  return opts;
}

function workspacePackages() {
  const dir = join(ROOT, "packages");
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(join(dir, e.name, "package.json")))
    .map((e) => {
      const pkgDir = join(dir, e.name);
      const manifest = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
      return { dir: pkgDir, name: manifest.name, manifest };
    })
    .filter((p) => !p.manifest.private)
    .sort((a, b) => a.name.localeCompare(b.name));
}

function internalDeps(manifest) {
  const fields = [manifest.dependencies, manifest.peerDependencies, manifest.optionalDependencies];
  return fields.flatMap((f) => Object.keys(f ?? {})).filter((n) => n.startsWith(SCOPE));
}

/** The selected packages plus every @stormlog package they need at install time. */
function closure(all, selected) {
  const byName = new Map(all.map((p) => [p.name, p]));
  const seen = new Map();
  const visit = (p) => {
    if (seen.has(p.name)) return;
    seen.set(p.name, p);
    for (const dep of internalDeps(p.manifest)) {
      const target = byName.get(dep);
      if (!target) throw new Error(`${p.name} depends on ${dep}, which is not a package in packages/`);
      visit(target);
    }
  };
  for (const p of selected) visit(p);
  return [...seen.values()];
}

/** Runs a command, capturing its output. Resolves with {code, out}. */
/** A script that tracks one phase into a sink (written by the worker) and prints status and record count. */
function sinkWorkerProbe(load) {
  const head =
    load === "import"
      ? 'import { MemoryTracker } from "@stormlog/tracker";\nimport { loadTelemetrySessions } from "@stormlog/sink";\n'
      : 'const { MemoryTracker } = require("@stormlog/tracker");\nconst { loadTelemetrySessions } = require("@stormlog/sink");\n';
  return `${head}(async () => {
  const tracker = new MemoryTracker({ sink: { rootDir: "sink-${load}" }, initialSample: false });
  await tracker.start();
  tracker.phase("probe", () => undefined);
  await tracker.stop();
  const [session] = await loadTelemetrySessions("sink-${load}");
  console.log(session.summary.status, session.events.filter((e) => e.event_type !== "stop").length);
})();
`;
}

function exec(cmd, args, cwd, timeoutMs = 600_000) {
  return new Promise((done) => {
    const child = spawn(cmd, args, { cwd, env: CHILD_ENV, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      out += d;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (err) => {
      clearTimeout(timer);
      done({ code: -1, out: `${out}\n${err.message}` });
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      done({ code: code ?? (signal ? `signal ${signal}` : -1), out });
    });
  });
}

/** Runs async jobs at most `limit` at a time, keeping the order of results. */
async function pool(items, limit, job) {
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await job(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

function indent(text) {
  return text
    .trimEnd()
    .split("\n")
    .map((l) => `    ${l}`)
    .join("\n");
}

const ESM_PROBE = `
const out = {};
for (const name of JSON.parse(process.argv[2])) {
  try { out[name] = { ok: true, keys: Object.keys(await import(name)).sort() }; }
  catch (e) { out[name] = { ok: false, error: String(e?.stack ?? e) }; }
}
console.log("@@probe" + JSON.stringify(out));
`;
const CJS_PROBE = `
const out = {};
for (const name of JSON.parse(process.argv[2])) {
  try { out[name] = { ok: true, keys: Object.keys(require(name)).sort() }; }
  catch (e) { out[name] = { ok: false, error: String(e?.stack ?? e) }; }
}
console.log("@@probe" + JSON.stringify(out));
`;

/** Bytes of the regular files under `dir` (symlinks such as node_modules/.bin entries not followed). */
function treeBytes(dir) {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += treeBytes(path);
    else if (entry.isFile()) total += lstatSync(path).size;
  }
  return total;
}

/** The packages installed under `nodeModules` (scoped ones as `@scope/name`), with their sizes, largest first. */
function installedPackages(nodeModules) {
  const found = [];
  const visit = (dir) => {
    if (!existsSync(dir)) return;
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name.startsWith(".")) continue;
      const path = join(dir, entry.name);
      if (entry.name.startsWith("@")) {
        for (const scoped of readdirSync(path, { withFileTypes: true })) {
          if (scoped.isDirectory())
            found.push({ name: `${entry.name}/${scoped.name}`, path: join(path, scoped.name) });
        }
      } else found.push({ name: entry.name, path });
    }
  };
  visit(nodeModules);
  return found.map((p) => ({ name: p.name, bytes: treeBytes(p.path) })).sort((a, b) => b.bytes - a.bytes);
}

function formatBytes(bytes) {
  if (bytes >= MB) return `${Number((bytes / MB).toFixed(2))} MB`;
  return `${Number((bytes / 1000).toFixed(1))} kB`;
}

/** What `import`/`require` can load from a package: its name and each subpath export without a wildcard. */
function entryPoints(p) {
  const subpaths = Object.keys(p.manifest.exports ?? {}).filter(
    (key) => key.startsWith("./") && !key.includes("*") && !key.endsWith(".json"),
  );
  return [p.name, ...subpaths.map((key) => `${p.name}/${key.slice(2)}`)];
}

function budgetOf(name) {
  return { ...SIZE_BUDGETS.default, ...SIZE_BUDGETS[name] };
}

/** Problems with the registry metadata of a packed package.json (`dir`: the package's folder name). */
export function metadataProblems(manifest, dir) {
  const problems = [];
  const repo = manifest.repository;
  const directory = `packages/${dir}`;
  if (
    typeof repo !== "object" ||
    repo === null ||
    repo.type !== "git" ||
    repo.url !== REPOSITORY_URL ||
    repo.directory !== directory
  ) {
    problems.push(
      `"repository" must be {"type": "git", "url": "${REPOSITORY_URL}", "directory": "${directory}"}, got ${JSON.stringify(repo)}`,
    );
  }
  const homepage = `https://github.com/stormlog/stormlog-ts/tree/main/${directory}#readme`;
  if (manifest.homepage !== homepage) {
    problems.push(`"homepage" must be "${homepage}", got ${JSON.stringify(manifest.homepage)}`);
  }
  const bugs = typeof manifest.bugs === "string" ? manifest.bugs : manifest.bugs?.url;
  if (bugs !== "https://github.com/stormlog/stormlog-ts/issues") {
    problems.push(
      `"bugs" must point at https://github.com/stormlog/stormlog-ts/issues, got ${JSON.stringify(manifest.bugs)}`,
    );
  }
  const keywords = manifest.keywords;
  if (
    !Array.isArray(keywords) ||
    keywords.length === 0 ||
    !keywords.every((k) => typeof k === "string" && k !== "")
  ) {
    problems.push(`"keywords" must be a non-empty list of words, got ${JSON.stringify(keywords)}`);
  }
  return problems;
}

function parseProbe(res) {
  const line = res.out.split("\n").find((l) => l.startsWith("@@probe"));
  return line ? JSON.parse(line.slice("@@probe".length)) : undefined;
}

export async function main(argv) {
  let opts;
  try {
    opts = parseArgs(argv);
  } catch (err) {
    console.error(`check:packages: ${err.message}`);
    return 2;
  }
  if (opts.help) {
    console.log(USAGE);
    return 0;
  }

  const all = workspacePackages();
  const selected = opts.filters.length
    ? all.filter((p) => opts.filters.some((f) => p.name.includes(f)))
    : all;
  if (selected.length === 0) {
    console.error(`check:packages: no package matches ${opts.filters.join(", ")}`);
    return 1;
  }
  const unknownBudgets = Object.keys(SIZE_BUDGETS).filter(
    (k) => k !== "default" && !all.some((p) => p.name === k),
  );
  if (unknownBudgets.length > 0) {
    console.error(`check:packages: SIZE_BUDGETS names no package in packages/: ${unknownBudgets.join(", ")}`);
    return 1;
  }
  const packed = closure(all, selected);
  const failures = [];
  const fail = (pkg, step, detail) => failures.push({ pkg, step, detail });

  // 1. Build.
  if (opts.build) {
    const filterArgs = opts.filters.length ? selected.map((p) => `--filter=${p.name}...`) : [];
    console.log(`▶ build: turbo run build ${filterArgs.join(" ")}`.trimEnd());
    const res = spawnSync(join(BIN, "turbo"), ["run", "build", "--output-logs=errors-only", ...filterArgs], {
      cwd: ROOT,
      env: CHILD_ENV,
      stdio: "inherit",
    });
    if (res.status !== 0) {
      console.error("check:packages: the build failed; fix it first (pnpm build).");
      return 1;
    }
  }
  for (const p of packed) {
    if (!existsSync(join(p.dir, "dist"))) {
      console.error(`check:packages: ${p.name} has no dist/; run pnpm build (or drop --skip-build).`);
      return 1;
    }
  }

  const work = mkdtempSync(join(tmpdir(), "stormlog-check-packages-"));
  const tarDir = join(work, "tarballs");
  const project = join(work, "project");
  mkdirSync(tarDir);
  mkdirSync(project);
  try {
    // 2. Pack (pnpm rewrites workspace:* to the packages' versions).
    console.log(`▶ pack: ${packed.length} package(s) into ${opts.keep ? tarDir : "a temporary folder"}`);
    const tarballs = new Map();
    for (const p of packed) {
      const before = new Set(readdirSync(tarDir));
      const res = await exec("pnpm", ["pack", "--pack-destination", tarDir], p.dir);
      const made = readdirSync(tarDir).filter((f) => f.endsWith(".tgz") && !before.has(f));
      if (res.code !== 0 || made.length !== 1) {
        console.error(`check:packages: pnpm pack failed for ${p.name}:\n${indent(res.out)}`);
        return 1;
      }
      tarballs.set(p.name, join(tarDir, made[0]));
    }
    for (const p of packed) {
      const res = spawnSync("tar", ["-xzOf", tarballs.get(p.name), "package/package.json"], {
        encoding: "utf8",
      });
      if (res.status === 0 && res.stdout.includes("workspace:")) {
        fail(p.name, "pack", "the packed package.json still has a workspace: range");
      }
    }

    // LICENSE and registry metadata, as packed. Each package keeps its own copy of the root LICENSE (npm and
    // pnpm pack only a package's own folder); the copy must not drift from the root's text.
    console.log("▶ LICENSE and repository/homepage/bugs/keywords in each tarball");
    const rootLicense = existsSync(join(ROOT, "LICENSE"))
      ? readFileSync(join(ROOT, "LICENSE"), "utf8")
      : undefined;
    for (const p of selected) {
      const tgz = tarballs.get(p.name);
      const license = spawnSync("tar", ["-xzOf", tgz, "package/LICENSE"], { encoding: "utf8" });
      if (rootLicense === undefined) fail(p.name, "LICENSE", "the repository has no LICENSE at its root");
      else if (license.status !== 0) {
        fail(
          p.name,
          "LICENSE",
          `the tarball has no LICENSE: copy the root LICENSE to ${join("packages", basename(p.dir), "LICENSE")}`,
        );
      } else if (license.stdout !== rootLicense) {
        fail(
          p.name,
          "LICENSE",
          `the packed LICENSE differs from the root LICENSE: copy it again (cp LICENSE ${join("packages", basename(p.dir))}/)`,
        );
      }
      const packedManifest = spawnSync("tar", ["-xzOf", tgz, "package/package.json"], { encoding: "utf8" });
      const problems =
        packedManifest.status === 0
          ? metadataProblems(JSON.parse(packedManifest.stdout), basename(p.dir))
          : ["the tarball has no package.json"];
      for (const problem of problems) fail(p.name, "metadata", problem);
      console.log(
        `  ${p.name}: LICENSE ${license.status === 0 && license.stdout === rootLicense ? "ok" : "FAILED"}, metadata ${problems.length === 0 ? "ok" : "FAILED"}`,
      );
    }

    // 3. publint and attw on the tarballs, two at a time (the machine has two cores).
    console.log("▶ publint + attw (profile node16)");
    const lintResults = await pool(selected, 2, async (p) => {
      const tgz = tarballs.get(p.name);
      const publint = await exec(
        process.execPath,
        [join(ROOT, "node_modules/publint/src/cli.js"), "run", tgz, "--strict"],
        ROOT,
      );
      const attw = await exec(
        join(BIN, "attw"),
        [tgz, "--profile", "node16", "--format", "ascii", "--no-emoji", "--no-color"],
        ROOT,
      );
      return { p, publint, attw };
    });
    for (const { p, publint, attw } of lintResults) {
      const suggestions = /suggestion/i.test(publint.out);
      if (publint.code !== 0) fail(p.name, "publint", publint.out);
      else if (suggestions) console.log(`  ${p.name}: publint suggestions:\n${indent(publint.out)}`);
      if (attw.code !== 0) fail(p.name, "attw", attw.out);
      console.log(
        `  ${p.name}: publint ${publint.code === 0 ? "ok" : "FAILED"}, attw ${attw.code === 0 ? "ok" : "FAILED"}`,
      );
    }

    // 4. Install every tarball into an empty project. `overrides` makes npm take our packages only from the
    // tarballs, never from the registry; third-party dependencies do come from the registry (or npm's cache).
    const fileSpecs = Object.fromEntries([...tarballs].map(([name, tgz]) => [name, `file:${tgz}`]));
    writeFileSync(
      join(project, "package.json"),
      `${JSON.stringify({ name: "stormlog-pack-check", private: true, version: "0.0.0", dependencies: fileSpecs, overrides: fileSpecs }, null, 2)}\n`,
    );
    console.log("▶ npm install of the tarballs into an empty project");
    const install = await exec(
      "npm",
      [
        "install",
        "--ignore-scripts",
        "--omit=optional",
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        "--loglevel=error",
        "--no-package-lock",
      ],
      project,
    );
    if (install.code !== 0) {
      console.error(`check:packages: npm install of the tarballs failed:\n${indent(install.out)}`);
      return 1;
    }

    // 5. import and require each selected package; run its bins.
    console.log("▶ import (ESM) and require (CJS) of each package");
    const names = JSON.stringify(selected.flatMap((p) => entryPoints(p)));
    writeFileSync(join(project, "probe.mjs"), ESM_PROBE);
    writeFileSync(join(project, "probe.cjs"), CJS_PROBE);
    const esmRes = await exec(process.execPath, ["probe.mjs", names], project, 120_000);
    const cjsRes = await exec(process.execPath, ["probe.cjs", names], project, 120_000);
    const esm = parseProbe(esmRes);
    const cjs = parseProbe(cjsRes);
    if (!esm || !cjs) {
      const bad = esm ? cjsRes : esmRes;
      console.error(`check:packages: the ${esm ? "require" : "import"} probe crashed:\n${indent(bad.out)}`);
      return 1;
    }
    for (const p of selected) {
      // The root and each subpath (`@stormlog/core/internal`): loads both ways, with the same names.
      const subpaths = [];
      for (const entry of entryPoints(p)) {
        const e = esm[entry];
        const c = cjs[entry];
        if (!e.ok) fail(p.name, "import", `import("${entry}") threw:\n${e.error}`);
        if (!c.ok) fail(p.name, "require", `require("${entry}") threw:\n${c.error}`);
        if (e.ok && c.ok && e.keys.join() !== c.keys.join()) {
          const onlyEsm = e.keys.filter((k) => !c.keys.includes(k));
          const onlyCjs = c.keys.filter((k) => !e.keys.includes(k));
          fail(
            p.name,
            "exports",
            `${entry}: ESM and CJS builds export different names: only ESM [${onlyEsm}], only CJS [${onlyCjs}]`,
          );
        }
        if (entry !== p.name)
          subpaths.push(`.${entry.slice(p.name.length)} ${e.ok && c.ok ? "ok" : "FAILED"}`);
      }
      const e = esm[p.name];
      const c = cjs[p.name];
      const bins =
        typeof p.manifest.bin === "string"
          ? { [p.name.split("/").pop()]: p.manifest.bin }
          : (p.manifest.bin ?? {});
      const binResults = [];
      for (const bin of Object.keys(bins)) {
        const res = await exec(join(project, "node_modules/.bin", bin), ["--help"], project, 60_000);
        if (res.code !== 0)
          fail(p.name, `bin ${bin}`, `\`${bin} --help\` exited with ${res.code}:\n${res.out}`);
        binResults.push(`${bin} --help ${res.code === 0 ? "ok" : "FAILED"}`);
      }
      const exportsInfo = e.ok ? `${e.keys.length} export(s)` : "";
      console.log(
        `  ${p.name}: import ${e.ok ? "ok" : "FAILED"}, require ${c.ok ? "ok" : "FAILED"}${exportsInfo ? `, ${exportsInfo}` : ""}${subpaths.length ? `, ${subpaths.join(", ")}` : ""}${binResults.length ? `, ${binResults.join(", ")}` : ""}`,
      );
    }
    // 6. The tracker's sink worker, started from the installed files (ESM and CJS builds).
    if (selected.some((p) => p.name === "@stormlog/tracker")) {
      console.log("▶ a tracker writing a sink on its worker thread (ESM and CJS)");
      writeFileSync(join(project, "sink-worker.mjs"), sinkWorkerProbe("import"));
      writeFileSync(join(project, "sink-worker.cjs"), sinkWorkerProbe("require"));
      for (const probe of ["sink-worker.mjs", "sink-worker.cjs"]) {
        const res = await exec(process.execPath, [probe], project, 60_000);
        // The fallback to the training thread would complete too: it must not have been needed.
        const ok = res.code === 0 && res.out.includes("completed 3") && !res.out.includes("worker thread");
        if (!ok) fail("@stormlog/tracker", `sink worker (${probe})`, `exited with ${res.code}:\n${res.out}`);
        console.log(`  ${probe}: ${ok ? "ok" : "FAILED"}`);
      }
    }

    // 8. Sizes: each tarball installed alone into a fresh project, as a user's `npm install <package>` would
    // (optional dependencies included; optional peers, such as koffi, not).
    console.log("▶ sizes: each tarball installed alone into a fresh project");
    const sizes = await pool(selected, 2, async (p) => {
      const dir = join(work, `install-${basename(p.dir)}`);
      mkdirSync(dir);
      writeFileSync(
        join(dir, "package.json"),
        `${JSON.stringify({ name: "stormlog-size-check", private: true, version: "0.0.0", dependencies: { [p.name]: fileSpecs[p.name] }, overrides: fileSpecs }, null, 2)}\n`,
      );
      const res = await exec(
        "npm",
        [
          "install",
          "--ignore-scripts",
          "--no-audit",
          "--no-fund",
          "--prefer-offline",
          "--loglevel=error",
          "--no-package-lock",
        ],
        dir,
      );
      if (res.code !== 0) return { p, error: res.out };
      const installed = installedPackages(join(dir, "node_modules"));
      return {
        p,
        tarball: lstatSync(tarballs.get(p.name)).size,
        install: treeBytes(join(dir, "node_modules")),
        heaviest: installed.find((d) => !d.name.startsWith(SCOPE)),
        count: installed.length,
      };
    });
    const rows = [["package", "tarball", "budget", "install", "budget", "packages", "heaviest third-party"]];
    for (const s of sizes) {
      if (s.error) {
        fail(s.p.name, "size", `npm install of the tarball alone failed:\n${s.error}`);
        continue;
      }
      const budget = budgetOf(s.p.name);
      const overTarball = s.tarball > budget.tarball;
      const overInstall = s.install > budget.install;
      if (overTarball) {
        fail(
          s.p.name,
          "size",
          `the tarball is ${formatBytes(s.tarball)}, over its budget of ${formatBytes(budget.tarball)} (SIZE_BUDGETS in scripts/check-packages.mjs): check "files" in its package.json`,
        );
      }
      if (overInstall) {
        const heavy = s.heaviest
          ? `; the heaviest dependency is ${s.heaviest.name} (${formatBytes(s.heaviest.bytes)})`
          : "";
        fail(
          s.p.name,
          "size",
          `installing it takes ${formatBytes(s.install)}, over its budget of ${formatBytes(budget.install)} (SIZE_BUDGETS in scripts/check-packages.mjs)${heavy}: make heavy or native dependencies optional peers`,
        );
      }
      rows.push([
        s.p.name,
        `${formatBytes(s.tarball)}${overTarball ? " ✗" : ""}`,
        formatBytes(budget.tarball),
        `${formatBytes(s.install)}${overInstall ? " ✗" : ""}`,
        formatBytes(budget.install),
        String(s.count),
        s.heaviest ? `${s.heaviest.name} ${formatBytes(s.heaviest.bytes)}` : "-",
      ]);
    }
    const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
    for (const row of rows)
      console.log(
        `  ${row
          .map((cell, i) => cell.padEnd(widths[i]))
          .join("  ")
          .trimEnd()}`,
      );
  } finally {
    if (opts.keep) console.log(`(kept ${work})`);
    else rmSync(work, { recursive: true, force: true });
  }

  if (failures.length > 0) {
    console.error(`\ncheck:packages: ${failures.length} problem(s):`);
    for (const f of failures) console.error(`\n✗ ${f.pkg} — ${f.step}\n${indent(f.detail)}`);
    return 1;
  }
  console.log(
    `\ncheck:packages: ${selected.length} package(s) pass publint, attw, import, require, bin, LICENSE, metadata and size checks.`,
  );
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
