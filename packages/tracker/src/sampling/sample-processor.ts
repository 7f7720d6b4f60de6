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
import type { TrackerLogger } from "../options/tracker-options.js";
import type { RecordLog } from "../records/record-log.js";
import { SKIPPED } from "./collector-reader.js";
import type { CollectorSet } from "./collector-set.js";
import { type CheckedFailure, type CheckedReading, checkSample, type DeviceGroup } from "./device-group.js";
import type { SampleSink } from "./sampling-loop.js";

type Outcome = CheckedReading | CheckedFailure | typeof SKIPPED;

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
    for (const group of this.collectors.groups) {
      const outcomes: Outcome[] = group.states.map((state) => {
        const value = raw[state.index];
        return value === SKIPPED ? SKIPPED : checkSample(state, value);
      });
      this.processGroup(group, outcomes, ts, nowS);
    }
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
    const used = reading.device_used_bytes;
    if (typeof used === "number" && used > stats.peakDeviceUsed) stats.peakDeviceUsed = used;

    const change = this.allocatorChange(group, reading, ts);
    if (this.alertPolicy.enabled) {
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
    if (allocated > stats.peakMemory) {
      stats.peakMemory = allocated;
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
}
