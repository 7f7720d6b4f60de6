import packageJson from "../package.json" with { type: "json" };

/** The version of `@stormlog/cli` (what `stormlog --version` prints). */
export const VERSION: string = packageJson.version;
