#!/usr/bin/env node
/**
 * The `stormlog` executable. It runs the bundled CLI (`bin.cjs`, beside this file) with V8's code
 * cache, so that a command does not parse and compile the same JavaScript at every start: on a warm
 * `stormlog analyze`, compiling was about a third of the process's own time. Node >= 22.1 keeps such
 * a cache itself (`module.enableCompileCache`); on older Node this file does, in the user cache
 * directory. It loads nothing but Node built-ins, and any failure of the cache only means a slower
 * start.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import Module from "node:module";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
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

launch();
