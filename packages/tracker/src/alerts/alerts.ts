import {
  formatBytes,
  InvalidConfigError,
  type JsonObject,
  type MemoryCapabilities,
  type MemoryReading,
} from "@stormlog/core";
import { pythonFormatFixed } from "@stormlog/core/internal";
import { markFloatIfIntegral } from "../health/health.js";

/** Alert thresholds, the reference's four (`set_threshold` names in snake_case are accepted too). */
export interface AlertThresholds {
  /** Usage (allocated, or device used without allocator counters) over device total, in % (default 80). */
  memoryWarningPercent: number;
  /** Usage in % that raises `critical` (default 95). */
  memoryCriticalPercent: number;
  /** One sample-to-sample allocation above this many bytes raises "Large allocation" (default 100 MiB). */
  memoryLeakThreshold: number;
  /** `(reserved - allocated) / reserved` above this raises "High fragmentation" (default 0.3). */
  fragmentationThreshold: number;
}

/** The reference's defaults. */
export const DEFAULT_THRESHOLDS: Readonly<AlertThresholds> = Object.freeze({
  memoryWarningPercent: 80,
  memoryCriticalPercent: 95,
  memoryLeakThreshold: 100 * 1024 * 1024,
  fragmentationThreshold: 0.3,
});

const SNAKE_NAMES: Readonly<Record<string, keyof AlertThresholds>> = {
  memory_warning_percent: "memoryWarningPercent",
  memory_critical_percent: "memoryCriticalPercent",
  memory_leak_threshold: "memoryLeakThreshold",
  fragmentation_threshold: "fragmentationThreshold",
};

/** The threshold a name designates (camelCase or the reference's snake_case); throws `InvalidConfigError`. */
export function thresholdKey(name: string): keyof AlertThresholds {
  if (name in DEFAULT_THRESHOLDS) return name as keyof AlertThresholds;
  const key = SNAKE_NAMES[name];
  if (key === undefined) {
    throw new InvalidConfigError(
      "threshold",
      `Unknown threshold: ${name}; use one of ${Object.keys(SNAKE_NAMES).join(", ")} (or their camelCase forms)`,
    );
  }
  return key;
}

/** Checks one threshold value; throws `InvalidConfigError`. */
export function checkThreshold(key: keyof AlertThresholds, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new InvalidConfigError(key, `expected a finite number >= 0, got ${String(value)}`);
  }
  return value;
}

/**
 * When alerts fire. The reference raises them on every sample while a condition holds (an alert
 * storm of one `warning` per 100 ms at 85 % usage); the default here raises one per episode.
 */
export interface AlertPolicy {
  /** Default true. False: no alert events (the reference's `enable_alerts=False`). */
  readonly enabled?: boolean;
  /**
   * `episode` (default): usage and fragmentation alerts fire when the condition starts (or usage
   * escalates from warning to critical) and again only after it has cleared by the hysteresis margin.
   * `every-sample`: the reference's behaviour. Large allocations fire each time in both modes.
   */
  readonly mode?: "episode" | "every-sample";
  /** Percentage points usage must drop below a threshold to end its episode (default 5). */
  readonly usageHysteresisPercent?: number;
  /** How far fragmentation must drop below its threshold to end its episode (default 0.05). */
  readonly fragmentationHysteresis?: number;
}

/** `AlertPolicy` with defaults filled in. */
export interface ResolvedAlertPolicy {
  readonly enabled: boolean;
  readonly mode: "episode" | "every-sample";
  readonly usageHysteresisPercent: number;
  readonly fragmentationHysteresis: number;
}

/** Resolves `alerts: boolean | AlertPolicy`; throws `InvalidConfigError`. */
export function resolveAlertPolicy(policy: boolean | AlertPolicy | undefined): ResolvedAlertPolicy {
  const given: AlertPolicy = typeof policy === "boolean" ? { enabled: policy } : (policy ?? {});
  const mode = given.mode ?? "episode";
  if (mode !== "episode" && mode !== "every-sample") {
    throw new InvalidConfigError("alerts.mode", `expected "episode" or "every-sample", got ${String(mode)}`);
  }
  const margin = (name: string, value: number | undefined, fallback: number) => {
    if (value === undefined) return fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
      throw new InvalidConfigError(name, `expected a finite number >= 0, got ${String(value)}`);
    }
    return value;
  };
  return {
    enabled: given.enabled ?? true,
    mode,
    usageHysteresisPercent: margin("alerts.usageHysteresisPercent", given.usageHysteresisPercent, 5),
    fragmentationHysteresis: margin("alerts.fragmentationHysteresis", given.fragmentationHysteresis, 0.05),
  };
}

