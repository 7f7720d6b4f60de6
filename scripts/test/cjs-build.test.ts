import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build, type Options } from "tsup";
import { afterAll, describe, expect, it } from "vitest";

// The CommonJS build of a package whose entries share chunks (`splitting`) must keep `?.` and `??`
// as written: tsup's own conversion of those chunks (sucrase) turned each into a helper call that
// allocates an array and closures every time it runs, on the hot paths of every `require` user.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const PACKAGES = join(ROOT, "packages");
const SUCRASE_HELPERS = /\b_optionalChain\(|\b_nullishCoalesce\(/;

async function configOf(dir: string): Promise<Options | null> {
  const path = join(PACKAGES, dir, "tsup.config.ts");
  if (!existsSync(path)) return null;
  const loaded = (await import(pathToFileURL(path).href)) as { default: Options | Options[] };
  const first = Array.isArray(loaded.default) ? loaded.default[0] : loaded.default;
  return first ?? null;
}

const split: { dir: string; config: Options }[] = [];
for (const dir of readdirSync(PACKAGES).sort()) {
  const config = await configOf(dir);
  if (config?.splitting === true) split.push({ dir, config });
}
const outDirs: string[] = [];
afterAll(() => {
  for (const dir of outDirs) rmSync(dir, { recursive: true, force: true });
});

describe("CommonJS builds of packages with shared chunks", () => {
  it("are found (the packages whose entries share modules)", () => {
    expect(split.map(({ dir }) => dir)).toEqual(
      expect.arrayContaining(["analysis", "core", "phases", "sink"]),
    );
  });

  it.each(split.map(({ dir, config }) => [dir, config] as const))(
    "@stormlog/%s keeps ?. and ?? in its .cjs files, which are CommonJS scripts",
    async (dir, config) => {
      const packageDir = join(PACKAGES, dir);
      const outDir = mkdtempSync(join(tmpdir(), `stormlog-cjs-${dir}-`));
      outDirs.push(outDir);
      const entry = Object.fromEntries(
        Object.entries(config.entry as Record<string, string>).map(([name, path]) => [
          name,
          join(packageDir, path),
        ]),
      );
      await build({
        ...config,
        entry,
        format: ["cjs"],
        dts: false,
        sourcemap: false,
        silent: true,
        config: false,
        clean: false,
        outDir,
        // As in the published package: the other @stormlog packages are dependencies, not bundled.
        external: [/^@stormlog\//],
        esbuildOptions(options) {
          options.absWorkingDir = packageDir;
        },
      });
      const files = readdirSync(outDir).filter((name) => name.endsWith(".cjs"));
      expect(files.length).toBeGreaterThan(Object.keys(entry).length);
      let optionalChains = 0;
      for (const name of files) {
        const code = readFileSync(join(outDir, name), "utf8");
        expect(SUCRASE_HELPERS.test(code), `${name} calls sucrase's helpers`).toBe(false);
        optionalChains += code.split("?.").length - 1;
        // A CommonJS script (Node parses it as one) whose required chunks are there. (Not loaded: that
        // would resolve the other @stormlog packages to builds this test did not make.)
        const checked = spawnSync(process.execPath, ["--check", join(outDir, name)], { encoding: "utf8" });
        expect(checked.stderr, `${name} parses as CommonJS`).toBe("");
        expect(checked.status).toBe(0);
        for (const [, required] of code.matchAll(/require\(['"](\.\/[^'"]+)['"]\)/g))
          expect(existsSync(join(outDir, required!)), `${name} requires ${required}`).toBe(true);
      }
      expect(optionalChains).toBeGreaterThan(0);
      expect(files).toEqual(expect.arrayContaining(Object.keys(entry).map((name) => `${name}.cjs`)));
    },
    120_000,
  );
});
