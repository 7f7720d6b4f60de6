import { type Clock, formatBytes, type JsonObject, type MemoryReading } from "@stormlog/core";
import {
  type AlertThresholds,
  checkThreshold,
  evaluateAlerts,
  type ResolvedAlertPolicy,
  thresholdKey,
} from "../alerts/alerts.js";
import type { LeakWatch } from "../alerts/leak-alerts.js";
import { describeError } from "../describe-error.js";
import type { CollectorHealthMachine } from "../health/collector-health.js";
import { healthMetadata } from "../health/health.js";
import type { TrackerLogger } from "../options/tracker-options.js";
import type { RecordLog } from "../records/record-log.js";
import { SKIPPED } from "./collector-reader.js";
import type { CollectorSet } from "./collector-set.js";
import {
  type CheckedFailure,
  type CheckedReading,
  checkSample,
  type DeviceGroup,
  readSyncOver,
} from "./device-group.js";
import type { SampleSink } from "./sampling-loop.js";

type Outcome = CheckedReading | CheckedFailure | typeof SKIPPED;

/** What a high-water sample says of itself: no collector was read at its time. */
export const HIGH_WATER_CONTEXT = "High-water mark since the previous reading.";
/** Its metadata, shared by every one (records are never changed after being stored). */
export const HIGH_WATER_METADATA: JsonObject = { high_water_mark: true };

function isFailure(outcome: CheckedReading | CheckedFailure): outcome is CheckedFailure {
  return (outcome as CheckedFailure).error !== undefined;
}

/**
 * Turns one tick's collector results into records, device by device: checks each result against the
 * contract, merges the device's counters, moves collector health, updates the device's statistics
 * and records `peak`, `allocation`/`deallocation`, alerts and the `sample` itself.
 */
export class SampleProcessor implements SampleSink {
  constructor(
    private readonly records: RecordLog,
    private readonly collectors: CollectorSet,
    private readonly health: CollectorHealthMachine,
    private readonly clock: Clock,
    private readonly logger: TrackerLogger,
    private readonly alertPolicy: ResolvedAlertPolicy,
    /** The alert thresholds, owned here (`setThreshold()` changes them). */
    private readonly thresholdValues: AlertThresholds,
    private readonly leakWatch: LeakWatch | null,
  ) {}

  /** The alert thresholds (a copy). */
  get thresholds(): AlertThresholds {
    return { ...this.thresholdValues };
  }

  /** Changes one threshold (`memory_warning_percent` or `memoryWarningPercent`...). */
  setThreshold(name: string, value: number): void {
    const key = thresholdKey(name);
    this.thresholdValues[key] = checkThreshold(key, value);
  }

  /** Records one tick: `raw` holds each collector's result (or `SKIPPED`) by its state's index. */
  process(raw: readonly unknown[]): void {
    const ts = this.clock.nowNs();
    const nowS = Number(ts) / 1e9;
    if (this.collectors.highWaterStates.length > 0) this.takeHighWater(ts, true);
    for (const group of this.collectors.groups) {
      const outcomes: Outcome[] = group.states.map((state) => {
        const value = raw[state.index];
        return value === SKIPPED ? SKIPPED : checkSample(state, value);
      });
      this.processGroup(group, outcomes, ts, nowS);
    }
  }

