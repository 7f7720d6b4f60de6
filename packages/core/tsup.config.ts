import { packageBuild } from "../../tsup.base.js";

// `@stormlog/core/testing` is an entry of its own so the main entry carries none of the contract suite.
export default packageBuild({ index: "src/index.ts", testing: "src/testing/index.ts" });
