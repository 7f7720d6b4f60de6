#!/usr/bin/env node
/**
 * The `stormlog` executable. It runs the bundled CLI (`bin.cjs`, beside this file) with V8's code
 * cache, so that a command does not parse and compile the same JavaScript at every start: on a warm
 * `stormlog analyze`, compiling was about a third of the process's own time. Node >= 22.1 keeps such
 * a cache itself (`module.enableCompileCache`); on older Node this file does, in the user cache
 * directory. It loads nothing but Node built-ins, and any failure of the cache only means a slower
 * start. A first scan of a big file runs in a child process with glibc's trim threshold fixed
 * (`rerunWithBoundedArenas`).
 */
import { type ChildProcess, spawn } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import Module from "node:module";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { Script } from "node:vm";

const bundle = join(__dirname, "bin.cjs");

/** `module.enableCompileCache` (Node >= 22.1), absent from Node 20's types. */
type EnableCompileCache = (directory?: string) => unknown;
const builtInCache = (Module as unknown as { enableCompileCache?: EnableCompileCache }).enableCompileCache;

/**
 * `$STORMLOG_CACHE_DIR`, else `$XDG_CACHE_HOME/stormlog` or `~/.cache/stormlog`: where analysis
 * indexes go when a sink directory is read-only (the same rule as `@stormlog/analysis`, restated
 * here because this file must load nothing else).
 */
function cacheRoot(): string {
  const explicit = process.env.STORMLOG_CACHE_DIR;
  if (explicit) return explicit;
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "stormlog");
}

/** Runs `bin.cjs` as a CommonJS module compiled from `source`, with `cachedData` when there is some. */
function runBundle(source: string, cachedData: Buffer | undefined): Script {
  const script = new Script(Module.wrap(source), { filename: bundle, cachedData });
  const module = { exports: {} };
  const requireFromBundle = Module.createRequire(bundle);
  (script.runInThisContext() as (...args: unknown[]) => void).call(
    module.exports,
    module.exports,
    requireFromBundle,
    module,
    bundle,
    dirname(bundle),
  );
  return script;
}

/** Entries kept: a few builds (a global and a project's install, an upgrade) can alternate without thrashing. */
const KEEP_ENTRIES = 4;

/** Writes the cache once the command is over (atomically), and removes all but the newest entries. */
function saveOnExit(script: Script, dir: string, name: string): void {
  process.once("exit", () => {
    try {
      mkdirSync(dir, { recursive: true });
      const temporary = join(dir, `${name}.${process.pid}.tmp`);
      writeFileSync(temporary, script.createCachedData());
      renameSync(temporary, join(dir, name));
      const entries = readdirSync(dir)
        .filter((entry) => entry.startsWith("bin-") && entry.endsWith(".cache"))
        .map((entry) => ({ entry, mtimeMs: statSync(join(dir, entry)).mtimeMs }))
        .sort((a, b) => b.mtimeMs - a.mtimeMs);
      for (const { entry } of entries.slice(KEEP_ENTRIES)) rmSync(join(dir, entry), { force: true });
    } catch {
      // A read-only or full cache directory: the next start compiles again.
    }
  });
}

function launch(): void {
  if (process.env.NODE_DISABLE_COMPILE_CACHE || process.env.STORMLOG_COMPILE_CACHE === "0") {
    require(bundle);
    return;
  }
  if (builtInCache !== undefined) {
    try {
      builtInCache();
    } catch {
      // Without the cache, as on any start.
    }
    require(bundle);
    return;
  }
  let source: string;
  let name: string;
  try {
    const stats = statSync(bundle);
    // The bundle's identity: V8 checks its own version and flags, and only the length of the source.
    name = `bin-${process.version}-${process.arch}-${stats.size}-${Math.trunc(stats.mtimeMs)}-${stats.ino}.cache`;
    source = readFileSync(bundle, "utf8").replace(/^#!.*/, "");
  } catch {
    require(bundle);
    return;
  }
  const dir = join(cacheRoot(), "compile-cache");
  let cachedData: Buffer | undefined;
  try {
    cachedData = readFileSync(join(dir, name));
  } catch {
    cachedData = undefined;
  }
  const script = runBundle(source, cachedData);
  if (cachedData === undefined || script.cachedDataRejected === true) saveOnExit(script, dir, name);
}

/** Commands that may scan their input into an analysis index. */
const SCANNING_COMMANDS: ReadonlySet<string> = new Set([
  "analyze",
  "diagnose",
  "export",
  "report",
  "sessions",
]);
/** A first scan of a file this big runs on two scan workers (the analysis's own rule). */
const BIG_INPUT_BYTES = 512 * 1024 * 1024;
/** The trim threshold such a scan runs with: free memory an arena keeps before it gives some back. */
const TRIM_THRESHOLD_BYTES = 1024 * 1024;
/** Where an index beside its input lives (`INDEX_DIRNAME` of @stormlog/analysis, restated: see `cacheRoot`). */
const INDEX_DIRNAME = ".stormlog-index";
/** Signals a terminal or a job runner sends: the child gets them too. */
const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];

