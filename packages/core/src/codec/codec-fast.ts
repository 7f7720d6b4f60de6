import type { TelemetryRecordV3 } from "../schema/schema.js";
import { CANONICAL_END, CANONICAL_PREFIX as P } from "./canonical-line.js";
import type { JsonObject } from "./json.js";
import { type LosslessJsonParser, MAX_JSON_DEPTH } from "./json-codec.js";

/** `schema_version` (always 3 here) and the next key. */
const SCHEMA_AND_SESSION = `${P.schema_version}3${P.session_id}`;

/**
 * The hot path of `decodeTelemetryLine`: a v3 line exactly as the sinks write it (sorted keys, `", "` and
 * `": "` separators, all 23 keys), read and range-checked in one pass into a fixed-shape object.
 * Returns `undefined` at the first surprise (other layout, escapes, float tokens, any rule broken) and
 * the caller re-reads the line on the general path, which produces the precise error.
 */
export function decodeCanonicalV3(parser: LosslessJsonParser): TelemetryRecordV3 | undefined {
  const text = parser.text;
  const r = new CanonicalReader(text);
  if (!r.expect(P.allocator_active_bytes)) return undefined;
  const active = r.nullableCount();
  if (active === FAIL || !r.expect(P.allocator_allocated_bytes)) return undefined;
  const allocated = r.count();
  if (allocated === FAIL || !r.expect(P.allocator_change_bytes)) return undefined;
  const change = r.int();
  if (change === FAIL || !r.expect(P.allocator_inactive_bytes)) return undefined;
  const inactive = r.nullableCount();
  if (inactive === FAIL || !r.expect(P.allocator_reserved_bytes)) return undefined;
  const reserved = r.count();
  if (reserved === FAIL || !r.expect(P.collector)) return undefined;
  const collector = r.nonEmptyString();
  if (collector === undefined || !r.expect(P.context)) return undefined;
  let context: string | null;
  if (text.startsWith("null", r.pos)) {
    context = null;
    r.pos += 4;
  } else {
    const value = r.plainString();
    if (value === undefined) return undefined;
    context = value;
  }
  if (!r.expect(P.device_free_bytes)) return undefined;
  const free = r.nullableCount();
  if (free === FAIL || !r.expect(P.device_id)) return undefined;
  const deviceId = r.int();
  if (deviceId === FAIL || !r.expect(P.device_total_bytes)) return undefined;
  const total = r.nullableCount();
  if (total === FAIL || !r.expect(P.device_used_bytes)) return undefined;
  const used = r.count();
  if (used === FAIL || !r.expect(P.event_type)) return undefined;
  const eventType = r.nonEmptyString();
  if (eventType === undefined || !r.expect(P.host)) return undefined;
  const host = r.nonEmptyString();
  if (host === undefined || !r.expect(P.job_id)) return undefined;
  let jobId: string | null;
  if (text.startsWith("null", r.pos)) {
    jobId = null;
    r.pos += 4;
  } else {
    const value = r.nonEmptyString();
    if (value === undefined) return undefined;
    jobId = value;
  }
  if (!r.expect(P.local_rank)) return undefined;
  const localRank = r.count();
  if (localRank === FAIL || !r.expect(P.metadata)) return undefined;
  let metadata: JsonObject;
  if (text.startsWith("{}", r.pos)) {
    metadata = {};
    r.pos += 2;
  } else {
    if (text.charCodeAt(r.pos) !== 0x7b) return undefined;
    // Only `pid` and later keys follow metadata, none of which can hold this text: the last match ends it.
    const end = text.lastIndexOf(P.pid);
    if (end <= r.pos) return undefined;
    const slice = text.slice(r.pos, end);
    // Too deep for the exact parser's limit: its general path says so with the file and line.
    if (slice.length > 2 * MAX_JSON_DEPTH && bracketCount(slice) > MAX_JSON_DEPTH) return undefined;
    if (FLOAT_OR_LONG_NUMBER.test(slice)) {
      // Floats need their marks and long integers their digits: the exact parser handles those.
      parser.pos = r.pos;
      try {
        metadata = parser.readObject();
      } catch {
        return undefined;
      }
      r.pos = parser.pos;
    } else {
      try {
        metadata = JSON.parse(slice) as JsonObject;
      } catch {
        return undefined;
      }
      if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) return undefined;
      r.pos = end;
    }
  }
  if (!r.expect(P.pid)) return undefined;
  const pid = r.int();
  if (pid === FAIL || pid < -1 || !r.expect(P.rank)) return undefined;
  const rank = r.count();
  if (rank === FAIL || !r.expect(P.sampling_interval_ms)) return undefined;
  const samplingIntervalMs = r.count();
  if (samplingIntervalMs === FAIL || !r.expect(SCHEMA_AND_SESSION)) return undefined;
  const sessionId = r.nonEmptyString();
  if (sessionId === undefined || !r.expect(P.timestamp_ns)) return undefined;
  const timestampStart = r.pos;
  let c = text.charCodeAt(r.pos);
  while (c >= 0x30 && c <= 0x39) c = text.charCodeAt(++r.pos);
  const timestampEnd = r.pos;
  const timestampDigits = timestampEnd - timestampStart;
  if (timestampDigits === 0 || (timestampDigits > 1 && text.charCodeAt(timestampStart) === 0x30))
    return undefined;
  if (!r.expect(P.world_size)) return undefined;
  const worldSize = r.count();
  if (worldSize === FAIL || worldSize < 1 || !r.expect(CANONICAL_END)) return undefined;
  // Only trailing whitespace may follow.
  for (let i = r.pos; i < text.length; i++) {
    const ws = text.charCodeAt(i);
    if (ws !== 0x20 && ws !== 0x09 && ws !== 0x0d && ws !== 0x0a) return undefined;
  }
  if (rank >= worldSize || localRank >= worldSize) return undefined;
  if (total !== null && (used > total || (free !== null && free > total))) return undefined;
  return {
    schema_version: 3,
    session_id: sessionId,
    timestamp_ns: BigInt(text.slice(timestampStart, timestampEnd)),
    event_type: eventType,
    collector,
    sampling_interval_ms: samplingIntervalMs,
    pid,
    host,
    job_id: jobId,
    rank,
    local_rank: localRank,
    world_size: worldSize,
    device_id: deviceId,
    allocator_allocated_bytes: allocated,
    allocator_reserved_bytes: reserved,
    allocator_active_bytes: active,
    allocator_inactive_bytes: inactive,
    allocator_change_bytes: change,
    device_used_bytes: used,
    device_free_bytes: free,
    device_total_bytes: total,
    context,
    metadata,
  };
}

