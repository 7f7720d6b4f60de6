import { StormlogError } from "@stormlog/core";

const SESSION_MISMATCH_MARKER = Symbol.for("stormlog.error.sink_session_mismatch");

/**
 * A record was appended whose `session_id` is not the sink's active session. Segments never mix
 * sessions: close the active session first (`await sink.close()`), or append records of the active one.
 */
export class SinkSessionMismatchError extends StormlogError {
  readonly [SESSION_MISMATCH_MARKER] = true;
  override readonly name = "SinkSessionMismatchError";
  readonly activeSessionId: string;
  readonly recordSessionId: unknown;

  constructor(activeSessionId: string, recordSessionId: unknown) {
    super(
      `Record session_id ${JSON.stringify(recordSessionId)} does not match the sink's active session ` +
        `${JSON.stringify(activeSessionId)}: close the active session (await sink.close()) before appending ` +
        "records of another session, or use one sink per session",
    );
    this.activeSessionId = activeSessionId;
    this.recordSessionId = recordSessionId;
  }

  static override isInstance(error: unknown): error is SinkSessionMismatchError {
    return typeof error === "object" && error !== null && SESSION_MISMATCH_MARKER in error;
  }
}

const SESSION_NOT_FOUND_MARKER = Symbol.for("stormlog.error.session_not_found");

/** A requested session id is not among the sessions of the input. Lists the ids that exist. */
export class SessionNotFoundError extends StormlogError {
  readonly [SESSION_NOT_FOUND_MARKER] = true;
  override readonly name = "SessionNotFoundError";
  readonly sessionId: string;
  readonly availableSessionIds: readonly string[];

  constructor(sessionId: string, availableSessionIds: readonly string[], source: string) {
    const listed =
      availableSessionIds.length === 0
        ? "it holds no sessions"
        : `sessions there: ${availableSessionIds.join(", ")}`;
    super(
      `Requested session_id not found: ${sessionId} in ${source} (${listed}); pass one of the listed ids`,
    );
    this.sessionId = sessionId;
    this.availableSessionIds = availableSessionIds;
  }

  static override isInstance(error: unknown): error is SessionNotFoundError {
    return typeof error === "object" && error !== null && SESSION_NOT_FOUND_MARKER in error;
  }
}

const SOURCE_MARKER = Symbol.for("stormlog.error.telemetry_source");

/** A path given to a loader is missing or holds no telemetry this package can read. */
export class TelemetrySourceError extends StormlogError {
  readonly [SOURCE_MARKER] = true;
  override readonly name = "TelemetrySourceError";
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(`${message} (${path})`, options);
    this.path = path;
  }

  static override isInstance(error: unknown): error is TelemetrySourceError {
    return typeof error === "object" && error !== null && SOURCE_MARKER in error;
  }
}
