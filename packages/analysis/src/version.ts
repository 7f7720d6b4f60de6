import packageJson from "../package.json" with { type: "json" };

/** This package's version: results it renders and stores are read back only by the same version. */
export const PACKAGE_VERSION: string = packageJson.version;
