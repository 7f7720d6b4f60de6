/**
 * A `stormlog analyze` whose rendering the input's index already holds, for the input as it is now
 * (stored by the analysis, vouched for by the index's snapshot of the input), printed by the launcher
 * without loading the CLI's bundle: on a warm run, reading and compiling that bundle took ~50 of
 * ~110 ms. Anything else (another command, `--help`, a usage error, nothing stored, an output that
 * could not be written) is left to the CLI, which then does it all and reports what went wrong.
 */
import { readStoredRendering } from "@stormlog/analysis/internal";
import { type AnalyzeRequest, readAnalyzeRequest } from "./commands/analyze-request.js";
import { type CliIo, resolveIo, whenOutputFlushed, writeOutput } from "./io.js";

/**
 * Prints the stored answer to `argv` (the command line after the executable), resolving once it is
 * written out: true when it did, false when the CLI is to run the command.
 */
export async function printStoredAnswer(argv: readonly string[], io: CliIo = resolveIo()): Promise<boolean> {
  if (argv[0] !== "analyze") return false;
  let request: AnalyzeRequest | "help";
  let text: string | null;
  try {
    request = readAnalyzeRequest(argv.slice(1), io);
    if (request === "help") return false;
    text = readStoredRendering(request.path, request);
  } catch {
    return false;
  }
  if (text === null) return false;
  try {
    await writeOutput(io, request.file, text);
  } catch {
    // Written again by the CLI, which names the error.
    return false;
  }
  await new Promise<void>((resolve) => whenOutputFlushed(resolve));
  return true;
}
