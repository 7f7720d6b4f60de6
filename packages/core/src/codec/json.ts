/**
 * JSON values as Stormlog decodes them: integers beyond 2^53 are `bigint` so that no digit is lost.
 */
export type JsonPrimitive = null | boolean | number | bigint | string;
/** Any JSON value, with `bigint` for integers that do not fit a double exactly. */
export type JsonValue = JsonPrimitive | JsonValue[] | JsonObject;
/** A JSON object. */
export interface JsonObject {
  [key: string]: JsonValue;
}

/**
 * Why `value` (from a caller that bypassed the types) is not a `JsonValue`, naming where from `name`,
 * or null when it is: strings, numbers, bigints, booleans, null, dense arrays and plain objects only. A `Date` or a `Map`
 * would be written as `{}`, `undefined` dropped. Walks without recursion; an object met twice is
 * looked at once (a cycle is the encoder's to refuse).
 */
export function jsonValueProblem(value: unknown, name = "value"): string | null {
  const items: unknown[] = [value];
  const paths: string[] = [name];
  const seen = new Set<object>();
  while (items.length > 0) {
    const item = items.pop();
    const path = paths.pop() as string;
    if (item === null) continue;
    const kind = typeof item;
    if (kind === "string" || kind === "number" || kind === "bigint" || kind === "boolean") continue;
    if (kind !== "object") return `${path} is ${kind === "undefined" ? "undefined" : `a ${kind}`}`;
    const object = item as object;
    if (seen.has(object)) continue;
    seen.add(object);
    if (Array.isArray(object)) {
      for (let i = 0; i < object.length; i++) {
        if (!(i in object)) return `${path}[${i}] is a hole`;
        items.push(object[i]);
        paths.push(`${path}[${i}]`);
      }
      continue;
    }
    const prototype = Object.getPrototypeOf(object) as object | null;
    if (prototype !== Object.prototype && prototype !== null)
      return `${path} is a ${object.constructor?.name ?? "class instance"}, not a plain object`;
    for (const [key, nested] of Object.entries(object)) {
      items.push(nested);
      paths.push(`${path}.${key}`);
    }
  }
  return null;
}
