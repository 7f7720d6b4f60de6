import { packageBuild } from "../../tsup.base.js";

export default packageBuild({ index: "src/index.ts", bin: "src/bin.ts" });
