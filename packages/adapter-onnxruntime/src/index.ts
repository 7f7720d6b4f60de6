/**
 * @stormlog/adapter-onnxruntime: onnxruntime-node session instrumentation (phases around run,
 * create and release, input shapes) and ingestion of onnxruntime's profiling output.
 * onnxruntime has no memory API: memory readings come from the tracker's process collector
 * (host RSS) and the NVML collector (device). Depends on `@stormlog/core` only.
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 */

// Sessions under phases: create, run and release, with cycles and input shapes.

export {
  createInstrumentedSession,
  type InstrumentSessionOptions,
  instrumentSession,
} from "./session.js";

// onnxruntime's profiler output: parsed, turned into readings and phase attributes.

export {
  type IngestedProfile,
  type IngestProfileOptions,
  ingestSessionProfile,
  type OnnxNodeExecution,
  type OnnxProfile,
  type OnnxProfileReading,
  type OnnxRunSummary,
  parseOnnxProfile,
  profileReadings,
  profileSummaryMetadata,
  readOnnxProfile,
} from "./profile.js";

// Errors: a profile file that cannot be read or parsed.

export { OnnxProfileError } from "./errors.js";

// The parts of onnxruntime-node the adapter uses, typed structurally (no onnxruntime import).

export type { OrtNamespace, OrtSessionLike, OrtSessionOptionsLike, OrtValueLike } from "./types.js";
