/**
 * @stormlog/adapter-tfjs: TensorFlow.js memory for Stormlog on every backend (cpu, wasm, webgl,
 * webgpu, tfjs-node, tfjs-node-gpu), `model.fit` phases and opt-in per-kernel detail.
 * Depends on `@stormlog/core` only; the `tf` namespace is injected.
 */

export { LARGEST_GROUPS, type LivePhaseTensors, type LiveTensorGroup } from "./attribution.js";
export {
  type StormlogCallbackOptions,
  type StormlogFitCallback,
  stormlogCallback,
  type TfjsCallbackLogs,
} from "./callback.js";
export {
  TFJS_COLLECTOR_NAME,
  type TfjsCollector,
  type TfjsCollectorOptions,
  tfjsCollector,
  wasmHeapBytes,
} from "./collector.js";
export {
  type KernelMemoryDetail,
  type KernelProfileSummary,
  type KernelTotals,
  type ProfiledPhase,
  type ProfilePhaseOptions,
  profilePhase,
  summarizeProfile,
} from "./profile.js";
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
