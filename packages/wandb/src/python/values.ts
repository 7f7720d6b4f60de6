/**
 * The Python reference's view of decoded JSON values, reproduced: which values are `int`, `float`,
 * `bool`, `str`, `None`, `list` or `dict`; `str()` and `repr()` of them; `int()` with its errors; and
 * the file-system questions `pathlib` answers (`Path(value).exists()`, `.name`, `==`).
 *
 * Values come from `parseJson` of `@stormlog/core`: integers past 2^53 are `bigint`, and a float token
 * with an integral value (`85.0`) is marked on its container, so `85.0` stays a float here as in Python.
 */
import { statSync } from "node:fs";
import type { JsonObject, JsonValue } from "@stormlog/core";
import { FLOAT_KEYS, pythonFloatRepr, pythonStrip } from "@stormlog/core/internal";

/** A JSON object or array, the containers whose float marks say which integral values were floats. */
export type JsonContainer = JsonObject | JsonValue[];

type FloatMarked = { [FLOAT_KEYS]?: Set<string | number> };

/** True when `container[key]` was written as a float token (`85.0`, `1e3`) or is not integral. */
export function isFloatAt(container: JsonContainer | null | undefined, key: string | number): boolean {
  if (container == null) return false;
  const value = (container as Record<string | number, JsonValue>)[key];
  if (typeof value !== "number") return false;
  if (!Number.isInteger(value)) return true;
  return (container as FloatMarked)[FLOAT_KEYS]?.has(key) ?? false;
}

/** Python's `isinstance(value, int) and not isinstance(value, bool)`. */
export function isPyInt(value: unknown, isFloat = false): value is number | bigint {
  if (typeof value === "bigint") return true;
  return typeof value === "number" && Number.isInteger(value) && !isFloat;
}

/** Python's `isinstance(value, (int, float)) and not isinstance(value, bool)`. */
export function isPyNumber(value: unknown): value is number | bigint {
  return typeof value === "number" || typeof value === "bigint";
}

/** Python's `isinstance(value, Mapping)` for a decoded JSON value. */
export function isPyDict(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Python's truthiness of a decoded JSON value. */
export function pyTruthy(value: unknown): boolean {
  if (value === null || value === undefined || value === false) return false;
  if (typeof value === "number") return value !== 0;
  if (typeof value === "bigint") return value !== 0n;
  if (typeof value === "string") return value.length > 0;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === "object") return Object.keys(value).length > 0;
  return true;
}

/** `dict.get(key)`: own keys only (`__proto__` and `toString` are keys like any other). */
export function pyGet(object: JsonObject, key: string): JsonValue | undefined {
  return Object.hasOwn(object, key) ? object[key] : undefined;
}

