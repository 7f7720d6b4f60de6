/**
 * The `stormlog` command as a fresh process, as a user runs it, for the benches that time one: the built
 * CLI when there is one (else the source through tsx, which adds its own start-up), and its peak RSS.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const BUILT = join(REPO, "packages/cli/dist/launch.cjs");

/** How the CLI is started, and what the figures say about it. */
export const cli = existsSync(BUILT)
  ? { args: [BUILT], label: "built CLI (packages/cli/dist/launch.cjs)" }
  : {
      args: ["--conditions=@stormlog/source", "--import", "tsx", join(REPO, "packages/cli/src/bin.ts")],
      label: "CLI from source through tsx (run pnpm build for the built CLI's figures)",
    };

// Peak RSS from /proc/self/status (VmHWM): getrusage's maxRSS of a spawned child on Linux also counts the
// memory of this process, which it was forked from. CPU time is the process's, all its threads (the scan
// worker, V8's compiler and GC threads): against the wall time it says how busy the cores were. Page
// faults are the minor faults of the process (first touches of fresh memory): on a VM that gives
// memory back to its host, each costs ~15 us, so they say what memory a command touches costs it.
const rssProbe = join(mkdtempSync(join(tmpdir(), "stormlog-bench-rss-")), "rss.cjs");
writeFileSync(
  rssProbe,
  `process.on("exit", () => {
    let kb = process.resourceUsage().maxRSS;
    try { kb = Number(/VmHWM:\\s+(\\d+)/.exec(require("node:fs").readFileSync("/proc/self/status", "utf8"))[1]); } catch {}
    const cpu = process.cpuUsage();
    process.stderr.write("maxrss=" + Math.round(kb / 1024) + " cpums=" + Math.round((cpu.user + cpu.system) / 1000) + " faults=" + process.resourceUsage().minorPageFault + "\\n");
  });\n`,
);

/**
 * Runs `stormlog <args>` once; its wall time, peak RSS (MB, "?" where unknown), CPU time and minor page
 * faults (summed over its processes, NaN where unknown). Throws when it fails.
 */
export function runCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): { ms: number; rssMb: string; cpuMs: number; faults: number } {
  const started = performance.now();
  const child = spawnSync(process.execPath, ["--require", rssProbe, ...cli.args, ...args], {
    cwd: REPO,
    encoding: "utf8",
    env,
  });
  const ms = performance.now() - started;
  if (child.status !== 0) throw new Error(`stormlog ${args[0]} failed: ${child.stderr}`);
  // The largest of the processes that report one: a big first scan runs in a child of the launcher, which
  // waits beside it with ~7 MB of its own (most of its ~44 MB resident is shared with the child).
  const reports = [...child.stderr.matchAll(/maxrss=(\d+) cpums=(\d+) faults=(\d+)/g)];
  if (reports.length === 0) return { ms, rssMb: "?", cpuMs: Number.NaN, faults: Number.NaN };
  const rssMb = String(Math.max(...reports.map((match) => Number(match[1]))));
  // A process's CPU time leaves out its children's: each reports its own.
  const cpuMs = reports.reduce((sum, match) => sum + Number(match[2]), 0);
  const faults = reports.reduce((sum, match) => sum + Number(match[3]), 0);
  return { ms, rssMb, cpuMs, faults };
}

/**
 * This environment without `NODE_EXTRA_CA_CERTS`, or null when it is not set. Node 20 parses that
 * certificate bundle at every start, before any of our code (on this VM ~70 ms of a 100 ms `node -e 0`):
 * a cost of the machine's setup that a user's shell usually does not have, reported beside the as-is figure.
 */
export function envWithoutExtraCerts(): NodeJS.ProcessEnv | null {
  if (!process.env.NODE_EXTRA_CA_CERTS) return null;
  const { NODE_EXTRA_CA_CERTS: _certs, ...rest } = process.env;
  return rest;
}

/**
 * ", CPU N ms (X of C cores busy)" for a `runCli` result, empty where its CPU time is unknown. CPU time over
 * wall time is how many cores were busy on average (worker threads, V8's compiler and GC threads count): near
 * the machine's cores, only less work makes the command faster, not more threads.
 */
export function cpuNote({ ms, cpuMs, faults }: { ms: number; cpuMs: number; faults: number }): string {
  if (Number.isNaN(cpuMs)) return "";
  return `, CPU ${Math.round(cpuMs)} ms (${(cpuMs / ms).toFixed(2)} of ${availableParallelism()} cores busy), ${faults} page faults`;
}
