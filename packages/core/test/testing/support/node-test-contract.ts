// Runs the collector contract under node:test (spawned by collector-contract.test.ts): a collector
// that keeps the rules, and one that reports a zero for a counter it does not support.
import { describe, it } from "node:test";
import { describeCollectorContract } from "@stormlog/core/testing";
import {
  COLLECTOR_SPECIFICATION_VERSION,
  type MemoryCollector,
  noCapabilities,
} from "../../../src/collector/collector.js";

function heapCollector(zeros: boolean): MemoryCollector {
  let closed = false;
  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: "stormlog.heap_tracker",
    deviceId: -1,
    capabilities: {
      ...noCapabilities("cpu", "stormlog.heap_tracker", "v8"),
      supports_allocator_allocated: true,
    },
    availability: () => ({ available: true }),
    sample: () =>
      closed
        ? { kind: "failure", error: "closed" }
        : {
            kind: "full",
            reading: {
              allocator_allocated_bytes: process.memoryUsage().heapUsed,
              ...(zeros ? { device_used_bytes: 0 } : {}),
            },
          },
    close: () => {
      closed = true;
    },
  };
}

describeCollectorContract("heap", () => heapCollector(process.env.CONTRACT_ZEROS === "1"), { describe, it });
