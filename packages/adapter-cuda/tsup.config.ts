import { copyFile } from "node:fs/promises";
import { packageBuild } from "../../tsup.base.js";

// The NVML binding and the sampling worker are plain CommonJS loaded at run time (a worker thread
// cannot load TypeScript): copy them next to the bundle, where `new URL("./...", import.meta.url)`
// finds them. `shims` gives the CJS bundle an `import.meta.url`.
export default packageBuild(
  { index: "src/index.ts" },
  {
    shims: true,
    external: ["./nvml-binding.cjs", "./nvml-worker.cjs"],
    async onSuccess() {
      await copyFile("src/nvml-binding.cjs", "dist/nvml-binding.cjs");
      await copyFile("src/nvml-worker.cjs", "dist/nvml-worker.cjs");
    },
  },
);
