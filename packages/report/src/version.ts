import packageJson from "../package.json" with { type: "json" };

/** This package's version, named in the pages it makes. */
export const PACKAGE_VERSION: string = packageJson.version;
