import { writeFileSync } from "node:fs";
import {
  encodeTelemetryRecord,
  InvalidConfigError,
  type JsonValue,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import { ALERT_TYPES, type RecordLog } from "../records/record-log.js";

/** Filters of `getEvents()`. */
export interface EventQuery {
  readonly eventType?: string;
  /** Only the last N (after the other filters). */
  readonly lastN?: number;
  /** Only records at or after this time (ns since the epoch). */
  readonly sinceNs?: bigint;
}

const epochSeconds = (ns: bigint): number => Number(ns) / 1e9;

/**
 * The in-memory history: the last `maxEvents` records of the store since the session started (or
 * `clear()`), read back as record objects (built at each call), as a timeline, or into a file.
 */
export class History {
  /** Absolute store index where the history starts (moved by `clear()`). */
  private start = 0;

  constructor(
    private readonly records: RecordLog,
    readonly maxEvents: number,
  ) {}

  /** A new session: the history starts with its first record. */
  reset(): void {
    this.start = 0;
  }

  /** Forgets the records kept so far. */
  clear(): void {
    this.start = this.records.store.written;
  }

  /** Absolute store indices of the history: [from, to). */
  range(): [number, number] {
    const written = this.records.store.written;
    return [Math.max(this.start, written - this.maxEvents), written];
  }

  /** Records since the start that the window no longer holds. */
  get dropped(): number {
    return Math.max(0, this.records.store.written - this.start - this.maxEvents);
  }

  /** Records kept that are later than `ns`. */
  countAfter(ns: bigint): number {
    const [from, to] = this.range();
    let count = 0;
    for (let index = from; index < to; index++) if (this.records.store.timestamp(index) > ns) count++;
    return count;
  }

  /** Records kept, oldest first, filtered. */
  events(query: EventQuery = {}): TelemetryEvent[] {
    const store = this.records.store;
    return this.select(
      query.lastN,
      (index) =>
        (query.eventType === undefined || store.eventType(index) === query.eventType) &&
        (query.sinceNs === undefined || store.timestamp(index) >= query.sinceNs),
    );
  }

  /** `warning`, `critical` and `error` records kept. */
  alerts(lastN?: number): TelemetryEvent[] {
    const store = this.records.store;
    return this.select(lastN, (index) => ALERT_TYPES.has(store.eventType(index)));
  }

  /** The last `lastN` (all when unset or not positive) records kept that `keep` accepts. */
  private select(lastN: number | undefined, keep: (index: number) => boolean): TelemetryEvent[] {
    const context = this.records.context;
    if (context === null) return [];
    const [from, to] = this.range();
    const selected: number[] = [];
    for (let index = from; index < to; index++) if (keep(index)) selected.push(index);
    const kept = lastN !== undefined && lastN > 0 ? selected.slice(-lastN) : selected;
    return kept.map((index) => this.records.store.materialize(index, context));
  }

  /**
   * The last record of device `deviceId` in each `intervalS`-second bucket from its first kept
   * record, as parallel arrays.
   */
  timeline(intervalS: number, deviceId: number) {
    if (!(intervalS > 0)) throw new InvalidConfigError("interval", `must be > 0, got ${String(intervalS)}`);
    const timeline = {
      timestamps: [] as number[],
      allocated: [] as (number | null)[],
      reserved: [] as (number | null)[],
      device_used: [] as (number | null)[],
      device_free: [] as (number | null)[],
      device_total: [] as (number | null)[],
    };
    const events = this.events().filter((event) => event.device_id === deviceId);
    const first = events[0];
    if (first === undefined) return timeline;
    const start = epochSeconds(first.timestamp_ns);
    const push = (bucket: number, event: TelemetryEvent) => {
      timeline.timestamps.push(start + bucket * intervalS);
      timeline.allocated.push(event.allocator_allocated_bytes);
      timeline.reserved.push(event.allocator_reserved_bytes);
      timeline.device_used.push(event.device_used_bytes);
      timeline.device_free.push(event.device_free_bytes);
      timeline.device_total.push(event.device_total_bytes);
    };
    let current = 0;
    let last = first;
    for (const event of events.slice(1)) {
      const bucket = Math.floor((epochSeconds(event.timestamp_ns) - start) / intervalS);
      if (bucket !== current) {
        push(current, last);
        current = bucket;
      }
      last = event;
    }
    push(current, last);
    return timeline;
  }

  /** Writes the records kept to `path` as `jsonl` (canonical sink lines) or `json`; returns how many. */
  export(path: string, format: "json" | "jsonl"): number {
    const events = this.events();
    if (format === "jsonl") {
      writeFileSync(path, events.map((event) => `${encodeTelemetryRecord(event)}\n`).join(""), "utf8");
    } else if (format === "json") {
      writeFileSync(path, `${stringifyJson(events as unknown as JsonValue, { indent: 2 })}\n`, "utf8");
    } else {
      throw new InvalidConfigError("format", `Unsupported format: ${String(format)}; use "json" or "jsonl"`);
    }
    return events.length;
  }
}
