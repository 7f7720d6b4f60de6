import { resolve } from "node:path";
import { listTelemetrySessions, type RankGroupSession } from "@stormlog/analysis";
import { type JsonObject, stringifyJson } from "@stormlog/core";
import type { SessionInfo } from "@stormlog/sink";
import {
  type CommandHelp,
  choice,
  formatCommandHelp,
  INDEX_OPTIONS,
  indexFlags,
  parseCommandArgs,
  requirePath,
  stringFlag,
} from "../args.js";
import { durationNs, isoNs, renderTable, shown, warningLine } from "../format.js";
import { type CliIo, writeOutput } from "../io.js";
import type { Command } from "./command.js";

const help: CommandHelp = {
  name: "sessions",
  summary: "List the capture sessions of a sink or telemetry file, newest completed first.",
  usage: "stormlog sessions <path> [--format txt|json] [--output FILE] [--no-index] [--cache-dir DIR]",
  description:
    "Lists every session in the order the Python reference ranks them (completed, then interrupted,\n" +
    "incomplete, running; newest first in each), with status, event count and time range. Per-rank\n" +
    "sessions of one distributed job are also shown as the rank group that analyze, diagnose and\n" +
    "export select by default. Reads the input through the index they share (one scan, then none).",
  options: {
    format: { type: "string", value: "txt|json", description: "Output format.", default: "txt" },
    output: { type: "string", short: "o", value: "FILE", description: "Write to FILE instead of stdout." },
    ...INDEX_OPTIONS,
  },
  examples: [
    "stormlog sessions ./stormlog-sink",
    "stormlog sessions ./stormlog-sink --format json | jq '.sessions[0]'",
  ],
};

function sessionJson(session: SessionInfo): JsonObject {
  const summary = session.summary;
  return {
    session_id: summary.session_id,
    status: summary.status,
    event_count: session.eventCount,
    first_timestamp_ns: session.firstTimestampNs,
    last_timestamp_ns: session.lastTimestampNs,
    started_at_ns: summary.started_at_ns,
    ended_at_ns: summary.ended_at_ns,
    host: summary.host,
    pid: summary.pid,
    job_id: summary.job_id,
    rank: summary.rank,
    local_rank: summary.local_rank,
    world_size: summary.world_size,
    source: summary.source,
    sources: session.sources,
    warnings: session.warnings,
  };
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const args = parseCommandArgs(help, argv);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  const path = resolve(io.cwd, requirePath(help, args));
  const format = choice(help, args, "format", ["txt", "json"] as const, "txt");
  // What was not read (a link out of the input, a final line cut short): on stderr, one line each.
  const warnings: string[] = [];
  const { sessions, rankGroups } = await listTelemetrySessions(path, {
    ...indexFlags(args, io.cwd),
    onWarning: (message) => warnings.push(message),
  });
  let text: string;
  if (format === "json") {
    const document: JsonObject = {
      sessions: sessions.map(sessionJson),
      rank_groups: rankGroups.map((group) => ({
        session_id: group.summary.session_id,
        status: group.summary.status,
        job_id: group.summary.job_id,
        world_size: group.summary.world_size,
        member_session_ids: group.members.map((member) => member.summary.session_id),
        ranks: [...group.ranks],
      })),
    };
    text = `${stringifyJson(document, { indent: 2 })}\n`;
  } else {
    text = formatSessionsText(path, sessions, rankGroups);
  }
  await writeOutput(io, stringFlag(args, "output"), text);
  for (const warning of warnings) io.stderr.write(warningLine(help.name, warning));
  return 0;
}

function formatSessionsText(
  path: string,
  sessions: readonly SessionInfo[],
  rankGroups: readonly RankGroupSession[],
): string {
  if (sessions.length === 0) return `No sessions in ${shown(path)}.\n`;
  const rows = sessions.map((session) => {
    const summary = session.summary;
    return [
      summary.session_id,
      summary.status,
      String(session.eventCount),
      summary.job_id ?? "-",
      summary.world_size > 1 ? `${summary.rank}/${summary.world_size}` : String(summary.rank),
      isoNs(session.firstTimestampNs ?? summary.started_at_ns).replace(/\.\d+Z$/, "Z"),
      durationNs(session.firstTimestampNs, session.lastTimestampNs),
    ];
  });
  const table = renderTable(
    ["SESSION", "STATUS", "EVENTS", "JOB", "RANK", "STARTED (UTC)", "SPAN"],
    rows,
    new Set([2, 6]),
  );
  const lines = [
    `${sessions.length} session${sessions.length === 1 ? "" : "s"} in ${shown(path)}`,
    "",
    table,
  ];
  for (const group of rankGroups) {
    const ranks = group.ranks;
    lines.push(
      "",
      `Rank group ${shown(group.summary.session_id)}: job ${shown(group.summary.job_id)}, ranks ${ranks.join(", ")} ` +
        `of ${group.summary.world_size} (${group.summary.status}); selected by default by analyze, diagnose and export.`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/** `stormlog sessions`. */
export const sessionsCommand: Command = { help, run };
