import type { TfTrackedTensor } from "../../src/index.js";

/**
 * An engine of tfjs-core's shape on the `tensorflow` backend (tfjs-node registers its backend with
 * tfjs-core's Engine class: only the backend differs), counting float32 bytes as tfjs does.
 */
export class NativeShapedEngine {
  backendName = "tensorflow";
  state = { numBytes: 0, numTensors: 0, numDataBuffers: 0 };
  trackTensor(tensor: TfTrackedTensor): void {
    this.state.numTensors++;
    this.state.numBytes += tensor.size * 4;
  }
  disposeTensor(tensor: TfTrackedTensor): void {
    this.state.numTensors--;
    this.state.numBytes -= tensor.size * 4;
  }
}
