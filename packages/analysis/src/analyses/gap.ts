/**
 * Hidden-memory gap analysis: memory the device driver reports in use that the framework's allocator
 * does not account for (`device_used_bytes - allocator_reserved_bytes`). The three classifiers,
 * thresholds, evidence, severities, confidences and ordering are the Python reference's
 * (`stormlog/gap_analysis.py`, reference §6.3); descriptions and remediation are ours, written for
 * TensorFlow.js, onnxruntime-node and NVML users.
 *
 * The gap only means something when `device_used_bytes` comes from the driver (NVML), not from the
 * framework itself. Pass one rank's events in time order, as the reference's callers do.
 */
import { formatBytes, InvalidConfigError, type JsonObject, type TelemetryEvent } from "@stormlog/core";
import {
  type ExactCounterField,
  type ExactCounters,
  exactCountersOf,
  exactQuotient,
  isSampleEventType,
  markFloat,
} from "@stormlog/core/internal";
import {
  type PhaseAttributionPayload,
  type PhaseEventLike,
  type PhaseResolver,
  phaseAttributionToPayload,
} from "@stormlog/phases";
import { scratchDoubles, scratchInts } from "../scratch.js";
import { argmax, linregress, mean, pythonRound, std } from "./stats.js";

/** What a gap finding says about the hidden memory. */
export type GapClassification = "transient_spike" | "persistent_drift" | "fragmentation_like";
/** Severity of a finding, as the reference grades it. */
export type GapSeverity = "critical" | "warning" | "info";

/** The classifier thresholds (the reference's `gap_*` threshold keys). */
export interface GapThresholds {
  /** Minimum peak |gap| / device total for any finding (reference `gap_ratio_threshold`). */
  readonly gapRatioThreshold: number;
  /** z-score above which a gap sample is a spike (`gap_spike_zscore`). */
  readonly gapSpikeZscore: number;
  /** Minimum R² of an upward linear fit for drift (`gap_drift_r_squared`). */
  readonly gapDriftRSquared: number;
  /** Minimum mean (reserved - allocated) / reserved for fragmentation (`gap_fragmentation_ratio`). */
  readonly gapFragmentationRatio: number;
}

/** The reference's defaults. */
export const DEFAULT_GAP_THRESHOLDS: GapThresholds = Object.freeze({
  gapRatioThreshold: 0.05,
  gapSpikeZscore: 2.0,
  gapDriftRSquared: 0.6,
  gapFragmentationRatio: 0.3,
});

/** Evidence of a `transient_spike` finding. */
export type TransientSpikeEvidence = {
  spike_count: number;
  max_gap_bytes: number;
  max_zscore: number;
  mean_gap_bytes: number;
  std_gap_bytes: number;
};
/** Evidence of a `persistent_drift` finding. */
export type PersistentDriftEvidence = {
  slope_bytes_per_sec: number;
  r_squared: number;
  p_value: number;
  gap_start_bytes: number;
  gap_end_bytes: number;
};
/** Evidence of a `fragmentation_like` finding. */
export type FragmentationEvidence = {
  avg_fragmentation_ratio: number;
  max_fragmentation_ratio: number;
  avg_gap_bytes: number;
  sample_count: number;
};

/** One finding (`GapFinding`), keys in the reference's order. */
export interface GapFinding {
  classification: GapClassification;
  severity: GapSeverity;
  /** 0 to 1, rounded to 3 decimals. */
  confidence: number;
  evidence: TransientSpikeEvidence | PersistentDriftEvidence | FragmentationEvidence;
  description: string;
  remediation: string[];
  /** The sample the finding points at: the largest spike, the last sample, or the most fragmented. */
  evidence_timestamp_ns: bigint | null;
  phase_attribution: PhaseAttributionPayload | null;
}

/** Options of `analyzeGaps`. */
export interface GapAnalysisOptions {
  /** Attributes each finding's evidence sample to a phase (e.g. a `PhaseReplayIndex`). */
  readonly phaseResolver?: PhaseResolver | null;
  /** Overrides of `DEFAULT_GAP_THRESHOLDS`. */
  readonly thresholds?: Partial<GapThresholds>;
}

