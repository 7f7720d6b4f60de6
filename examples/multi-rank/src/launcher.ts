/**
 * A 4-rank job on one machine, launched as torchrun would: every worker gets RANK, LOCAL_RANK,
 * WORLD_SIZE and a job id (TORCHELASTIC_RUN_ID) and records under one sink root. Rank 2 allocates
 * its gradient buffer in `train / backward` several steps before the other ranks allocate theirs;
 * the cross-rank analysis then names rank 2 as the first cause.
 *
 *   pnpm start [-- --no-spike] [--out DIR] [--world-size N] [--job-id ID]
 *
 * --no-spike   no rank allocates the buffer: the analysis reports no suspect.
 */
import { fork } from "node:child_process";
import { rmSync } from "node:fs";
import { relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { loadDistributedEvents, summarizeCrossRankAnalysis } from "@stormlog/analysis";
import { PhaseReplayIndex } from "@stormlog/phases";
import {
  type DoneMessage,
  type JobPlan,
  PLAN_ENV,
  SINK_ROOT_ENV,
  type StartMessage,
  type TrackMessage,
  type WorkerMessage,
} from "./protocol.js";

// `pnpm start -- --flag` passes the `--` through: skip it.
const argv = process.argv.slice(2);
if (argv[0] === "--") argv.shift();
const { values: args } = parseArgs({
  args: argv,
  options: {
    "no-spike": { type: "boolean", default: false },
    out: { type: "string" },
    "world-size": { type: "string", default: "4" },
    "job-id": { type: "string" },
    keep: { type: "boolean", default: false },
  },
});

const worldSize = Number(args["world-size"]);
if (!Number.isInteger(worldSize) || worldSize < 3) {
  console.error(`--world-size must be a whole number >= 3, got ${args["world-size"]}`);
  process.exit(1);
}
const spike = !args["no-spike"];
const EARLY_RANK = 2;
const MIB = 1024 * 1024;
const plan: JobPlan = {
  steps: 24,
  stepMs: 100,
  samplingIntervalMs: 50,
  bufferStep: spike ? 16 : null,
  earlyRank: spike ? EARLY_RANK : null,
  earlyStep: spike ? 8 : null,
  bufferBytes: 128 * MIB,
};
const jobId = args["job-id"] ?? `multi-rank-${new Date().toISOString().replace(/[-:.]/g, "").slice(0, 15)}`;
const root = resolve(args.out ?? process.env.STORMLOG_SINK_DIR ?? "stormlog-sink");
const userCwd = process.env.INIT_CWD ?? process.cwd();
const shown = (path: string) => {
  const rel = relative(userCwd, path);
  return rel === "" ? "." : rel.startsWith("..") ? path : rel;
};
// One job per root keeps the example's output about this run; --keep adds runs side by side.
if (!args.keep) rmSync(root, { recursive: true, force: true });

console.log(`Stormlog multi-rank example: ${worldSize} TensorFlow.js ranks, job ${jobId}`);
console.log(`  sink root   ${shown(root)} (one directory per rank)`);
if (spike) {
  console.log(
    `  scenario    rank ${EARLY_RANK} allocates its ${plan.bufferBytes / MIB} MiB gradient buffer in ` +
      `train / backward at step ${plan.earlyStep}; the other ranks at step ${plan.bufferStep}`,
  );
} else {
  console.log("  scenario    --no-spike: no rank allocates the buffer");
}
console.log();

const workerPath = fileURLToPath(new URL("./worker.ts", import.meta.url));
const workers = Array.from({ length: worldSize }, (_, rank) =>
  // fork() runs the worker with this process's node flags (--conditions, --import tsx) and an IPC channel.
  fork(workerPath, [], {
    env: {
      ...process.env,
      RANK: String(rank),
      LOCAL_RANK: String(rank),
      WORLD_SIZE: String(worldSize),
      TORCHELASTIC_RUN_ID: jobId,
      [PLAN_ENV]: JSON.stringify(plan),
      [SINK_ROOT_ENV]: root,
    },
  }),
);

const loaded = new Set<number>();
const ready = new Set<number>();
const done = new Map<number, DoneMessage>();
const exits = workers.map(
  (worker, rank) =>
    new Promise<number>((resolveExit) => {
      worker.on("message", (message: WorkerMessage) => {
        if (message.type === "loaded") {
          loaded.add(message.rank);
          if (loaded.size === worldSize) {
            const track: TrackMessage = { type: "track", trackAtMs: Date.now() + 200 };
            for (const w of workers) w.send(track);
          }
        } else if (message.type === "ready") {
          ready.add(message.rank);
          // A common start time, as the first collective of a real job would line ranks up.
          if (ready.size === worldSize) {
            const start: StartMessage = { type: "start", startAtMs: Date.now() + 200 };
            for (const w of workers) w.send(start);
            console.log(`▶ ${worldSize} ranks ready; training ${plan.steps} steps of ${plan.stepMs} ms`);
          }
        } else if (message.type === "done") {
          done.set(message.rank, message);
        }
      });
      worker.on("exit", (code, signal) => {
        if (code !== 0) console.error(`rank ${rank} exited with ${code ?? signal}`);
        resolveExit(code ?? 1);
      });
    }),
);
const codes = await Promise.all(exits);
if (codes.some((code) => code !== 0) || done.size !== worldSize) {
  console.error("some ranks failed; see above");
  process.exit(1);
}
for (const rank of [...done.keys()].sort((a, b) => a - b)) {
  const info = done.get(rank)!;
  console.log(
    `  rank ${rank}  ${info.steps} steps  peak tensors ${(info.peakTensorBytes / MIB).toFixed(1)} MiB  ` +
      `${shown(info.sinkDir)}`,
  );
}

// The ranks' sessions share the job id: the analysis merges them into one distributed view.
const { selection, events } = await loadDistributedEvents(root);
const analysis = summarizeCrossRankAnalysis(events, { phaseResolver: PhaseReplayIndex.fromEvents(events) });
console.log();
console.log(
  `── cross-rank analysis (${selection.memberSessionIds.length} sessions merged, ranks ` +
    `${analysis.participating_ranks.join(", ")}) ──`,
);
if (analysis.first_cause_suspects.length === 0) {
  console.log("  no first-cause suspect: no rank's device memory spiked");
}
for (const [index, suspect] of analysis.first_cause_suspects.entries()) {
  const phase = suspect.phase_attribution?.phase_path ?? "no phase";
  const lead = Number(suspect.lead_over_cluster_onset_ns) / 1e6;
  console.log(
    `  ${index + 1}. rank ${suspect.rank}  confidence ${suspect.confidence}  phase ${phase}  ` +
      `+${(Number(suspect.peak_delta_bytes) / MIB).toFixed(0)} MiB  ${lead.toFixed(0)} ms before the cluster`,
  );
}
for (const note of analysis.notes) console.log(`  note: ${note}`);
console.log();
console.log("Next (after `pnpm build`, from the repository root):");
console.log(`  pnpm exec stormlog diagnose ${shown(root)}    per-rank table, first anomaly and its phase`);
console.log(`  pnpm exec stormlog analyze ${shown(root)}     the full report, cross-rank analysis included`);
