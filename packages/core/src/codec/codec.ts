import { ByteOrderMarkError, type SourceLocation, TelemetryValidationError } from "../runtime/errors.js";
import { counterText } from "../schema/exact-counters.js";
import { INTEGER_TELEMETRY_FIELDS, TELEMETRY_V3_FIELDS, type TelemetryRecord } from "../schema/schema.js";
import { validateTelemetryRecord } from "../schema/validate.js";
import { decodeCanonicalV3 } from "./codec-fast.js";
import type { JsonObject } from "./json.js";
import { LosslessJsonParser, pythonJsonString, setJsonMember, stringifyJson } from "./json-codec.js";
import { isRecorderPhaseScope } from "./phase-scope-shape.js";

/** Options of `decodeTelemetryLine`. */
export interface DecodeOptions {
  /**
   * Strict (default): an integer field written as `1.0` or `1e3` is rejected, as the Python reference
   * rejects it. Lenient: accepted when integral, and reported through `onNote`.
   */
  readonly strict?: boolean;
  /** Named in error messages (`file:line`). */
  readonly location?: SourceLocation;
  /** Receives notes about input accepted only in lenient mode. */
  readonly onNote?: (note: string) => void;
}

const INTEGER_FIELDS: ReadonlySet<string> = new Set(INTEGER_TELEMETRY_FIELDS);

/** Canonical order of a sink line, with the quoted key as it appears in the text. */
const SORTED_FIELDS = [...TELEMETRY_V3_FIELDS].sort();
const QUOTED_SORTED_FIELDS = SORTED_FIELDS.map((field) => `"${field}"`);

/**
 * A line that does not start an object: a whole JSON value of another kind is a record that is no
 * object (`TelemetryValidationError`, which a final line without newline is not forgiven, as the
 * reference raises there); anything else is not JSON (a decode error, which such a line is).
 */
function notAnObject(parser: LosslessJsonParser, options: DecodeOptions): never {
  const start = parser.pos;
  let value: unknown;
  try {
    value = parser.readValue();
    parser.expectEnd();
  } catch {
    parser.pos = start;
    parser.fail("a telemetry line must be a JSON object");
  }
  return validateTelemetryRecord(value, options.location ? { location: options.location } : {}) as never;
}

/** Reads the top-level object, matching keys against the canonical order first (interned, no slicing). */
function readRecordObject(parser: LosslessJsonParser, options: DecodeOptions): Record<string, unknown> {
  const text = parser.text;
  parser.skipWhitespace();
  if (text.charCodeAt(parser.pos) !== 0x7b) {
    if (parser.pos >= text.length) parser.fail("empty line");
    // A file saved as "UTF-8 with BOM": said as such, not as a line that is no object.
    if (text.charCodeAt(parser.pos) === 0xfeff) throw new ByteOrderMarkError(options.location ?? {});
    notAnObject(parser, options);
  }
  parser.pos++;
  const record: JsonObject = {};
  parser.skipWhitespace();
  if (text.charCodeAt(parser.pos) === 0x7d) {
    parser.pos++;
    return record;
  }
  let expected = 0;
  for (;;) {
    parser.skipWhitespace();
    let key: string;
    // Python's sink writes keys sorted; v2 lines lack session_id, so also try the one after it.
    if (expected < SORTED_FIELDS.length && text.startsWith(QUOTED_SORTED_FIELDS[expected]!, parser.pos)) {
      key = SORTED_FIELDS[expected]!;
      parser.pos += key.length + 2;
      expected++;
    } else if (
      expected + 1 < SORTED_FIELDS.length &&
      text.startsWith(QUOTED_SORTED_FIELDS[expected + 1]!, parser.pos)
    ) {
      key = SORTED_FIELDS[expected + 1]!;
      parser.pos += key.length + 2;
      expected += 2;
    } else {
      if (text.charCodeAt(parser.pos) !== 0x22) parser.fail("expected a string key");
      key = parser.readString();
    }
    parser.skipWhitespace();
    if (text.charCodeAt(parser.pos) !== 0x3a) parser.fail("expected ':'");
    parser.pos++;
    parser.lastNumberWasFloat = false;
    const value = parser.readValue();
    if (parser.lastNumberWasFloat && typeof value === "number" && INTEGER_FIELDS.has(key)) {
      parser.lastNumberWasFloat = false;
      if (options.strict !== false) {
        throw new TelemetryValidationError(
          `Field '${key}' must be an integer, got a float token (${value}); the Python reference rejects it too. ` +
            "Write the integer (1, not 1.0); the API reads integral floats with { strict: false }",
          { field: key, ...(options.location ? { location: options.location } : {}) },
        );
      }
      if (Number.isInteger(value)) {
        options.onNote?.(
          `Field '${key}' was written as a float (${value}); accepted as an integer in lenient mode`,
        );
      }
    }
    setJsonMember(record, key, value);
    parser.skipWhitespace();
    const c = text.charCodeAt(parser.pos++);
    if (c === 0x2c) continue;
    if (c === 0x7d) return record;
    parser.pos--;
    parser.fail("expected ',' or '}'");
  }
}

