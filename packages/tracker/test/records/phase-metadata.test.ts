import type { JsonObject } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { PhaseMetadataBuilder } from "../../src/records/store.js";

/** What the builder stands for. */
const literal = (
  scope: JsonObject,
  extra: JsonObject | null,
  base: JsonObject,
  counters: string,
): JsonObject => ({
  phase_scope: scope,
  ...extra,
  ...base,
  phase_counters: counters,
});

/** Keys in order with their values: key order decides nothing in the output, but it is what a spread gives. */
const entries = (object: JsonObject) => Object.keys(object).map((key) => [key, object[key]]);

describe("PhaseMetadataBuilder", () => {
  it("builds what the spreads build, key order included, as base and detail change", () => {
    const builder = new PhaseMetadataBuilder();
    const health: JsonObject = {
      backend: "tfjs-cpu",
      collector_health_status: "healthy",
      supports_device_free: false,
    };
    const degraded: JsonObject = { ...health, collector_health_status: "degraded" };
    const cases: [JsonObject | null, JsonObject, string][] = [
      [{ tfjs_num_tensors: 3, tfjs_num_data_buffers: 3 }, health, "boundary_read"],
      [{ tfjs_num_tensors: 5, tfjs_num_data_buffers: 4 }, health, "boundary_read"],
      [null, health, "last_sample"],
      [{ tfjs_num_tensors: 6, tfjs_num_data_buffers: 4 }, health, "last_sample"],
      // Health changed: the group hands a new base object.
      [{ tfjs_num_tensors: 6, tfjs_num_data_buffers: 4 }, degraded, "boundary_read"],
      // Detail with other keys, in another order.
      [{ tfjs_num_data_buffers: 1, tfjs_num_tensors: 2, onnx_arena_bytes: 1024 }, degraded, "boundary_read"],
      // Detail keys the base or the counters key override, and one that replaces the scope.
      [{ backend: "from the detail", tfjs_num_tensors: 7 }, degraded, "boundary_read"],
      [{ phase_counters: "from the detail", tfjs_num_tensors: 8 }, degraded, "last_sample"],
      [{ phase_scope: "from the detail", tfjs_num_tensors: 9 }, degraded, "last_sample"],
      [{ tfjs_num_tensors: 10 }, { ...degraded, phase_scope: "from the base" }, "boundary_read"],
      [{ tfjs_num_tensors: 11, tfjs_num_data_buffers: 4 }, health, "boundary_read"],
    ];
    const built: JsonObject[] = [];
    cases.forEach(([extra, base, counters], sequence) => {
      const scope: JsonObject = { name: "forward", sequence };
      const metadata = builder.build(scope, extra, base, counters);
      expect(entries(metadata)).toEqual(entries(literal(scope, extra, base, counters)));
      built.push(metadata);
    });
    // Each record has its own object: changing one leaves the others and the base alone.
    built[0]!.tfjs_num_tensors = -1;
    built[0]!.backend = "changed";
    expect(built[1]!.tfjs_num_tensors).toBe(5);
    expect(built[1]!.backend).toBe("tfjs-cpu");
    expect(health.backend).toBe("tfjs-cpu");
  });
});
