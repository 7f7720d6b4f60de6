import type { PhaseContextLike } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { full, makeTracker, reading, SequencedCollector } from "./helpers.js";

/** A collector that receives the tracker's phase context, as the tfjs collector does for birth phases. */
class PhaseAwareCollector extends SequencedCollector {
  context: PhaseContextLike | undefined;
  binds = 0;
  bindPhases(context: PhaseContextLike): void {
    this.context = context;
    this.binds++;
  }
  /** What an allocation made now would be attributed to. */
  here(): string {
    return this.context?.currentPhasePath() ?? "unbound";
  }
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("bindPhases", () => {
  it("hands collectors a context that names the current phase in nested sync and async phases", async () => {
    const collector = new PhaseAwareCollector([full(reading({ allocated: 1, reserved: 2 }))]);
    const { tracker } = makeTracker([collector]);
    expect(collector.binds).toBe(0);
    await tracker.start();
    expect(collector.binds).toBe(1);

    const seen: string[] = [collector.here()];
    tracker.phase("setup", () => {
      seen.push(collector.here());
      tracker.phase("load", () => seen.push(collector.here()));
      seen.push(collector.here());
    });
    await tracker.phase("train", async () => {
      seen.push(collector.here());
      await tick();
      // Two async phases at once: each sees its own path across its awaits.
      const order: string[] = [];
      await Promise.all([
        tracker.phase("forward", async () => {
          await tick();
          order.push(`forward:${collector.here()}`);
          tracker.phase("matmul", () => order.push(`matmul:${collector.here()}`));
        }),
        tracker.phase("backward", async () => {
          order.push(`backward:${collector.here()}`);
          await tick();
          order.push(`backward:${collector.here()}`);
        }),
      ]);
      expect(order.sort()).toEqual([
        "backward:train / backward",
        "backward:train / backward",
        "forward:train / forward",
        "matmul:train / forward / matmul",
      ]);
      {
        using _step = tracker.phase("optimizer_step");
        seen.push(collector.here());
      }
      seen.push(collector.here());
    });
    seen.push(collector.here());
    expect(seen).toEqual([
      "",
      "setup",
      "setup / load",
      "setup",
      "train",
      "train / optimizer_step",
      "train",
      "",
    ]);

    await tracker.stop();
    // After stop the context answers "" (no session), whatever the code does.
    tracker.phase("after", () => seen.push(collector.here()));
    expect(seen.at(-1)).toBe("");
  });

  it("logs and goes on when a collector's bindPhases throws", async () => {
    const collector = new PhaseAwareCollector([full(reading({ allocated: 1, reserved: 2 }))]);
    collector.bindPhases = () => {
      throw new Error("cannot bind");
    };
    const { tracker, warnings } = makeTracker([collector]);
    await tracker.start();
    expect(warnings.some((w) => w.includes("could not bind the phases: cannot bind"))).toBe(true);
    expect(tracker.isTracking).toBe(true);
    await tracker.stop();
  });
});
