import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type Clock,
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryReading,
  noCapabilities,
  type SampleResult,
  type Scheduler,
  type SessionStatus,
  type SessionSummary,
  type TelemetryEvent,
  type TimerHandle,
} from "@stormlog/core";
import type { TelemetrySinkOptions } from "@stormlog/sink";
import { afterEach } from "vitest";
import {
  MemoryTracker,
  type MemoryTrackerOptions,
  type TelemetryWriter,
  type WriterDiagnostics,
} from "../src/index.js";

/** A maker of temporary directories (prefix `prefix`), each removed after the test that made it. */
export function temporaryDirectories(prefix: string): () => string {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  return () => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };
}

/** A clock the test moves by hand, starting at a whole number of epoch seconds. */
export class FakeClock implements Clock {
  ns: bigint;
  constructor(startSeconds = 1_700_000_000) {
    this.ns = BigInt(startSeconds) * 1_000_000_000n;
  }
  nowNs(): bigint {
    return this.ns;
  }
  setSeconds(seconds: number): void {
    this.ns = BigInt(Math.round(seconds * 1e9));
  }
  advanceMs(ms: number): void {
    this.ns += BigInt(Math.round(ms * 1e6));
  }
  get seconds(): number {
    return Number(this.ns) / 1e9;
  }
}

interface FakeTimer {
  id: number;
  dueNs: bigint;
  callback: () => void;
}

/** Timers driven by `advance()`, on a `FakeClock`. */
export class FakeScheduler implements Scheduler {
  private timers: FakeTimer[] = [];
  private nextId = 1;
  constructor(readonly clock: FakeClock) {}

  setTimeout(callback: () => void, delayMs: number): TimerHandle {
    const timer = { id: this.nextId++, dueNs: this.clock.ns + BigInt(Math.round(delayMs * 1e6)), callback };
    this.timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers = this.timers.filter((timer) => timer.id !== handle);
  }

  get pending(): number {
    return this.timers.length;
  }

  /** Moves time forward, firing due timers in order and letting their promises settle. */
  async advance(ms: number): Promise<void> {
    const target = this.clock.ns + BigInt(Math.round(ms * 1e6));
    for (;;) {
      this.timers.sort((a, b) => (a.dueNs < b.dueNs ? -1 : a.dueNs > b.dueNs ? 1 : a.id - b.id));
      const next = this.timers[0];
      if (next === undefined || next.dueNs > target) break;
      this.timers.shift();
      if (next.dueNs > this.clock.ns) this.clock.ns = next.dueNs;
      next.callback();
      await settle();
    }
    this.clock.ns = target;
    await settle();
  }
}

/** Lets pending promise callbacks run. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** The capabilities of the reference's test collector (a CUDA device with every counter). */
export function cudaCapabilities(overrides: Partial<MemoryCapabilities> = {}): MemoryCapabilities {
  return {
    ...noCapabilities("cuda", "stormlog.cuda_tracker", "test.collector"),
    supports_allocator_allocated: true,
    supports_allocator_reserved: true,
    supports_allocator_active: true,
    supports_allocator_inactive: true,
    supports_device_used: true,
    supports_device_free: true,
    supports_device_total: true,
    supports_fragmentation_analysis: true,
    ...overrides,
  };
}

/** The reference test's `_sample`: used = max(allocated, reserved), free = total - used. */
export function reading(options: {
  allocated: number;
  reserved: number;
  used?: number;
  total?: number | null;
  active?: number | null;
  inactive?: number | null;
}): MemoryReading {
  const total = options.total === undefined ? 4096 : options.total;
  const used = options.used ?? Math.max(options.allocated, options.reserved);
  return {
    allocator_allocated_bytes: options.allocated,
    allocator_reserved_bytes: options.reserved,
    allocator_active_bytes: options.active === undefined ? 512 : options.active,
    allocator_inactive_bytes: options.inactive === undefined ? 256 : options.inactive,
    device_used_bytes: used,
    device_free_bytes: total === null ? null : total - used,
    device_total_bytes: total,
  };
}

export function full(r: MemoryReading): SampleResult {
  return { kind: "full", reading: r };
}

export function failure(error = "collector unavailable"): SampleResult {
  return { kind: "failure", error };
}

