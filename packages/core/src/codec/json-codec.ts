import { JsonlDecodeError, JsonTooDeepError, type SourceLocation } from "../runtime/errors.js";
import { pythonFloatRepr } from "../text/pyrepr.js";
import type { JsonObject, JsonValue } from "./json.js";

/**
 * Keys of an object (or indices of an array) whose value was written as a float token that holds an
 * integer (`85.0`, `1e3`). JS numbers cannot tell `85.0` from `85`; this mark lets the encoder write
 * the token back as Python would, so decode then encode stays byte-identical.
 */
export const FLOAT_KEYS: unique symbol = Symbol.for("stormlog.json.float_keys");

type FloatMarked = { [FLOAT_KEYS]?: Set<string | number> };

/** Marks `key` of `container` as a float, so an integral value is still written as `85.0`. */
export function markFloat(container: JsonObject | JsonValue[], key: string | number): void {
  const marked = container as FloatMarked;
  let keys = marked[FLOAT_KEYS];
  if (!keys) {
    keys = new Set();
    Object.defineProperty(container, FLOAT_KEYS, { value: keys, enumerable: false });
  }
  keys.add(key);
}

/**
 * Sets `object[key] = value` as data, `__proto__` included: assigned, that key would replace the
 * object's prototype instead (JSON.parse and Python's json.loads keep it as a key). For every copy
 * of keys read from input.
 */
export function setJsonMember(object: JsonObject, key: string, value: JsonValue): void {
  if (key === "__proto__")
    Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
  else object[key] = value;
}

/** A number token as the lossless parser read it. */
export interface NumberToken {
  value: number | bigint;
  /** The token had a fraction or exponent. */
  isFloat: boolean;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * Arrays and objects nested deeper than this are refused: telemetry never nests past a handful of
 * levels, and the parser (like every consumer of the value) recurses once per level.
 */
export const MAX_JSON_DEPTH = 512;

/** Space, tab, line feed and carriage return: the whitespace JSON allows around values. */
export function isJsonWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

/** The 1-based line of each position of `text` (`positions` in ascending order), in one pass. */
export function linesAt(text: string, positions: readonly number[]): number[] {
  const lines: number[] = [];
  let line = 1;
  let at = text.indexOf("\n");
  for (const position of positions) {
    while (at !== -1 && at < position) {
      line++;
      at = text.indexOf("\n", at + 1);
    }
    lines.push(line);
  }
  return lines;
}

/**
 * A small, exact JSON parser: integers beyond 2^53 become `bigint`, integral float tokens are marked
 * (see `FLOAT_KEYS`), and Python's `NaN`/`Infinity` tokens are accepted as `json.loads` accepts them.
 */
export class LosslessJsonParser {
  pos = 0;
  /** Set by `readNumber`: whether the last number token had a fraction or exponent. */
  lastNumberWasFloat = false;
  /** Arrays and objects open around the position. */
  depth = 0;

  constructor(
    readonly text: string,
    readonly location?: SourceLocation,
  ) {}

  fail(message: string, type: typeof JsonlDecodeError = JsonlDecodeError): never {
    // A caller may retry from another position (the fast decoder falls back to the full one).
    this.depth = 0;
    let location = this.location;
    let column = this.pos + 1;
    if (location?.file !== undefined && location.line === undefined) {
      // A whole document (not one JSONL line): its line and the column in that line.
      const end = Math.min(this.pos, this.text.length);
      location = { ...location, line: linesAt(this.text, [end])[0] };
      const lineStart = end === 0 ? 0 : this.text.lastIndexOf("\n", end - 1) + 1;
      column = this.pos - lineStart + 1;
    }
    throw new type(`Invalid JSON at column ${column}: ${message}`, { location });
  }

  failTooDeep(): never {
    return this.fail(
      `arrays or objects nested deeper than ${MAX_JSON_DEPTH} levels; telemetry never nests so deep`,
      JsonTooDeepError,
    );
  }

  skipWhitespace(): void {
    const text = this.text;
    let pos = this.pos;
    for (;;) {
      const c = text.charCodeAt(pos);
      if (isJsonWhitespace(c)) pos++;
      else break;
    }
    this.pos = pos;
  }