function reprString(value: string): string {
  const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of value) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === quote || ch === "\\") out += `\\${ch}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (code >= 0x80 && code <= 0xa0) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (code === 0xad) out += "\\xad";
    else if ((code >= 0xd800 && code <= 0xdfff) || code === 0x2028 || code === 0x2029)
      out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return out + quote;
}

function numberText(value: number | bigint, isFloat: boolean): string {
  if (typeof value === "bigint") return value.toString();
  if (!isFloat && Number.isInteger(value)) {
    return Number.isSafeInteger(value) ? String(value) : BigInt(value).toString();
  }
  return pythonFloatRepr(value);
}

/** Python's `repr()` of a decoded JSON value (`'text'`, `[4, 4]`, `{'a': 1.0}`, `True`, `None`). */
export function pyRepr(value: JsonValue | undefined, isFloat = false): string {
  if (value === null || value === undefined) return "None";
  if (typeof value === "string") return reprString(value);
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "number" || typeof value === "bigint") return numberText(value, isFloat);
  if (Array.isArray(value)) {
    return `[${value.map((item, index) => pyRepr(item, isFloatAt(value, index))).join(", ")}]`;
  }
  const parts = Object.keys(value).map(
    (key) => `${reprString(key)}: ${pyRepr(value[key], isFloatAt(value, key))}`,
  );
  return `{${parts.join(", ")}}`;
}

/** Python's `str()` of a decoded JSON value: strings as they are, everything else as `repr()`. */
export function pyStr(value: JsonValue | undefined, isFloat = false): string {
  return typeof value === "string" ? value : pyRepr(value, isFloat);
}

/** `str(container[key])`, knowing whether the value was a float. */
export function pyStrAt(container: JsonContainer, key: string | number): string {
  return pyStr((container as Record<string | number, JsonValue>)[key], isFloatAt(container, key));
}

/** An exception the reference would raise, by its Python class name. */
export class PythonError extends Error {
  override readonly name = "PythonError";
  constructor(
    readonly pythonType: "ValueError" | "TypeError" | "OverflowError",
    message: string,
  ) {
    super(`${pythonType}: ${message}`);
  }
}

const PY_INT_TEXT = /^[+-]?\d(?:_?\d)*$/;

/** Python's `int(value)` of a decoded JSON value, raising what Python raises. */
export function pyInt(value: JsonValue | undefined): bigint {
  if (typeof value === "boolean") return value ? 1n : 0n;
  if (typeof value === "bigint") return value;
  if (typeof value === "number") {
    if (Number.isNaN(value)) throw new PythonError("ValueError", "cannot convert float NaN to integer");
    if (!Number.isFinite(value)) {
      throw new PythonError("OverflowError", "cannot convert float infinity to integer");
    }
    return BigInt(Math.trunc(value));
  }
  if (typeof value === "string") {
    const text = pythonStrip(value);
    if (!PY_INT_TEXT.test(text)) {
      throw new PythonError("ValueError", `invalid literal for int() with base 10: ${reprString(value)}`);
    }
    return BigInt(text.replaceAll("_", ""));
  }
  const typeName =
    value === null || value === undefined ? "NoneType" : Array.isArray(value) ? "list" : "dict";
  throw new PythonError(
    "TypeError",
    `int() argument must be a string, a bytes-like object or a real number, not '${typeName}'`,
  );
}

/** A `bigint` as a JSON number when it fits a double exactly, else as itself. */
export function intValue(value: bigint): number | bigint {
  return value >= -BigInt(Number.MAX_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(value)
    : value;
}

/** Python's `html.escape(text)` (quote=True). */
export function htmlEscape(text: string): string {
  return text
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#x27;");
}

/**
 * `pathlib.PurePosixPath(value)` as text: `.` components and repeated or trailing slashes dropped,
 * `..` kept; the empty path is `.`. Two paths are equal in Python when these texts are.
 */
export function purePath(value: string): string {
  const absolute = value.startsWith("/");
  const parts = value.split("/").filter((part) => part !== "" && part !== ".");
  const joined = parts.join("/");
  if (absolute) return `/${joined}`;
  return joined === "" ? "." : joined;
}

/** `Path(value).name`. */
export function pathName(value: string): string {
  const pure = purePath(value);
  if (pure === "." || pure === "/") return "";
  return pure.slice(pure.lastIndexOf("/") + 1);
}

/** `Path(value).parent`. */
export function pathParent(value: string): string {
  const pure = purePath(value);
  const slash = pure.lastIndexOf("/");
  if (pure === "." || pure === "/") return pure;
  if (slash < 0) return ".";
  return slash === 0 ? "/" : pure.slice(0, slash);
}

function statOf(value: string): ReturnType<typeof statSync> | undefined {
  try {
    return statSync(purePath(value));
  } catch {
    return undefined;
  }
}

/** `Path(value)` when it exists and is a file (`coerce_existing_file`), else null. */
export function existingFile(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return statOf(value)?.isFile() ? value : null;
}

/** `Path(value)` when it exists and is a folder (`coerce_existing_dir`), else null. */
export function existingDir(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return statOf(value)?.isDirectory() ? value : null;
}

/** `Path(value).exists()`. */
export function pathExists(value: string): boolean {
  return statOf(value) !== undefined;
}
