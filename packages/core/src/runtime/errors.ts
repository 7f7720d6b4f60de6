const STORMLOG_ERROR_MARKER = Symbol.for("stormlog.error");

/**
 * Base class of every error Stormlog throws. Use `StormlogError.isInstance(err)` rather than
 * `instanceof`: it also recognises errors from another copy of the package.
 */
export class StormlogError extends Error {
  readonly [STORMLOG_ERROR_MARKER] = true;
  override readonly name: string = "StormlogError";

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }

  /** True for any Stormlog error, whichever copy of the package created it. */
  static isInstance(error: unknown): error is StormlogError {
    return StormlogError.hasMarker(error, STORMLOG_ERROR_MARKER);
  }

  /**
   * Whether `error` carries `marker` (a `Symbol.for` key its class sets on every instance): the one test
   * behind every error class's `isInstance`, true across copies of a package where `instanceof` is not.
   */
  static hasMarker(error: unknown, marker: symbol): boolean {
    return typeof error === "object" && error !== null && marker in error;
  }
}

/**
 * Text read from input (a key, an id) quoted into an error message: as is when it is a plain name,
 * else as a JSON string literal, so that the message stays one line whatever the input holds.
 */
export function inputText(text: string): string {
  return /^[\w.:@/+-]+$/.test(text) ? text : JSON.stringify(text);
}

/** Where a record came from, for error messages: `file:line`. */
export interface SourceLocation {
  readonly file?: string | undefined;
  readonly line?: number | undefined;
}

export function describeLocation(location: SourceLocation | undefined): string {
  if (!location || (location.file === undefined && location.line === undefined)) return "";
  if (location.line === undefined) return ` (${location.file})`;
  return ` (${location.file ?? "<input>"}:${location.line})`;
}

const VALIDATION_MARKER = Symbol.for("stormlog.error.telemetry_validation");

/** A telemetry record breaks the schema. `field` names the offending field when there is one. */
export class TelemetryValidationError extends StormlogError {
  readonly [VALIDATION_MARKER] = true;
  override readonly name = "TelemetryValidationError";
  readonly field: string | undefined;
  readonly location: SourceLocation | undefined;

  constructor(message: string, options: { field?: string; location?: SourceLocation; cause?: unknown } = {}) {
    super(`${message}${describeLocation(options.location)}`, { cause: options.cause });
    this.field = options.field;
    this.location = options.location;
  }

  static override isInstance(error: unknown): error is TelemetryValidationError {
    return StormlogError.hasMarker(error, VALIDATION_MARKER);
  }
}

const DECODE_MARKER = Symbol.for("stormlog.error.jsonl_decode");

/** A JSONL line is not valid JSON (or not an object). Names the file and line. */
export class JsonlDecodeError extends StormlogError {
  readonly [DECODE_MARKER] = true;
  override readonly name: string = "JsonlDecodeError";
  readonly location: SourceLocation | undefined;

  constructor(message: string, options: { location?: SourceLocation; cause?: unknown } = {}) {
    super(`${message}${describeLocation(options.location)}`, { cause: options.cause });
    this.location = options.location;
  }

  static override isInstance(error: unknown): error is JsonlDecodeError {
    return StormlogError.hasMarker(error, DECODE_MARKER);
  }
}

const BOM_MARKER = Symbol.for("stormlog.error.byte_order_mark");

/**
 * Telemetry text starting with a UTF-8 byte order mark (an editor's "UTF-8 with BOM"). The Python
 * reference reads files as plain UTF-8, where `json.loads` rejects the mark, so Stormlog does too,
 * saying how to remove it.
 */
export class ByteOrderMarkError extends JsonlDecodeError {
  readonly [BOM_MARKER] = true;
  override readonly name = "ByteOrderMarkError";

  constructor(location: SourceLocation) {
    super(
      "A UTF-8 byte order mark (BOM) starts the line; the Python reference rejects it too: " +
        "save the file as UTF-8 without BOM, e.g. tail -c +4 FILE > FIXED (drops the 3 bytes of the mark)",
      { location },
    );
  }

  static override isInstance(error: unknown): error is ByteOrderMarkError {
    return StormlogError.hasMarker(error, BOM_MARKER);
  }
}

const TOO_DEEP_MARKER = Symbol.for("stormlog.error.json_too_deep");

/**
 * JSON nested deeper than the parser takes (`MAX_JSON_DEPTH`): refused where the reference, whose
 * limit is Python's recursion limit, would parse it, rather than recursing past the stack. A
 * `JsonlDecodeError`, so callers that handle those handle this; a final line without newline this
 * deep is refused too, not dropped as cut short, when its brackets close (`isCutShortLine`).
 */
export class JsonTooDeepError extends JsonlDecodeError {
  readonly [TOO_DEEP_MARKER] = true;
  override readonly name = "JsonTooDeepError";

  static override isInstance(error: unknown): error is JsonTooDeepError {
    return StormlogError.hasMarker(error, TOO_DEEP_MARKER);
  }
}

const CONFIG_MARKER = Symbol.for("stormlog.error.invalid_config");

/** An option passed to a Stormlog API is out of range or of the wrong type. */
export class InvalidConfigError extends StormlogError {
  readonly [CONFIG_MARKER] = true;
  override readonly name = "InvalidConfigError";
  readonly option: string;

  constructor(option: string, message: string) {
    super(`Invalid option '${option}': ${message}`);
    this.option = option;
  }

  static override isInstance(error: unknown): error is InvalidConfigError {
    return StormlogError.hasMarker(error, CONFIG_MARKER);
  }
}
