import { StormlogError } from "@stormlog/core";
import { inputText } from "@stormlog/core/internal";

const TIME_RANGE_MARKER = Symbol.for("stormlog.error.analysis_time_range");

/**
 * One rank of one session holds timestamps 2^53 ns (about 104 days) or more apart, beyond what
 * the analysis stores exactly. A real capture never does: the input mixes unrelated records under
 * one session id; analyse them separately. `where` names the file (and line) where the span broke.
 */
export class TimeRangeError extends StormlogError {
  readonly [TIME_RANGE_MARKER] = true;
  override readonly name = "TimeRangeError";
  readonly sessionId: string;
  readonly rank: number;
  /** The file and line (`file:line`), or the files, holding the records too far apart. */
  readonly where: string | undefined;

  constructor(sessionId: string, rank: number, where?: string) {
    super(
      `Session ${inputText(sessionId)} rank ${rank} has timestamps 2^53 ns (about 104 days) or more apart` +
        `${where === undefined ? "" : ` (${where})`}: the records cannot come from one capture; split ` +
        "the input or analyse its sessions one at a time (--session-id on the command line, sessionId in the API)",
    );
    this.sessionId = sessionId;
    this.rank = rank;
    this.where = where;
  }

  /** `error` naming `where` when it is a `TimeRangeError` that names no place yet; else `error`. */
  static locate(error: unknown, where: string): unknown {
    if (!TimeRangeError.isInstance(error) || error.where !== undefined) return error;
    return new TimeRangeError(error.sessionId, error.rank, where);
  }

  static override isInstance(error: unknown): error is TimeRangeError {
    return StormlogError.hasMarker(error, TIME_RANGE_MARKER);
  }
}
