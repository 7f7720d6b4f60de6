/**
 * Exports the demo's last recorded session to Weights & Biases, as the Python Stormlog's W&B export
 * does: a W&B offline run directory (`wandb/offline-run-<time>-<id>/`) that `wandb sync` uploads, and,
 * with `WANDB_API_KEY` set and `@wandb/sdk` installed, the history and summary streamed live too.
 *
 *   pnpm --filter tfjs-training start     # record a session into ./stormlog-sink
 *   pnpm --filter tfjs-training wandb     # export it; prints the `wandb sync` command
 *
 * --sink DIR     the sink to read (default ./stormlog-sink)
 * --dir DIR      where wandb/ is written (default .)
 * --project P    the W&B project (default stormlog-tfjs-training)
 * --offline      no live run, even with an API key
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import type { JsonObject } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import {
  exportTrackingRunToWandb,
  loadOnlineSdk,
  type WandbClient,
  WandbOfflineClient,
  WandbStreamingClient,
} from "@stormlog/wandb";

const { values: args } = parseArgs({
  options: {
    sink: { type: "string" },
    dir: { type: "string" },
    project: { type: "string" },
    offline: { type: "boolean" },
  },
});
const sinkDir = resolve(args.sink ?? "stormlog-sink");

// The newest session that holds events.
const sessions = (await loadTelemetrySessions(sinkDir)).filter((session) => session.eventCount > 0);
sessions.sort((a, b) => (a.summary.started_at_ns < b.summary.started_at_ns ? -1 : 1));
const session = sessions.at(-1);
if (session === undefined) {
  console.error(`no recorded session in ${sinkDir}: run \`pnpm --filter tfjs-training start\` first`);
  process.exit(1);
}

// The tracker's statistics are not in the sink; these are what its events say.
let peak = 0;
let alerts = 0;
for (const event of session.events) {
  peak = Math.max(peak, event.allocator_allocated_bytes ?? 0);
  if (event.event_type === "warning" || event.event_type === "critical" || event.event_type === "error")
    alerts++;
}
const stats: JsonObject = {
  peak_memory: peak,
  total_events: session.eventCount,
  alert_count: alerts,
  backend: "tfjs",
  session_status: session.summary.status,
};

const offline = new WandbOfflineClient({ dir: resolve(args.dir ?? ".") });
let client: WandbClient = offline;
if (args.offline !== true) {
  const online = await loadOnlineSdk();
  if (online.available) client = new WandbStreamingClient(offline, online.sdk);
  else console.log(`offline only: ${online.reason}`);
}

await exportTrackingRunToWandb(
  {
    enabled: true,
    project: args.project ?? "stormlog-tfjs-training",
    mode: args.offline === true ? "offline" : null,
    logArtifacts: true,
  },
  {
    commandName: "tfjs-training",
    sessionSummary: session.summary,
    stats,
    events: session.events,
    telemetrySinkDir: sinkDir,
  },
  client,
);

for (const run of offline.runs) {
  console.log(`W&B offline run: ${run.runDir}`);
  console.log(`upload it with:  ${run.syncCommand()}`);
}