const FAIL = -1.5;
/**
 * A number token with a fraction or exponent, or of 16+ digits: one JSON.parse would not keep exact.
 * Only tokens after `:`, `[` or `,` (where JSON numbers are), so digits inside strings, such as the
 * "30e2" of a session UUID in a phase scope id, do not send the line to the slower exact parser.
 */
const FLOAT_OR_LONG_NUMBER = /[:[,]\s*-?(?:[0-9]+[.eE]|[0-9]{16})/;

/** Reads one canonical line; fields keep the hot loop monomorphic. */
class CanonicalReader {
  pos = 0;
  constructor(readonly text: string) {}

  // A native substring compare: faster on V8 11 than startsWith(literal, position) or a charCode loop.
  expect(literal: string): boolean {
    const end = this.pos + literal.length;
    if (this.text.slice(this.pos, end) !== literal) return false;
    this.pos = end;
    return true;
  }

  /** An integer token (no fraction, no exponent, within 2^53), or FAIL. */
  int(): number {
    let negative = false;
    let c = this.text.charCodeAt(this.pos);
    if (c === 0x2d) {
      negative = true;
      c = this.text.charCodeAt(++this.pos);
    }
    const start = this.pos;
    if (c === 0x30) {
      c = this.text.charCodeAt(++this.pos);
    } else {
      let value = 0;
      while (c >= 0x30 && c <= 0x39) {
        value = value * 10 + (c - 0x30);
        c = this.text.charCodeAt(++this.pos);
      }
      const digits = this.pos - start;
      if (digits === 0 || digits > 15) {
        if (digits === 0) return FAIL;
        if (!Number.isSafeInteger(value)) return FAIL;
      }
      if (c === 0x2e || c === 0x65 || c === 0x45) return FAIL;
      return negative ? -value : value;
    }
    if (c === 0x2e || c === 0x65 || c === 0x45 || (c >= 0x30 && c <= 0x39)) return FAIL;
    return 0;
  }

  /** A non-negative integer token, or FAIL. */
  count(): number {
    if (this.text.charCodeAt(this.pos) === 0x2d) return FAIL;
    return this.int();
  }

  nullableCount(): number | null {
    if (this.text.charCodeAt(this.pos) === 0x6e) {
      if (!this.text.startsWith("null", this.pos)) return FAIL;
      this.pos += 4;
      return null;
    }
    return this.count();
  }

  /** A string without escapes or control characters; `undefined` otherwise. */
  plainString(): string | undefined {
    if (this.text.charCodeAt(this.pos) !== 0x22) return undefined;
    const start = this.pos + 1;
    let pos = start;
    for (;;) {
      const c = this.text.charCodeAt(pos);
      if (c === 0x22) break;
      if (c === 0x5c || c < 0x20 || pos >= this.text.length) return undefined;
      pos++;
    }
    this.pos = pos + 1;
    return this.text.slice(start, pos);
  }

  nonEmptyString(): string | undefined {
    const value = this.plainString();
    if (value === undefined || value.length === 0) return undefined;
    const first = value.charCodeAt(0);
    const last = value.charCodeAt(value.length - 1);
    // Whitespace at an end: the general path applies Python's strip() rule.
    if (first <= 0x20 || last <= 0x20 || first > 0x7e || last > 0x7e) return undefined;
    return value;
  }
}

/** `{` and `[` in `text`: at least its nesting depth (strings may hold some too). */
function bracketCount(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b || c === 0x5b) count++;
  }
  return count;
}