/** Per-device alert episode state. */
export interface AlertState {
  /** 0 normal, 1 warning, 2 critical (with hysteresis). */
  usageLevel: 0 | 1 | 2;
  fragmented: boolean;
  /** Alerts not raised because their episode was already reported. */
  suppressed: number;
}

/** A fresh episode state. */
export function newAlertState(): AlertState {
  return { usageLevel: 0, fragmented: false, suppressed: 0 };
}

/** An alert to record, in the reference's vocabulary and wording. */
export interface PendingAlert {
  readonly eventType: "warning" | "critical";
  readonly context: string;
  readonly metadata: JsonObject;
}

/**
 * The alerts one sample raises, in the reference's order: usage (critical, else warning), large
 * allocation, fragmentation. Usage alerts need a device total; large allocations need allocator
 * counters; fragmentation needs `supports_fragmentation_analysis` (as the reference's v4).
 */
export function evaluateAlerts(
  reading: MemoryReading,
  change: number | null,
  capabilities: MemoryCapabilities,
  totalMemory: number,
  thresholds: AlertThresholds,
  policy: ResolvedAlertPolicy,
  state: AlertState,
): PendingAlert[] {
  const alerts: PendingAlert[] = [];
  const episodes = policy.mode === "episode";
  const allocated = reading.allocator_allocated_bytes ?? null;
  const usageValue = capabilities.supports_allocator_allocated
    ? allocated
    : (reading.device_used_bytes ?? null);
  if (totalMemory > 0 && usageValue !== null) {
    const usage = (usageValue / totalMemory) * 100;
    const critical = thresholds.memoryCriticalPercent;
    const warning = thresholds.memoryWarningPercent;
    const raw: 0 | 1 | 2 = usage >= critical ? 2 : usage >= warning ? 1 : 0;
    let fire: 0 | 1 | 2 = raw;
    if (episodes) {
      const margin = policy.usageHysteresisPercent;
      let level = state.usageLevel;
      if (raw > level) {
        level = raw;
      } else {
        if (level === 2 && usage < critical - margin) level = usage >= warning - margin ? 1 : 0;
        if (level === 1 && usage < warning - margin) level = 0;
      }
      fire = level > state.usageLevel ? level : 0;
      if (fire === 0 && raw > 0) state.suppressed++;
      state.usageLevel = level;
    }
    if (fire > 0) {
      const metadata: JsonObject = { usage_percent: usage };
      markFloatIfIntegral(metadata, "usage_percent");
      const percent = pythonFormatFixed(usage, 1);
      alerts.push(
        fire === 2
          ? { eventType: "critical", context: `CRITICAL: Memory usage at ${percent}%`, metadata }
          : { eventType: "warning", context: `WARNING: Memory usage at ${percent}%`, metadata },
      );
    }
  }
  if (
    change !== null &&
    capabilities.supports_allocator_allocated &&
    change > thresholds.memoryLeakThreshold
  ) {
    alerts.push({
      eventType: "warning",
      context: `Large allocation detected: ${formatBytes(change)}`,
      metadata: { large_allocation: true },
    });
  }
  const reserved = reading.allocator_reserved_bytes ?? null;
  if (
    capabilities.supports_fragmentation_analysis &&
    allocated !== null &&
    reserved !== null &&
    reserved > 0
  ) {
    const fragmentation = (reserved - allocated) / reserved;
    const over = fragmentation > thresholds.fragmentationThreshold;
    let fire = over;
    if (episodes) {
      fire = over && !state.fragmented;
      if (over) state.fragmented = true;
      else if (fragmentation < thresholds.fragmentationThreshold - policy.fragmentationHysteresis) {
        state.fragmented = false;
      }
      if (over && !fire) state.suppressed++;
    }
    if (fire) {
      const metadata: JsonObject = { fragmentation };
      markFloatIfIntegral(metadata, "fragmentation");
      alerts.push({
        eventType: "warning",
        context: `High fragmentation: ${pythonFormatFixed(fragmentation * 100, 1)}%`,
        metadata,
      });
    }
  }
  return alerts;
}
