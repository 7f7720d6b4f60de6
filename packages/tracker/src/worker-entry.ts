import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";

/**
 * Starts the worker entry `name` next to the module at `here` (its `import.meta.url`): the built
 * `.js`/`.cjs` (the package's entries sit side by side in `dist/`), or, when the tracker runs from
 * its TypeScript source (this repository's tests and examples), the `.ts` file through tsx.
 * Throws when there is none (a bundle that left the entry out): callers do the work on this thread.
 */
export function startWorkerBeside(here: string, name: string): Worker {
  if (!here.endsWith(".ts")) {
    const entry = new URL(here.endsWith(".cjs") ? `./${name}.cjs` : `./${name}.js`, here);
    return new Worker(entry, { execArgv: [] });
  }
  const entry = new URL(`./${name}.ts`, here).href;
  const tsx = tsxLoaderUrl(here);
  const bootstrap = `import(${JSON.stringify(tsx)}).then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}));`;
  return new Worker(bootstrap, { eval: true, execArgv: ["--conditions=@stormlog/source"] });
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
