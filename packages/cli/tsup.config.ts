import { defineConfig } from "tsup";
import { packageBuild } from "../../tsup.base.js";

export default defineConfig([
  packageBuild({ index: "src/index.ts" }, { clean: false }),
  // The `stormlog` bin is ESM with our packages inside: resolving their export maps cost a fresh process
  // ~17 ms of its ~200 ms warm `analyze` (measured). `track`'s tracker and NVML adapter stay in chunks
  // that only `track` loads. The build script cleans dist/, which both builds share.
  packageBuild(
    { bin: "src/bin.ts" },
    { format: ["esm"], dts: false, clean: false, splitting: true, noExternal: [/^@stormlog\//] },
  ),
]);
