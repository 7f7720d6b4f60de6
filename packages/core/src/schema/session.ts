import { hostname } from "node:os";
import type { JsonObject, JsonValue } from "../codec/json.js";
import { nodeCrypto } from "../runtime/builtins.js";
import { type Clock, systemClock } from "../runtime/clock.js";
import { InvalidConfigError, type SourceLocation, TelemetryValidationError } from "../runtime/errors.js";
import { type PythonScalar, pythonStr } from "../text/pyrepr.js";

/** Every lifecycle status a session can have (the reference has no "clean" or "crashed"). */
export const SESSION_STATUSES = ["running", "completed", "interrupted", "incomplete"] as const;
/**
 * Lifecycle of a capture session: `running` while tracking, `completed` after a clean stop,
 * `interrupted` when a crashed `running` session is found on reopening a sink, `incomplete` when
 * writing failed or no stop was seen.
 */
export type SessionStatus = (typeof SESSION_STATUSES)[number];

const STATUS_SET: ReadonlySet<string> = new Set(SESSION_STATUSES);

/** Selection priority per status; lower wins. Unknown statuses rank last (99). */
export const SESSION_SELECTION_PRIORITY: Readonly<Record<SessionStatus, number>> = {
  completed: 0,
  interrupted: 1,
  incomplete: 2,
  running: 3,
};
const UNKNOWN_STATUS_PRIORITY = 99;

/**
 * Identity and lifecycle of one capture session, with the reference's snake_case field names and
 * order (`dataclasses.asdict(SessionSummary)`), as stored in a sink manifest.
 */
export interface SessionSummary {
  session_id: string;
  status: SessionStatus;
  /** Nanoseconds since the Unix epoch. */
  started_at_ns: bigint;
  ended_at_ns: bigint | null;
  host: string;
  pid: number;
  job_id: string | null;
  rank: number;
  local_rank: number;
  world_size: number;
  /** What produced the summary, e.g. `stormlog.tracker`. */
  source: string;
}

/** The fields session ordering looks at; `status` may be any string (unknown ranks last). */
export interface SessionOrderKey {
  readonly session_id: string;
  readonly status: string;
  readonly started_at_ns: bigint;
  readonly ended_at_ns: bigint | null;
}

/** The RFC 4122 URL namespace (`uuid.NAMESPACE_URL` in Python). */
export const NAMESPACE_URL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";

