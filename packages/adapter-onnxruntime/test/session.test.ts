import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { recordingHost } from "../../adapter-tfjs/test/support/recording-host.js";
import { createInstrumentedSession, instrumentSession } from "../src/index.js";
import { inputSignature, sessionInstrumentation, sessionOptionAttributes } from "../src/session.js";
import { tinyMatMulAddModel } from "./support/model.js";

const model = tinyMatMulAddModel();
const feeds = (rows: number) => ({
  x: new ort.Tensor("float32", new Float32Array(rows * 4).fill(1), [rows, 4]),
});

describe("instrumentSession", () => {
  it("runs each run() in onnx:<name> / run with the input shapes, and passes results through", async () => {
    const host = recordingHost();
    const session = instrumentSession(await ort.InferenceSession.create(model), host, { name: "tiny" });
    const result = (await session.run(feeds(2))) as Record<string, ort.Tensor>;
    expect(result.z!.dims).toEqual([2, 4]);
    // z = x @ w + x with x = 1 and w[i][j] = 4i + j: column j sums to 24 + 4j, plus 1.
    expect(Array.from(result.z!.data as Float32Array).slice(0, 4)).toEqual([25, 29, 33, 37]);
    await session.run(feeds(3));
    await session.run(feeds(2));

    expect(host.entered()).toEqual([
      "onnx:tiny",
      "onnx:tiny / run",
      "onnx:tiny",
      "onnx:tiny / run",
      "onnx:tiny",
      "onnx:tiny / run",
    ]);
    const runs = host.boundaries
      .filter((b) => b.type === "enter" && b.path.length === 2)
      .map((b) => b.attributes);
    expect(runs).toEqual([
      {
        onnx_session: "tiny",
        onnx_cycle: 1,
        onnx_run: 1,
        onnx_input_shapes: { x: [2, 4] },
        onnx_input_signature: "x:float32[2,4]",
        onnx_new_input_signature: true,
        onnx_distinct_input_signatures: 1,
      },
      expect.objectContaining({
        onnx_run: 2,
        onnx_input_shapes: { x: [3, 4] },
        onnx_new_input_signature: true,
      }),
      expect.objectContaining({
        onnx_run: 3,
        onnx_new_input_signature: false,
        onnx_distinct_input_signatures: 2,
      }),
    ]);
    expect(host.openPaths()).toEqual([]);
    expect(sessionInstrumentation(session)).toMatchObject({
      name: "tiny",
      runs: 3,
      signatures: ["x:float32[2,4]", "x:float32[3,4]"],
      released: false,
    });
    // Everything else is the session's own.
    expect(session.inputNames).toEqual(["x"]);
    expect(session.outputNames).toEqual(["z"]);
    await session.release();
    expect(sessionInstrumentation(session)?.released).toBe(true);
  });

  it("closes the run phase when run() rejects", async () => {
    const host = recordingHost();
    const session = instrumentSession(await ort.InferenceSession.create(model), host, { name: "bad" });
    await expect(session.run({ wrong: feeds(1).x })).rejects.toThrow();
    expect(host.openPaths()).toEqual([]);
    await session.release();
  });

  it("can track create/release only", async () => {
    const host = recordingHost();
    const session = instrumentSession(await ort.InferenceSession.create(model), host, {
      name: "quiet",
      runPhases: false,
      recordRss: false,
    });
    await session.run(feeds(1));
    await session.release();
    expect(host.entered()).toEqual(["onnx:quiet", "onnx:quiet / release"]);
    expect(host.boundaries[1]!.attributes).toEqual({ onnx_session: "quiet", onnx_cycle: 1, onnx_runs: 1 });
  });

  it("rejects an empty name", async () => {
    const session = await ort.InferenceSession.create(model);
    expect(() => instrumentSession(session, recordingHost(), { name: " " })).toThrow(/name/);
    await session.release();
  });
});

describe("createInstrumentedSession", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "stormlog-onnx-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("records create and release with a cycle counter, session options and RSS, per name and host", async () => {
    const host = recordingHost();
    const options = { enableCpuMemArena: false, enableMemPattern: false, executionProviders: ["cpu"] };
    for (let i = 0; i < 3; i += 1) {
      const session = await createInstrumentedSession(ort, model, options, host, { name: "tts" });
      await session.run(feeds(i + 1));
      await session.release();
    }
    const other = await createInstrumentedSession(ort, model, undefined, host, { name: "other" });
    await other.release();

    const creates = host.boundaries.filter((b) => b.type === "enter" && b.path.at(-1) === "create");
    expect(creates.map((b) => b.path.join(" / "))).toEqual([
      "onnx:tts / create",
      "onnx:tts / create",
      "onnx:tts / create",
      "onnx:other / create",
    ]);
    expect(creates.map((b) => b.attributes?.onnx_cycle)).toEqual([1, 2, 3, 1]);
    expect(creates[0]!.attributes).toMatchObject({
      onnx_session: "tts",
      onnx_enable_cpu_mem_arena: false,
      onnx_enable_mem_pattern: false,
      onnx_execution_providers: ["cpu"],
      onnx_model_bytes: model.byteLength,
    });
    expect(creates[0]!.attributes!.onnx_rss_bytes).toBeGreaterThan(1024 * 1024);
    const releases = host.boundaries.filter((b) => b.type === "enter" && b.path.at(-1) === "release");
    expect(releases.map((b) => [b.path[0], b.attributes?.onnx_cycle, b.attributes?.onnx_runs])).toEqual([
      ["onnx:tts", 1, 1],
      ["onnx:tts", 2, 1],
      ["onnx:tts", 3, 1],
      ["onnx:other", 1, 0],
    ]);
    expect(releases[0]!.attributes!.onnx_rss_bytes).toBeGreaterThan(1024 * 1024);
    expect(host.openPaths()).toEqual([]);
  });

  it("a new host counts cycles from 1 again", async () => {
    const first = recordingHost();
    const second = recordingHost();
    await (await createInstrumentedSession(ort, model, undefined, first, { name: "m" })).release();
    const session = await createInstrumentedSession(ort, model, undefined, second, { name: "m" });
    expect(sessionInstrumentation(session)?.cycle).toBe(1);
    await session.release();
  });

  it("loads from a file path too, and records it", async () => {
    const path = join(dir, "tiny.onnx");
    const { writeFileSync } = await import("node:fs");
    writeFileSync(path, model);
    const host = recordingHost();
    const session = await createInstrumentedSession(ort, path, {}, host, { name: "file" });
    expect(host.boundaries[1]!.attributes).toMatchObject({ onnx_model: path });
    await session.release();
  });
});

describe("helpers", () => {
  it("signs inputs by sorted name, type and dims", () => {
    expect(
      inputSignature({ b: { dims: [1], type: "int64" }, a: { dims: [2, 3], type: "float32" }, c: {} }),
    ).toBe("a:float32[2,3];b:int64[1];c:?");
    expect(inputSignature(null)).toBe("");
  });

  it("records only JSON-safe, memory-relevant session options", () => {
    expect(
      sessionOptionAttributes({
        graphOptimizationLevel: "all",
        executionProviders: [{ name: "cuda" }, "cpu"],
        intraOpNumThreads: 2,
      }),
    ).toEqual({
      onnx_graph_optimization_level: "all",
      onnx_execution_providers: ["cuda", "cpu"],
      onnx_intra_op_num_threads: 2,
    });
    expect(sessionOptionAttributes(undefined)).toEqual({});
  });
});
