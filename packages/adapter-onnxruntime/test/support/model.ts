import onnxProto from "onnx-proto";

// onnx-proto is CommonJS without static export names: take the namespace from the default export.
const { onnx } = onnxProto;

/**
 * A tiny ONNX model built in memory: z = x @ w + x, with x of shape [N, 4] (N dynamic) and w a
 * 4x4 initializer. opset 13. onnxruntime fuses MatMul+Add into one Gemm node.
 */
export function tinyMatMulAddModel(): Uint8Array {
  const FLOAT = onnx.TensorProto.DataType.FLOAT;
  const valueInfo = (name: string) => ({
    name,
    type: { tensorType: { elemType: FLOAT, shape: { dim: [{ dimParam: "N" }, { dimValue: 4 }] } } },
  });
  const model = onnx.ModelProto.create({
    irVersion: 8,
    producerName: "stormlog-test",
    opsetImport: [{ domain: "", version: 13 }],
    graph: {
      name: "tiny",
      node: [
        { opType: "MatMul", input: ["x", "w"], output: ["y"], name: "matmul" },
        { opType: "Add", input: ["y", "x"], output: ["z"], name: "add" },
      ],
      input: [valueInfo("x")],
      output: [valueInfo("z")],
      initializer: [
        { name: "w", dataType: FLOAT, dims: [4, 4], floatData: Array.from({ length: 16 }, (_, i) => i) },
      ],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}
