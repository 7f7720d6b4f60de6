/**
 * On-disk form of a segment's aggregate: `SLAGG` magic, a JSON header (sessions, ranks, identities;
 * timestamps as decimal strings so `JSON.parse` reads it exactly), then each rank's sample columns as
 * raw little-endian arrays, 8-byte aligned, read back as views without copying, and its boundaries'
 * counters as columns too (their timestamps and scopes as one text), then the alerts and health
 * transitions as small JSON arrays of rows. Small, because V8 parses a JSON text of 100 KB or more
 * straight into the old generation, which is only collected once it has grown by several times the
 * live heap: memory would grow with the size of the segments.
 */
import {
  closeSync,
  fstatSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { type JsonObject, parseJson, stringifyJson } from "@stormlog/core";
import { type ExactCounterField, type ExactCounters, openRegularFileSync } from "@stormlog/core/internal";
import {
  ALL_SAMPLE_RULES,
  type AlertEntry,
  type CounterPeak,
  DETAIL_CAP,
  type HealthEntry,
  type InstantEntry,
  type LinedEvidence,
  RankPart,
  type SampleIdentity,
  type SegmentAggregate,
  type SessionEvidence,
  SessionPart,
} from "../input/aggregate.js";
import { BOUNDARY_COLUMNS, BoundaryLog } from "../input/boundary-log.js";

const MAGIC = Buffer.from("SLAGG\u0005\u0000\u0000", "latin1");

/** Rows are cut into JSON texts of about this many characters (well under V8's 100 KB). */
const ROW_CHUNK_CHARS = 32 * 1024;

/** Byte ranges `[start, length]` of JSON arrays of rows, after the columns. */
type Chunks = [number, number][];

type Num = number | null;
const num = (value: number): Num => (Number.isNaN(value) ? null : value);
const unnum = (value: Num | undefined): number =>
  value === null || value === undefined ? Number.NaN : value;
const ts = (value: bigint | null): string | null => (value === null ? null : value.toString());
const unts = (value: string | null | undefined): bigint | null =>
  value === null || value === undefined ? null : BigInt(value);

type Evidence = (Omit<SessionEvidence, "timestamp_ns"> & { t: string; line: number; offset: number }) | null;

interface RankHeader {
  rank: number;
  eventCount: number;
  base: string | null;
  minT: number | null;
  maxT: number | null;
  first: Evidence;
  lastStop: Evidence;
  identities: SampleIdentity[];
  peaks: ({ v: number; t: string; d: number; c: string } | null)[];
  samplesWithoutUsed: number;
  count: number;
  hasIdentity: boolean;
  /**
   * `[sample index, sampleRules bits]` of each sample that not every reference rule takes (a type
   * other than exactly "sample": rare); absent when there is none.
   */
  rules?: [number, number][];
  /** `[sample line, counter field, exact decimal digits]` of counters past 2^53; absent when none. */
  exact?: [number, string, string][];
  /** `[sample line, its phase attribution hints as exact JSON]`; absent when none. */
  origins?: [number, string][];
  /** Hosts of the rank's events in the order first seen; absent when one (the first event's). */
  hosts?: string[];
  /** `[job id, offset, line]` of the earliest event with a `job_id`; absent when none has one. */
  job?: [string, number, number];
  /** Records shown as instants (`InstantRow`s); absent when none. */
  instants?: Chunks;
  /** Byte offset of the rank's columns in the data area. */
  offset: number;
  /**
   * Boundaries: how many, and the byte range `[start, length]` (after the columns) of their text.
   * Their columns (`BOUNDARY_COLUMNS`) follow the rank's sample columns.
   */
  boundaries: [number, number, number];
  /** Live tensors by birth phase (`BirthRow`s). */
  births: Chunks;
  /** Alerts (`AlertRow`s). */
  alerts: Chunks;
  /** [largest positive world_size, several seen (0/1), alerts or health cut by DETAIL_CAP (0/1)]. */
  extra: [number, number, number];
  /** Health transitions (`HealthRow`s). */
  health: Chunks;
}

/** [ts, the sample's `tfjs_live_by_phase` as JSON text]. */
type BirthRow = [string, string];
/** [ts, type, context, oom reason, used, allocated, origin hints as exact JSON or null, line]. */
type AlertRow = [string, string, string | null, string | null, Num, Num, string | null, number];
type HealthRow = [string, string, string, string | null, string | null, string | null];
/** [ts, type, context, metadata as exact JSON, line]. */
type InstantRow = [string, string, string | null, string, number];

interface SessionHeader {
  sessionId: string;
  eventCount: number;
  eventTypes: [string, number][];
  ranks: RankHeader[];
}

interface Header {
  lineCount: number;
  eventCount: number;
  /** Byte offset of the row texts in the data area (after the columns). */
  rowsAt: number;
  minTs: string | null;
  maxTs: string | null;
  warnings: { message: string; sessionId: string | null }[];
  sessions: SessionHeader[];
}

function evidenceOut(value: LinedEvidence | null, offset: number): Evidence {
  if (value === null) return null;
  const { timestamp_ns, ...rest } = value.evidence;
  return { ...rest, t: timestamp_ns.toString(), line: value.line, offset };
}

function evidenceIn(value: Evidence): LinedEvidence | null {
  if (value === null) return null;
  const { t, line, offset: _offset, ...rest } = value;
  return { evidence: { ...rest, timestamp_ns: BigInt(t) }, line };
}

/** The samples whose rule bits are not `ALL_SAMPLE_RULES`, as `[index, bits]`. */
function oddRules(rules: Uint8Array, count: number): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < count; i++) if (rules[i] !== ALL_SAMPLE_RULES) out.push([i, rules[i]!]);
  return out;
}