/** What to try, per classification, for TensorFlow.js, onnxruntime-node and NVML users. */
export const GAP_REMEDIATION: Readonly<Record<GapClassification, readonly string[]>> = Object.freeze({
  transient_spike: Object.freeze([
    "tfjs: wrap each step in tf.tidy() and dispose() tensors returned across steps; a transient that matches a tf.memory().numBytes jump is framework memory the allocator counter missed.",
    "tfjs-node-gpu: TensorFlow claims most of the GPU at start-up; set TF_FORCE_GPU_ALLOW_GROWTH=true before loading @tensorflow/tfjs-node-gpu so device usage follows what the model needs.",
    "Convolution spikes are often cuDNN/cuBLAS workspaces allocated outside the tensor allocator; for tfjs-node-gpu, TF_CUDNN_WORKSPACE_LIMIT_IN_MB caps the cuDNN workspace.",
    "onnxruntime-node: the CUDA arena grows in power-of-two chunks by default, so one large input can leave a step-shaped jump; warm the session up with the largest input shape once, and set enableMemPattern: false when input shapes vary.",
    "Check the NVML process list (nvidia-smi --query-compute-apps=pid,used_memory --format=csv) at the spike's timestamp: another process, or a second CUDA context in this one, shows up here as hidden memory.",
  ]),
  persistent_drift: Object.freeze([
    "Memory is accumulating outside the allocator's accounting: look for native resources created per step and never released.",
    "tfjs-node: tensors that are never disposed keep native TensorFlow buffers alive; compare tf.memory().numTensors across steps and dispose models with model.dispose() when replacing them.",
    "onnxruntime-node: every InferenceSession holds its own CUDA arena and weights; call await session.release() before dropping a session, and reuse one session instead of creating one per request.",
    "Check the NVML process list (nvidia-smi --query-compute-apps=pid,used_memory --format=csv): a growing entry for another process on the same GPU also appears as drift here.",
    "If the drift tracks a phase, attribute it with tracker.phase() around the suspect code and compare the per-phase net change.",
  ]),
  fragmentation_like: Object.freeze([
    "The allocator holds much more than live tensors need (reserved minus allocated): this is arena growth rather than a leak, and it is not returned to the device until the arena is torn down.",
    "tfjs-node-gpu uses TensorFlow's BFC allocator; TF_FORCE_GPU_ALLOW_GROWTH=true makes it grow on demand instead of reserving most of the GPU, and TF_GPU_ALLOCATOR=cuda_malloc_async (TensorFlow 2.5+ with CUDA 11.2+) replaces BFC with CUDA's stream-ordered allocator, which fragments less.",
    "onnxruntime-node: the Node binding passes only deviceId to the CUDA execution provider, so arena options (gpu_mem_limit, arena_extend_strategy) and the run option memory.enable_memory_arena_shrinkage are not available; releasing the session (session.release()) is what frees the arena.",
    "onnxruntime-node on CPU: enableCpuMemArena: false trades some speed for memory that follows actual use; enableMemPattern: false avoids per-shape buffers when input shapes vary.",
    "Keep input shapes stable (pad or bucket batch and sequence sizes) so cached blocks are reused instead of new ones being carved out.",
  ]),
});

function resolveThresholds(overrides: Partial<GapThresholds> | undefined): GapThresholds {
  const thresholds = { ...DEFAULT_GAP_THRESHOLDS, ...overrides };
  for (const [name, value] of Object.entries(thresholds)) {
    if (typeof value !== "number" || !Number.isFinite(value)) {
      throw new InvalidConfigError(`thresholds.${name}`, `expected a finite number, got ${String(value)}.`);
    }
  }
  return thresholds;
}

/** A byte count with its sign (formatBytes does not scale negatives). */
function signedBytes(bytes: number): string {
  return bytes < 0 ? `-${formatBytes(-bytes)}` : formatBytes(bytes);
}

/** Marks fields whose value Python holds as a float, so `stringifyJson` writes `3127599901.0`. */
function floats<T extends object>(object: T, keys: ReadonlyArray<keyof T & string>): T {
  for (const key of keys) markFloat(object as unknown as JsonObject, key);
  return object;
}

