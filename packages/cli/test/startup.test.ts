import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { finished, spawnCli, tempDir } from "./helpers.js";

const dir = tempDir("stormlog-cli-startup-");
afterAll(() => dir.remove());

/** The module specifiers a `stormlog <args>` process resolved, through a resolve hook it is started with. */
async function resolvedBy(args: readonly string[], name: string): Promise<string[]> {
  const log = join(dir.path, `${name}.log`);
  const hooks = join(dir.path, "hooks.mjs");
  writeFileSync(
    hooks,
    'import { appendFileSync } from "node:fs";\nlet log;\nexport function initialize(data) { log = data.log; }\n' +
      'export async function resolve(specifier, context, next) {\n  appendFileSync(log, specifier + "\\n");\n' +
      "  return next(specifier, context);\n}\n",
  );
  const register = join(dir.path, `${name}-register.mjs`);
  writeFileSync(
    register,
    `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hooks).href)}, { data: { log: ${JSON.stringify(log)} } });\n`,
  );
  writeFileSync(log, "");
  await finished(
    spawnCli(args, { env: { ...process.env, NODE_OPTIONS: `--import ${pathToFileURL(register).href}` } }),
  );
  return readFileSync(log, "utf8").split("\n").filter(Boolean);
}

describe("what a command loads", () => {
  it("loads the W&B exporter (and protobufjs behind it) only for a command that exports to W&B", async () => {
    // Loaded at every start it cost every command ~10 ms (a warm `analyze` does ~35 ms of its own work).
    const missing = join(dir.path, "no-such-sink");
    const wandb = (specifiers: string[]) => specifiers.filter((specifier) => specifier === "@stormlog/wandb");
    expect(wandb(await resolvedBy(["sessions", missing, "--format", "json"], "sessions"))).toEqual([]);
    expect(wandb(await resolvedBy(["analyze", missing], "analyze"))).toEqual([]);
    // A directory that holds no sink: the W&B settings are read (the exporter loaded) before it is.
    const empty = join(dir.path, "empty");
    mkdirSync(empty);
    const exporting = await resolvedBy(
      ["export", empty, "--format", "wandb", "--wandb-mode", "offline"],
      "export",
    );
    expect(wandb(exporting).length).toBeGreaterThan(0);
  }, 60_000);
});
