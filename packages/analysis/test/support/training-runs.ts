import type { TelemetryEvent } from "@stormlog/core";
import { MiB, Timeline } from "../../../sink/test/support/telemetry-fixtures.js";

/** Where a generated run keeps memory, per step. */
export interface TrainingRun {
  steps?: number;
  /** Activations forward allocates and backward frees. */
  activations?: number;
  /** Bytes kept per step by each phase (may depend on the step). */
  keep?: Partial<Record<"forward" | "backward" | "optimizer_step" | "load_batch", (step: number) => number>>;
  /** Tensors kept per step by forward. */
  keepTensors?: (step: number) => number;
  /** `train / load_batch` returns a batch the step disposes after optimizer_step (not a leak). */
  loader?: number;
  /** Memory allocated in forward and freed in the next step's backward (pipelining). */
  pipelined?: number;
  /** Standard deviation of each reading's noise, in bytes. */
  noise?: number;
  seed?: number;
  /** `metadata.phase_counters` of phase records. */
  phaseCounters?: "boundary_read" | "last_sample" | null;
  identity?: ConstructorParameters<typeof Timeline>[0];
}

/** A seeded normal generator (Box-Muller over an LCG). */
function gaussian(seed: number): () => number {
  let state = seed >>> 0 || 1;
  const uniform = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state + 1) / 4294967297;
  };
  return () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
}

/** A training loop `train` > [load_batch], forward, backward, optimizer_step, one `train` per step. */
export function trainingRun(run: TrainingRun = {}): TelemetryEvent[] {
  const t = new Timeline(run.identity ?? {});
  t.phaseCounters = run.phaseCounters === undefined ? "boundary_read" : run.phaseCounters;
  t.tensors = 100;
  const normal = gaussian(run.seed ?? 7);
  const noise = run.noise ?? 0;
  const activations = run.activations ?? 256 * MiB;
  let level = 2048 * MiB;
  // Each reading sees the level plus its own noise.
  const read = () => {
    t.allocated = Math.round(level + (noise > 0 ? noise * normal() : 0));
  };
  const enter = (name: string) => {
    read();
    t.enter(name);
  };
  const exit = () => {
    read();
    t.exit();
  };
  let pipelinedHeld = 0;
  for (let step = 0; step < (run.steps ?? 30); step++) {
    read();
    t.sample();
    enter("train");
    if (run.loader !== undefined) {
      enter("load_batch");
      level += run.loader + (run.keep?.load_batch?.(step) ?? 0);
      t.tensors! += 1;
      exit();
    }
    enter("forward");
    level += activations + (run.keep?.forward?.(step) ?? 0) + (run.pipelined ?? 0);
    t.tensors! += 20 + (run.keepTensors?.(step) ?? 0);
    exit();
    enter("backward");
    level -= activations + pipelinedHeld;
    pipelinedHeld = run.pipelined ?? 0;
    level += run.keep?.backward?.(step) ?? 0;
    t.tensors! -= 20;
    exit();
    enter("optimizer_step");
    level += run.keep?.optimizer_step?.(step) ?? 0;
    exit();
    if (run.loader !== undefined) {
      level -= run.loader;
      t.tensors! -= 1;
    }
    exit();
  }
  return t.events;
}
