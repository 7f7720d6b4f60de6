import packageJson from "../package.json" with { type: "json" };

/** This package's version, written into each file's `created_by` and the dataset's manifest. */
export const PACKAGE_VERSION: string = packageJson.version;
