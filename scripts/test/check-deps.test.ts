import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const repo = resolve(import.meta.dirname, "../..");
const script = join(repo, "scripts/check-deps.mjs");
const temps: string[] = [];

function checkDeps(...args: string[]) {
  return spawnSync(process.execPath, [script, ...args], { cwd: repo, encoding: "utf8" });
}

/** Writes a tiny fake monorepo: `files` maps paths to contents (objects become JSON). */
function fakeRepo(files: Record<string, string | object>): string {
  const root = mkdtempSync(join(tmpdir(), "stormlog-deps-"));
  temps.push(root);
  for (const [path, content] of Object.entries(files)) {
    const full = join(root, path);
    mkdirSync(dirname(full), { recursive: true });
    writeFileSync(full, typeof content === "string" ? content : JSON.stringify(content));
  }
  return root;
}

const core = { name: "@stormlog/core" };
const phases = { name: "@stormlog/phases", dependencies: { "@stormlog/core": "workspace:*" } };

afterEach(() => {
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("check:deps", () => {
  it("passes on this repository", () => {
    const res = checkDeps();
    expect(res.stderr).toBe("");
    expect(res.status).toBe(0);
    expect(res.stdout).toContain("all packages follow the dependency rules");
  });

  it("passes on a fake tree that follows the rules", () => {
    const root = fakeRepo({
      "packages/core/package.json": core,
      "packages/core/src/index.ts": 'export const x = 1;\n// import { y } from "@stormlog/tracker";\n',
      "packages/phases/package.json": phases,
      "packages/phases/src/index.ts": 'import { x } from "@stormlog/core";\nexport { x };\n',
    });
    expect(checkDeps("--root", root).status).toBe(0);
  });

  it("fails when core imports another of our packages, naming the file and line", () => {
    const root = fakeRepo({
      "packages/core/package.json": core,
      "packages/core/src/index.ts": 'export const a = 1;\nexport { Tracker } from "@stormlog/tracker";\n',
    });
    const res = checkDeps("--root", root);
    expect(res.status).toBe(1);
    expect(res.stderr).toContain("packages/core/src/index.ts:2: @stormlog/core imports @stormlog/tracker");
  });

  it("fails on a forbidden package.json dependency, an undeclared import and a path into another package", () => {
    const root = fakeRepo({
      "packages/core/package.json": core,
      "packages/core/src/index.ts": "export {};\n",
      "packages/sink/package.json": {
        name: "@stormlog/sink",
        dependencies: { "@stormlog/phases": "workspace:*" },
      },
      "packages/sink/src/index.ts": "export {};\n",
      "packages/phases/package.json": { name: "@stormlog/phases" },
      "packages/phases/src/a.ts":
        'const m = await import("@stormlog/core");\nimport "../../core/src/index.js";\n',
    });
    const res = checkDeps("--root", root);
    expect(res.status).toBe(1);
    expect(res.stderr).toContain("@stormlog/sink lists @stormlog/phases in dependencies");
    expect(res.stderr).toContain(
      'packages/phases/src/a.ts:1: @stormlog/phases imports @stormlog/core; add "@stormlog/core"',
    );
    expect(res.stderr).toContain(
      "packages/phases/src/a.ts:2: @stormlog/phases imports ../../core/src/index.js, outside its package",
    );
  });

  it("fails on a package that has no rule", () => {
    const root = fakeRepo({ "packages/extra/package.json": { name: "@stormlog/extra" } });
    const res = checkDeps("--root", root);
    expect(res.status).toBe(1);
    expect(res.stderr).toContain("@stormlog/extra has no dependency rule");
  });
});
