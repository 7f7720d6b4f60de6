/**
 * @stormlog/adapter-onnxruntime: onnxruntime-node session instrumentation (phases around run,
 * create and release, input shapes) and ingestion of onnxruntime's profiling output.
 * onnxruntime has no memory API: memory readings come from the tracker's process collector
 * (host RSS) and the NVML collector (device). Depends on `@stormlog/core` only.
 */
export { OnnxProfileError } from "./errors.js";
export {
  DEFAULT_PROFILE_FILE_PREFIX,
  findProfileFile,
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
export {
  createInstrumentedSession,
  type InstrumentSessionOptions,
  inputShapes,
  inputSignature,
  instrumentSession,
  type SessionInstrumentation,
  sessionInstrumentation,
  sessionOptionAttributes,
  sessionPhaseName,
} from "./session.js";
export type { OrtNamespace, OrtSessionLike, OrtSessionOptionsLike, OrtValueLike } from "./types.js";
