// What scripts/test/doc-snippets.test.ts gives the documentation's code blocks, and how it reads what they wrote.
// It lives here, beside the dependencies the blocks import, so that it resolves them as the blocks do.
import { cpSync, existsSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type LoadedSession, loadTelemetrySessions } from "@stormlog/sink";
import onnxProto from "onnx-proto";

const REPO = resolve(import.meta.dirname, "../..");
/** A sink the Python Stormlog wrote (one completed session of 42 events): it stands for the reader's recorded job. */
const RECORDED_SINK = join(REPO, "fixtures/golden/python-sink/single-completed/sink");

/** `model.onnx` for the onnxruntime example: one Relu, input `input` of float32 [1, 3, 224, 224]. */
function reluModel(): Uint8Array {
  // onnx-proto is CommonJS without static export names: take the namespace from the default export.
  const { onnx } = onnxProto;
  const FLOAT = onnx.TensorProto.DataType.FLOAT;
  const tensor = (name: string) => ({
    name,
    type: {
      tensorType: { elemType: FLOAT, shape: { dim: [1, 3, 224, 224].map((dimValue) => ({ dimValue })) } },
    },
  });
  const model = onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 13 }],
    graph: {
      name: "relu",
      node: [{ opType: "Relu", input: ["input"], output: ["output"], name: "relu" }],
      input: [tensor("input")],
      output: [tensor("output")],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

/**
 * What a `<!-- snippet: run with PATH (...) -->` marker may ask for: PATH is created in the block's folder before it
 * runs, standing for what the reader would have there.
 */
export const GIVEN: Readonly<Record<string, (path: string) => void>> = {
  "./job-sinks": (path) => cpSync(RECORDED_SINK, path, { recursive: true }),
  "./stormlog-sink": (path) => cpSync(RECORDED_SINK, path, { recursive: true }),
  "model.onnx": (path) => writeFileSync(path, reluModel()),
};

/** Sink directories (holding a manifest.json) under `dir`, `skip` and node_modules left out. */
export function sinkDirectories(dir: string, skip: readonly string[] = [], depth = 3): string[] {
  if (skip.includes(dir) || depth < 0) return [];
  const found = existsSync(join(dir, "manifest.json")) ? [dir] : [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory() && entry.name !== "node_modules" && !entry.name.startsWith(".")) {
      found.push(...sinkDirectories(join(dir, entry.name), skip, depth - 1));
    }
  }
  return found;
}

/** The sessions of a sink as Stormlog's reader loads them. */
export function readSessions(dir: string): Promise<LoadedSession[]> {
  return loadTelemetrySessions(dir);
}
