import type { TelemetryEvent } from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { analyzeEvents, type LeakReport } from "../src/index.js";
import { judgeLevels } from "../src/leaks.js";
import { MiB, Timeline } from "./report-helpers.js";

interface StepOptions {
  steps?: number;
  /** Bytes and tensors the forward pass keeps, per step (may depend on the step). */
  leakBytes?: (step: number) => number;
  leakTensors?: (step: number) => number;
  /** Bytes the optimizer's arena grows by, per step. */
  arena?: (step: number) => number;
  /** Noise added to the level after backward. */
  noise?: (step: number) => number;
  tensors?: boolean;
  identity?: ConstructorParameters<typeof Timeline>[0];
  /** Wrap steps in `train / step`. */
  nested?: boolean;
}

/** A training loop: forward allocates activations (and maybe leaks), backward frees them, optimizer may grow an arena. */
function training(options: StepOptions = {}): TelemetryEvent[] {
  const t = new Timeline(options.identity ?? {});
  if (options.tensors !== false) t.tensors = 100;
  const steps = options.steps ?? 30;
  t.enter("train");
  for (let step = 0; step < steps; step++) {
    if (options.nested) t.enter("step");
    t.enter("forward").sample();
    t.allocated += 256 * MiB;
    if (t.tensors !== null) t.tensors += 40;
    t.allocated += options.leakBytes?.(step) ?? 0;
    if (t.tensors !== null) t.tensors += options.leakTensors?.(step) ?? 0;
    t.sample().exit();
    t.enter("backward").sample();
    t.allocated -= 256 * MiB;
    if (t.tensors !== null) t.tensors -= 40;
    t.allocated += options.noise?.(step) ?? 0;
    t.sample().exit();
    t.enter("optimizer");
    t.allocated += options.arena?.(step) ?? 0;
    t.sample().exit();
    if (options.nested) t.exit();
  }
  t.exit();
  return t.events;
}

function leakOf(events: TelemetryEvent[], path: string): LeakReport {
  const leak = analyzeEvents(events).leaks.find((report) => report.phase_path === path);
  if (leak === undefined) throw new Error(`no verdict for ${path}`);
  return leak;
}

