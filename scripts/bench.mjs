#!/usr/bin/env node
// `pnpm bench [filter...]`: runs every packages/*/bench/*.bench.ts (and bench/*.bench.ts) with
// `node --conditions=@stormlog/source --import tsx <file>`, collects mitata's results through a module hook
// (scripts/lib/bench-loader.mjs) and writes bench/results/latest.json plus a readable table.
import { spawn } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const PRELOAD = pathToFileURL(join(REPO_ROOT, "scripts/lib/bench-preload.mjs")).href;
const BENCH_FILE = /\.bench\.(?:[cm]?ts|[cm]?js)$/;

const USAGE = `usage: pnpm bench [filter...] [--root DIR] [--out FILE] [--timeout SECONDS] [--list]
  filter      run only files whose package name or path contains one of these strings (e.g. "core")
  --root      where to look for packages/*/bench/*.bench.ts and bench/*.bench.ts (default: the repository)
  --out       where to write the JSON summary (default: <root>/bench/results/latest.json)
  --timeout   seconds one bench file may run (default: 600)
  --list      print the bench files that would run, and exit`;

function parseArgs(argv) {
  const opts = { root: REPO_ROOT, out: undefined, timeout: 600, list: false, filters: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${arg} needs a value\n${USAGE}`);
      return v;
    };
    if (arg === "--root") opts.root = resolve(value());
    else if (arg === "--out") opts.out = resolve(value());
    else if (arg === "--timeout") opts.timeout = Number(value());
    else if (arg === "--list") opts.list = true;
    else if (arg === "--help" || arg === "-h") opts.help = true;
    else if (arg === "--") continue;
    else if (arg.startsWith("-")) throw new Error(`unknown option ${arg}\n${USAGE}`);
    else opts.filters.push(arg);
  }
  if (!Number.isFinite(opts.timeout) || opts.timeout <= 0)
    throw new Error("--timeout must be a positive number");
  opts.out ??= join(opts.root, "bench/results/latest.json");
  return opts;
}

function readName(dir) {
  const manifest = join(dir, "package.json");
  if (!existsSync(manifest)) return undefined;
  try {
    return JSON.parse(readFileSync(manifest, "utf8")).name;
  } catch {
    return undefined;
  }
}

function benchFilesIn(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && BENCH_FILE.test(e.name))
    .map((e) => join(dir, e.name))
    .sort();
}

/** Every bench file under `root`, with the package it belongs to. */
export function discover(root) {
  const found = [];
  const packagesDir = join(root, "packages");
  if (existsSync(packagesDir)) {
    for (const entry of readdirSync(packagesDir, { withFileTypes: true }).sort((a, b) =>
      a.name.localeCompare(b.name),
    )) {
      if (!entry.isDirectory()) continue;
      const pkgDir = join(packagesDir, entry.name);
      const pkg = readName(pkgDir) ?? entry.name;
      for (const file of benchFilesIn(join(pkgDir, "bench"))) found.push({ file, pkg });
    }
  }
  const rootName = readName(root) ?? basename(root);
  for (const file of benchFilesIn(join(root, "bench"))) found.push({ file, pkg: rootName });
  return found;
}

function matches(entry, root, filters) {
  if (filters.length === 0) return true;
  const rel = relative(root, entry.file);
  return filters.some((f) => entry.pkg.includes(f) || rel.includes(f));
}

function runFile(file, timeoutSec) {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-bench-"));
  const out = join(dir, "results.jsonl");
  return new Promise((done) => {
    const child = spawn(
      process.execPath,
      ["--conditions=@stormlog/source", "--import", "tsx", "--import", PRELOAD, file],
      {
        cwd: REPO_ROOT,
        env: { ...process.env, STORMLOG_BENCH_OUT: out },
        stdio: ["ignore", "inherit", "inherit"],
      },
    );
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutSec * 1000);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const lines = existsSync(out) ? readFileSync(out, "utf8").split("\n").filter(Boolean) : [];
      rmSync(dir, { recursive: true, force: true });
      done({ code, signal, timedOut, reports: lines.map((l) => JSON.parse(l)) });
    });
    child.on("error", (err) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      done({ code: null, signal: null, timedOut: false, spawnError: err, reports: [] });
    });
  });
}

function formatNs(ns) {
  if (typeof ns !== "number" || !Number.isFinite(ns)) return "-";
  if (ns < 1e3) return `${ns.toFixed(2)} ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(2)} µs`;
  if (ns < 1e9) return `${(ns / 1e6).toFixed(2)} ms`;
  return `${(ns / 1e9).toFixed(2)} s`;
}

function printTable(rows) {
  const header = ["package", "benchmark", "median", "p75", "p99", "samples"];
  const body = rows.map((r) => [
    r.package,
    r.group ? `${r.group} › ${r.name}` : r.name,
    formatNs(r.median),
    formatNs(r.p75),
    formatNs(r.p99),
    String(r.samples ?? "-"),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i].length)));
  const line = (cells) =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const row of body) console.log(line(row));
}

export async function main(argv) {
  let opts;
  try {
    opts = parseArgs(argv);
  } catch (err) {
    console.error(`bench: ${err.message}`);
    return 2;
  }
  if (opts.help) {
    console.log(USAGE);
    return 0;
  }
  const all = discover(opts.root);
  const selected = all.filter((e) => matches(e, opts.root, opts.filters));
  if (opts.list) {
    for (const e of selected) console.log(`${e.pkg}\t${relative(opts.root, e.file)}`);
    return 0;
  }
  if (selected.length === 0) {
    const what = opts.filters.length ? ` matching ${opts.filters.map((f) => `"${f}"`).join(", ")}` : "";
    console.log(
      `bench: no bench files${what} under ${opts.root} (packages/*/bench/*.bench.ts, bench/*.bench.ts).`,
    );
    return opts.filters.length ? 1 : 0;
  }

  const rows = [];
  const failures = [];
  const contexts = new Set();
  for (const entry of selected) {
    const rel = relative(opts.root, entry.file);
    console.log(`\n▶ ${entry.pkg}: ${rel}`);
    const started = Date.now();
    const res = await runFile(entry.file, opts.timeout);
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    let count = 0;
    for (const report of res.reports) {
      contexts.add(
        `${report.runtime ?? "?"} ${report.version ?? ""} (${report.arch ?? "?"}), cpu: ${report.cpu ?? "?"}`,
      );
      for (const r of report.runs) {
        if (r.error !== undefined) {
          failures.push(`${rel}: benchmark "${r.name}" threw: ${r.error}`);
          continue;
        }
        const s = r.stats;
        rows.push({
          package: entry.pkg,
          name: r.name,
          unit: "ns",
          median: s.p50,
          p75: s.p75,
          p99: s.p99,
          samples: s.samples,
          avg: s.avg,
          min: s.min,
          max: s.max,
          group: r.group,
          ...(Object.keys(r.args).length ? { args: r.args } : {}),
          file: rel,
        });
        count++;
      }
    }
    if (res.spawnError) failures.push(`${rel}: could not start node: ${res.spawnError.message}`);
    else if (res.timedOut)
      failures.push(`${rel}: killed after ${opts.timeout} s (use --timeout to allow more)`);
    else if (res.code !== 0) failures.push(`${rel}: exited with ${res.code ?? res.signal}`);
    else if (res.reports.length === 0) {
      failures.push(
        `${rel}: produced no results; a bench file must import from "mitata" and end with \`await run()\``,
      );
    }
    console.log(`  ${count} result(s) in ${seconds} s`);
  }

  // A filtered run replaces only the files it ran; the rest of an earlier summary is kept.
  let previous = [];
  if (opts.filters.length > 0 && existsSync(opts.out)) {
    try {
      const ran = new Set(selected.map((e) => relative(opts.root, e.file)));
      const old = JSON.parse(readFileSync(opts.out, "utf8"));
      if (Array.isArray(old)) previous = old.filter((r) => !ran.has(r.file));
    } catch {
      previous = [];
    }
  }
  const results = [...previous, ...rows];
  mkdirSync(dirname(opts.out), { recursive: true });
  writeFileSync(opts.out, `${JSON.stringify(results, null, 2)}\n`);

  console.log("");
  for (const c of contexts) console.log(`runtime: ${c}`);
  if (rows.length > 0) printTable(rows);
  const shown = relative(process.cwd(), opts.out);
  console.log(`\nwrote ${results.length} result(s) to ${shown.startsWith("..") ? opts.out : shown}`);
  if (failures.length > 0) {
    console.error(`\nbench: ${failures.length} failure(s):`);
    for (const f of failures) console.error(`  ${f}`);
    return 1;
  }
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
