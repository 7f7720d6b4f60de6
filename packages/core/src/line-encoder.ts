import { encodeTelemetryRecord } from "./codec.js";
import type { JsonObject, JsonValue } from "./json.js";
import { FLOAT_KEYS, pythonJsonNumber, pythonJsonString, stringifyJson } from "./json-codec.js";
import type { TelemetryEvent } from "./schema.js";

/** A string field's last value and its JSON form: consecutive records mostly repeat them. */
class StringCache {
  private last: string | null | undefined = undefined;
  private encoded = "";

  get(value: string | null): string {
    if (value !== this.last) {
      this.last = value;
      this.encoded = value === null ? "null" : pythonJsonString(value);
    }
    return this.encoded;
  }
}

/** An integer field's last value and its text: counters such as the device total rarely change. */
class IntCache {
  private last: number | null | undefined = undefined;
  private text = "";

  get(value: number | null): string {
    if (value !== this.last) {
      this.last = value;
      this.text = value === null ? "null" : String(value);
    }
    return this.text;
  }
}

/** Flattens a concatenated string once, so that every line reusing it copies one piece. */
function flat(text: string): string {
  text.charCodeAt(0);
  return text;
}

/** Keys that sort differently by UTF-16 unit and by code point need core's slow path. */
const ASTRAL = /[\ud800-\udfff]/;

/**
 * Encodes records exactly as `encodeTelemetryRecord` (the bytes Python's
 * `json.dumps(record, sort_keys=True)` writes), faster for the writer's stream of similar records:
 * string fields and metadata values that repeat the previous record's are not escaped again, and
 * the metadata key order is sorted once per key set, not once per record. Anything unusual
 * (float-marked or nested values with astral keys, `undefined` values) goes through core.
 */
export class TelemetryLineEncoder {
  private readonly collector = new StringCache();
  private readonly context = new StringCache();
  private readonly eventType = new StringCache();
  private readonly host = new StringCache();
  private readonly jobId = new StringCache();
  private readonly sessionId = new StringCache();
  private readonly active = new IntCache();
  private readonly allocated = new IntCache();
  private readonly change = new IntCache();
  private readonly inactive = new IntCache();
  private readonly reserved = new IntCache();
  private readonly free = new IntCache();
  private readonly total = new IntCache();
  private readonly used = new IntCache();

  private keys: string[] = [];
  private order: number[] = [];
  private prefixes: string[] = [];
  private lastValues: unknown[] = [];
  private lastEncoded: string[] = [];
  private lastMetadata = "";

  // Runs of fields that rarely change, kept as one (flat) string each while their values repeat.
  private identityRun = "";
  private identityKey: unknown[] = [];
  private tailRun = "";
  private tailKey: unknown[] = [];

  encode(record: TelemetryEvent): string {
    const metadata = this.metadata(record.metadata);
    if (metadata === undefined) return encodeTelemetryRecord(record);
    const collector = this.collector.get(record.collector);
    const context = this.context.get(record.context);
    const eventType = this.eventType.get(record.event_type);
    const host = this.host.get(record.host);
    const jobId = this.jobId.get(record.job_id);
    const sessionId = this.sessionId.get(record.session_id);
    // collector, context (then the device counters), event_type, host, job_id, local_rank.
    const identity = this.identityKey;
    if (
      identity[0] !== collector ||
      identity[1] !== context ||
      identity[2] !== eventType ||
      identity[3] !== host ||
      identity[4] !== jobId ||
      identity[5] !== record.local_rank
    ) {
      this.identityKey = [collector, context, eventType, host, jobId, record.local_rank];
      this.identityRun = flat(
        `, "event_type": ${eventType}, "host": ${host}, "job_id": ${jobId}, "local_rank": ${record.local_rank}, "metadata": `,
      );
    }
    // pid, rank, sampling_interval_ms, schema_version, session_id, up to timestamp_ns.
    const tail = this.tailKey;
    if (
      tail[0] !== record.pid ||
      tail[1] !== record.rank ||
      tail[2] !== record.sampling_interval_ms ||
      tail[3] !== record.schema_version ||
      tail[4] !== sessionId
    ) {
      this.tailKey = [record.pid, record.rank, record.sampling_interval_ms, record.schema_version, sessionId];
      this.tailRun = flat(
        `, "pid": ${record.pid}, "rank": ${record.rank}, "sampling_interval_ms": ${record.sampling_interval_ms}` +
          `, "schema_version": ${record.schema_version}, "session_id": ${sessionId}, "timestamp_ns": `,
      );
    }
    return (
      `{"allocator_active_bytes": ${this.active.get(record.allocator_active_bytes)}` +
      `, "allocator_allocated_bytes": ${this.allocated.get(record.allocator_allocated_bytes)}` +
      `, "allocator_change_bytes": ${this.change.get(record.allocator_change_bytes)}` +
      `, "allocator_inactive_bytes": ${this.inactive.get(record.allocator_inactive_bytes)}` +
      `, "allocator_reserved_bytes": ${this.reserved.get(record.allocator_reserved_bytes)}` +
      `, "collector": ${collector}, "context": ${context}` +
      `, "device_free_bytes": ${this.free.get(record.device_free_bytes)}` +
      `, "device_id": ${record.device_id}` +
      `, "device_total_bytes": ${this.total.get(record.device_total_bytes)}` +
      `, "device_used_bytes": ${this.used.get(record.device_used_bytes)}` +
      this.identityRun +
      metadata +
      this.tailRun +
      `${record.timestamp_ns}, "world_size": ${record.world_size}}`
    );
  }

