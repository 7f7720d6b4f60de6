import { packageBuild } from "../../tsup.base.js";

// `@stormlog/wandb/internal` holds what Stormlog's own tools share (the replay script, the CLI).
// `splitting` puts the modules both entries use in one chunk.
export default packageBuild({ index: "src/index.ts", internal: "src/internal.ts" }, { splitting: true });
