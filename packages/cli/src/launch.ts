#!/usr/bin/env node
/**
 * The `stormlog` executable. It runs the bundled CLI (`bin.cjs`, beside this file) with V8's code
 * cache, so that a command does not parse and compile the same JavaScript at every start: on a warm
 * `stormlog analyze`, compiling was about a third of the process's own time. Node >= 22.1 keeps such
 * a cache itself (`module.enableCompileCache`); on older Node this file does, in the user cache
 * directory. It loads nothing but Node built-ins and, for `stormlog analyze`, the small
 * `stored-answer.cjs`, which prints an answer the input's index already holds without the bundle;
 * any failure of either only means a slower start. A first scan of a big file runs in a child
 * process with glibc's trim threshold fixed (`rerunWithBoundedArenas`).
 */
import type { ChildProcess } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import Module from "node:module";
import { constants, homedir } from "node:os";
import { basename, dirname, join } from "node:path";
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

/** Commands that may scan their input into an analysis index (`query` exports a .jsonl to Parquet first). */
const SCANNING_COMMANDS: ReadonlySet<string> = new Set([
  "analyze",
  "diagnose",
  "export",
  "query",
  "report",
  "sessions",
]);
/** A first scan of a file this big runs on two scan workers (the analysis's own rule). */
const BIG_INPUT_BYTES = 512 * 1024 * 1024;
/** The trim threshold such a scan runs with: free memory an arena keeps before it gives some back. */
const TRIM_THRESHOLD_BYTES = 1024 * 1024;
/** glibc (2.35 and later; earlier ones ignore it) asks for transparent huge pages for what it maps. */
const HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1";
/** Where an index beside its input lives (`INDEX_DIRNAME` of @stormlog/analysis, restated: see `cacheRoot`). */
const INDEX_DIRNAME = ".stormlog-index";
/** Signals a terminal or a job runner sends: the child gets them too. */
const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];
/** Signals whose default action dumps core: the child's dump is the one to keep, so the launcher does not make one. */
const CORE_SIGNALS: ReadonlySet<string> = new Set([
  "SIGABRT",
  "SIGBUS",
  "SIGFPE",
  "SIGILL",
  "SIGQUIT",
  "SIGSEGV",
  "SIGSYS",
  "SIGTRAP",
  "SIGXCPU",
  "SIGXFSZ",
]);
/** Set in the child the launcher starts: it ends when the launcher does (`followLauncher`). */
const CHILD_MARKER = "STORMLOG_LAUNCHER_CHILD";

/**
 * Whether the analysis has an index of `file` beside it (`locate` in @stormlog/analysis: the catalog
 * `index-<name>.json` of a .jsonl, `index.json` of another file, beside its real path). One in the user
 * cache directory (a read-only input, `--cache-dir`) is not looked for: a warm run whose answer is not
 * stored there (`storedAnswer`) pays the child's start.
 */
function indexedBeside(file: string): boolean {
  const real = realpathSync(file);
  const catalog = real.endsWith(".jsonl") ? `index-${basename(real)}.json` : "index.json";
  return existsSync(join(dirname(real), INDEX_DIRNAME, catalog));
}

