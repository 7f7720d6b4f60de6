import { resolve } from "node:path";
import {
  buildPerfettoTrace,
  loadDistributedEvents,
  perfettoTraceChunks,
  selectDistributedSession,
  telemetryCsvLines,
} from "@stormlog/analysis";
import { encodeTelemetryRecord, type TelemetryEvent } from "@stormlog/core";
import { iterateTelemetryEvents, summarizeTelemetrySessions } from "@stormlog/sink";
import {
  type CommandHelp,
  choice,
  formatCommandHelp,
  parseCommandArgs,
  requirePath,
  stringFlag,
} from "../args.js";
import { type CliIo, createProgress, type Output, openOutput, type Progress } from "../io.js";
import type { Command } from "./command.js";

const FORMATS = ["perfetto", "csv", "jsonl"] as const;

const help: CommandHelp = {
  name: "export",
  summary: "Export a run as a Perfetto/Chrome trace, CSV (metadata kept) or canonical JSONL.",
  usage: "stormlog export <path> --format perfetto|csv|jsonl [--output FILE] [--session-id ID]",
  description:
    "perfetto: Chrome Trace Event JSON for ui.perfetto.dev: each rank is a process ('rank R @ host'),\n" +
    "phases are slices on one lane per recording thread, memory series are counter tracks, and alerts,\n" +
    "collector transitions, first-cause spikes and hidden-memory findings are instants. ts is in\n" +
    "microseconds since the first event; exact nanoseconds are in each slice's args.\n" +
    "csv: one row per record in the reference's columns; metadata is a JSON column (nothing lost).\n" +
    "jsonl: canonical sink lines (keys sorted, byte-identical to what the Python sink writes).\n" +
    "The selection is the one analyze and diagnose use: per-rank sessions of one job are merged\n" +
    "unless --session-id picks one. csv and jsonl stream in storage order.",
  options: {
    format: { type: "string", value: "perfetto|csv|jsonl", description: "Export format (required)." },
    output: { type: "string", short: "o", value: "FILE", description: "Write to FILE instead of stdout." },
    "session-id": { type: "string", value: "ID", description: "Export this session or rank group." },
  },
  examples: [
    "stormlog export ./job-sinks --format perfetto --output trace.json   # open in https://ui.perfetto.dev",
    "stormlog export ./stormlog-sink --format csv --output events.csv",
    "stormlog export ./stormlog-sink --format jsonl --session-id <id> > session.jsonl",
  ],
};

async function writeAll(output: Output, chunks: Iterable<string> | AsyncIterable<string>): Promise<void> {
  // Batch small chunks: one write per ~64 KB.
  let pending = "";
  for await (const chunk of chunks) {
    pending += chunk;
    if (pending.length >= 65536) {
      await output.write(pending);
      pending = "";
    }
  }
  if (pending.length > 0) await output.write(pending);
}

async function* selectedEvents(
  path: string,
  members: ReadonlySet<string>,
  total: number,
  progress: Progress,
): AsyncGenerator<TelemetryEvent> {
  let read = 0;
  for await (const event of iterateTelemetryEvents(path, { onWarning: () => undefined })) {
    if (!members.has(event.session_id)) continue;
    read++;
    if (read % 4096 === 0) progress.update(read, total);
    yield event;
  }
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const args = parseCommandArgs(help, argv);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  const path = resolve(io.cwd, requirePath(help, args));
  const format = choice(help, args, "format", FORMATS);
  const sessionId = stringFlag(args, "session-id");
  const progress = createProgress(io, format === "perfetto" ? "Reading telemetry" : "Exporting");
  try {
    if (format === "perfetto") {
      progress.elapsed();
      const { selection, events } = await loadDistributedEvents(
        path,
        sessionId === undefined ? {} : { sessionId },
      );
      progress.finish();
      const trace = buildPerfettoTrace(events, { sessionId: selection.summary?.session_id ?? null });
      const output = await openOutput(io, stringFlag(args, "output"));
      await writeAll(output, perfettoTraceChunks(trace));
      await output.close();
      return 0;
    }
    const sessions = await summarizeTelemetrySessions(path);
    const selection = selectDistributedSession(sessions, sessionId, path);
    const members = new Set(selection.memberSessionIds);
    let total = 0;
    for (const session of sessions) if (members.has(session.summary.session_id)) total += session.eventCount;
    const events = selectedEvents(path, members, total, progress);
    const output = await openOutput(io, stringFlag(args, "output"));
    if (format === "csv") {
      await writeAll(output, telemetryCsvLines(events));
    } else {
      await writeAll(
        output,
        (async function* () {
          for await (const event of events) yield `${encodeTelemetryRecord(event)}\n`;
        })(),
      );
    }
    await output.close();
    return 0;
  } finally {
    progress.finish();
  }
}

/** `stormlog export`. */
export const exportCommand: Command = { help, run };