/** A name-based (SHA-1, version 5) UUID, as Python's `uuid.uuid5(namespace, name)`. */
export function uuid5(namespace: string, name: string): string {
  const namespaceBytes = Buffer.from(namespace.replace(/-/g, ""), "hex");
  if (namespaceBytes.length !== 16) {
    throw new InvalidConfigError(
      "namespace",
      `expected a UUID such as ${NAMESPACE_URL}, got ${JSON.stringify(namespace)}`,
    );
  }
  const bytes = nodeCrypto()
    .createHash("sha1")
    .update(namespaceBytes)
    .update(name, "utf8")
    .digest()
    .subarray(0, 16);
  bytes[6] = (bytes[6]! & 0x0f) | 0x50;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The reference's deterministic id for artifacts without a session:
 * `"legacy-" + uuid5(NAMESPACE_URL, "::".join(str(p) for p in parts if p is not None))`.
 * Numbers go through Python's `str()` (see `pythonStr`); pass a float that must keep its `.0` as
 * the string `pythonStr(x, { float: true })`.
 */
export function stableLegacySessionId(parts: readonly (PythonScalar | null | undefined)[]): string {
  const payload = parts
    .filter((part): part is PythonScalar => part !== null && part !== undefined)
    .map((part) => pythonStr(part))
    .join("::");
  return `legacy-${uuid5(NAMESPACE_URL, payload)}`;
}

/** A fresh random session id (UUID v4), as the reference's `new_session_id`. */
export function newSessionId(): string {
  return nodeCrypto().randomUUID();
}

/** Checks and normalizes a status (trimmed, lower-cased). Throws `InvalidConfigError` otherwise. */
export function normalizeSessionStatus(value: unknown): SessionStatus {
  if (typeof value !== "string" || value.trim() === "") {
    throw new InvalidConfigError(
      "status",
      `session status must be a non-empty string, one of ${SESSION_STATUSES.join(", ")}`,
    );
  }
  const normalized = value.trim().toLowerCase();
  if (!STATUS_SET.has(normalized)) {
    throw new InvalidConfigError(
      "status",
      `Unsupported session status: ${value}; use one of ${SESSION_STATUSES.join(", ")}`,
    );
  }
  return normalized as SessionStatus;
}

/** Options of `createSessionSummary`; everything but `source` has a default. */
export interface CreateSessionSummaryOptions {
  source: string;
  /** Default `running`. */
  status?: string;
  /** Default: a new UUID v4 (also when empty). */
  sessionId?: string | null;
  /** Default: now, from `clock`. */
  startedAtNs?: bigint | null;
  endedAtNs?: bigint | null;
  /** Default: this machine's host name (also when empty). */
  host?: string | null;
  /** Default: this process's pid. */
  pid?: number | null;
  jobId?: string | null;
  rank?: number;
  localRank?: number;
  /** Raised to at least 1. */
  worldSize?: number;
  /** Default `systemClock`. */
  clock?: Clock;
}

/** Builds a normalized summary, filling defaults as the reference's `create_session_summary`. */
export function createSessionSummary(options: CreateSessionSummaryOptions): SessionSummary {
  const clock = options.clock ?? systemClock;
  return {
    session_id: options.sessionId || newSessionId(),
    status: normalizeSessionStatus(options.status ?? "running"),
    started_at_ns: options.startedAtNs ?? clock.nowNs(),
    ended_at_ns: options.endedAtNs ?? null,
    host: options.host || hostname(),
    pid: options.pid ?? process.pid,
    job_id: options.jobId ?? null,
    rank: options.rank ?? 0,
    local_rank: options.localRank ?? 0,
    world_size: Math.max(1, options.worldSize ?? 1),
    source: options.source,
  };
}

/** Lifecycle changes for `updateSessionSummary`; an absent key leaves the field as it is. */
export interface SessionSummaryUpdate {
  status?: string;
  /** `null` clears the end time; `undefined` keeps it. */
  endedAtNs?: bigint | null;
  source?: string;
}

/** A copy of `summary` with lifecycle changes applied. */
export function updateSessionSummary(summary: SessionSummary, update: SessionSummaryUpdate): SessionSummary {
  return {
    ...summary,
    ...(update.status === undefined ? {} : { status: normalizeSessionStatus(update.status) }),
    ...(update.endedAtNs === undefined ? {} : { ended_at_ns: update.endedAtNs }),
    ...(update.source === undefined ? {} : { source: update.source }),
  };
}

/**
 * Ends a session: `running` becomes `completed`, any other status (`incomplete` after a sink
 * failure, `interrupted`) is kept; `ended_at_ns` is set (default now).
 */
export function finalizeSessionSummary(
  summary: SessionSummary,
  options: { endedAtNs?: bigint; clock?: Clock } = {},
): SessionSummary {
  return updateSessionSummary(summary, {
    status: summary.status === "running" ? "completed" : summary.status,
    endedAtNs: options.endedAtNs ?? (options.clock ?? systemClock).nowNs(),
  });
}

/** The summary as a JSON object, in the reference's field order (as in a sink manifest). */
export function sessionSummaryToJson(summary: SessionSummary): JsonObject {
  return {
    session_id: summary.session_id,
    status: summary.status,
    started_at_ns: summary.started_at_ns,
    ended_at_ns: summary.ended_at_ns,
    host: summary.host,
    pid: summary.pid,
    job_id: summary.job_id,
    rank: summary.rank,
    local_rank: summary.local_rank,
    world_size: summary.world_size,
    source: summary.source,
  };
}

function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Python's `int(x)` for a decoded JSON value, or undefined when it would raise. */
function pythonInt(value: JsonValue | undefined): bigint | undefined {
  if (typeof value === "bigint") return value;
  if (typeof value === "boolean") return value ? 1n : 0n;
  if (typeof value === "number") return Number.isFinite(value) ? BigInt(Math.trunc(value)) : undefined;
  if (typeof value === "string" && /^\s*[+-]?\d+(?:_\d+)*\s*$/.test(value)) {
    return BigInt(value.trim().replace(/_/g, ""));
  }
  return undefined;
}

/**
 * Reads a summary from its JSON form (a sink manifest entry), with the reference's rules:
 * `session_id`, `source`, `host` non-empty strings, a known `status`, `started_at_ns` present;
 * `pid`/`rank`/`local_rank`/`world_size` default to -1/0/0/1. Throws `TelemetryValidationError`.
 */
export function sessionSummaryFromJson(
  payload: JsonValue,
  options: { location?: SourceLocation } = {},
): SessionSummary {
  const fail = (message: string, field?: string): never => {
    throw new TelemetryValidationError(message, {
      ...(field ? { field } : {}),
      ...(options.location ? { location: options.location } : {}),
    });
  };
  if (!isPlainObject(payload)) return fail("session summary payload must be an object");
  const text = (field: string): string => {
    const value = payload[field];
    if (typeof value !== "string" || value.trim() === "")
      return fail(`${field} must be a non-empty string`, field);
    return value;
  };
  const integer = (field: string, fallback: bigint): bigint => {
    const value = payload[field];
    if (value === undefined) return fallback;
    const parsed = pythonInt(value);
    if (parsed === undefined)
      return fail(`${field} must be an integer, got ${JSON.stringify(String(value))}`, field);
    return parsed;
  };
  const smallInteger = (field: string, fallback: number): number => {
    const value = integer(field, BigInt(fallback));
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < -BigInt(Number.MAX_SAFE_INTEGER)) {
      return fail(`${field} exceeds 2^53`, field);
    }
    return Number(value);
  };

  const sessionId = text("session_id");
  const source = text("source");
  let status: SessionStatus;
  try {
    status = normalizeSessionStatus(payload.status);
  } catch (error) {
    return fail(
      error instanceof Error ? error.message.replace(/^Invalid option 'status': /, "") : "bad status",
      "status",
    );
  }
  if (payload.started_at_ns === undefined || payload.started_at_ns === null) {
    return fail("started_at_ns must be present", "started_at_ns");
  }
  const startedAtNs = integer("started_at_ns", 0n);
  const endedAtNs =
    payload.ended_at_ns === undefined || payload.ended_at_ns === null ? null : integer("ended_at_ns", 0n);
  const host = text("host");
  const jobId = payload.job_id;
  if (jobId !== undefined && jobId !== null && typeof jobId !== "string") {
    return fail("job_id must be a string or null", "job_id");
  }
  return {
    session_id: sessionId,
    status,
    started_at_ns: startedAtNs,
    ended_at_ns: endedAtNs,
    host,
    pid: smallInteger("pid", -1),
    job_id: jobId ?? null,
    rank: smallInteger("rank", 0),
    local_rank: smallInteger("local_rank", 0),
    world_size: Math.max(1, smallInteger("world_size", 1)),
    source,
  };
}

