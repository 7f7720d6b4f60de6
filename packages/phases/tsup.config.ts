import { packageBuild } from "../../tsup.base.js";

// `@stormlog/phases/internal` holds what Stormlog's other packages share. `splitting` puts the modules
// both entries use in one chunk, so a program that loads both gets one copy of each module.
export default packageBuild({ index: "src/index.ts", internal: "src/internal.ts" }, { splitting: true });
