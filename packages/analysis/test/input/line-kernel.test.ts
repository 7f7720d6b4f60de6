import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const build = fileURLToPath(new URL("../../kernel/build.mjs", import.meta.url));
const scanDigest = fileURLToPath(new URL("./fixtures/scan-digest.ts", import.meta.url));
const LEAKS = fileURLToPath(new URL("../../../../fixtures/golden/leaks", import.meta.url));

/** The digests of scanning `files` in a child node run with `flags`. */
function digestsIn(
  flags: readonly string[],
  files: readonly string[],
): { webAssembly: boolean; digests: unknown[] } {
  const run = spawnSync(
    process.execPath,
    [...flags, "--conditions=@stormlog/source", "--import", "tsx", scanDigest, ...files],
    { encoding: "utf8", maxBuffer: 64 << 20 },
  );
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as { webAssembly: boolean; digests: unknown[] };
}

describe("the line-template kernel", () => {
  it("is committed as what its AssemblyScript source compiles to", () => {
    const run = spawnSync(process.execPath, [build, "--check"], { encoding: "utf8" });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
  });

  it("is not needed: without WebAssembly (--jitless) a scan reads every line in full, to the same digest", () => {
    const files = readdirSync(LEAKS).map((name) => join(LEAKS, name, "input.jsonl"));
    const withKernel = digestsIn([], files);
    const without = digestsIn(["--jitless"], files);
    expect(withKernel.webAssembly).toBe(true);
    expect(without.webAssembly).toBe(false);
    expect(without.digests).toHaveLength(files.length);
    expect(without.digests).toEqual(withKernel.digests);
  });
});