/** The reference's `_SequencedCollector`: returns its results in turn, then repeats the last. */
export class SequencedCollector implements MemoryCollector {
  readonly specificationVersion = COLLECTOR_SPECIFICATION_VERSION;
  calls = 0;
  readSyncResult: SampleResult | undefined;
  private queue: (SampleResult | Promise<SampleResult>)[];
  private last: SampleResult | Promise<SampleResult>;

  constructor(
    results: (SampleResult | Promise<SampleResult>)[],
    readonly name = "stormlog.cuda_tracker",
    readonly deviceId = 0,
    readonly capabilities: MemoryCapabilities = cudaCapabilities(),
  ) {
    this.queue = [...results];
    this.last = results[results.length - 1] as SampleResult;
  }

  availability(): CollectorAvailability {
    return { available: true };
  }

  sample(): SampleResult | Promise<SampleResult> {
    this.calls++;
    const next = this.queue.shift();
    if (next !== undefined) this.last = next;
    return this.last;
  }

  push(...results: (SampleResult | Promise<SampleResult>)[]): void {
    this.queue.push(...results);
  }
}

/** A collector with a `readSync()` (like tfjs's counters) whose value the test sets. */
export class SyncReadCollector extends SequencedCollector {
  current: MemoryReading;
  constructor(
    initial: MemoryReading,
    name = "stormlog.tfjs_tracker",
    deviceId = 0,
    capabilities?: MemoryCapabilities,
  ) {
    super([], name, deviceId, capabilities);
    this.current = initial;
  }
  override sample(): SampleResult {
    this.calls++;
    return { kind: "full", reading: { ...this.current } };
  }
  readSync(): SampleResult {
    return { kind: "full", reading: { ...this.current } };
  }
}

/** A writer that keeps what it gets, optionally failing. */
export class FakeWriter implements TelemetryWriter {
  records: TelemetryEvent[] = [];
  sessions: SessionSummary[] = [];
  closes: (SessionStatus | undefined)[] = [];
  failAppend = false;
  diagnostics: WriterDiagnostics = { rollover_count: 0, final_retained_files: 1, final_retained_bytes: 10 };

  append(record: TelemetryEvent): void {
    if (this.failAppend) throw new Error("disk full");
    this.records.push(record);
  }
  startSession(summary: Partial<SessionSummary>): SessionSummary {
    const full = { status: "running", ended_at_ns: null, ...summary } as SessionSummary;
    this.sessions.push(full);
    return full;
  }
  close(status?: SessionStatus): Promise<void> {
    this.closes.push(status);
    return Promise.resolve();
  }
  getDiagnostics(): WriterDiagnostics {
    return this.diagnostics;
  }
}

/** A tracker with fake time, no process hooks, no global registration. */
export function makeTracker(
  collectors: MemoryCollector[],
  options: Partial<MemoryTrackerOptions> = {},
  startSeconds = 1_700_000_000,
): { tracker: MemoryTracker; clock: FakeClock; scheduler: FakeScheduler; warnings: string[] } {
  const clock = new FakeClock(startSeconds);
  const scheduler = new FakeScheduler(clock);
  const warnings: string[] = [];
  const tracker = new MemoryTracker({
    collectors,
    samplingIntervalMs: 10,
    // Tests drive sampling themselves (sampleNow, fake timers).
    initialSample: false,
    alerts: false,
    clock,
    scheduler,
    env: false,
    handleProcessExit: false,
    registerGlobal: false,
    hostname: "test-host",
    pid: 4242,
    logger: { warn: (message) => warnings.push(message) },
    ...options,
  });
  return { tracker, clock, scheduler, warnings };
}

export function types(tracker: MemoryTracker): string[] {
  return tracker.getEvents().map((event) => event.event_type);
}

/** A tracker (fake time) writing a sink into `root`, sampling one collector at 128 / 256 bytes. */
export function trackerWithSink(root: string, sink: Partial<TelemetrySinkOptions> = {}) {
  const collector = new SequencedCollector([full(reading({ allocated: 128, reserved: 256 }))]);
  return makeTracker([collector], { sink: { rootDir: root, handleProcessExit: false, ...sink } });
}

/** The records of `trackOnePhase`, in order. */
export const ONE_PHASE_SESSION: readonly string[] = [
  "start",
  "peak",
  "sample",
  "phase_enter",
  "phase_exit",
  "stop",
];

/** Starts, samples once, runs one phase and stops. */
export async function trackOnePhase(tracker: MemoryTracker): Promise<void> {
  await tracker.start();
  await tracker.sampleNow();
  tracker.phase("train", () => undefined);
  await tracker.stop();
}
