/**
 * The canonical v3 line: the one layout Stormlog and the Python reference write
 * (`json.dumps(record, sort_keys=True)`): every v3 key once, in sorted order, with `", "` and
 * `": "` separators, ASCII only. This table is the layout's one definition: the line encoder's key
 * runs, core's fast decoder (`codec-fast.ts`) and the analysis scan's byte reader take each key's
 * text, order and value form from it.
 */
import { TELEMETRY_V3_FIELDS, type TelemetryField } from "../schema/schema.js";

/** How a field's value is written in a canonical line. */
export type CanonicalValueForm =
  /** A non-negative integer. */
  | "count"
  /** A non-negative integer or `null`. */
  | "nullable-count"
  /** An integer, possibly negative. */
  | "int"
  /** A string with at least one character. */
  | "text"
  /** A string or `null`. */
  | "nullable-string"
  /** A non-empty string or `null`. */
  | "nullable-text"
  /** A JSON object. */
  | "object";

/** One field of the canonical line. */
export interface CanonicalField {
  readonly key: TelemetryField;
  readonly form: CanonicalValueForm;
  /** What precedes the value: `{"key": ` for the first field, `, "key": ` for the others. */
  readonly prefix: string;
}

const FORMS: Readonly<Record<TelemetryField, CanonicalValueForm>> = {
  allocator_active_bytes: "nullable-count",
  allocator_allocated_bytes: "count",
  allocator_change_bytes: "int",
  allocator_inactive_bytes: "nullable-count",
  allocator_reserved_bytes: "count",
  collector: "text",
  context: "nullable-string",
  device_free_bytes: "nullable-count",
  device_id: "int",
  device_total_bytes: "nullable-count",
  device_used_bytes: "count",
  event_type: "text",
  host: "text",
  job_id: "nullable-text",
  local_rank: "count",
  metadata: "object",
  pid: "int",
  rank: "count",
  sampling_interval_ms: "count",
  schema_version: "count",
  session_id: "text",
  timestamp_ns: "count",
  world_size: "count",
};

/** The canonical v3 line's fields, in line order. */
export const CANONICAL_V3_FIELDS: readonly CanonicalField[] = [...TELEMETRY_V3_FIELDS]
  .sort()
  .map((key, i) => ({ key, form: FORMS[key], prefix: `${i === 0 ? "{" : ", "}"${key}": ` }));

/** Each field's prefix in the canonical line, by key. */
export const CANONICAL_PREFIX: Readonly<Record<TelemetryField, string>> = Object.fromEntries(
  CANONICAL_V3_FIELDS.map((field) => [field.key, field.prefix]),
) as Record<TelemetryField, string>;

/** What closes a canonical line. */
export const CANONICAL_END = "}";