/** The exact counters as rows: one per sample and field. */
function exactRows(exact: ReadonlyMap<number, ExactCounters>): [number, string, string][] {
  const rows: [number, string, string][] = [];
  for (const [line, counters] of exact)
    for (const [field, value] of Object.entries(counters)) rows.push([line, field, value.toString()]);
  return rows;
}

function exactFromRows(rows: readonly [number, string, string][]): Map<number, ExactCounters> {
  const exact = new Map<number, Partial<Record<ExactCounterField, bigint>>>();
  for (const [line, field, digits] of rows) {
    if (!/^-?\d+$/.test(digits)) continue; // a damaged row: the column's double stands
    let counters = exact.get(line);
    if (counters === undefined) {
      counters = {};
      exact.set(line, counters);
    }
    counters[field as ExactCounterField] = BigInt(digits);
  }
  return exact;
}

const COLUMNS = 7; // ts, line, allocated, reserved, used, total, tensors (8 bytes each)

function columnsBytes(count: number, hasIdentity: boolean): number {
  const identity = hasIdentity ? Math.ceil((count * 2) / 8) * 8 : 0;
  return count * 8 * COLUMNS + identity;
}

/** Serializes an aggregate, stamped with `stamp` (the source's fingerprint). */
export function encodeAggregate(aggregate: SegmentAggregate, stamp: string): Buffer {
  return Buffer.concat(encodeAggregateParts(aggregate, stamp));
}

/**
 * `encodeAggregate` as the parts of the file, in order: the sample columns are views of the
 * aggregate's own arrays, not copies (they are most of the bytes), so the aggregate must not change
 * until the parts are written.
 */
