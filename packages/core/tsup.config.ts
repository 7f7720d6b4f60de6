import { packageBuild } from "../../tsup.base.js";

// `@stormlog/core/testing` is an entry of its own so the main entry carries none of the contract suite.
// `@stormlog/core/internal` holds what Stormlog's other packages share. `splitting` puts the modules the
// entries share in one chunk, so a program that loads several entries gets one copy of each module.
export default packageBuild(
  { index: "src/index.ts", internal: "src/internal.ts", testing: "src/testing/index.ts" },
  { splitting: true },
);
