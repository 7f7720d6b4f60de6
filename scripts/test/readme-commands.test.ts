import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const repo = resolve(import.meta.dirname, "../..");
const readme = readFileSync(join(repo, "README.md"), "utf8");
const scripts: Record<string, string> = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")).scripts;

/** The first command line after a `<!-- ci:NAME -->` marker, skipping blank lines and code fences. */
function markedCommand(marker: string): string | undefined {
  const lines = readme.split("\n");
  const at = lines.findIndex((l) => l.includes(`<!-- ci:${marker} -->`));
  if (at === -1) return undefined;
  return lines.slice(at + 1).find((l) => l.trim() !== "" && !/^\s*(```|~~~)/.test(l));
}

/** Every `pnpm <script>` a command runs must exist in the root package.json. */
function pnpmScripts(cmd: string): string[] {
  return [...cmd.matchAll(/\bpnpm\s+(?:run\s+)?([\w:-]+)/g)].map((m) => m[1] ?? "");
}

describe("README fresh-machine commands", () => {
  it("has exactly one marked test command, and .ci/run runs that command", () => {
    expect(readme.match(/<!-- ci:test-command -->/g)).toHaveLength(1);
    const cmd = markedCommand("test-command");
    expect(cmd).toMatch(/^bash scripts\/setup\.sh && .*pnpm test$/);
    const printed = spawnSync("bash", [join(repo, ".ci/run"), "--print"], { encoding: "utf8" });
    expect(printed.status).toBe(0);
    expect(printed.stdout.trim()).toBe(cmd);
  });

  it("has exactly one marked demo command that sets up and runs pnpm demo", () => {
    expect(readme.match(/<!-- ci:demo-command -->/g)).toHaveLength(1);
    expect(markedCommand("demo-command")).toMatch(/^bash scripts\/setup\.sh && pnpm demo$/);
  });

  it("only uses scripts that exist", () => {
    expect(existsSync(join(repo, "scripts/setup.sh"))).toBe(true);
    for (const marker of ["test-command", "demo-command"]) {
      const used = pnpmScripts(markedCommand(marker) ?? "");
      expect(used.length).toBeGreaterThan(0);
      for (const name of used) expect(Object.keys(scripts), `pnpm ${name}`).toContain(name);
    }
  });

  it("setup.sh is valid bash", () => {
    const res = spawnSync("bash", ["-n", join(repo, "scripts/setup.sh")], { encoding: "utf8" });
    expect(res.stderr).toBe("");
    expect(res.status).toBe(0);
  });
});