describe("leak verdicts per phase path", () => {
  it("reports a forward pass that keeps 3 tensors and 12 KB per step, and nothing else", () => {
    const events = training({ leakBytes: () => 12 * 1024, leakTensors: () => 3 });
    const report = analyzeEvents(events);
    const forward = report.leaks[0]!;
    expect(forward).toMatchObject({
      phase_path: "train / forward",
      verdict: "leaking",
      bytes_per_occurrence: 12 * 1024,
      tensors_per_occurrence: 3,
      message: "`train / forward` keeps 3 tensors, 12.00 KB per occurrence",
      occurrences: 30,
    });
    expect(forward.confidence).toBeGreaterThanOrEqual(0.9);
    expect(forward.evidence.bytes?.positive_fraction).toBe(1);
    // backward's level rises with the leak but it frees what it finds: not a leak.
    expect(leakOf(events, "train / backward").verdict).toBe("stable");
    expect(leakOf(events, "train / optimizer").verdict).toBe("stable");
    expect(leakOf(events, "train").verdict).toBe("insufficient_data");
  });

  it("reports bytes only when the adapter records no tensor counts", () => {
    const leak = leakOf(training({ leakBytes: () => 12 * 1024, tensors: false }), "train / forward");
    expect(leak.verdict).toBe("leaking");
    expect(leak.tensors_per_occurrence).toBeNull();
    expect(leak.message).toBe("`train / forward` keeps 12.00 KB per occurrence");
  });

  it("reports tensors kept without bytes", () => {
    const leak = leakOf(training({ leakTensors: () => 2 }), "train / forward");
    expect(leak).toMatchObject({ verdict: "leaking", tensors_per_occurrence: 2, bytes_per_occurrence: null });
  });

  it("calls an arena that grows for a few steps and then holds a plateau, not a leak", () => {
    const events = training({ arena: (step) => (step < 6 ? 64 * MiB : 0) });
    const optimizer = leakOf(events, "train / optimizer");
    expect(optimizer.verdict).toBe("plateau");
    expect(optimizer.message).toContain("warm-up, not a leak");
    expect(analyzeEvents(events).leaks.some((leak) => leak.verdict === "leaking")).toBe(false);
  });

  it("does not call allocate-then-free phases or noise a leak", () => {
    let state = 11;
    const noise = (): number => {
      state = (state * 1103515245 + 12345) % 2 ** 31;
      return Math.round((state / 2 ** 31 - 0.5) * 2 * MiB);
    };
    const events = training({ noise, steps: 60 });
    for (const leak of analyzeEvents(events).leaks) expect(leak.verdict, leak.phase_path).not.toBe("leaking");
  });

  it("still sees a leak through a transient spike in the middle of the run", () => {
    const leak = leakOf(
      training({
        leakBytes: (step) => 12 * 1024 + (step === 20 ? 1024 * MiB : step === 22 ? -1024 * MiB : 0),
        steps: 40,
      }),
      "train / forward",
    );
    expect(leak.verdict).toBe("leaking");
    expect(leak.bytes_per_occurrence).toBe(12 * 1024);
  });

  it("needs enough occurrences per rank", () => {
    expect(leakOf(training({ leakBytes: () => MiB, steps: 4 }), "train / forward").verdict).toBe(
      "insufficient_data",
    );
    expect(leakOf(training({ leakBytes: () => MiB, steps: 5 }), "train / forward").verdict).toBe("leaking");
  });

  it("names the leaking ranks when only some leak", () => {
    const events: TelemetryEvent[] = [];
    for (const rank of [0, 1, 2, 3]) {
      events.push(
        ...training({
          identity: { rank, world_size: 4, session_id: `rank-${rank}`, job_id: "job" },
          leakBytes: () => (rank === 2 ? 4096 : 0),
        }),
      );
    }
    const leak = leakOf(events, "train / forward");
    expect(leak).toMatchObject({
      verdict: "leaking",
      leaking_ranks: [2],
      ranks_analyzed: 4,
      bytes_per_occurrence: 4096,
    });
    expect(leak.message).toBe("`train / forward` keeps 4.00 KB per occurrence (rank 2 of 4)");
    expect(leak.evidence.rank).toBe(2);
  });

  it("says which child holds a leaking parent's growth", () => {
    const events = training({ nested: true, leakBytes: () => 8192 });
    const step = leakOf(events, "train / step");
    expect(step.verdict).toBe("leaking");
    expect(step.message).toContain("the growth is inside `train / step / forward`");
    expect(leakOf(events, "train / step / forward").verdict).toBe("leaking");
  });

  it("falls back to device used memory when the allocator counter is absent (schema v4 nulls)", () => {
    const events = training({ leakBytes: () => 65536 }).map((event) =>
      event.event_type.startsWith("phase")
        ? ({
            ...event,
            schema_version: 4,
            allocator_allocated_bytes: null,
            device_used_bytes: event.allocator_allocated_bytes! + 1024 * MiB,
          } as unknown as TelemetryEvent)
        : event,
    );
    const leak = leakOf(events, "train / forward");
    expect(leak.verdict).toBe("leaking");
    expect(leak.evidence.bytes?.metric).toBe("device_used_bytes");
  });
});

describe("judgeLevels", () => {
  const levels = (exits: number[], nets: number[]) => ({
    enter: exits.map((x, i) => x - nets[i]!),
    exit: exits,
  });

  it("sees a plateau that begins late as no leak once the last third is flat", () => {
    const exits = Array.from({ length: 30 }, (_, i) => Math.min(i, 15) * 1000);
    const nets = exits.map((_, i) => (i <= 15 ? 1000 : 0));
    expect(judgeLevels(levels(exits, nets), "allocator_allocated_bytes").verdict).not.toBe("leaking");
  });

  it("flags steady growth with a positive net on most occurrences", () => {
    const exits = Array.from({ length: 30 }, (_, i) => i * 500 + (i % 3 === 0 ? 100 : 0));
    const nets = exits.map((_, i) => (i % 7 === 0 ? -10 : 500));
    const verdict = judgeLevels(levels(exits, nets), "allocator_allocated_bytes");
    expect(verdict.verdict).toBe("leaking");
    expect(verdict.evidence?.retained_per_occurrence).toBe(500);
  });
});
