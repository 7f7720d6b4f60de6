/** The memory timeline of a tracking session: rows per event, the 250-point sampling, the alerts table. */
import { ALERT_EVENT_TYPES, type JsonValue } from "@stormlog/core";
import type { WandbCell } from "../client.js";
import { isPyInt, isPyNumber, pyStr, pyTruthy } from "../python/values.js";

/** Event types the timeline pins and the alerts table lists: the alerts, and peaks as the reference adds. */
export const PINNED_EVENT_TYPES: ReadonlySet<string> = new Set([...ALERT_EVENT_TYPES, "peak"]);

/** At most this many timeline points reach W&B. */
export const TIMELINE_MAX_POINTS = 250;

/** The most alert rows the alerts table keeps (the last ones). */
export const ALERTS_TABLE_MAX_ROWS = 250;

/**
 * An event as the export reads it: a telemetry record (`TelemetryEvent` of `@stormlog/core`) or any
 * object with the reference's field names (`event_type`, `timestamp_ns` or `timestamp`,
 * `allocator_allocated_bytes` or `memory_allocated`, ...).
 */
export type ExportEvent = object;

/** One timeline point. */
export interface TimelineRow {
  /** The event's index among the events with a timestamp. */
  readonly sample_index: number;
  readonly elapsed_seconds: number;
  readonly event_type: string;
  readonly allocated_bytes: number | bigint | null;
  readonly reserved_bytes: number | bigint | null;
  readonly change_bytes: number | bigint | null;
  readonly device_used_bytes: number | bigint | null;
  readonly utilization_percent: number | null;
  readonly context: JsonValue;
  /** `str(context or '')`, as the dashboard prints it. */
  readonly contextText: string;
  readonly rank: JsonValue;
}

/** `getattr(event, name, None)` / `event.get(name)`. */
export function eventValue(event: ExportEvent, name: string): unknown {
  if (!(name in event)) return null;
  const value = (event as Record<string, unknown>)[name];
  return value === undefined ? null : value;
}

function jsonOf(value: unknown): JsonValue {
  if (
    value === null ||
    typeof value === "string" ||
    typeof value === "number" ||
    typeof value === "boolean" ||
    typeof value === "bigint" ||
    typeof value === "object"
  ) {
    return value as JsonValue;
  }
  return null;
}

/** The first of `names` holding an integer (not a boolean). */
export function eventIntValue(event: ExportEvent, ...names: string[]): number | bigint | null {
  for (const name of names) {
    const value = eventValue(event, name);
    if (isPyInt(value)) return value;
  }
  return null;
}

/** Seconds since the epoch: `timestamp` (a number), else `timestamp_ns / 1e9`. */
export function eventTimestampSeconds(event: ExportEvent): number | null {
  const value = eventValue(event, "timestamp");
  if (isPyNumber(value)) return Number(value);
  const ns = eventValue(event, "timestamp_ns");
  if (isPyInt(ns)) return Number(ns) / 1_000_000_000.0;
  return null;
}

function eventTypeOf(event: ExportEvent): unknown {
  const primary = eventValue(event, "event_type");
  return pyTruthy(primary) ? primary : eventValue(event, "type");
}

function maxInt(values: readonly (number | bigint)[]): number | bigint {
  let best = values[0] as number | bigint;
  for (const value of values) if (value > best) best = value;
  return best;
}

