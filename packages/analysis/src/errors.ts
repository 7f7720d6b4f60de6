import { StormlogError } from "@stormlog/core";

const TIME_RANGE_MARKER = Symbol.for("stormlog.error.analysis_time_range");

/**
 * One rank of one session holds timestamps more than 2^53 ns (about 104 days) apart, beyond what
 * the analysis stores exactly. A real capture never does: the input mixes unrelated records under
 * one session id; analyse them separately.
 */
export class TimeRangeError extends StormlogError {
  readonly [TIME_RANGE_MARKER] = true;
  override readonly name = "TimeRangeError";

  constructor(sessionId: string, rank: number) {
    super(
      `Session ${sessionId} rank ${rank} has timestamps more than 104 days (2^53 ns) apart: the records cannot ` +
        "come from one capture; split the input or analyse the sessions separately (sessionId)",
    );
  }

  static override isInstance(error: unknown): error is TimeRangeError {
    return typeof error === "object" && error !== null && TIME_RANGE_MARKER in error;
  }
}
