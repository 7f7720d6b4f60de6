// Telemetry records and sink directories built for tests (the analysis and CLI tests use them too).
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  encodeTelemetryRecord,
  type JsonObject,
  type TelemetryEvent,
  type TelemetryRecordV3,
} from "@stormlog/core";
import { afterAll } from "vitest";
import { serializeManifest } from "../../src/internal.js";

/** The golden cases recorded from the Python reference, in the repository. */
export const GOLDEN = join(import.meta.dirname, "../../../../fixtures/golden");
let goldenCopies: string | undefined;

/**
 * A copy of `fixtures/golden/<relative>` (a file or a folder) in a temporary folder of this test file,
 * removed after it: what an analysis writes beside its input (its index) stays out of the repository.
 */
export function goldenCopy(relative: string): string {
  if (goldenCopies === undefined) {
    const root = mkdtempSync(join(tmpdir(), "stormlog-golden-"));
    goldenCopies = root;
    afterAll(() => rmSync(root, { recursive: true, force: true }));
  }
  const target = join(goldenCopies, relative);
  if (!existsSync(target)) cpSync(join(GOLDEN, relative), target, { recursive: true });
  return target;
}

export const BASE_NS = 1_760_000_000_000_000_000n;
export const MS = 1_000_000n;
export const MiB = 1024 ** 2;
export const GiB = 1024 ** 3;

/** A canonical v3 record with defaults; `extra` overrides any field. */
export function record(
  eventType: string,
  timestampNs: bigint,
  extra: Partial<TelemetryRecordV3> = {},
): TelemetryEvent {
  return {
    schema_version: 3,
    session_id: "session-a",
    timestamp_ns: timestampNs,
    event_type: eventType,
    collector: "stormlog.test",
    sampling_interval_ms: 10,
    pid: 100,
    host: "node-0",
    job_id: null,
    rank: 0,
    local_rank: 0,
    world_size: 1,
    device_id: 0,
    allocator_allocated_bytes: 0,
    allocator_reserved_bytes: 0,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: 0,
    device_free_bytes: null,
    device_total_bytes: 80 * GiB,
    context: null,
    metadata: {},
    ...extra,
  };
}

/** `count` samples of one session, 1 ms apart from `start`. */
export function samples(
  count: number,
  options: { sessionId?: string; start?: bigint } = {},
): TelemetryEvent[] {
  const start = options.start ?? BASE_NS;
  const fields = options.sessionId === undefined ? {} : { session_id: options.sessionId };
  return Array.from({ length: count }, (_, i) => record("sample", start + BigInt(i) * MS, fields));
}

/** JSON arrays nested `depth` deep: past every parser's recursion limit at a few thousand. */
export function deepJson(depth: number): string {
  return `${"[".repeat(depth)}${"]".repeat(depth)}`;
}

/** Builds one process's events: samples and nested phases, boundary records carrying the current counters. */
export class Timeline {
  readonly events: TelemetryEvent[] = [];
  now: bigint;
  allocated = 1 * GiB;
  reserved = 2 * GiB;
  gap = 256 * MiB;
  tensors: number | null = null;
  private sequence = 0;
  private readonly stack: { name: string; path: string[]; scopeId: string; parent: string | null }[] = [];

  constructor(
    readonly identity: Partial<TelemetryRecordV3> = {},
    start: bigint = BASE_NS,
  ) {
    this.now = start;
  }

  /** `metadata.phase_counters` of phase records (our tracker's reads at the boundary), null to leave it out. */
  phaseCounters: "boundary_read" | "last_sample" | null = "boundary_read";

  private counters(): Partial<TelemetryRecordV3> {
    return {
      allocator_allocated_bytes: this.allocated,
      allocator_reserved_bytes: this.reserved,
      device_used_bytes: this.reserved + this.gap,
    };
  }

  private metadata(extra: JsonObject = {}): JsonObject {
    return this.tensors === null ? extra : { ...extra, tfjs_num_tensors: this.tensors };
  }

  advance(ms: number): this {
    this.now += BigInt(ms) * MS;
    return this;
  }

  sample(): this {
    this.events.push(
      record("sample", this.now, { ...this.identity, ...this.counters(), metadata: this.metadata() }),
    );
    return this.advance(10);
  }

