import { StormlogError } from "@stormlog/core";

const USAGE_MARKER = Symbol.for("stormlog.error.cli_usage");

/**
 * The command line was wrong (unknown flag, missing argument, bad value). The CLI prints the
 * message and the hint on one line and exits with code 1.
 */
export class CliUsageError extends StormlogError {
  readonly [USAGE_MARKER] = true;
  override readonly name = "CliUsageError";
  /** What to do instead, e.g. `run 'stormlog analyze --help'`. */
  readonly hint: string | undefined;

  constructor(message: string, hint?: string) {
    super(message);
    this.hint = hint;
  }

  static override isInstance(error: unknown): error is CliUsageError {
    return StormlogError.hasMarker(error, USAGE_MARKER);
  }
}
