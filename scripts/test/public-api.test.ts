import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

// The API report: each package's root entry must export exactly the runtime names listed in its
// `test/public-api.json`, so that adding (or dropping) a public export is a reviewed change to that
// list, not a side effect of an `export` somewhere in `src/`. Types cannot be listed at run time.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const PACKAGES = join(ROOT, "packages");
const packages = readdirSync(PACKAGES, { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && existsSync(join(PACKAGES, entry.name, "package.json")))
  .map((entry) => entry.name)
  .sort();

async function runtimeNames(file: string): Promise<string[]> {
  const module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  return Object.keys(module).sort();
}

function difference(a: readonly string[], b: readonly string[]): string[] {
  const other = new Set(b);
  return a.filter((name) => !other.has(name));
}

describe.each(packages)("@stormlog/%s", (dir) => {
  it("exports from its root exactly the names in test/public-api.json", async () => {
    const listPath = join(PACKAGES, dir, "test/public-api.json");
    expect(existsSync(listPath), `packages/${dir}/test/public-api.json is missing`).toBe(true);
    const listed = (JSON.parse(readFileSync(listPath, "utf8")) as string[]).slice().sort();
    const actual = await runtimeNames(join(PACKAGES, dir, "src/index.ts"));
    const added = difference(actual, listed);
    const removed = difference(listed, actual);
    const message =
      `packages/${dir}/src/index.ts exports [${added.join(", ")}] not in test/public-api.json and no longer ` +
      `exports [${removed.join(", ")}]. A public export is a promise to users: if the change is deliberate, ` +
      "update the list and add a changeset; if only Stormlog's own packages need a name, export it from " +
      "src/internal.ts (the package's `./internal` subpath) instead.";
    expect({ added, removed }, message).toEqual({ added: [], removed: [] });
  });
});

const withInternal = packages.filter((dir) => existsSync(join(PACKAGES, dir, "src/internal.ts")));

describe.each(withInternal)("@stormlog/%s/internal", (dir) => {
  it("holds no public name, and is wired as the root is", async () => {
    const [root, internal] = await Promise.all([
      runtimeNames(join(PACKAGES, dir, "src/index.ts")),
      runtimeNames(join(PACKAGES, dir, "src/internal.ts")),
    ]);
    const both = internal.filter((name) => root.includes(name));
    expect(both, "a name is public or internal, not both: import it from the root").toEqual([]);
    const manifest = JSON.parse(readFileSync(join(PACKAGES, dir, "package.json"), "utf8")) as {
      exports: Record<string, unknown>;
    };
    // The same conditions as ".", pointing at the `internal` files.
    const expected = JSON.parse(JSON.stringify(manifest.exports["."]).replaceAll("/index.", "/internal."));
    expect(manifest.exports["./internal"]).toEqual(expected);
  });
});