/**
 * Decodes one JSONL line into a validated telemetry record, losslessly: `timestamp_ns` keeps every
 * digit (as a `bigint`), and re-encoding gives back the same bytes for canonical lines.
 * Throws `JsonlDecodeError` for malformed JSON and `TelemetryValidationError` for schema violations,
 * both naming the file and line when `location` is given.
 */
export function decodeTelemetryLine(line: string, options: DecodeOptions = {}): TelemetryRecord {
  const parser = new LosslessJsonParser(line, options.location);
  const fast = decodeCanonicalV3(parser);
  if (fast !== undefined) return fast;
  parser.pos = 0;
  const candidate = readRecordObject(parser, options);
  parser.expectEnd();
  return validateTelemetryRecord(candidate, options.location ? { location: options.location } : {});
}

function nullableString(value: string | null): string {
  return value === null ? "null" : pythonJsonString(value);
}

function encodeMetadata(metadata: JsonObject): string {
  let keys = 0;
  for (const _ in metadata) keys++;
  if (keys === 0) return "{}";
  const scope = metadata.phase_scope;
  if (keys === 1 && typeof scope === "object" && scope !== null && !Array.isArray(scope)) {
    const encoded = encodePhaseScope(scope);
    if (encoded !== undefined) return `{"phase_scope": ${encoded}}`;
  }
  return stringifyJson(metadata, { sortKeys: true });
}

/**
 * Encodes a record as the canonical sink line (no trailing newline): keys sorted, Python's
 * `json.dumps(record, sort_keys=True)` separators and escaping, exact integers. The same bytes
 * the Python sink writes for the same record.
 */
export function encodeTelemetryRecord(record: TelemetryRecord): string {
  const session = record.schema_version === 2 ? "" : `"session_id": ${pythonJsonString(record.session_id)}, `;
  return (
    `{"allocator_active_bytes": ${counterText(record, "allocator_active_bytes")}` +
    `, "allocator_allocated_bytes": ${counterText(record, "allocator_allocated_bytes")}` +
    `, "allocator_change_bytes": ${counterText(record, "allocator_change_bytes")}` +
    `, "allocator_inactive_bytes": ${counterText(record, "allocator_inactive_bytes")}` +
    `, "allocator_reserved_bytes": ${counterText(record, "allocator_reserved_bytes")}` +
    `, "collector": ${pythonJsonString(record.collector)}` +
    `, "context": ${nullableString(record.context)}` +
    `, "device_free_bytes": ${counterText(record, "device_free_bytes")}` +
    `, "device_id": ${record.device_id}` +
    `, "device_total_bytes": ${counterText(record, "device_total_bytes")}` +
    `, "device_used_bytes": ${counterText(record, "device_used_bytes")}` +
    `, "event_type": ${pythonJsonString(record.event_type)}` +
    `, "host": ${pythonJsonString(record.host)}` +
    `, "job_id": ${nullableString(record.job_id)}` +
    `, "local_rank": ${record.local_rank}` +
    `, "metadata": ${encodeMetadata(record.metadata)}` +
    `, "pid": ${record.pid}` +
    `, "rank": ${record.rank}` +
    `, "sampling_interval_ms": ${record.sampling_interval_ms}` +
    `, "schema_version": ${record.schema_version}, ${session}` +
    `"timestamp_ns": ${record.timestamp_ns}` +
    `, "world_size": ${record.world_size}}`
  );
}

/**
 * `metadata.phase_scope` as the phase recorder writes it, in one template: phase records are half of
 * a training run's lines. Returns undefined for any other shape (the generic writer handles it).
 */
function encodePhaseScope(scope: JsonObject): string | undefined {
  if (!isRecorderPhaseScope(scope)) return undefined;
  const { action, attributes, depth, name, parent_scope_id: parent, path, scope_id: scopeId } = scope;
  const { sequence, thread_id: threadId, thread_name: threadName } = scope;
  const parts = path as string[];
  let pathText = "[";
  for (let i = 0; i < parts.length; i++)
    pathText += i === 0 ? pythonJsonString(parts[i]!) : `, ${pythonJsonString(parts[i]!)}`;
  const attributesText =
    attributes === undefined ? "" : `"attributes": ${stringifyJson(attributes, { sortKeys: true })}, `;
  return (
    `{"action": ${pythonJsonString(action as string)}, ${attributesText}"depth": ${depth}, "name": ${pythonJsonString(name as string)}` +
    `, "parent_scope_id": ${parent === null ? "null" : pythonJsonString(parent as string)}, "path": ${pathText}]` +
    `, "scope_id": ${pythonJsonString(scopeId as string)}, "sequence": ${sequence}, "thread_id": ${threadId}` +
    `, "thread_name": ${pythonJsonString(threadName as string)}}`
  );
}