/**
 * One rank's samples as columns, for `analyzeGapColumns`: NaN marks a null counter. Only the samples
 * a finding points at become records (`event`), for their timestamp and phase attribution.
 */
export interface GapColumns {
  readonly count: number;
  readonly used: ArrayLike<number>;
  readonly reserved: ArrayLike<number>;
  readonly allocated: ArrayLike<number>;
  readonly total: ArrayLike<number>;
  /** `Number(timestamp_ns)` of sample `i` (a double, as Python's `float()` makes it). */
  timeOf(i: number): number;
  /** Sample `i` as a record the phase resolver reads (timestamp, session, rank, origin hints). */
  event(i: number): PhaseEventLike & { readonly timestamp_ns: bigint };
  /**
   * The exact values of sample `i`'s counters past 2^53 (the columns hold their nearest doubles);
   * absent when no sample has any. The reference computes with unbounded integers.
   */
  readonly exactCounters?: (i: number) => ExactCounters | undefined;
}

/** A counter of a sample exactly: its value past 2^53 when it has one, else the column's (exact) double. */
function exactCounter(exact: ExactCounters, field: ExactCounterField, column: number): bigint {
  return exact[field] ?? BigInt(column);
}

function attribution(
  resolver: PhaseResolver | null | undefined,
  event: PhaseEventLike,
): PhaseAttributionPayload | null {
  return resolver ? phaseAttributionToPayload(resolver.resolveForEvent(event)) : null;
}

function finding(
  classification: GapClassification,
  severity: GapSeverity,
  confidence: number,
  evidence: GapFinding["evidence"],
  description: string,
  event: PhaseEventLike & { readonly timestamp_ns: bigint },
  resolver: PhaseResolver | null | undefined,
): GapFinding {
  return floats(
    {
      classification,
      severity,
      confidence,
      evidence,
      description,
      remediation: [...GAP_REMEDIATION[classification]],
      evidence_timestamp_ns: event.timestamp_ns,
      phase_attribution: attribution(resolver, event),
    },
    ["confidence"],
  );
}

function transientSpike(
  columns: GapColumns,
  usable: Int32Array,
  gaps: Float64Array,
  zThreshold: number,
  resolver: PhaseResolver | null | undefined,
): GapFinding | null {
  const average = mean(gaps);
  const deviation = std(gaps, 1);
  if (deviation === 0 || Number.isNaN(deviation)) return null;
  let spikeCount = 0;
  for (const gap of gaps) if ((gap - average) / deviation > zThreshold) spikeCount++;
  if (spikeCount === 0) return null;
  const maxIndex = argmax(gaps);
  const maxGap = gaps[maxIndex]!;
  const maxZ = (maxGap - average) / deviation;
  const severity: GapSeverity = maxZ > 2 * zThreshold ? "critical" : "warning";
  const confidence = Math.min(1, maxZ / (3 * zThreshold));
  const evidence = floats<TransientSpikeEvidence>(
    {
      spike_count: spikeCount,
      max_gap_bytes: maxGap,
      max_zscore: pythonRound(maxZ, 3),
      mean_gap_bytes: pythonRound(average, 1),
      std_gap_bytes: pythonRound(deviation, 1),
    },
    ["max_gap_bytes", "max_zscore", "mean_gap_bytes", "std_gap_bytes"],
  );
  const description =
    `${spikeCount} short spike(s) of device memory outside the framework allocator ` +
    `(device used minus allocator reserved); the largest reached ${signedBytes(maxGap)}, ` +
    `${maxZ.toFixed(1)} standard deviations above the mean gap of ${signedBytes(average)}.`;
  return finding(
    "transient_spike",
    severity,
    pythonRound(confidence, 3),
    evidence,
    description,
    columns.event(usable[maxIndex]!),
    resolver,
  );
}

