import { packageBuild } from "../../tsup.base.js";

// `shims` gives the CJS bundle an `import.meta.url`: the page inlines uPlot's files, found from there.
export default packageBuild({ index: "src/index.ts" }, { shims: true });