/** The timeline rows of the events, sampled to at most 250 points. */
export function trackingTimelineRows(events: Iterable<ExportEvent>): TimelineRow[] {
  const rows: TimelineRow[] = [];
  let first: number | null = null;
  for (const event of events) {
    const timestamp = eventTimestampSeconds(event);
    if (timestamp === null) continue;
    if (first === null) first = timestamp;
    const allocated = eventIntValue(event, "memory_allocated", "allocator_allocated_bytes");
    const reserved = eventIntValue(event, "memory_reserved", "allocator_reserved_bytes");
    const change = eventIntValue(event, "memory_change", "allocator_change_bytes");
    let deviceUsed = eventIntValue(event, "device_used", "device_used_bytes");
    const deviceTotal = eventIntValue(event, "device_total", "device_total_bytes");
    if (deviceUsed === null) {
      const candidates = [allocated, reserved].filter((value): value is number | bigint => value !== null);
      deviceUsed = candidates.length > 0 ? maxInt(candidates) : null;
    }
    let utilization: number | null = null;
    if (deviceUsed !== null && deviceTotal !== null && deviceTotal > 0) {
      utilization = (Number(deviceUsed) / Number(deviceTotal)) * 100.0;
    }
    const rawType = eventTypeOf(event);
    const context = jsonOf(eventValue(event, "context"));
    rows.push({
      sample_index: rows.length,
      elapsed_seconds: timestamp - first,
      event_type: pyTruthy(rawType) ? pyStr(jsonOf(rawType)) : "sample",
      allocated_bytes: allocated,
      reserved_bytes: reserved,
      change_bytes: change,
      device_used_bytes: deviceUsed,
      utilization_percent: utilization,
      context,
      contextText: pyTruthy(context) ? pyStr(context) : "",
      rank: jsonOf(eventValue(event, "rank")),
    });
  }
  return sampleTimelineRows(rows);
}

/**
 * At most 250 rows: every alert row and the last row are kept (the last 250 of them when they alone
 * are more); the rest of the budget takes every k-th other row from the first, k = ceil(others / budget).
 */
export function sampleTimelineRows<T extends { readonly sample_index: number; readonly event_type: string }>(
  rows: readonly T[],
): T[] {
  if (rows.length <= TIMELINE_MAX_POINTS) return [...rows];
  const pinned = new Map<number, T>();
  for (const row of rows) if (PINNED_EVENT_TYPES.has(row.event_type)) pinned.set(row.sample_index, row);
  const last = rows[rows.length - 1] as T;
  pinned.set(last.sample_index, last);
  const pinnedRows = [...pinned.values()].sort((a, b) => a.sample_index - b.sample_index);
  const budget = TIMELINE_MAX_POINTS - pinnedRows.length;
  if (budget <= 0) return pinnedRows.slice(-TIMELINE_MAX_POINTS);
  const unpinned = rows.filter((row) => !pinned.has(row.sample_index));
  const stride = Math.max(1, Math.ceil(unpinned.length / budget));
  const sampled = unpinned.filter((_, index) => index % stride === 0).slice(0, budget);
  return [...pinnedRows, ...sampled]
    .sort((a, b) => a.sample_index - b.sample_index)
    .slice(0, TIMELINE_MAX_POINTS);
}

/** The alerts table's columns. */
export const ALERT_COLUMNS = [
  "timestamp_s",
  "event_type",
  "context",
  "memory_allocated_bytes",
  "memory_reserved_bytes",
  "memory_change_bytes",
  "job_id",
  "rank",
] as const;

/** The last 250 alert events of all events, as rows of the alerts table. */
export function alertRows(events: Iterable<ExportEvent>): WandbCell[][] {
  const rows: WandbCell[][] = [];
  for (const event of events) {
    const type = eventTypeOf(event);
    if (typeof type !== "string" || !PINNED_EVENT_TYPES.has(type)) continue;
    rows.push([
      eventTimestampSeconds(event),
      type,
      jsonOf(eventValue(event, "context")),
      eventIntValue(event, "memory_allocated", "allocator_allocated_bytes"),
      eventIntValue(event, "memory_reserved", "allocator_reserved_bytes"),
      eventIntValue(event, "memory_change", "allocator_change_bytes"),
      jsonOf(eventValue(event, "job_id")),
      jsonOf(eventValue(event, "rank")),
    ]);
  }
  return rows.slice(-ALERTS_TABLE_MAX_ROWS);
}
