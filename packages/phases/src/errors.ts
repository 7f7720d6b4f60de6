import { StormlogError } from "@stormlog/core";

const PROTOCOL_MARKER = Symbol.for("stormlog.error.phase_protocol");

/**
 * A phase scope was closed out of order: not the innermost open phase of its thread (or async task),
 * from another task than the one that opened it, or unknown to the running tracker. The message starts
 * with the Python reference's wording and then says what to change.
 */
export class PhaseProtocolError extends StormlogError {
  readonly [PROTOCOL_MARKER] = true;
  override readonly name = "PhaseProtocolError";

  static override isInstance(error: unknown): error is PhaseProtocolError {
    return StormlogError.hasMarker(error, PROTOCOL_MARKER);
  }
}

const NAME_MARKER = Symbol.for("stormlog.error.invalid_phase_name");

/** A phase name is empty or blank (the reference's `phase name must be a non-empty string`). */
export class InvalidPhaseNameError extends StormlogError {
  readonly [NAME_MARKER] = true;
  override readonly name = "InvalidPhaseNameError";

  constructor(received: unknown) {
    super(
      `phase name must be a non-empty string (got ${JSON.stringify(String(received))}). ` +
        'Pass a short label such as "forward"; nesting builds the path ("train / forward").',
    );
  }

  static override isInstance(error: unknown): error is InvalidPhaseNameError {
    return StormlogError.hasMarker(error, NAME_MARKER);
  }
}