  /** The metadata object's JSON, or undefined to let core encode the whole record. */
  private metadata(metadata: JsonObject): string | undefined {
    if (FLOAT_KEYS in metadata) return undefined;
    const keys = Object.keys(metadata);
    const count = keys.length;
    if (count === 0) return "{}";
    if (!this.sameKeys(keys) && !this.learnKeys(keys)) return undefined;
    const order = this.order;
    const prefixes = this.prefixes;
    const lastValues = this.lastValues;
    const lastEncoded = this.lastEncoded;
    // A tracker's metadata (backend, collector health, capabilities) is mostly the same from one
    // record to the next: then the whole text is too.
    if (this.lastMetadata !== "") {
      let same = true;
      for (let i = 0; i < count; i++) {
        const key = comparable(metadata[keys[i]!]);
        if (key === NEVER_EQUAL || key !== lastValues[i]) {
          same = false;
          break;
        }
      }
      if (same) return this.lastMetadata;
    }
    let out = "{";
    for (let j = 0; j < count; j++) {
      const i = order[j]!;
      const value = metadata[keys[i]!];
      const key = comparable(value);
      let encoded: string;
      if (key !== NEVER_EQUAL && key === lastValues[i]) {
        encoded = lastEncoded[i]!;
      } else {
        const fresh = encodeValue(value);
        if (fresh === undefined) {
          this.lastMetadata = "";
          return undefined;
        }
        encoded = fresh;
        lastValues[i] = key;
        lastEncoded[i] = encoded;
      }
      out += prefixes[j]! + encoded;
    }
    this.lastMetadata = flat(`${out}}`);
    return this.lastMetadata;
  }

  private sameKeys(keys: string[]): boolean {
    const known = this.keys;
    if (keys.length !== known.length) return false;
    for (let i = 0; i < keys.length; i++) if (keys[i] !== known[i]) return false;
    return true;
  }

  private learnKeys(keys: string[]): boolean {
    if (keys.some((key) => ASTRAL.test(key))) return false;
    const order = keys
      .map((_, index) => index)
      .sort((a, b) => (keys[a]! < keys[b]! ? -1 : keys[a]! > keys[b]! ? 1 : 0));
    this.keys = keys;
    this.order = order;
    this.prefixes = order.map(
      (index, position) => `${position === 0 ? "" : ", "}${pythonJsonString(keys[index]!)}: `,
    );
    this.lastValues = new Array(keys.length).fill(undefined);
    this.lastEncoded = new Array(keys.length).fill("");
    this.lastMetadata = "";
    return true;
  }
}

const EMPTY_ARRAY = Symbol("empty array");
const NEVER_EQUAL = Symbol("never equal");

/**
 * What a metadata value is compared by against the previous record's: itself for primitives, one
 * token for every empty array (tracker records carry `collector_partial_fields: []`), and a token
 * equal to nothing for other objects (they may have changed in place).
 */
function comparable(value: JsonValue | undefined): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value) && value.length === 0 && !(FLOAT_KEYS in value)) return EMPTY_ARRAY;
  return NEVER_EQUAL;
}

function encodeValue(value: JsonValue | undefined): string | undefined {
  switch (typeof value) {
    case "string":
      return pythonJsonString(value);
    case "number":
      return pythonJsonNumber(value, false);
    case "boolean":
      return value ? "true" : "false";
    case "bigint":
      return value.toString();
    case "object":
      if (value === null) return "null";
      if (Array.isArray(value) && value.length === 0 && !(FLOAT_KEYS in value)) return "[]";
      return stringifyJson(value, { sortKeys: true });
    default:
      // undefined (core skips the key) or not JSON at all: core decides.
      return undefined;
  }
}