export function encodeAggregateParts(aggregate: SegmentAggregate, stamp: string): Uint8Array[] {
  const sessions: SessionHeader[] = [];
  const chunks: Uint8Array[] = [];
  let offset = 0;
  const texts: Uint8Array[] = [];
  let textOffset = 0;
  /** Puts `text` after the texts before it; its byte range `[start, length]` there. */
  const place = (text: Uint8Array): [number, number] => {
    const at = textOffset;
    texts.push(text);
    textOffset += text.length;
    return [at, text.length];
  };
  /** `row` gives an item's row, or its JSON text when it has it. */
  const rows = <T>(items: readonly T[], row: (item: T) => unknown[] | string): Chunks => {
    const out: Chunks = [];
    let parts: string[] = [];
    let size = 0;
    const flush = (): void => {
      out.push(place(Buffer.from(`[${parts.join(",")}]`, "utf8")));
      parts = [];
      size = 0;
    };
    for (const item of items) {
      const value = row(item);
      const text = typeof value === "string" ? value : JSON.stringify(value);
      parts.push(text);
      size += text.length + 1;
      if (size >= ROW_CHUNK_CHARS) flush();
    }
    if (parts.length > 0) flush();
    return out;
  };
  for (const session of aggregate.sessions.values()) {
    const ranks: RankHeader[] = [];
    for (const part of session.ranks.values()) {
      const samples = part.samples;
      const count = samples.count;
      const hasIdentity = samples.identity !== null;
      const bounds = part.boundaryLog.encoded();
      const header: RankHeader = {
        rank: part.rank,
        eventCount: part.eventCount,
        base: ts(part.base),
        minT: part.eventCount === 0 ? null : part.minT,
        maxT: part.eventCount === 0 ? null : part.maxT,
        first: evidenceOut(part.first, part.firstT),
        lastStop: evidenceOut(part.lastStop, part.lastStopT),
        identities: part.identities,
        peaks: part.peaks.map((peak) =>
          peak === null
            ? null
            : { v: peak.value, t: peak.timestampNs.toString(), d: peak.deviceId, c: peak.collector },
        ),
        samplesWithoutUsed: part.samplesWithoutUsed,
        count,
        hasIdentity,
        ...(samples.rules === null ? {} : { rules: oddRules(samples.rules, count) }),
        ...(part.exact === null ? {} : { exact: exactRows(part.exact) }),
        ...(part.origins === null
          ? {}
          : {
              origins: [...part.origins].map(([line, origin]): [number, string] => [
                line,
                stringifyJson(origin),
              ]),
            }),
        ...(part.hosts.length > 1 ? { hosts: part.hosts } : {}),
        ...(part.job === null ? {} : { job: [part.job.jobId, part.jobT, part.job.line] }),
        ...(part.instants.length === 0
          ? {}
          : {
              instants: rows(
                part.instants.slice(0, DETAIL_CAP),
                (i): InstantRow => [
                  i.timestampNs.toString(),
                  i.eventType,
                  i.context,
                  stringifyJson(i.metadata),
                  i.line,
                ],
              ),
            }),
        offset,
        boundaries: [part.boundaryLog.length, ...place(bounds.text)],
        births: rows(part.births, (b): BirthRow => [b.timestampNs.toString(), b.json]),
        // The index keeps at most DETAIL_CAP of each; the loader scans a part cut so again.
        alerts: rows(
          part.alerts.slice(0, DETAIL_CAP),
          (a): AlertRow => [
            a.timestampNs.toString(),
            a.eventType,
            a.context,
            a.oomReason,
            num(a.used),
            num(a.allocated),
            a.origin === null ? null : stringifyJson(a.origin),
            a.line,
          ],
        ),
        extra: [
          part.worldSizeMax,
          part.worldSizeMixed ? 1 : 0,
          part.detailsCut ||
          part.alerts.length > DETAIL_CAP ||
          part.health.length > DETAIL_CAP ||
          part.instants.length > DETAIL_CAP
            ? 1
            : 0,
        ],
        health: rows(
          part.health.slice(0, DETAIL_CAP),
          (h): HealthRow => [
            h.timestampNs.toString(),
            h.eventType,
            h.collector,
            h.context,
            h.error,
            h.status,
          ],
        ),
      };
      ranks.push(header);
      const arrays = [
        samples.t,
        samples.line,
        samples.allocated,
        samples.reserved,
        samples.used,
        samples.total,
        samples.tensors,
      ];
      for (const array of arrays) chunks.push(new Uint8Array(array.buffer, array.byteOffset, count * 8));
      if (hasIdentity) {
        const bytes = new Uint8Array(Math.ceil((count * 2) / 8) * 8);
        bytes.set(new Uint8Array(samples.identity!.buffer, samples.identity!.byteOffset, count * 2));
        chunks.push(bytes);
      }
      chunks.push(
        new Uint8Array(bounds.columns.buffer, bounds.columns.byteOffset, bounds.columns.byteLength),
      );
      offset += columnsBytes(count, hasIdentity) + bounds.columns.byteLength;
    }
    sessions.push({
      sessionId: session.sessionId,
      eventCount: session.eventCount,
      eventTypes: [...session.eventTypes.entries()],
      ranks,
    });
  }
  const header: Header = {
    lineCount: aggregate.lineCount,
    eventCount: aggregate.eventCount,
    rowsAt: offset,
    minTs: ts(aggregate.minTs),
    maxTs: ts(aggregate.maxTs),
    warnings: aggregate.warnings,
    sessions,
  };
  // The stamp comes first, so that `aggregateStampMatches` checks a file from its first bytes.
  const stampBytes = Buffer.from(stamp, "utf8");
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const jsonStart = MAGIC.length + 4 + stampBytes.length + 4;
  const headerEnd = jsonStart + json.length;
  const dataStart = Math.ceil(headerEnd / 8) * 8;
  const head = Buffer.alloc(dataStart);
  MAGIC.copy(head, 0);
  head.writeUInt32LE(stampBytes.length, MAGIC.length);
  stampBytes.copy(head, MAGIC.length + 4);
  head.writeUInt32LE(json.length, jsonStart - 4);
  json.copy(head, jsonStart);
  return [head, ...chunks, ...texts];
}

