import type { PhaseHost, PhaseOptions, PhaseScope } from "@stormlog/core";
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { recordingHost } from "../../adapter-tfjs/test/support/recording-host.js";
import { createInstrumentedSession, instrumentSession } from "../src/index.js";
import { tinyMatMulAddModel } from "./support/model.js";

const model = tinyMatMulAddModel();
const feeds = (rows: number) => ({
  x: new ort.Tensor("float32", new Float32Array(rows * 4).fill(1), [rows, 4]),
});

/** A recording host that also notes, per phase opened, whether it asked for readings. */
function readingsHost(): PhaseHost & { asked: string[] } {
  const inner = recordingHost();
  const asked: string[] = [];
  const note = (name: string, options: PhaseOptions | undefined) =>
    asked.push(`${name}:${options?.readings === true}`);
  function phase<T>(name: string, fn: () => T, options?: PhaseOptions): T;
  function phase(name: string, options?: PhaseOptions): PhaseScope;
  function phase<T>(
    name: string,
    fnOrOptions?: (() => T) | PhaseOptions,
    options?: PhaseOptions,
  ): T | PhaseScope {
    if (typeof fnOrOptions !== "function") {
      note(name, fnOrOptions);
      return inner.phase(name, fnOrOptions);
    }
    note(name, options);
    return inner.phase(name, fnOrOptions, options);
  }
  return {
    asked,
    phase,
    enterPhase(name: string, options?: PhaseOptions): PhaseScope {
      note(name, options);
      return inner.enterPhase(name, options);
    },
  };
}

describe("readings at the boundaries of the session's phases", () => {
  it("create, run, release and the outer onnx:<name> phase ask for readings", async () => {
    const host = readingsHost();
    const session = await createInstrumentedSession(ort, model, undefined, host, { name: "tiny" });
    await session.run(feeds(2));
    await session.release();
    expect(host.asked).toEqual([
      "onnx:tiny:true",
      "create:true",
      "onnx:tiny:true",
      "run:true",
      "onnx:tiny:true",
      "release:true",
    ]);
  });

  it("readings: false leaves them plain", async () => {
    const host = readingsHost();
    const session = instrumentSession(await ort.InferenceSession.create(model), host, {
      name: "plain",
      readings: false,
    });
    await session.run(feeds(1));
    await session.release();
    expect(host.asked).toEqual(["onnx:plain:false", "run:false", "onnx:plain:false", "release:false"]);
  });
});
