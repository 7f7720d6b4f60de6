import type { JsonObject, MemoryReading } from "@stormlog/core";
import type { RecordLog } from "../records/record-log.js";
import type { CheckedReading, CollectorState, DeviceGroup } from "../sampling/device-group.js";
import {
  type CollectorHealth,
  HEALTHY,
  healthMetadata,
  markFloatIfIntegral,
  type RetryBackoff,
  retryDelaySeconds,
} from "./health.js";

/**
 * The collector-health state machine: moves each collector between `healthy`, `degraded` (partial
 * samples) and `unhealthy` (failed samples, retried with backoff) as its samples come in, and records
 * the transitions as `collector_degraded` / `collector_recovered`, as the reference does.
 */
export class CollectorHealthMachine {
  constructor(
    private readonly records: RecordLog,
    private readonly backoff: RetryBackoff,
  ) {}

  /** Whether the collector is backing off after failures at `nowS` (epoch seconds): not sampled now. */
  backingOff(state: CollectorState, nowS: number): boolean {
    const retryAt = state.health.nextRetryEpochS;
    return retryAt !== null && nowS < retryAt;
  }

  /** A sample of `state`'s collector failed with `error`: unhealthy, retried after the backoff. */
  failed(group: DeviceGroup, state: CollectorState, error: string, ts: bigint, nowS: number): void {
    const previous = state.health;
    const failures = previous.consecutiveFailures + 1;
    const delay = retryDelaySeconds(failures, this.backoff);
    const health: CollectorHealth = {
      status: "unhealthy",
      telemetryPartial: true,
      partialFields: [],
      lastError: error,
      consecutiveFailures: failures,
      nextRetryEpochS: delay > 0 ? nowS + delay : null,
    };
    group.setHealth(state, health);
    if (previous.status !== "healthy") return;
    const metadata: JsonObject = {
      collector_transition: "degraded",
      collector_degraded_from: previous.status,
      collector_degradation_reason: error,
      collector_retry_delay_s: delay,
    };
    markFloatIfIntegral(metadata, "collector_retry_delay_s");
    this.transition(
      group,
      state,
      health,
      "collector_degraded",
      ts,
      group.lastReading,
      metadata,
      "Collector unavailable; telemetry paused until recovery.",
    );
  }

  /**
   * A sample of `state`'s collector passed the contract checks: degraded when it misses supported
   * counters, else healthy. `reading` is what the transition record carries.
   */
  sampled(
    group: DeviceGroup,
    state: CollectorState,
    outcome: CheckedReading,
    reading: MemoryReading | null,
    ts: bigint,
  ): void {
    const previous = state.health;
    if (outcome.missing.length > 0) {
      const health: CollectorHealth = {
        status: "degraded",
        telemetryPartial: true,
        partialFields: [...outcome.missing],
        lastError: outcome.reason,
        consecutiveFailures: 0,
        nextRetryEpochS: null,
      };
      group.setHealth(state, health);
      if (previous.status === "healthy") {
        this.transition(
          group,
          state,
          health,
          "collector_degraded",
          ts,
          reading,
          {
            collector_transition: "degraded",
            collector_degraded_from: previous.status,
            collector_degradation_reason: outcome.reason,
          },
          "Collector degraded; telemetry is partial.",
        );
      }
      return;
    }
    if (previous.status === "healthy") return;
    group.setHealth(state, HEALTHY);
    this.transition(
      group,
      state,
      HEALTHY,
      "collector_recovered",
      ts,
      reading,
      {
        collector_transition: "recovered",
        collector_recovered_from: previous.status,
        collector_previous_error: previous.lastError,
        collector_previous_failure_count: previous.consecutiveFailures,
      },
      "Collector recovered; full telemetry sampling resumed.",
    );
  }

  private transition(
    group: DeviceGroup,
    state: CollectorState,
    health: CollectorHealth,
    eventType: string,
    ts: bigint,
    reading: MemoryReading | null,
    extra: JsonObject,
    context: string,
  ): void {
    // The event is about one collector: its own health, not its device's.
    const base: JsonObject = { ...healthMetadata(health), ...group.capabilityMetadata };
    if (group.states.length > 1) base.collector_name = state.name;
    this.records.emit(group, eventType, ts, reading, 0, context, extra, base);
  }
}