/**
 * Reads an aggregate back; `undefined` when the bytes are not one (wrong magic, truncated, other
 * stamp). Columns are views into `bytes` (copied first when it is not 8-byte aligned).
 */
export function decodeAggregate(bytes: Buffer, stamp: string): SegmentAggregate | undefined {
  if (!stampMatches(bytes, stamp)) return undefined;
  const jsonStart = MAGIC.length + 4 + bytes.readUInt32LE(MAGIC.length) + 4;
  const length = bytes.readUInt32LE(jsonStart - 4);
  const headerEnd = jsonStart + length;
  if (headerEnd > bytes.length) return undefined;
  let header: Header;
  try {
    header = JSON.parse(bytes.toString("utf8", jsonStart, headerEnd)) as Header;
  } catch {
    return undefined;
  }
  const dataStart = Math.ceil(headerEnd / 8) * 8;
  let buffer = bytes.buffer;
  let base = bytes.byteOffset + dataStart;
  if (base % 8 !== 0) {
    const copy = new Uint8Array(bytes.length - dataStart);
    copy.set(bytes.subarray(dataStart));
    buffer = copy.buffer;
    base = 0;
  }
  const dataLength = bytes.length - dataStart;
  const rowsAt = dataStart + header.rowsAt;
  /** Calls `each` on every row of `chunks`; false when a chunk lies outside the file or is not JSON. */
  const eachRow = <T>(chunks: Chunks, each: (row: T) => void): boolean => {
    for (const [start, length] of chunks) {
      const end = rowsAt + start + length;
      if (!(start >= 0 && length > 0 && end <= bytes.length)) return false;
      let rows: T[];
      try {
        rows = JSON.parse(bytes.toString("utf8", rowsAt + start, end)) as T[];
      } catch {
        return false;
      }
      for (const row of rows) each(row);
    }
    return true;
  };
  if (!Number.isSafeInteger(header.rowsAt) || rowsAt > bytes.length) return undefined;
  const sessions = new Map<string, SessionPart>();
  for (const s of header.sessions) {
    const session = new SessionPart(s.sessionId);
    session.eventCount = s.eventCount;
    for (const [type, count] of s.eventTypes) session.eventTypes.set(type, count);
    for (const r of s.ranks) {
      const part = new RankPart(r.rank, s.sessionId);
      part.eventCount = r.eventCount;
      part.base = unts(r.base);
      if (part.base !== null) {
        part.baseHead = Number(part.base / 1_000_000_000n);
        part.baseTail = Number(part.base % 1_000_000_000n);
      }
      part.minT = r.minT ?? Number.POSITIVE_INFINITY;
      part.maxT = r.maxT ?? Number.NEGATIVE_INFINITY;
      part.first = evidenceIn(r.first);
      part.firstT = r.first?.offset ?? 0;
      part.lastStop = evidenceIn(r.lastStop);
      part.lastStopT = r.lastStop?.offset ?? 0;
      part.identities.push(...r.identities);
      r.peaks.forEach((peak, i) => {
        part.setPeak(
          i as 0 | 1 | 2,
          peak === null
            ? null
            : ({
                value: peak.v,
                timestampNs: BigInt(peak.t),
                deviceId: peak.d,
                collector: peak.c,
              } satisfies CounterPeak),
        );
      });
      part.samplesWithoutUsed = r.samplesWithoutUsed;
      if (r.exact !== undefined) part.exact = exactFromRows(r.exact);
      if (r.origins !== undefined)
        part.origins = new Map(r.origins.map(([line, json]) => [line, parseJson(json) as JsonObject]));
      const n = r.count;
      const [boundaryCount, textStart, textLength] = r.boundaries;
      const boundariesAt = r.offset + columnsBytes(n, r.hasIdentity);
      if (boundariesAt + boundaryCount * BOUNDARY_COLUMNS * 8 > dataLength) return undefined;
      const at = base + r.offset;
      const samples = part.samples;
      samples.count = n;
      samples.t = new Float64Array(buffer, at, n);
      samples.line = new Float64Array(buffer, at + 8 * n, n);
      samples.allocated = new Float64Array(buffer, at + 16 * n, n);
      samples.reserved = new Float64Array(buffer, at + 24 * n, n);
      samples.used = new Float64Array(buffer, at + 32 * n, n);
      samples.total = new Float64Array(buffer, at + 40 * n, n);
      samples.tensors = new Float64Array(buffer, at + 48 * n, n);
      samples.identity = r.hasIdentity ? new Uint16Array(buffer, at + 56 * n, n) : null;
      if (r.rules !== undefined) {
        samples.rules = new Uint8Array(n).fill(ALL_SAMPLE_RULES);
        for (const [i, bits] of r.rules) if (i >= 0 && i < n) samples.rules[i] = bits;
      }
      let boundariesRead = boundaryCount === 0;
      if (boundaryCount > 0) {
        const textEnd = rowsAt + textStart + textLength;
        if (textStart >= 0 && textLength > 0 && textEnd <= bytes.length) {
          const log = BoundaryLog.adopt(
            new Float64Array(buffer, base + boundariesAt, boundaryCount * BOUNDARY_COLUMNS),
            bytes,
            rowsAt + textStart,
            textEnd,
          );
          if (log !== null) part.boundaryLog = log;
          boundariesRead = log !== null;
        }
      }
      const birthsRead = eachRow<BirthRow>(r.births, ([t, json]) => {
        part.births.push({ timestampNs: BigInt(t), json });
      });
      const alertsRead = eachRow<AlertRow>(r.alerts, (row) => {
        const [t, eventType, context, oomReason, used, allocated, origin, line] = row;
        part.alerts.push({
          timestampNs: BigInt(t),
          line,
          eventType,
          context,
          oomReason,
          used: unnum(used),
          allocated: unnum(allocated),
          origin: origin === null ? null : (parseJson(origin) as JsonObject),
        } satisfies AlertEntry);
      });
      part.worldSizeMax = r.extra[0];
      part.worldSizeMixed = r.extra[1] === 1;
      part.detailsCut = r.extra[2] === 1;
      const healthRead = eachRow<HealthRow>(r.health, (row) => {
        const [t, eventType, collector, context, error, status] = row;
        part.health.push({
          timestampNs: BigInt(t),
          eventType,
          collector,
          context,
          error,
          status,
        } satisfies HealthEntry);
      });
      if (r.hosts !== undefined) part.hosts.push(...r.hosts);
      else if (part.first !== null) part.hosts.push(part.first.evidence.host);
      if (r.job !== undefined) {
        part.job = { jobId: r.job[0], line: r.job[2] };
        part.jobT = r.job[1];
      }
      const instantsRead = eachRow<InstantRow>(r.instants ?? [], (row) => {
        const [t, eventType, context, metadata, line] = row;
        part.instants.push({
          timestampNs: BigInt(t),
          line,
          eventType,
          context,
          metadata: parseJson(metadata) as JsonObject,
        } satisfies InstantEntry);
      });
      if (!boundariesRead || !birthsRead || !alertsRead || !healthRead || !instantsRead) return undefined;
      session.ranks.set(r.rank, part);
    }
    sessions.set(s.sessionId, session);
  }
  return {
    lineCount: header.lineCount,
    eventCount: header.eventCount,
    sessions,
    warnings: header.warnings,
    minTs: unts(header.minTs),
    maxTs: unts(header.maxTs),
  };
}

