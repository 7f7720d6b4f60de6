import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { scansIn } from "./fixtures/scans-in-child.js";

const build = fileURLToPath(new URL("../../kernel/build.mjs", import.meta.url));
const LEAKS = fileURLToPath(new URL("../../../../fixtures/golden/leaks", import.meta.url));

describe("the line-template kernel", () => {
  it("is committed as what its AssemblyScript source compiles to", () => {
    const run = spawnSync(process.execPath, [build, "--check"], { encoding: "utf8" });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
  });

  it("is not needed: without WebAssembly (--jitless) a scan reads every line in full, to the same aggregate", () => {
    const files = readdirSync(LEAKS).map((name) => join(LEAKS, name, "input.jsonl"));
    const withKernel = scansIn([], files);
    const without = scansIn(["--jitless"], files);
    expect(withKernel.webAssembly).toBe(true);
    expect(without.webAssembly).toBe(false);
    expect(without.scans).toHaveLength(files.length);
    expect(without.scans).toEqual(withKernel.scans);
  });
});
