import { StormlogError } from "@stormlog/core";

const PROFILE_MARKER = Symbol.for("stormlog.error.onnx_profile");

/** An onnxruntime profile file could not be found or is not the Chrome-trace JSON onnxruntime writes. */
export class OnnxProfileError extends StormlogError {
  readonly [PROFILE_MARKER] = true;
  override readonly name = "OnnxProfileError";

  static override isInstance(error: unknown): error is OnnxProfileError {
    return StormlogError.hasMarker(error, PROFILE_MARKER);
  }
}