function persistentDrift(
  columns: GapColumns,
  usable: Int32Array,
  gaps: Float64Array,
  rSquaredThreshold: number,
  resolver: PhaseResolver | null | undefined,
): GapFinding | null {
  const n = gaps.length;
  if (n < 5) return null;
  // The reference converts timestamps to float first, then subtracts the first one.
  const x = scratchDoubles("gap.x", n);
  const first = columns.timeOf(usable[0]!);
  for (let i = 0; i < n; i++) x[i] = columns.timeOf(usable[i]!) - first;
  const fit = linregress(x, gaps);
  // SciPy raises when every timestamp is equal; there is no drift to report then.
  if (fit === null) return null;
  const rSquared = fit.rvalue ** 2;
  if (fit.slope <= 0 || rSquared < rSquaredThreshold) return null;
  const severity: GapSeverity = rSquared > 0.85 ? "critical" : "warning";
  const slopePerSecond = fit.slope * 1e9;
  const evidence = floats<PersistentDriftEvidence>(
    {
      slope_bytes_per_sec: pythonRound(slopePerSecond, 1),
      r_squared: pythonRound(rSquared, 4),
      p_value: pythonRound(fit.pvalue, 6),
      gap_start_bytes: pythonRound(gaps[0]!, 1),
      gap_end_bytes: pythonRound(gaps[n - 1]!, 1),
    },
    ["slope_bytes_per_sec", "r_squared", "p_value", "gap_start_bytes", "gap_end_bytes"],
  );
  const description =
    `Device memory outside the framework allocator grows steadily by about ${formatBytes(Math.trunc(Math.abs(slopePerSecond)))}/s ` +
    `(R²=${rSquared.toFixed(2)}), from ${signedBytes(gaps[0]!)} to ${signedBytes(gaps[n - 1]!)}.`;
  return finding(
    "persistent_drift",
    severity,
    pythonRound(Math.min(1, rSquared), 3),
    evidence,
    description,
    columns.event(usable[n - 1]!),
    resolver,
  );
}

function fragmentation(
  columns: GapColumns,
  usable: Int32Array,
  gaps: Float64Array,
  threshold: number,
  resolver: PhaseResolver | null | undefined,
): GapFinding | null {
  const all = scratchDoubles("gap.ratios", usable.length);
  const ratioSamples = scratchInts("gap.ratioSamples", usable.length);
  let count = 0;
  for (const i of usable) {
    const reserved = columns.reserved[i]!;
    const allocated = columns.allocated[i]!;
    // NaN (null) fails `reserved > 0` and makes the ratio NaN.
    if (!(reserved > 0) || Number.isNaN(allocated)) continue;
    const exact = columns.exactCounters?.(i);
    if (exact === undefined)
      // Reference §6.6: the allocator gap is clamped at zero (allocated above reserved is a stale read).
      all[count] = Math.max(0, reserved - allocated) / reserved;
    else {
      const exactReserved = exactCounter(exact, "allocator_reserved_bytes", reserved);
      const unallocated = exactReserved - exactCounter(exact, "allocator_allocated_bytes", allocated);
      all[count] = exactQuotient(unallocated > 0n ? unallocated : 0n, exactReserved);
    }
    ratioSamples[count++] = i;
  }
  if (count === 0) return null;
  const ratios = all.subarray(0, count);
  const average = mean(ratios);
  if (average < threshold) return null;
  const maxIndex = argmax(ratios);
  const severity: GapSeverity = average > 0.5 ? "critical" : "warning";
  const evidence = floats<FragmentationEvidence>(
    {
      avg_fragmentation_ratio: pythonRound(average, 4),
      max_fragmentation_ratio: pythonRound(ratios[maxIndex]!, 4),
      avg_gap_bytes: pythonRound(mean(gaps), 1),
      sample_count: ratios.length,
    },
    ["avg_fragmentation_ratio", "max_fragmentation_ratio", "avg_gap_bytes"],
  );
  const description =
    `On average ${Math.round(average * 100)}% of the memory the allocator reserves holds no live tensor ` +
    `(reserved but unallocated), which inflates the device footprint.`;
  return finding(
    "fragmentation_like",
    severity,
    pythonRound(Math.min(1, average / 0.6), 3),
    evidence,
    description,
    columns.event(ratioSamples[maxIndex]!),
    resolver,
  );
}

