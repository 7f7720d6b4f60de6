import { configDefaults, defineConfig } from "vitest/config";

// Tests run against `src` through the `@stormlog/source` export condition: no build needed.
const conditions = ["@stormlog/source", "node", "import", "module", "default"];
const include = ["packages/*/test/**/*.test.ts", "examples/*/test/**/*.test.ts", "scripts/test/**/*.test.ts"];
// Files whose assertions bound a time (a SIGKILL's loss in milliseconds) or that start many processes
// on a schedule (the examples' four ranks started together, a service run for two seconds): they run
// alone, after the rest, so that other files' load on a two-core machine does not decide them.
const sequential = "**/*.sequential.test.ts";

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: ["@stormlog/source"] } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: "forks",
    projects: [
      {
        extends: true,
        test: {
          name: "parallel",
          include,
          exclude: [...configDefaults.exclude, sequential],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "sequential",
          include: include.map((pattern) => pattern.replace(/\.test\.ts$/, ".sequential.test.ts")),
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
