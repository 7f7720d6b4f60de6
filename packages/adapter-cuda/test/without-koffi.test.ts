import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KoffiMissingError } from "../src/index.js";
import { buildStub } from "./stub/build.js";

interface Outcome {
  available: boolean;
  reason: string;
  sampleKind: string;
  sampleError: string;
  causeIsKoffiMissing: boolean;
  causeName: string | null;
  found: string | null;
  nvidiaSmi: boolean | null;
}

let stubPath: string;
let binDir: string;

beforeAll(() => {
  stubPath = buildStub("full");
  binDir = mkdtempSync(join(tmpdir(), "stormlog-fake-smi-"));
  const smi = join(binDir, "nvidia-smi");
  writeFileSync(smi, "#!/bin/sh\nexit 0\n");
  chmodSync(smi, 0o755);
});

afterAll(() => {
  rmSync(binDir, { recursive: true, force: true });
});

/** Creates an NVML collector with `options` in a child process where koffi cannot be resolved. */
function withoutKoffi(options: Record<string, unknown>): Outcome {
  const index = pathToFileURL(join(import.meta.dirname, "../src/index.ts")).href;
  const script = `
    const { KoffiMissingError, nvmlCollector } = await import(${JSON.stringify(index)});
    const gpu = nvmlCollector(${JSON.stringify(options)});
    const availability = gpu.availability();
    const sample = await gpu.sample();
    await gpu.close();
    console.log(JSON.stringify({
      available: availability.available,
      reason: availability.reason ?? "",
      sampleKind: sample.kind,
      sampleError: sample.error ?? "",
      causeIsKoffiMissing: KoffiMissingError.isInstance(sample.cause),
      causeName: sample.cause?.name ?? null,
      found: sample.cause?.found ?? null,
      nvidiaSmi: sample.cause?.nvidiaSmi ?? null,
    }));
  `;
  const child = spawnSync(
    process.execPath,
    [
      "--require",
      join(import.meta.dirname, "support/hide-koffi.cjs"),
      "--conditions=@stormlog/source",
      "--import",
      "tsx",
      "--input-type=module",
      "--eval",
      script,
    ],
    { cwd: join(import.meta.dirname, ".."), encoding: "utf8", timeout: 20_000 },
  );
  expect(child.stderr).toBe("");
  expect(child.status).toBe(0);
  return JSON.parse(child.stdout.trim()) as Outcome;
}

describe("nvmlCollector without koffi (an optional peer dependency)", () => {
  it("names the missing package and its install command when an NVML library is on disk", () => {
    const outcome = withoutKoffi({ libraryPath: stubPath, env: {} });
    expect(outcome.available).toBe(false);
    expect(outcome.reason).toBe(
      `NVML unavailable: koffi is not installed; install it (npm i koffi) to read this GPU through NVML (found ${stubPath})`,
    );
    // The CLI shortens reasons that list the paths tried: this one must reach the user whole.
    expect(outcome.reason).not.toContain("(tried ");
    expect(outcome).toMatchObject({
      sampleKind: "failure",
      sampleError: outcome.reason,
      causeIsKoffiMissing: true,
      causeName: "KoffiMissingError",
      found: stubPath,
      nvidiaSmi: false,
    });
  });

  it("points at nvidiaSmiCollector() when nvidia-smi is on PATH", () => {
    const outcome = withoutKoffi({
      libraryPath: "/nonexistent/libnvidia-ml.so.1",
      env: { PATH: binDir },
    });
    expect(outcome.available).toBe(false);
    expect(outcome.reason).toContain("install it (npm i koffi)");
    expect(outcome.reason).toContain(`(found ${join(binDir, "nvidia-smi")})`);
    expect(outcome.reason).toContain("nvidiaSmiCollector() reads it through nvidia-smi");
    expect(outcome).toMatchObject({ causeIsKoffiMissing: true, nvidiaSmi: true });
  });

  it("reports no driver (not the missing koffi) on a machine without one", () => {
    const outcome = withoutKoffi({ libraryPath: "/nonexistent/libnvidia-ml.so.1", env: {} });
    expect(outcome.available).toBe(false);
    expect(outcome.reason).toMatch(/^NVML unavailable \(tried \/nonexistent\/libnvidia-ml\.so\.1; /);
    expect(outcome.reason).toContain("no NVIDIA driver library found");
    expect(outcome).toMatchObject({ sampleKind: "failure", causeIsKoffiMissing: false, causeName: null });
  });
});

describe("KoffiMissingError", () => {
  it("is a StormlogError recognised across copies of the package", () => {
    const error = new KoffiMissingError("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", true);
    expect(error.name).toBe("KoffiMissingError");
    expect(KoffiMissingError.isInstance(error)).toBe(true);
    expect(KoffiMissingError.isInstance(new Error(error.message))).toBe(false);
    expect(
      error.message.startsWith("NVML unavailable: koffi is not installed; install it (npm i koffi)"),
    ).toBe(true);
  });
});
