// A child script that runs as another user must not read the repository (a clone may be readable by
// root only): it is bundled, sources and workspace packages included, into one file in a temp dir.
import { chmodSync, mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

type BuildSync = (options: Record<string, unknown>) => { errors: unknown[] };

/** esbuild, as tsup (a dev dependency of the workspace) brings it. */
function esbuildSync(): BuildSync {
  const requireHere = createRequire(import.meta.url);
  const requireFromTsup = createRequire(requireHere.resolve("tsup"));
  return (requireFromTsup("esbuild") as { buildSync: BuildSync }).buildSync;
}

/**
 * Bundles `entry` (a TypeScript script of this package) into `<new temp dir>/<name>.mjs`, readable
 * by everyone, and returns its path. The caller removes the directory.
 */
export function bundleForAnotherUser(entry: string, name: string): { file: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-child-"));
  chmodSync(dir, 0o755);
  const file = join(dir, `${name}.mjs`);
  esbuildSync()({
    entryPoints: [entry],
    outfile: file,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    conditions: ["@stormlog/source"],
    logLevel: "silent",
    // Bundled CommonJS dependencies may call require().
    banner: {
      js: 'import { createRequire as __cr } from "node:module"; const require = __cr(import.meta.url);',
    },
  });
  chmodSync(file, 0o644);
  return { file, dir };
}
