/**
 * @stormlog/adapter-tfjs: TensorFlow.js memory for Stormlog on every backend (cpu, wasm, webgl,
 * webgpu, tfjs-node, tfjs-node-gpu), `model.fit` phases and opt-in per-kernel detail.
 * Depends on `@stormlog/core` only; the `tf` namespace is injected.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 */

// The collector: `tf.memory()` per backend, and each live tensor's birth phase.

export type { LivePhaseTensors, LiveTensorGroup } from "./attribution.js";
export {
  TFJS_COLLECTOR_NAME,
  type TfjsCollector,
  type TfjsCollectorOptions,
  tfjsCollector,
} from "./collector.js";

// `model.fit` / `model.fitDataset` phases without touching the loop.

export {
  type StormlogCallbackOptions,
  type StormlogFitCallback,
  stormlogCallback,
  type TfjsCallbackLogs,
} from "./callback.js";

// Per-kernel memory of one phase through `tf.profile` (a debugging tool).

export {
  type KernelMemoryDetail,
  type KernelProfileSummary,
  type KernelTotals,
  type ProfiledPhase,
  type ProfilePhaseOptions,
  profilePhase,
} from "./profile.js";

// The parts of the `tf` namespace the adapter uses, typed structurally (no tfjs import).

export type {
  TfEngine,
  TfEngineState,
  TfKernelInfo,
  TfMemoryInfo,
  TfNamespace,
  TfProfileInfo,
  TfProfiler,
  TfTrackedTensor,
} from "./types.js";
