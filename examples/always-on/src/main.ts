/**
 * The always-on recipe end to end: the tracked service (service.ts) runs three times into one
 * sink directory. The first run completes, the second is killed with SIGKILL mid-run, the third
 * completes. Then the sessions in the sink are listed (completed, interrupted, completed) and the
 * analysis picks the newest completed session, as `stormlog analyze` does.
 *
 *   pnpm start [-- --out DIR] [--json FILE]
 */
import { spawn } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { analyzeTelemetry, formatReportText, reportToJson } from "@stormlog/analysis";
import { stringifyJson } from "@stormlog/core";
import { summarizeTelemetrySessions } from "@stormlog/sink";

// `pnpm start -- --flag` passes the `--` through: skip it.
const argv = process.argv.slice(2);
if (argv[0] === "--") argv.shift();
const { values: args } = parseArgs({
  args: argv,
  options: {
    out: { type: "string" },
    json: { type: "string" },
    duration: { type: "string", default: "2" },
  },
});
const sinkDir = resolve(args.out ?? process.env.STORMLOG_SINK_DIR ?? "stormlog-sink");
const userCwd = process.env.INIT_CWD ?? process.cwd();
const shown = (path: string) => {
  const rel = relative(userCwd, path);
  return rel === "" ? "." : rel.startsWith("..") ? path : rel;
};
const servicePath = fileURLToPath(new URL("./service.ts", import.meta.url));

interface Run {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly sessionId: string | undefined;
}

/**
 * Runs the service with this process's node flags. With `killAfterReport`, sends SIGKILL once it
 * has printed its first counters (it has written segments by then): a crash, no clean-up at all.
 */
function runService(label: string, serviceArgs: string[], killAfterReport: boolean): Promise<Run> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(
      process.execPath,
      [...process.execArgv, servicePath, "--sink", sinkDir, ...serviceArgs],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    let sessionId: string | undefined;
    let buffered = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      buffered += chunk;
      let newline = buffered.indexOf("\n");
      while (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        sessionId ??= /^session (\S+) started/.exec(line)?.[1];
        console.log(`  [${label}] ${line}`);
        if (killAfterReport && line.startsWith("step ")) {
          console.log(`  [${label}] → kill -KILL ${child.pid}`);
          child.kill("SIGKILL");
        }
        newline = buffered.indexOf("\n");
      }
    });
    child.on("error", reject);
    child.on("close", (code, signal) => resolveRun({ code, signal, sessionId }));
  });
}

rmSync(sinkDir, { recursive: true, force: true });
console.log("Stormlog always-on example: a tracked service, three runs into one sink");
console.log(`  sink       ${shown(sinkDir)} (rollover at 64 KiB; retention: 12 segments, 1.5 MiB)`);
console.log("  history    200 records in memory; the sink keeps the rest until retention prunes it");
console.log();

console.log("▶ run 1: completes");
const first = await runService("run 1", ["--duration", args.duration ?? "2"], false);
console.log("▶ run 2: killed with SIGKILL mid-run");
const second = await runService("run 2", [], true);
console.log("▶ run 3: completes (opening the sink marks run 2 interrupted)");
const third = await runService("run 3", ["--duration", args.duration ?? "2"], false);
if (first.code !== 0 || second.signal !== "SIGKILL" || third.code !== 0) {
  console.error("a run did not end as planned; see above");
  process.exit(1);
}

console.log();
console.log("── sessions in the sink (stormlog sessions) ─────────────────────────────────");
const sessions = await summarizeTelemetrySessions(sinkDir);
const runOf = new Map([
  [first.sessionId, "run 1"],
  [second.sessionId, "run 2"],
  [third.sessionId, "run 3"],
]);
for (const { summary, eventCount } of sessions) {
  console.log(
    `  ${summary.session_id}  ${summary.status.padEnd(11)} ${String(eventCount).padStart(5)} records kept  ` +
      `(${runOf.get(summary.session_id) ?? "?"})`,
  );
}

const report = await analyzeTelemetry(sinkDir);
console.log();
console.log("── stormlog analyze (default: the newest completed session) ─────────────────");
console.log(formatReportText(report));
if (args.json !== undefined)
  writeFileSync(args.json, `${stringifyJson(reportToJson(report), { indent: 2 })}\n`);
console.log("─────────────────────────────────────────────────────────────────────────────");
console.log("Next (after `pnpm build`, from the repository root):");
console.log(`  pnpm exec stormlog sessions ${shown(sinkDir)}`);
console.log(
  `  pnpm exec stormlog analyze ${shown(sinkDir)} --session-id ${second.sessionId}   the interrupted run`,
);
