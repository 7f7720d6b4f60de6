import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { Worker as NodeWorker, ResourceLimits } from "node:worker_threads";
import { nodeWorkerThreads } from "./builtins.js";

/**
 * Old generation a worker with a heap limit gets at least when it runs from TypeScript source:
 * compiling it through tsx takes more than such a worker's own work.
 */
const SOURCE_OLD_GENERATION_MB = 128;

/**
 * Starts the worker entry `name` next to the module at `here` (its `import.meta.url`): the built
 * `.js`/`.cjs` (a package's entries sit side by side in `dist/`, the CLI's beside its bundle), or,
 * when the package runs from its TypeScript source (this repository's tests, examples and
 * benchmarks), the `.ts` file through tsx. Throws when there is none (a bundle that left the entry
 * out, no tsx): callers then do the work on their own thread.
 */
export function startWorkerBeside(
  here: string,
  name: string,
  resourceLimits: ResourceLimits = {},
): NodeWorker {
  const { Worker } = nodeWorkerThreads();
  if (!here.endsWith(".ts")) {
    const entry = new URL(here.endsWith(".cjs") ? `./${name}.cjs` : `./${name}.js`, here);
    if (!existsSync(fileURLToPath(entry))) throw new Error(`no worker entry ${fileURLToPath(entry)}`);
    return new Worker(entry, { execArgv: [], resourceLimits });
  }
  const entry = new URL(`./${name}.ts`, here).href;
  const tsx = tsxLoaderUrl(here);
  const bootstrap = `import(${JSON.stringify(tsx)}).then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}));`;
  const limit = resourceLimits.maxOldGenerationSizeMb;
  return new Worker(bootstrap, {
    eval: true,
    execArgv: ["--conditions=@stormlog/source"],
    resourceLimits:
      limit === undefined
        ? resourceLimits
        : { ...resourceLimits, maxOldGenerationSizeMb: Math.max(limit, SOURCE_OLD_GENERATION_MB) },
  });
}

/** tsx's ESM loader API (`tsx/esm/api`, its `import` export), found from `from`. */
function tsxLoaderUrl(from: string): string {
  const manifestPath = createRequire(from).resolve("tsx/package.json");
  const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as {
    exports: Record<string, { import: { default: string } }>;
  };
  const api = manifest.exports["./esm/api"]?.import.default;
  if (api === undefined) throw new Error(`no tsx/esm/api in ${manifestPath}`);
  return new URL(api, pathToFileURL(manifestPath)).href;
}