  readValue(): JsonValue {
    this.skipWhitespace();
    const c = this.text.charCodeAt(this.pos);
    switch (c) {
      case 0x7b /* { */:
        return this.readObject();
      case 0x5b /* [ */:
        return this.readArray();
      case 0x22 /* " */:
        return this.readString();
      case 0x74 /* t */:
        return this.readLiteral("true", true);
      case 0x66 /* f */:
        return this.readLiteral("false", false);
      case 0x6e /* n */:
        return this.readLiteral("null", null);
      case 0x4e /* N */:
        return this.readLiteral("NaN", Number.NaN);
      case 0x49 /* I */:
        return this.readLiteral("Infinity", Number.POSITIVE_INFINITY);
      default:
        if (c === 0x2d /* - */ && this.text.startsWith("-Infinity", this.pos)) {
          return this.readLiteral("-Infinity", Number.NEGATIVE_INFINITY);
        }
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.readNumber();
        if (Number.isNaN(c)) this.fail("unexpected end of input");
        return this.fail(`unexpected character ${JSON.stringify(this.text[this.pos])}`);
    }
  }

  readLiteral<T extends JsonValue>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail(`expected ${word}`);
    this.pos += word.length;
    return value;
  }

  readObject(): JsonObject {
    const text = this.text;
    const result: JsonObject = {};
    this.pos++; // {
    if (++this.depth > MAX_JSON_DEPTH) this.failTooDeep();
    this.skipWhitespace();
    if (text.charCodeAt(this.pos) === 0x7d) {
      this.pos++;
      this.depth--;
      return result;
    }
    for (;;) {
      this.skipWhitespace();
      if (text.charCodeAt(this.pos) !== 0x22) this.fail("expected a string key");
      const key = this.readString();
      this.skipWhitespace();
      if (text.charCodeAt(this.pos) !== 0x3a) this.fail("expected ':'");
      this.pos++;
      const value = this.readValue();
      if (this.lastNumberWasFloat && typeof value === "number") {
        this.lastNumberWasFloat = false;
        if (Number.isInteger(value)) markFloat(result, key);
      }
      // Python keeps the last of duplicate keys; so does plain assignment.
      setJsonMember(result, key, value);
      this.skipWhitespace();
      const c = text.charCodeAt(this.pos++);
      if (c === 0x2c) continue;
      if (c === 0x7d) {
        this.depth--;
        return result;
      }
      this.pos--;
      this.fail("expected ',' or '}'");
    }
  }

  readArray(): JsonValue[] {
    const text = this.text;
    const result: JsonValue[] = [];
    this.pos++; // [
    if (++this.depth > MAX_JSON_DEPTH) this.failTooDeep();
    this.skipWhitespace();
    if (text.charCodeAt(this.pos) === 0x5d) {
      this.pos++;
      this.depth--;
      return result;
    }
    for (;;) {
      const value = this.readValue();
      if (this.lastNumberWasFloat && typeof value === "number") {
        this.lastNumberWasFloat = false;
        if (Number.isInteger(value)) markFloat(result, result.length);
      }
      result.push(value);
      this.skipWhitespace();
      const c = text.charCodeAt(this.pos++);
      if (c === 0x2c) continue;
      if (c === 0x5d) {
        this.depth--;
        return result;
      }
      this.pos--;
      this.fail("expected ',' or ']'");
    }
  }

