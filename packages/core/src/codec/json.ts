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