/** The event fields a summary is inferred from. */
export interface SessionEventLike {
  readonly timestamp_ns: bigint;
  readonly event_type: string;
  readonly host: string;
  readonly pid: number;
  readonly job_id: string | null;
  readonly rank: number;
  readonly local_rank: number;
  readonly world_size: number;
}

/** The fields of `event` a summary is inferred from, copied so that the event itself can be dropped. */
export function sessionEventLikeOf(event: SessionEventLike): SessionEventLike {
  return {
    timestamp_ns: event.timestamp_ns,
    event_type: event.event_type,
    host: event.host,
    pid: event.pid,
    job_id: event.job_id,
    rank: event.rank,
    local_rank: event.local_rank,
    world_size: event.world_size,
  };
}

/**
 * A summary for a session that has no manifest entry, from its events: started at the earliest
 * event, `completed` (ended at the last `stop`) if a `stop` event exists, else `fallbackStatus`
 * (default `incomplete`); identity from the earliest event. No events: a summary with this
 * process's host/pid, started now.
 */
export function inferSessionSummaryFromEvents(options: {
  sessionId: string;
  events: Iterable<SessionEventLike>;
  source: string;
  fallbackStatus?: string;
  clock?: Clock;
}): SessionSummary {
  const fallbackStatus = options.fallbackStatus ?? "incomplete";
  const events = [...options.events].sort((a, b) =>
    a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0,
  );
  const first = events[0];
  if (first === undefined) {
    return createSessionSummary({
      source: options.source,
      status: fallbackStatus,
      sessionId: options.sessionId,
      ...(options.clock ? { clock: options.clock } : {}),
    });
  }
  let status: string = normalizeSessionStatus(fallbackStatus);
  let endedAtNs: bigint | null = null;
  for (const event of events) {
    if (event.event_type === "stop") {
      status = "completed";
      endedAtNs = event.timestamp_ns;
    }
  }
  return createSessionSummary({
    source: options.source,
    status,
    sessionId: options.sessionId,
    startedAtNs: first.timestamp_ns,
    endedAtNs,
    host: first.host,
    pid: first.pid,
    jobId: first.job_id,
    rank: first.rank,
    localRank: first.local_rank,
    worldSize: first.world_size,
  });
}