function stampMatches(bytes: Buffer, stamp: string): boolean {
  if (bytes.length < MAGIC.length + 8 || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) return false;
  const length = bytes.readUInt32LE(MAGIC.length);
  const end = MAGIC.length + 4 + length;
  return end + 4 <= bytes.length && bytes.toString("utf8", MAGIC.length + 4, end) === stamp;
}

/** `read` on the open file at `path`, closed after; `fallback` when it cannot be opened or read. */
function withFile<T>(path: string, fallback: T, read: (fd: number) => T): T {
  let fd: number;
  try {
    fd = openRegularFileSync(path);
  } catch {
    return fallback;
  }
  try {
    return read(fd);
  } catch {
    return fallback;
  } finally {
    closeSync(fd);
  }
}

/** Whether the aggregate file at `path` starts as one stamped `stamp` (reads only its first bytes). */
export function aggregateStampMatches(path: string, stamp: string): boolean {
  return withFile(path, false, (fd) => {
    const head = Buffer.alloc(MAGIC.length + 8 + Buffer.byteLength(stamp, "utf8"));
    const read = readSync(fd, head, 0, head.length, 0);
    return stampMatches(head.subarray(0, read), stamp);
  });
}

/**
 * Reads the whole aggregate file at `path` into a buffer from `allocate` (at least its size, so a
 * caller can reuse buffers); `bytes` views the file's part. Null when it cannot be read.
 */
