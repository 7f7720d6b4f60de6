import onnxProto from "onnx-proto";

// onnx-proto is CommonJS without static export names: take the namespace from the default export.
const { onnx } = onnxProto;

/** Sizes of the generated model. */
export interface MlpShape {
  readonly inputs: number;
  readonly hidden: number;
  readonly outputs: number;
}

export const DEFAULT_SHAPE: MlpShape = { inputs: 64, hidden: 256, outputs: 16 };

/** Deterministic weights in [-0.5, 0.5) (a linear congruential generator; no dependency). */
function weights(count: number, seed: number): number[] {
  const values = new Array<number>(count);
  let state = seed >>> 0;
  for (let i = 0; i < count; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    values[i] = state / 2 ** 32 - 0.5;
  }
  return values;
}

/**
 * A two-layer MLP as an ONNX model (opset 13): `y = relu(x @ w1 + b1) @ w2`, with `x` of shape
 * `[batch, inputs]` and the batch dimension dynamic, so every batch size is a new input shape.
 */
export function buildMlpModel(shape: MlpShape = DEFAULT_SHAPE): Uint8Array {
  const FLOAT = onnx.TensorProto.DataType.FLOAT;
  const matrix = (name: string, rows: number, columns: number, seed: number) => ({
    name,
    dataType: FLOAT,
    dims: [rows, columns],
    floatData: weights(rows * columns, seed),
  });
  const io = (name: string, width: number) => ({
    name,
    type: { tensorType: { elemType: FLOAT, shape: { dim: [{ dimParam: "batch" }, { dimValue: width }] } } },
  });
  const model = onnx.ModelProto.create({
    irVersion: 8,
    producerName: "stormlog-example",
    opsetImport: [{ domain: "", version: 13 }],
    graph: {
      name: "mlp",
      node: [
        { opType: "MatMul", input: ["x", "w1"], output: ["h0"], name: "fc1" },
        { opType: "Add", input: ["h0", "b1"], output: ["h1"], name: "bias1" },
        { opType: "Relu", input: ["h1"], output: ["h"], name: "relu" },
        { opType: "MatMul", input: ["h", "w2"], output: ["y"], name: "fc2" },
      ],
      input: [io("x", shape.inputs)],
      output: [io("y", shape.outputs)],
      initializer: [
        matrix("w1", shape.inputs, shape.hidden, 1),
        { name: "b1", dataType: FLOAT, dims: [shape.hidden], floatData: weights(shape.hidden, 2) },
        matrix("w2", shape.hidden, shape.outputs, 3),
      ],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}