/** Python's string order (by code point); JS `<` differs only for characters past U+FFFF. */
function compareCodePoints(a: string, b: string): number {
  if (a === b) return 0;
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return a.codePointAt(i)! < b.codePointAt(i)! ? -1 : 1;
  }
  return a.length < b.length ? -1 : 1;
}

function priorityOf(status: string): number {
  return STATUS_SET.has(status)
    ? SESSION_SELECTION_PRIORITY[status as SessionStatus]
    : UNKNOWN_STATUS_PRIORITY;
}

/**
 * The reference's session order, `(priority[status], -(ended_at_ns or started_at_ns),
 * -started_at_ns, session_id)`: completed before interrupted, incomplete, running, then unknown;
 * within a status the most recently ended (or started) first; ties broken by id.
 */
export function compareSessionsForSelection(a: SessionOrderKey, b: SessionOrderKey): number {
  const byPriority = priorityOf(a.status) - priorityOf(b.status);
  if (byPriority !== 0) return byPriority;
  // Python's `ended or started` also skips an end time of 0.
  const aRecent = a.ended_at_ns || a.started_at_ns;
  const bRecent = b.ended_at_ns || b.started_at_ns;
  if (aRecent !== bRecent) return aRecent > bRecent ? -1 : 1;
  if (a.started_at_ns !== b.started_at_ns) return a.started_at_ns > b.started_at_ns ? -1 : 1;
  return compareCodePoints(a.session_id, b.session_id);
}

/** A sorted copy of `sessions` in selection order (see `compareSessionsForSelection`). */
export function sortSessions<T extends SessionOrderKey>(sessions: Iterable<T>): T[] {
  return [...sessions].sort(compareSessionsForSelection);
}

function orderKeyOf(session: SessionOrderKey | { readonly summary: SessionOrderKey }): SessionOrderKey {
  return "summary" in session ? session.summary : session;
}

/** The session a reader opens by default: the first in selection order, or undefined if none. */
export function selectDefaultSession<T extends SessionOrderKey | { readonly summary: SessionOrderKey }>(
  sessions: Iterable<T>,
): T | undefined {
  let best: T | undefined;
  for (const session of sessions) {
    if (best === undefined || compareSessionsForSelection(orderKeyOf(session), orderKeyOf(best)) < 0)
      best = session;
  }
  return best;
}

/**
 * Like `selectDefaultSession` for loaded sessions, but a session with events wins over an empty
 * one (a completed session whose segments were all pruned is not picked over a live one).
 */
export function selectDefaultLoadedSession<
  T extends { readonly summary: SessionOrderKey; readonly events: { readonly length: number } },
>(sessions: Iterable<T>): T | undefined {
  const all = [...sessions];
  const nonEmpty = all.filter((session) => session.events.length > 0);
  return selectDefaultSession(nonEmpty.length > 0 ? nonEmpty : all);
}
