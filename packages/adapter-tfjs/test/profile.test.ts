import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { type KernelProfileSummary, profilePhase } from "../src/index.js";
import { summarizeProfile } from "../src/profile.js";
import { useCpuBackend } from "./support/cpu-backend.js";
import { recordingHost } from "./support/recording-host.js";

beforeAll(async () => {
  await useCpuBackend();
  await tf.ready();
});

describe("profilePhase", () => {
  it("runs the function in the phase and records per-kernel bytes and tensors in a child phase", async () => {
    const host = recordingHost();
    const a = tf.ones([32, 32]);
    const { result, profile } = await profilePhase(
      tf,
      host,
      "forward",
      () => {
        const b = tf.matMul(a, a);
        const c = tf.add(b, 1);
        b.dispose();
        return c;
      },
      { metadata: { step: 7 } },
    );
    expect(result.shape).toEqual([32, 32]);
    expect((await result.data())[0]).toBe(33);

    expect(profile.new_tensors).toBe(1);
    expect(profile.new_bytes).toBe(32 * 32 * 4);
    expect(profile.kernel_count).toBe(profile.kernels.length);
    const names = profile.kernels.map((k) => k.name);
    expect(names).toContain("BatchMatMul");
    expect(names).toContain("Add");
    const matmul = profile.kernels.find((k) => k.name === "BatchMatMul")!;
    expect(matmul.bytes_added).toBe(32 * 32 * 4);
    expect(matmul.tensors_added).toBeGreaterThanOrEqual(1);
    expect(matmul.output_shapes).toEqual([[32, 32]]);
    expect(profile.peak_bytes).toBe(Math.max(...profile.kernels.map((k) => k.total_bytes_snapshot)));
    expect(profile.by_kernel.BatchMatMul?.count).toBe(1);

    expect(host.entered()).toEqual(["forward", "forward / tf.profile"]);
    expect(host.boundaries[0]!.attributes).toEqual({ step: 7, tfjs_profile: true });
    const detail = host.boundaries[1]!.attributes!.tfjs_kernels as KernelProfileSummary;
    expect(detail).toEqual(profile);
    expect(host.boundaries.at(-1)).toMatchObject({ type: "exit", path: ["forward"] });
    expect(host.openPaths()).toEqual([]);
    tf.dispose([a, result]);
  });

  it("lists at most maxKernels kernels and counts the rest", async () => {
    const host = recordingHost();
    const x = tf.scalar(1);
    const { result, profile } = await profilePhase(
      tf,
      host,
      "loop",
      () =>
        tf.tidy(() => {
          let y = x;
          for (let i = 0; i < 10; i += 1) y = tf.add(y, 1);
          return y;
        }),
      { maxKernels: 3 },
    );
    expect(profile.kernels).toHaveLength(3);
    expect(profile.kernels_truncated).toBe(profile.kernel_count - 3);
    expect(profile.by_kernel.Add?.count).toBe(10);
    tf.dispose([x, result]);
  });

  it("closes the phase and rethrows when the function throws", async () => {
    const host = recordingHost();
    await expect(
      profilePhase(tf, host, "broken", () => {
        throw new Error("boom");
      }),
    ).rejects.toThrow("boom");
    expect(host.openPaths()).toEqual([]);
  });

  it("rejects a negative maxKernels", async () => {
    await expect(profilePhase(tf, recordingHost(), "x", () => 1, { maxKernels: -1 })).rejects.toThrow(
      /maxKernels/,
    );
  });
});

describe("summarizeProfile", () => {
  it("reports a null peak, not -Infinity, when no kernel ran", () => {
    const summary = summarizeProfile({
      newBytes: 0,
      newTensors: 0,
      peakBytes: -Infinity,
      kernels: [],
      result: null,
    });
    expect(summary.peak_bytes).toBeNull();
    expect(summary.kernel_count).toBe(0);
    expect(JSON.parse(JSON.stringify(summary))).toEqual(summary);
  });
});
