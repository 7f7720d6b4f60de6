/**
 * A finished report stored in the index and read back identical: written with core's lossless
 * `stringifyJson` (floats stay floats), read with `parseJson`; every `*_ns` value is a `bigint` in
 * the report, so those are turned back into bigints.
 */
import { type JsonObject, type JsonValue, parseJson, stringifyJson } from "@stormlog/core";
import type { AnalysisReport } from "../report/types.js";

const FORMAT = "stormlog.analysis_report";

/** Serializes `report` (its `index` usage left out), stamped with the state it describes. */
export function serializeReport(report: AnalysisReport, stamp: string): string {
  const { index: _index, ...rest } = report;
  return stringifyJson({ format: FORMAT, stamp, report: rest as unknown as JsonObject });
}

function revive(value: JsonValue, exact: boolean): JsonValue {
  if (exact && typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = revive(value[i]!, false);
    return value;
  }
  if (typeof value === "object" && value !== null) {
    for (const key of Object.keys(value)) value[key] = revive(value[key]!, exact || key.endsWith("_ns"));
    return value;
  }
  return value;
}

/**
 * The object stored under `key` in an index entry written as `{format, stamp, [key]: ...}` by
 * `stringifyJson`, or null when the text is not one, or is another format's or another state's.
 */
export function readStoredObject(
  text: string,
  format: string,
  stamp: string,
  key: string,
): JsonObject | null {
  let payload: JsonValue;
  try {
    payload = parseJson(text);
  } catch {
    return null;
  }
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return null;
  if (payload.format !== format || payload.stamp !== stamp) return null;
  const value = payload[key];
  return typeof value === "object" && value !== null && !Array.isArray(value) ? value : null;
}

/** The stored report, or null when the text is not one or describes another state. */
export function deserializeReport(text: string, stamp: string): AnalysisReport | null {
  const report = readStoredObject(text, FORMAT, stamp, "report");
  if (report === null) return null;
  revive(report, false);
  const out = report as unknown as AnalysisReport;
  if (out.cross_rank_analysis === undefined) out.cross_rank_analysis = null;
  out.index = null;
  return out;
}
