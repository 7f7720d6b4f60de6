import { describeCollectorContract } from "@stormlog/core/testing";
import { describe, it } from "vitest";
import { processCollector } from "../../src/collectors/process-collector.js";

// The shipped process collector, on both of its sources.
describeCollectorContract("the process collector", () => processCollector(), { describe, it });
describeCollectorContract(
  "the process collector on process.memoryUsage()",
  () => processCollector({ procfs: false, arrayBuffersEveryN: 1 }),
  { describe, it },
);
describeCollectorContract(
  "the process collector with a statm path that cannot be opened",
  () => processCollector({ statmPath: "/nonexistent/statm" }),
  { describe, it },
);
