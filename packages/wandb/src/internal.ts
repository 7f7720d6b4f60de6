/**
 * @stormlog/wandb/internal: for Stormlog's own tools (the replay script, the CLI); no semver promise.
 */

export {
  type GoldenCaseConfig,
  loadCaseSession,
  readGoldenCaseConfig,
  runGoldenCaseExport,
} from "./golden-case.js";
