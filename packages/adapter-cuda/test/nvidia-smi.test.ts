import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describeCollectorContract } from "@stormlog/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nvidiaSmiCollector } from "../src/index.js";
import { NVIDIA_SMI_ARGS, parseNvidiaSmiOutput } from "../src/nvidia-smi.js";

const MiB = 1024 * 1024;
const ROWS = [
  "0, GPU-aaaa1111-0000-0000-0000-000000000000, 1024, 16384, 15000",
  "1, GPU-bbbb2222-0000-0000-0000-000000000000, [N/A], 81920, 80000",
].join("\n");

let dir: string;
/** A fake nvidia-smi that records its arguments and prints $FAKE_SMI_OUTPUT (or fails with $FAKE_SMI_FAIL). */
let fake: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-smi-"));
  fake = join(dir, "nvidia-smi");
  writeFileSync(
    fake,
    [
      "#!/bin/sh",
      `echo "$@" > "${dir}/args"`,
      'if [ -n "$FAKE_SMI_FAIL" ]; then echo "$FAKE_SMI_FAIL" >&2; exit 9; fi',
      'printf "%s\\n" "$FAKE_SMI_OUTPUT"',
    ].join("\n"),
  );
  chmodSync(fake, 0o755);
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describeCollectorContract(
  "nvidia-smi (fake executable)",
  () => nvidiaSmiCollector({ command: fake, env: { FAKE_SMI_OUTPUT: ROWS } }),
  { describe, it },
);

describe("nvidiaSmiCollector", () => {
  it("reads used/total/free in MiB and reports bytes", async () => {
    const gpu = nvidiaSmiCollector({ command: fake, env: { FAKE_SMI_OUTPUT: ROWS } });
    expect(gpu.availability()).toEqual({ available: true });
    expect(gpu.capabilities).toMatchObject({
      backend: "cuda",
      sampling_source: "nvidia-smi",
      supports_device_used: true,
    });
    const result = await gpu.sample();
    expect(result).toEqual({
      kind: "full",
      reading: {
        device_used_bytes: 1024 * MiB,
        device_total_bytes: 16384 * MiB,
        device_free_bytes: 15000 * MiB,
      },
      metadata: {
        nvml_device_uuid: "GPU-aaaa1111-0000-0000-0000-000000000000",
        nvml_physical_index: 0,
        nvidia_smi_unit: "MiB",
      },
    });
    const { readFileSync } = await import("node:fs");
    expect(readFileSync(join(dir, "args"), "utf8").trim()).toBe(NVIDIA_SMI_ARGS.join(" "));
  });

  it("maps the logical index through CUDA_VISIBLE_DEVICES and reports N/A as missing", async () => {
    const gpu = nvidiaSmiCollector({
      command: fake,
      env: { FAKE_SMI_OUTPUT: ROWS, CUDA_VISIBLE_DEVICES: "1" },
    });
    expect(gpu.deviceId).toBe(0);
    const result = await gpu.sample();
    expect(result).toMatchObject({
      kind: "partial",
      missing: ["device_used_bytes"],
      reading: { device_total_bytes: 81920 * MiB },
      metadata: { nvml_physical_index: 1 },
    });
  });

  it("turns a failing nvidia-smi into a failure carrying its message", async () => {
    const gpu = nvidiaSmiCollector({
      command: fake,
      env: { FAKE_SMI_FAIL: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." },
    });
    const result = await gpu.sample();
    expect(result).toMatchObject({ kind: "failure" });
    if (result.kind === "failure")
      expect(result.error).toMatch(/couldn't communicate with the NVIDIA driver/);
  });

  it("answers concurrent samples with one query", async () => {
    const gpu = nvidiaSmiCollector({ command: fake, env: { FAKE_SMI_OUTPUT: ROWS } });
    const [a, b] = [gpu.sample(), gpu.sample()];
    expect(a).toBe(b);
    await a;
  });

  it("is unavailable when the command does not exist", () => {
    const gpu = nvidiaSmiCollector({ command: join(dir, "missing-smi") });
    expect(gpu.availability()).toMatchObject({
      available: false,
      reason: expect.stringMatching(/not found/),
    });
    const onPath = nvidiaSmiCollector({ env: { PATH: dir } });
    expect(onPath.availability()).toEqual({ available: true });
    expect(nvidiaSmiCollector({ env: { PATH: "/nonexistent" } }).availability().available).toBe(false);
  });
});

describe("parseNvidiaSmiOutput", () => {
  it("skips blank and malformed lines and keeps N/A as undefined", () => {
    expect(parseNvidiaSmiOutput(`\n${ROWS}\nNo devices were found\n`)).toEqual([
      {
        index: 0,
        uuid: "GPU-aaaa1111-0000-0000-0000-000000000000",
        used: 1024 * MiB,
        total: 16384 * MiB,
        free: 15000 * MiB,
      },
      {
        index: 1,
        uuid: "GPU-bbbb2222-0000-0000-0000-000000000000",
        used: undefined,
        total: 81920 * MiB,
        free: 80000 * MiB,
      },
    ]);
  });
});
