import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const build = fileURLToPath(new URL("../../kernel/build.mjs", import.meta.url));

describe("the line-template kernel", () => {
  it("is committed as what its AssemblyScript source compiles to", () => {
    const run = spawnSync(process.execPath, [build, "--check"], { encoding: "utf8" });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
  });
});