/** Whether the command will likely scan a big file first (not indexed yet). */
function scansBigFile(args: readonly string[]): boolean {
  if (!SCANNING_COMMANDS.has(args[0] ?? "")) return false;
  for (const arg of args.slice(1)) {
    if (arg.startsWith("-")) continue;
    try {
      const stats = statSync(arg);
      if (stats.isFile() && stats.size >= BIG_INPUT_BYTES) return !indexedBeside(arg);
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

/** Whether a debugger is asked for: it would attach to the launcher, which runs nothing. */
function debugging(): boolean {
  return [...process.execArgv, process.env.NODE_OPTIONS ?? ""].some((arg) => /--inspect|--debug/.test(arg));
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

/** Ends this process as `signal` ended the child: by the same signal, else (core dumps, PID 1) with 128 + its number. */
function endAsKilledBy(signal: NodeJS.Signals): never {
  if (!CORE_SIGNALS.has(signal)) process.kill(process.pid, signal);
  // Still here: a core-dumping signal, or one a PID 1 (a container's first process) ignores.
  process.exit(128 + (constants.signals[signal] ?? 0));
}

/**
 * glibc lets each thread's arena keep freed memory up to twice a threshold that grows with the
 * blocks freed (to 64 MiB): after a first scan of a big file (two scan workers, V8's compiler
 * threads), about 40 MB of the peak RSS was memory kept that way (the 1.1 GB 64-rank file: 179-203
 * MiB, 148-167 MiB with a fixed 1 MiB threshold, for ~6 % more time). glibc reads the threshold when
 * the process starts, so such a command runs again in a child that has it; this process only relays
 * signals and ends as the child does. The child also has glibc ask for transparent huge pages
 * (`glibc.malloc.hugetlb=1`, where the kernel gives them on request): each first touch of a page is
 * a fault, and in a VM an expensive one (the 1.1 GB file: 88,000 faults against 109,000, 3.14 s
 * against 3.37 s, the same peak RSS; a smaller file does not gain what a second process start
 * costs). True when it did so; false to run the command here.
 */
function rerunWithBoundedArenas(): boolean {
  const args = process.argv.slice(2);
  if (process.platform !== "linux" || allocatorTuned(process.env) || debugging()) return false;
  if (!scansBigFile(args) || !usesGlibc()) return false;
  let child: ChildProcess;
  try {
    // Loaded only here: with the stream and socket modules it brings, ~10 ms of every other start.
    const { spawn } = require("node:child_process") as typeof import("node:child_process");
    child = spawn(process.execPath, [...process.execArgv, __filename, ...args], {
      // The IPC channel tells the child when this process is gone, even killed (`followLauncher`).
      stdio: ["inherit", "inherit", "inherit", "ipc"],
      env: {
        ...process.env,
        MALLOC_TRIM_THRESHOLD_: String(TRIM_THRESHOLD_BYTES),
        // Other tunables kept (none is glibc.malloc's: `allocatorTuned`).
        GLIBC_TUNABLES: [process.env.GLIBC_TUNABLES, HUGE_PAGES_TUNABLE].filter(Boolean).join(":"),
        [CHILD_MARKER]: "1",
      },
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
  // A child that could not be made leaves the command to this process ("error" before "spawn").
  let state: "starting" | "running" | "here" = "starting";
  child.once("spawn", () => {
    state = "running";
    // Only the child's end keeps this process waiting.
    child.channel?.unref();
  });
  child.on("error", () => {
    // A later error (a signal that could not be relayed) changes nothing: the child's end still comes.
    if (state !== "starting") return;
    state = "here";
    stopRelaying();
    launch();
  });
  child.once("exit", (code, signal) => {
    if (state !== "running") return;
    stopRelaying();
    if (signal !== null) endAsKilledBy(signal);
    process.exit(code ?? 1);
  });
  return true;
}

/** In the launcher's child: ends when the launcher is gone (killed, say), instead of running on alone. */
function followLauncher(): void {
  if (process.env[CHILD_MARKER] !== "1") return;
  // Processes this one starts are not the launcher's children.
  delete process.env[CHILD_MARKER];
  if (process.channel === undefined) return;
  process.channel.unref();
  process.on("disconnect", () => process.exit(1));
}

/**
 * Prints the answer to `stormlog analyze` its index already holds (`stored-answer.cjs`, beside this
 * file), without the bundle; null when the command is another, or that file cannot be loaded.
 */
function storedAnswer(): Promise<boolean> | null {
  if (process.argv[2] !== "analyze") return null;
  try {
    const { printStoredAnswer } = require(join(__dirname, "stored-answer.cjs")) as {
      printStoredAnswer: (argv: readonly string[]) => Promise<boolean>;
    };
    return printStoredAnswer(process.argv.slice(2));
  } catch {
    return null;
  }
}

/**
 * A command is a short process, whose hot code V8's optimizing compiler compiles while it runs (on
 * the second core, or beside it): inlining less there, it spends a tenth less CPU on a cold
 * `stormlog analyze` for code that runs as fast (the 240 MB job: median 1.30 s against 1.40 s, 10
 * alternating runs). Set before the bundle compiles, so that its code cache matches every start.
 * A V8 that no longer knows the flag prints so on stderr (the launch tests, which expect none, catch it).
 */
const INLINING_FLAG = "--max-inlined-bytecode-size-cumulative";
const INLINING_BUDGET = 200;

function runCommand(): void {
  // A setting of the user's own (`node --max-inlined-bytecode-size-cumulative=N stormlog ...`) stands.
  if (!process.execArgv.some((arg) => arg.startsWith(INLINING_FLAG)))
    (require("node:v8") as typeof import("node:v8")).setFlagsFromString(
      `${INLINING_FLAG}=${INLINING_BUDGET}`,
    );
  if (!rerunWithBoundedArenas()) launch();
}

followLauncher();
const stored = storedAnswer();
if (stored === null) runCommand();
else {
  // On the next tick, as on any start: an error there is thrown, not a rejected promise.
  const runLater = (): void => process.nextTick(runCommand);
  stored.then((printed) => {
    if (!printed) runLater();
  }, runLater);
}