  event(eventType: string, extra: Partial<TelemetryRecordV3> = {}): this {
    this.events.push(record(eventType, this.now, { ...this.identity, ...this.counters(), ...extra }));
    return this.advance(1);
  }

  enter(name: string): this {
    const parent = this.stack[this.stack.length - 1] ?? null;
    const sessionId = this.identity.session_id ?? "session-a";
    this.sequence++;
    const scope = {
      name,
      path: parent ? [...parent.path, name] : [name],
      scopeId: `${sessionId}:${this.sequence}`,
      parent: parent?.scopeId ?? null,
    };
    this.stack.push(scope);
    this.boundary("enter", scope);
    return this.advance(1);
  }

  exit(): this {
    const scope = this.stack.pop();
    if (scope === undefined) throw new Error("no open phase");
    this.sequence++;
    this.boundary("exit", scope);
    return this.advance(1);
  }

  private boundary(
    action: "enter" | "exit",
    scope: { name: string; path: string[]; scopeId: string; parent: string | null },
  ): void {
    this.events.push(
      record(action === "enter" ? "phase_enter" : "phase_exit", this.now, {
        ...this.identity,
        ...this.counters(),
        context: `Phase ${action === "enter" ? "entered" : "exited"}: ${scope.path.join(" / ")}`,
        metadata: this.metadata({
          ...(this.phaseCounters === null ? {} : { phase_counters: this.phaseCounters }),
          phase_scope: {
            action,
            name: scope.name,
            path: scope.path,
            depth: scope.path.length,
            scope_id: scope.scopeId,
            parent_scope_id: scope.parent,
            thread_id: 1,
            thread_name: "main",
            sequence: this.sequence,
          },
        }),
      }),
    );
  }
}

/** Writes events as a sink directory (one segment per `segmentSize` events, manifest with the sessions). */
export function writeSink(
  dir: string,
  events: readonly TelemetryEvent[],
  options: {
    segmentSize?: number;
    status?: "completed" | "interrupted" | "running";
    manifest?: boolean;
  } = {},
): string[] {
  mkdirSync(dir, { recursive: true });
  const size = options.segmentSize ?? 1000;
  const files: string[] = [];
  const segments = [];
  for (let i = 0, n = 1; i < events.length; i += size, n++) {
    const chunk = events.slice(i, i + size);
    const filename = `segment-${String(n).padStart(6, "0")}.jsonl`;
    const text = chunk.map((event) => `${encodeTelemetryRecord(event)}\n`).join("");
    writeFileSync(join(dir, filename), text);
    files.push(join(dir, filename));
    segments.push({
      filename,
      event_count: chunk.length,
      size_bytes: Buffer.byteLength(text),
      closed: true,
      session_id: chunk[0]!.session_id,
    });
  }
  if (options.manifest !== false) {
    const bySession = new Map<string, TelemetryEvent[]>();
    for (const event of events) {
      const list = bySession.get(event.session_id) ?? [];
      list.push(event);
      bySession.set(event.session_id, list);
    }
    const sessions = [...bySession.entries()].map(([sessionId, list]) => {
      const first = list[0]!;
      return {
        session_id: sessionId,
        status: options.status ?? "completed",
        started_at_ns: first.timestamp_ns,
        ended_at_ns: options.status === "running" ? null : list[list.length - 1]!.timestamp_ns,
        host: first.host,
        pid: first.pid,
        job_id: first.job_id,
        rank: first.rank,
        local_rank: first.local_rank,
        world_size: first.world_size,
        source: "stormlog.tracker",
      };
    });
    writeFileSync(join(dir, "manifest.json"), serializeManifest(sessions, segments));
  }
  return files;
}

/** Sleeps past the index's two-second "may still change" window. */
export function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 2100));
}

/** Appends one sample of `identity` at `at`, with `gap` bytes of hidden memory, to a segment file. */
export function appendSample(
  segment: string,
  identity: Partial<TelemetryRecordV3>,
  at: bigint,
  gap: number,
): void {
  const t = new Timeline(identity, at);
  t.gap = gap;
  t.sample();
  appendFileSync(segment, `${encodeTelemetryRecord(t.events[0]!)}\n`);
}
