import type { JsonObject } from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";

/** Collector health as the reference names it. */
export type CollectorHealthStatus = "healthy" | "degraded" | "unhealthy";

/** One collector's health (the reference's `CollectorHealthState`). */
export interface CollectorHealth {
  readonly status: CollectorHealthStatus;
  /** True while some supported counter is not being read. */
  readonly telemetryPartial: boolean;
  /** Telemetry field names not read in the last sample (deduplicated, in order). */
  readonly partialFields: readonly string[];
  readonly lastError: string | null;
  /** Failed samples in a row (a partial or full sample resets it). */
  readonly consecutiveFailures: number;
  /** When the next sample is attempted after a failure, in epoch seconds; null when not backing off. */
  readonly nextRetryEpochS: number | null;
}

/** The state every collector starts (and every session restarts) in. */
export const HEALTHY: CollectorHealth = Object.freeze({
  status: "healthy",
  telemetryPartial: false,
  partialFields: Object.freeze([]) as readonly string[],
  lastError: null,
  consecutiveFailures: 0,
  nextRetryEpochS: null,
});

/** Backoff after failed samples: `min(max, initial * factor^(n-1))` seconds; 0 without failures. */
export interface RetryBackoff {
  /** Seconds after the first failure (default 1). */
  readonly initialS?: number;
  /** Growth per further failure (default 2). */
  readonly factor?: number;
  /** Cap in seconds (default 30). */
  readonly maxS?: number;
}

/** The reference's `collector_retry_delay_seconds`: `min(30, 2^(n-1))` s with the defaults. */
export function retryDelaySeconds(consecutiveFailures: number, backoff: RetryBackoff = {}): number {
  const initial = backoff.initialS ?? 1;
  if (consecutiveFailures <= 0 || initial <= 0) return 0;
  const delay = initial * (backoff.factor ?? 2) ** Math.max(consecutiveFailures - 1, 0);
  return Math.min(backoff.maxS ?? 30, delay);
}

/** Marks `key` as a float when its value is integral, so it is written `1.0` as the reference writes it. */
export function markFloatIfIntegral(container: JsonObject, key: string): void {
  const value = container[key];
  if (typeof value === "number" && Number.isInteger(value)) markFloat(container, key);
}

/** The six health keys carried by every tracker record, in the reference's order (§2.4). */
export function healthMetadata(health: CollectorHealth): JsonObject {
  const metadata: JsonObject = {
    collector_health_status: health.status,
    telemetry_partial: health.telemetryPartial,
    collector_partial_fields: [...health.partialFields],
    collector_last_error: health.lastError,
    collector_consecutive_failures: health.consecutiveFailures,
    collector_next_retry_epoch_s: health.nextRetryEpochS,
  };
  markFloatIfIntegral(metadata, "collector_next_retry_epoch_s");
  return metadata;
}

const SEVERITY: Readonly<Record<CollectorHealthStatus, number>> = { healthy: 0, degraded: 1, unhealthy: 2 };

/**
 * The health of several collectors read as one (a device group, or the whole tracker): the worst
 * status, partial if any is, the union of partial fields, the worst collector's error, the most
 * failures in a row and the earliest retry. For one collector it is that collector's health.
 */
export function aggregateHealth(healths: readonly CollectorHealth[]): CollectorHealth {
  if (healths.length === 1) return healths[0] as CollectorHealth;
  if (healths.length === 0) return HEALTHY;
  let worst = healths[0] as CollectorHealth;
  let partial = false;
  const fields: string[] = [];
  let failures = 0;
  let retry: number | null = null;
  for (const health of healths) {
    if (SEVERITY[health.status] > SEVERITY[worst.status]) worst = health;
    partial ||= health.telemetryPartial;
    for (const field of health.partialFields) if (!fields.includes(field)) fields.push(field);
    failures = Math.max(failures, health.consecutiveFailures);
    if (health.nextRetryEpochS !== null && (retry === null || health.nextRetryEpochS < retry)) {
      retry = health.nextRetryEpochS;
    }
  }
  let lastError = worst.lastError;
  if (lastError === null) lastError = healths.find((health) => health.lastError !== null)?.lastError ?? null;
  return {
    status: worst.status,
    telemetryPartial: partial,
    partialFields: fields,
    lastError,
    consecutiveFailures: failures,
    nextRetryEpochS: retry,
  };
}