export function readAggregateFile(
  path: string,
  allocate: (size: number) => Buffer,
): { buffer: Buffer; bytes: Buffer } | null {
  return withFile(path, null, (fd) => {
    const size = fstatSync(fd).size;
    const buffer = allocate(size);
    let filled = 0;
    while (filled < size) {
      const read = readSync(fd, buffer, filled, size - filled, filled);
      if (read === 0) break;
      filled += read;
    }
    return { buffer, bytes: buffer.subarray(0, filled) };
  });
}

/** Where a file is written before it is renamed to `path` (see `writeAggregateFile`). */
export function temporaryPath(path: string): string {
  return `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
}

/** Whether a file name is one `temporaryPath` gives a name ending `.agg` (a write under way, or left over). */
export function isTemporaryAggregate(name: string): boolean {
  return /\.agg\.\d+\.[0-9a-z]+\.tmp$/.test(name);
}

/**
 * Writes a file through a temporary name and a rename, so that readers never see half of it; `data`
 * may be the parts of `encodeAggregateParts`, written one after the other.
 */
export function writeAggregateFile(path: string, data: Uint8Array | string | readonly Uint8Array[]): void {
  const tmp = temporaryPath(path);
  try {
    if (typeof data === "string" || data instanceof Uint8Array) writeFileSync(tmp, data);
    else {
      const fd = openSync(tmp, "w");
      try {
        for (const part of data) {
          let written = 0;
          while (written < part.length) written += writeSync(fd, part, written, part.length - written);
        }
      } finally {
        closeSync(fd);
      }
    }
    renameSync(tmp, path);
  } catch (error) {
    rmSync(tmp, { force: true });
    throw error;
  }
}

/** Ranks an aggregate holds (for the catalog's ranges). */
export function aggregateRanks(aggregate: SegmentAggregate): number[] {
  const ranks = new Set<number>();
  for (const session of aggregate.sessions.values()) for (const rank of session.ranks.keys()) ranks.add(rank);
  return [...ranks].sort((a, b) => a - b);
}