  readString(): string {
    const text = this.text;
    const start = this.pos + 1;
    let pos = start;
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c === 0x22) {
        this.pos = pos + 1;
        return text.slice(start, pos);
      }
      if (c === 0x5c /* \ */) return this.readEscapedString(start);
      if (c < 0x20) {
        this.pos = pos;
        this.fail("control character in string");
      }
      if (pos >= text.length) {
        this.pos = pos;
        this.fail("unterminated string");
      }
      pos++;
    }
  }

  /** Strings with escapes are rare in telemetry: hand the exact slice to the native parser. */
  readEscapedString(start: number): string {
    const text = this.text;
    let pos = start;
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c === 0x5c) pos += 2;
      else if (c === 0x22) break;
      else if (Number.isNaN(c)) {
        this.pos = pos;
        this.fail("unterminated string");
      } else pos++;
    }
    this.pos = pos + 1;
    try {
      return JSON.parse(text.slice(start - 1, pos + 1)) as string;
    } catch (error) {
      this.pos = start;
      return this.fail(`invalid string escape (${(error as Error).message})`);
    }
  }

  /** Reads a number token; integers stay exact (`bigint` above 2^53). */
  readNumber(): number | bigint {
    const text = this.text;
    const start = this.pos;
    let pos = start;
    if (text.charCodeAt(pos) === 0x2d) pos++;
    const digitsStart = pos;
    let c = text.charCodeAt(pos);
    if (c === 0x30) {
      pos++;
    } else if (c >= 0x31 && c <= 0x39) {
      do c = text.charCodeAt(++pos);
      while (c >= 0x30 && c <= 0x39);
    } else {
      this.pos = pos;
      this.fail("invalid number");
    }
    c = text.charCodeAt(pos);
    let isFloat = false;
    if (c === 0x2e /* . */) {
      isFloat = true;
      c = text.charCodeAt(++pos);
      if (!(c >= 0x30 && c <= 0x39)) {
        this.pos = pos;
        this.fail("invalid number");
      }
      do c = text.charCodeAt(++pos);
      while (c >= 0x30 && c <= 0x39);
    }
    if (c === 0x65 || c === 0x45 /* e E */) {
      isFloat = true;
      c = text.charCodeAt(++pos);
      if (c === 0x2b || c === 0x2d) c = text.charCodeAt(++pos);
      if (!(c >= 0x30 && c <= 0x39)) {
        this.pos = pos;
        this.fail("invalid number");
      }
      do c = text.charCodeAt(++pos);
      while (c >= 0x30 && c <= 0x39);
    }
    this.pos = pos;
    this.lastNumberWasFloat = isFloat;
    const token = text.slice(start, pos);
    if (isFloat) return Number(token);
    // Up to 15 digits always fit a double exactly.
    if (pos - digitsStart <= 15) return Number(token);
    const value = Number(token);
    if (value <= MAX_SAFE && value >= -MAX_SAFE) return value;
    return BigInt(token);
  }

  expectEnd(): void {
    this.skipWhitespace();
    if (this.pos !== this.text.length) this.fail("unexpected data after the JSON value");
  }
}

/** Parses JSON without losing integer digits (`bigint` above 2^53) or the float-ness of `85.0`. */
export function parseJson(text: string, location?: SourceLocation): JsonValue {
  const parser = new LosslessJsonParser(text, location);
  const value = parser.readValue();
  parser.expectEnd();
  return value;
}