  /**
   * Ends the high-water windows of the primary device's collectors at `ts`, the time of the record
   * about to be written, and records a peak that they saw go above both of the window's ends as a
   * `sample` just before it (inside the same phase: windows end at every boundary). `record` false
   * only starts new windows (a session's start).
   */
  takeHighWater(ts: bigint, record: boolean): void {
    const states = this.collectors.highWaterStates;
    let high: MemoryReading | null = null;
    for (const state of states) {
      let taken: MemoryReading | null | undefined;
      try {
        taken = state.collector.takeHighWater?.();
      } catch {
        continue;
      }
      if (taken === null || taken === undefined || typeof taken !== "object") continue;
      for (const field of state.owned) {
        const value = taken[field];
        if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) {
          high ??= {};
          high[field] = value;
        }
      }
    }
    if (high === null || !record) return;
    const group = this.collectors.primary;
    // As a boundary record: the last sample's counters, with what reads synchronously read now (a
    // wasm heap that grew for the peak is at least as large now), under the peak itself. What was
    // not read now (NVML's counters, polled on its thread) is listed as partial.
    const readNow = new Set<string>();
    const reading = readSyncOver(states, group.lastReading, readNow) ?? { ...group.lastReading };
    for (const field of Object.keys(high)) readNow.add(field);
    const unread: string[] = [];
    for (const state of group.states)
      for (const field of state.owned) if (!readNow.has(field)) unread.push(field);
    this.recordHighWater(group, Object.assign(reading, high), unread, this.markTime(ts));
  }

  /**
   * Just before `ts`, yet not before the record stored last: with a clock that did not move since
   * (a coarse or fake one), a mark at `ts - 1` would fall before the phase it belongs to.
   */
  private markTime(ts: bigint): bigint {
    const store = this.records.store;
    let mark = ts - 1n;
    if (store.written > 0) {
      const last = store.timestamp(store.written - 1);
      if (mark < last) mark = last < ts ? last : ts;
    }
    return mark;
  }

  /**
   * A high-water mark as a `sample`, with its change from the last reading, the statistics' peaks, a
   * `peak` record and alerts; `unread` lists the counters it carries from the last reading, as
   * partial. No `allocation`/`deallocation` records: the memory came and went between two readings,
   * and the next reading's change is from the last one, as without it.
   */
  private recordHighWater(group: DeviceGroup, reading: MemoryReading, unread: string[], ts: bigint): void {
    const base = group.baseMetadata(healthMetadata);
    const metadata =
      unread.length === 0 ? base : { ...base, telemetry_partial: true, collector_partial_fields: unread };
    const allocated = reading.allocator_allocated_bytes;
    let change: number | null = null;
    if (group.capabilities.supports_allocator_allocated && typeof allocated === "number") {
      change = group.lastAllocated === null ? 0 : allocated - group.lastAllocated;
      this.notePeak(group, reading, allocated, change, ts);
    }
    this.notePeakUsed(group, reading);
    this.emitAlerts(group, reading, change, ts);
    this.records.emit(
      group,
      "sample",
      ts,
      reading,
      change,
      HIGH_WATER_CONTEXT,
      HIGH_WATER_METADATA,
      metadata,
    );
  }

  /** Sampling threw: logged, and recorded as an `error` of the primary device. */
  failed(error: unknown): void {
    this.logger.warn(`sampling failed: ${describeError(error)}`);
    const primary = this.collectors.primary;
    this.records.emit(
      primary,
      "error",
      this.clock.nowNs(),
      primary.lastReading,
      0,
      `Tracking error: ${describeError(error)}`,
      undefined,
    );
  }

  private processGroup(group: DeviceGroup, outcomes: readonly Outcome[], ts: bigint, nowS: number): void {
    const reading: MemoryReading = {};
    const missing: string[] = [];
    const metadata: JsonObject = {};
    let answered = false;
    group.states.forEach((state, i) => {
      const outcome = outcomes[i] as Outcome;
      if (outcome === SKIPPED || isFailure(outcome)) {
        for (const field of state.owned) missing.push(field);
        return;
      }
      answered = true;
      for (const field of outcome.missing) if (state.owned.includes(field)) missing.push(field);
      for (const field of state.owned) {
        const value = outcome.reading[field];
        if (value !== undefined && value !== null) reading[field] = value;
      }
      if (outcome.metadata !== undefined) Object.assign(metadata, outcome.metadata);
    });
    // Health transitions first, as the reference emits them before the sample's own events.
    group.states.forEach((state, i) => {
      const outcome = outcomes[i] as Outcome;
      if (outcome === SKIPPED) return;
      if (isFailure(outcome)) this.health.failed(group, state, outcome.error, ts, nowS);
      else this.health.sampled(group, state, outcome, answered ? reading : group.lastReading, ts);
    });
    if (!answered) return;
    this.leakWatch?.sampled(group === this.collectors.primary, ts, metadata);

    group.lastReading = reading;
    group.lastMissing = missing;
    const stats = group.stats;
    stats.lastMemoryCheck = nowS;
    const total = reading.device_total_bytes;
    if (typeof total === "number") group.totalMemory = total;
    this.notePeakUsed(group, reading);

    const change = this.allocatorChange(group, reading, ts);
    this.emitAlerts(group, reading, change, ts);
    const context =
      missing.length > 0
        ? `Collected partial telemetry sample (${missing.join(", ")}).`
        : "Collected telemetry sample.";
    this.records.emit(group, "sample", ts, reading, change, context, metadata);
  }

  /**
   * The allocator's change since the last sample (null without allocator counters), with its
   * statistics and `peak` / `allocation` / `deallocation` records.
   */
  private allocatorChange(group: DeviceGroup, reading: MemoryReading, ts: bigint): number | null {
    const allocated = reading.allocator_allocated_bytes;
    if (!group.capabilities.supports_allocator_allocated || typeof allocated !== "number") return null;
    const stats = group.stats;
    // The first sample has no predecessor: it is not an allocation (the reference diffs against 0).
    const change = group.lastAllocated === null ? 0 : allocated - group.lastAllocated;
    group.lastAllocated = allocated;
    this.notePeak(group, reading, allocated, change, ts);
    if (change > 0) {
      stats.totalAllocations++;
      stats.totalAllocationBytes += change;
      this.records.emit(
        group,
        "allocation",
        ts,
        reading,
        change,
        `Memory allocated: ${formatBytes(change)}`,
        undefined,
      );
    } else if (change < 0) {
      stats.totalDeallocations++;
      stats.totalDeallocationBytes += -change;
      this.records.emit(
        group,
        "deallocation",
        ts,
        reading,
        change,
        `Memory freed: ${formatBytes(-change)}`,
        undefined,
      );
    }
    return change;
  }

  private notePeakUsed(group: DeviceGroup, reading: MemoryReading): void {
    const used = reading.device_used_bytes;
    if (typeof used === "number" && used > group.stats.peakDeviceUsed) group.stats.peakDeviceUsed = used;
  }

  /** The alert records `reading` calls for (when alerts are on). */
  private emitAlerts(group: DeviceGroup, reading: MemoryReading, change: number | null, ts: bigint): void {
    if (!this.alertPolicy.enabled) return;
    const alerts = evaluateAlerts(
      reading,
      change,
      group.capabilities,
      group.totalMemory,
      this.thresholdValues,
      this.alertPolicy,
      group.alerts,
    );
    for (const alert of alerts)
      this.records.emit(group, alert.eventType, ts, reading, change, alert.context, alert.metadata);
  }

  /** A new peak of allocated memory: the statistics' peak, and a `peak` record. */
  private notePeak(
    group: DeviceGroup,
    reading: MemoryReading,
    allocated: number,
    change: number,
    ts: bigint,
  ): void {
    if (allocated <= group.stats.peakMemory) return;
    group.stats.peakMemory = allocated;
    this.records.emit(
      group,
      "peak",
      ts,
      reading,
      change,
      `New peak memory: ${formatBytes(allocated)}`,
      undefined,
    );
  }
}
