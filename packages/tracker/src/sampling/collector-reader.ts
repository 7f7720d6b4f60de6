import type { Clock, Scheduler } from "@stormlog/core";
import { describeError } from "../describe-error.js";
import type { CollectorHealthMachine } from "../health/collector-health.js";
import type { CollectorSet } from "./collector-set.js";
import type { CollectorState } from "./device-group.js";
import type { SampleReader } from "./sampling-loop.js";

/** The result of a collector not read this tick (it is backing off after failures). */
export const SKIPPED: unique symbol = Symbol("skipped");

/**
 * Reads every collector of the set once per tick, in order, skipping those backing off; a collector
 * that throws, or whose asynchronous `sample()` takes longer than `timeoutMs`, yields a failure.
 */
export class CollectorReader implements SampleReader {
  constructor(
    private readonly collectors: CollectorSet,
    private readonly health: CollectorHealthMachine,
    private readonly clock: Clock,
    private readonly scheduler: Scheduler,
    private readonly timeoutMs: number,
  ) {}

  /** Each collector's raw result (or `SKIPPED`) by its state's index; a promise when some answer later. */
  read(): unknown[] | Promise<unknown[]> {
    const states = this.collectors.states;
    const nowS = Number(this.clock.nowNs()) / 1e9;
    const raw: unknown[] = new Array(states.length);
    let pending = false;
    for (const state of states) {
      if (this.health.backingOff(state, nowS)) {
        raw[state.index] = SKIPPED;
        continue;
      }
      const result = this.sampleOne(state);
      if (result instanceof Promise) pending = true;
      raw[state.index] = result;
    }
    return pending ? Promise.all(raw) : raw;
  }

  private sampleOne(state: CollectorState): unknown {
    let result: unknown;
    try {
      result = state.collector.sample();
    } catch (error) {
      return { kind: "failure", error: `collector ${state.name} threw: ${describeError(error)}` };
    }
    if (typeof (result as PromiseLike<unknown> | null)?.then !== "function") return result;
    return new Promise<unknown>((resolve) => {
      const timer = this.scheduler.setTimeout(
        () =>
          resolve({
            kind: "failure",
            error: `collector ${state.name} did not answer within ${this.timeoutMs} ms`,
          }),
        this.timeoutMs,
      );
      Promise.resolve(result).then(
        (value) => {
          this.scheduler.clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          this.scheduler.clearTimeout(timer);
          resolve({ kind: "failure", error: `collector ${state.name} failed: ${describeError(error)}` });
        },
      );
    });
  }
}
