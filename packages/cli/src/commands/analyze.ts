import { formatCommandHelp } from "../args.js";
import { type CliIo, createProgress, type Progress, writeOutput } from "../io.js";
import { analyzeHelp, readAnalyzeRequest } from "./analyze-request.js";
import type { Command } from "./command.js";

/** `analyzeTelemetry` reports `{ phase: "scan", done, total }` in bytes while it reads segments. */
function progressReporter(
  progress: Progress,
): (report: { phase: string; done: number; total: number }) => void {
  return ({ phase, done, total }) => {
    if (phase === "scan") progress.update(Math.round(done / 1048576), Math.round(total / 1048576), "MB");
  };
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const request = readAnalyzeRequest(argv, io);
  if (request === "help") {
    io.stdout.write(formatCommandHelp(analyzeHelp));
    return 0;
  }
  const { renderTelemetryAnalysis } = await import("@stormlog/analysis");
  const progress = createProgress(io, "Analyzing");
  let text: string;
  try {
    text = await renderTelemetryAnalysis(request.path, {
      format: request.format,
      color: request.color,
      ...(request.sessionId === undefined ? {} : { sessionId: request.sessionId }),
      index: request.index,
      ...(request.cacheDir === undefined ? {} : { cacheDir: request.cacheDir }),
      onProgress: progressReporter(progress),
    });
  } finally {
    progress.finish();
  }
  await writeOutput(io, request.file, text);
  return 0;
}

/** `stormlog analyze`. */
export const analyzeCommand: Command = { help: analyzeHelp, run };