/** Whether the command will likely scan a big file first (no index beside it yet). */
function scansBigFile(args: readonly string[]): boolean {
  if (!SCANNING_COMMANDS.has(args[0] ?? "")) return false;
  for (const arg of args.slice(1)) {
    if (arg.startsWith("-")) continue;
    try {
      const stats = statSync(arg);
      if (stats.isFile() && stats.size >= BIG_INPUT_BYTES)
        return !existsSync(join(dirname(resolve(arg)), INDEX_DIRNAME));
    } catch {
      // Not a path (an option's value): nothing to scan.
    }
  }
  return false;
}

/** Whether the user set glibc's allocator up already (`MALLOC_*`, malloc tunables): theirs is kept. */
function allocatorTuned(env: NodeJS.ProcessEnv): boolean {
  return (
    Object.keys(env).some((name) => name.startsWith("MALLOC_")) ||
    (env.GLIBC_TUNABLES ?? "").includes("glibc.malloc.")
  );
}

/** Whether this Node runs on glibc (musl and others ignore its settings). */
function usesGlibc(): boolean {
  try {
    const report = process.report.getReport() as { header?: { glibcVersionRuntime?: unknown } };
    return typeof report.header?.glibcVersionRuntime === "string";
  } catch {
    return false;
  }
}

/**
 * glibc lets each thread's arena keep freed memory up to twice a threshold that grows with the
 * blocks freed (to 64 MiB): after a first scan of a big file (two scan workers, V8's compiler
 * threads), about 40 MB of the peak RSS was memory kept that way (the 1.1 GB 64-rank file: 190-200
 * MiB, 151-160 MiB with a fixed 1 MiB threshold, as fast). glibc reads the threshold when the process
 * starts, so such a command runs again in a child that has it; this process only relays signals and
 * ends as the child does. True when it did so; false to run the command here.
 */
function rerunWithBoundedArenas(): boolean {
  const args = process.argv.slice(2);
  if (process.platform !== "linux" || allocatorTuned(process.env) || !scansBigFile(args)) return false;
  if (!usesGlibc()) return false;
  let child: ChildProcess;
  try {
    child = spawn(process.execPath, [...process.execArgv, __filename, ...args], {
      stdio: "inherit",
      env: { ...process.env, MALLOC_TRIM_THRESHOLD_: String(TRIM_THRESHOLD_BYTES) },
    });
  } catch {
    return false;
  }
  const relays = FORWARDED_SIGNALS.map((signal) => {
    const relay = (): void => {
      child.kill(signal);
    };
    process.on(signal, relay);
    return [signal, relay] as const;
  });
  const stopRelaying = (): void => {
    for (const [signal, relay] of relays) process.off(signal, relay);
  };
  let started = false;
  child.once("spawn", () => {
    started = true;
  });
  child.once("error", () => {
    // Not started (no process could be made): the command runs here, as without big files.
    if (started) return;
    stopRelaying();
    launch();
  });
  child.once("exit", (code, signal) => {
    if (!started) return;
    stopRelaying();
    if (signal !== null) process.kill(process.pid, signal);
    else process.exit(code ?? 1);
  });
  return true;
}

if (!rerunWithBoundedArenas()) launch();
