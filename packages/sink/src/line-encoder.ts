import {
  encodeTelemetryRecord,
  FLOAT_KEYS,
  type JsonObject,
  type JsonValue,
  pythonJsonNumber,
  pythonJsonString,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";

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

/** Keys that sort differently by UTF-16 unit and by code point need core's slow path. */
const ASTRAL = /[\ud800-\udfff]/;

/**
 * Encodes records exactly as core's `encodeTelemetryRecord` (the bytes Python's
 * `json.dumps(record, sort_keys=True)` writes), faster for the writer's stream of similar records:
 * string fields and metadata values that repeat the previous record's are not escaped again, and
 * the metadata key order is sorted once per key set, not once per record. Anything unusual
 * (float-marked or nested values with astral keys, `undefined` values) goes through core.
 */
export class LineEncoder {
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

  encode(record: TelemetryEvent): string {
    const metadata = this.metadata(record.metadata);
    if (metadata === undefined) return encodeTelemetryRecord(record);
    return (
      `{"allocator_active_bytes": ${this.active.get(record.allocator_active_bytes)}` +
      `, "allocator_allocated_bytes": ${this.allocated.get(record.allocator_allocated_bytes)}` +
      `, "allocator_change_bytes": ${this.change.get(record.allocator_change_bytes)}` +
      `, "allocator_inactive_bytes": ${this.inactive.get(record.allocator_inactive_bytes)}` +
      `, "allocator_reserved_bytes": ${this.reserved.get(record.allocator_reserved_bytes)}` +
      `, "collector": ${this.collector.get(record.collector)}` +
      `, "context": ${this.context.get(record.context)}` +
      `, "device_free_bytes": ${this.free.get(record.device_free_bytes)}` +
      `, "device_id": ${record.device_id}` +
      `, "device_total_bytes": ${this.total.get(record.device_total_bytes)}` +
      `, "device_used_bytes": ${this.used.get(record.device_used_bytes)}` +
      `, "event_type": ${this.eventType.get(record.event_type)}` +
      `, "host": ${this.host.get(record.host)}` +
      `, "job_id": ${this.jobId.get(record.job_id)}` +
      `, "local_rank": ${record.local_rank}` +
      `, "metadata": ${metadata}` +
      `, "pid": ${record.pid}` +
      `, "rank": ${record.rank}` +
      `, "sampling_interval_ms": ${record.sampling_interval_ms}` +
      `, "schema_version": ${record.schema_version}` +
      `, "session_id": ${this.sessionId.get(record.session_id)}` +
      `, "timestamp_ns": ${record.timestamp_ns}` +
      `, "world_size": ${record.world_size}}`
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
    let out = "{";
    for (let j = 0; j < count; j++) {
      const i = order[j]!;
      const value = metadata[keys[i]!];
      let encoded: string;
      if (value === lastValues[i] && (typeof value !== "object" || value === null)) {
        encoded = lastEncoded[i]!;
      } else {
        const fresh = encodeValue(value);
        if (fresh === undefined) return undefined;
        encoded = fresh;
        lastValues[i] = value;
        lastEncoded[i] = encoded;
      }
      out += prefixes[j]! + encoded;
    }
    return `${out}}`;
  }

  private sameKeys(keys: string[]): boolean {
    const known = this.keys;
    if (keys.length !== known.length) return false;
    for (let i = 0; i < keys.length; i++) if (keys[i] !== known[i]) return false;
    return true;
  }

  private learnKeys(keys: string[]): boolean {
    if (keys.some((key) => ASTRAL.test(key))) return false;
    const order = keys.map((_, index) => index).sort((a, b) => (keys[a]! < keys[b]! ? -1 : keys[a]! > keys[b]! ? 1 : 0));
    this.keys = keys;
    this.order = order;
    this.prefixes = order.map((index, position) => `${position === 0 ? "" : ", "}${pythonJsonString(keys[index]!)}: `);
    this.lastValues = new Array(keys.length).fill(undefined);
    this.lastEncoded = new Array(keys.length).fill("");
    return true;
  }
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