const SEVERITY_ORDER: Readonly<Record<GapSeverity, number>> = { critical: 0, warning: 1, info: 2 };

/**
 * Classifies the hidden-memory gap of one rank's samples (`analyze_hidden_memory_gaps`): only
 * `sample` events with a positive `device_total_bytes` (and, for schema v4, non-null device used and
 * allocator reserved) count; at least 3 are needed and the largest |gap| must reach
 * `gapRatioThreshold` of the device. Findings are ordered by severity, then confidence (descending).
 */
export function analyzeGaps(
  events: readonly TelemetryEvent[],
  options: GapAnalysisOptions = {},
): GapFinding[] {
  const samples = events.filter((event) => isSampleEventType(event.event_type, "strip-lower"));
  const n = samples.length;
  const used = new Float64Array(n);
  const reserved = new Float64Array(n);
  const allocated = new Float64Array(n);
  const total = new Float64Array(n);
  const orNaN = (value: number | null): number => (value === null ? Number.NaN : value);
  for (let i = 0; i < n; i++) {
    const event = samples[i]!;
    used[i] = orNaN(event.device_used_bytes);
    reserved[i] = orNaN(event.allocator_reserved_bytes);
    allocated[i] = orNaN(event.allocator_allocated_bytes);
    total[i] = orNaN(event.device_total_bytes);
  }
  return analyzeGapColumns(
    {
      count: n,
      used,
      reserved,
      allocated,
      total,
      timeOf: (i) => Number(samples[i]!.timestamp_ns),
      event: (i) => samples[i]!,
      exactCounters: (i) => exactCountersOf(samples[i]!),
    },
    options,
  );
}

/** `analyzeGaps` on one rank's samples held as columns (every entry is a `sample`, in time order). */
export function analyzeGapColumns(columns: GapColumns, options: GapAnalysisOptions = {}): GapFinding[] {
  const thresholds = resolveThresholds(options.thresholds);
  const { count, used, reserved, total } = columns;
  const exactOf = columns.exactCounters;
  // Reused working arrays: findings keep values, never the arrays.
  const picked = scratchInts("gap.picked", count);
  const allGaps = scratchDoubles("gap.gaps", count);
  let kept = 0;
  let maxRatio = 0;
  for (let i = 0; i < count; i++) {
    const deviceTotal = total[i]!;
    // NaN (null) counters fail these tests, as null does in the reference.
    if (!(deviceTotal > 0)) continue;
    let gap = used[i]! - reserved[i]!;
    if (Number.isNaN(gap)) continue;
    let ratio: number;
    const exact = exactOf?.(i);
    if (exact === undefined) ratio = Math.abs(gap / deviceTotal);
    else {
      const exactGap =
        exactCounter(exact, "device_used_bytes", used[i]!) -
        exactCounter(exact, "allocator_reserved_bytes", reserved[i]!);
      gap = Number(exactGap);
      ratio = Math.abs(exactQuotient(exactGap, exactCounter(exact, "device_total_bytes", deviceTotal)));
    }
    if (ratio > maxRatio) maxRatio = ratio;
    allGaps[kept] = gap;
    picked[kept++] = i;
  }
  if (kept < 3 || maxRatio < thresholds.gapRatioThreshold) return [];
  const gaps = allGaps.subarray(0, kept);
  const usable = picked.subarray(0, kept);
  const resolver = options.phaseResolver;
  const findings: GapFinding[] = [];
  const spike = transientSpike(columns, usable, gaps, thresholds.gapSpikeZscore, resolver);
  if (spike) findings.push(spike);
  const drift = persistentDrift(columns, usable, gaps, thresholds.gapDriftRSquared, resolver);
  if (drift) findings.push(drift);
  const fragmented = fragmentation(columns, usable, gaps, thresholds.gapFragmentationRatio, resolver);
  if (fragmented) findings.push(fragmented);
  // Stable, like Python's sort.
  findings.sort(
    (a, b) => SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || b.confidence - a.confidence,
  );
  return findings;
}
