import type { CommandHelp } from "../args.js";
import type { CliIo } from "../io.js";

/** A subcommand: its help and what it does. Resolves to the exit code. */
export interface Command {
  readonly help: CommandHelp;
  run(argv: readonly string[], io: CliIo): Promise<number>;
}