// Python json.dumps(ensure_ascii=True) escapes everything outside printable ASCII; control characters
// are exactly what these patterns must find.
// biome-ignore lint/suspicious/noControlCharactersInRegex: see above
const NEEDS_ESCAPE = /["\\\u0000-\u001f\u007f-\uffff]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: see above
const ESCAPE_ALL = /["\\\u0000-\u001f\u007f-\uffff]/g;
const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
  "\b": "\\b",
  "\f": "\\f",
};

function escapeChar(ch: string): string {
  return SHORT_ESCAPES[ch] ?? `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/** A JSON string literal exactly as Python's `json.dumps` (ensure_ascii) writes it. */
export function pythonJsonString(value: string): string {
  if (!NEEDS_ESCAPE.test(value)) return `"${value}"`;
  return `"${value.replace(ESCAPE_ALL, escapeChar)}"`;
}

/** A number as Python's `json.dumps` writes it: ints as digits, floats with `repr`. */
export function pythonJsonNumber(value: number, isFloat: boolean): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Number.POSITIVE_INFINITY) return "Infinity";
  if (value === Number.NEGATIVE_INFINITY) return "-Infinity";
  if (!isFloat && Number.isInteger(value)) {
    // Beyond 2^53 a JS number is no longer an exact int; write it as Python would write the float.
    return Math.abs(value) <= MAX_SAFE ? String(value) : pythonFloatRepr(value);
  }
  return pythonFloatRepr(value);
}

function compareCodePoints(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Python sorts keys by code point; JS `<` compares UTF-16 units, which differs only past U+FFFF. */
function sortKeysLikePython(keys: string[]): string[] {
  if (keys.some((key) => /[\ud800-\udfff]/.test(key))) {
    return keys.sort((a, b) => {
      const left = Array.from(a);
      const right = Array.from(b);
      for (let i = 0; i < Math.min(left.length, right.length); i++) {
        const diff = (left[i]!.codePointAt(0) ?? 0) - (right[i]!.codePointAt(0) ?? 0);
        if (diff !== 0) return diff;
      }
      return left.length - right.length;
    });
  }
  return keys.sort(compareCodePoints);
}

/** Options of `stringifyJson`, named after Python's `json.dumps` arguments. */
export interface StringifyOptions {
  /** Sort object keys (Python `sort_keys=True`). */
  readonly sortKeys?: boolean;
  /** Pretty-print with this many spaces (Python `indent=N`); compact one-line output otherwise. */
  readonly indent?: number;
}

/**
 * Serialises like Python's `json.dumps(value, sort_keys=..., indent=...)`: `", "`/`": "` separators
 * on one line (`","` and newlines when indented), ASCII-only escaping, float `repr`, exact `bigint`s.
 */
export function stringifyJson(value: JsonValue, options: StringifyOptions = {}): string {
  return writeValue(value, false, options.sortKeys === true, options.indent, "");
}

function writeValue(
  value: JsonValue,
  isFloat: boolean,
  sortKeys: boolean,
  indent: number | undefined,
  currentIndent: string,
): string {
  switch (typeof value) {
    case "string":
      return pythonJsonString(value);
    case "number":
      return pythonJsonNumber(value, isFloat);
    case "bigint":
      return value.toString();
    case "boolean":
      return value ? "true" : "false";
    case "object":
      if (value === null) return "null";
      return Array.isArray(value)
        ? writeArray(value, sortKeys, indent, currentIndent)
        : writeObject(value, sortKeys, indent, currentIndent);
    default:
      throw new TypeError(`Cannot serialise a ${typeof value} as JSON`);
  }
}

function writeArray(
  value: JsonValue[],
  sortKeys: boolean,
  indent: number | undefined,
  current: string,
): string {
  if (value.length === 0) return "[]";
  const inner = indent === undefined ? current : current + " ".repeat(indent);
  const separator = indent === undefined ? ", " : `,\n${inner}`;
  const marks = (value as FloatMarked)[FLOAT_KEYS];
  let out = indent === undefined ? "[" : `[\n${inner}`;
  for (let index = 0; index < value.length; index++) {
    if (index > 0) out += separator;
    out += writeValue(value[index] as JsonValue, marks?.has(index) === true, sortKeys, indent, inner);
  }
  return indent === undefined ? `${out}]` : `${out}\n${current}]`;
}

// Metadata keys repeat on every record (phase_scope, collector health): quote each once.
const quotedKeys = new Map<string, string>();
function quotedKey(key: string): string {
  let quoted = quotedKeys.get(key);
  if (quoted === undefined) {
    quoted = pythonJsonString(key);
    if (quotedKeys.size < 4096) quotedKeys.set(key, quoted);
  }
  return quoted;
}

function isSortedLikePython(keys: string[]): boolean {
  for (let i = 1; i < keys.length; i++) {
    if ((keys[i - 1] as string) >= (keys[i] as string)) return false;
  }
  return true;
}

function writeObject(
  value: JsonObject,
  sortKeys: boolean,
  indent: number | undefined,
  current: string,
): string {
  let keys = Object.keys(value);
  if (keys.length === 0) return "{}";
  // Records decoded from Python sinks are already sorted: skip the sort.
  if (sortKeys && !isSortedLikePython(keys)) keys = sortKeysLikePython(keys);
  const inner = indent === undefined ? current : current + " ".repeat(indent);
  const separator = indent === undefined ? ", " : `,\n${inner}`;
  // Read the float marks once per object: a missing symbol property is a slow lookup.
  const marks = (value as FloatMarked)[FLOAT_KEYS];
  let out = "";
  for (const key of keys) {
    const item = value[key];
    if (item === undefined) continue;
    if (out !== "") out += separator;
    out += `${quotedKey(key)}: ${writeValue(item, marks?.has(key) === true, sortKeys, indent, inner)}`;
  }
  if (out === "") return "{}";
  return indent === undefined ? `{${out}}` : `{\n${inner}${out}\n${current}}`;
}
