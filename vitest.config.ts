import { defineConfig } from "vitest/config";

// Tests run against `src` through the `@stormlog/source` export condition: no build needed.
const conditions = ["@stormlog/source", "node", "import", "module", "default"];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: ["@stormlog/source"] } },
  test: {
    include: ["packages/*/test/**/*.test.ts", "examples/*/test/**/*.test.ts", "scripts/test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: "forks",
  },
});
