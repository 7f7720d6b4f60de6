import { AsyncLocalStorage } from "node:async_hooks";
import type { PhaseContextLike } from "@stormlog/core";

/** Nested phases that follow sync and async code, with the tracker's `PhaseContextLike`, for adapter tests. */
export interface AsyncPhases extends PhaseContextLike {
  /** Runs `fn` in phase `name` nested in the current one; async functions keep it across awaits. */
  phase<T>(name: string, fn: () => T): T;
}

/**
 * A stand-in for the tracker's phase recorder (adapters cannot depend on it): the current path lives
 * in AsyncLocalStorage, as the recorder's async phases do, so concurrent async phases keep their own.
 */
export function asyncPhases(): AsyncPhases {
  const storage = new AsyncLocalStorage<string>();
  return {
    phase<T>(name: string, fn: () => T): T {
      const parent = storage.getStore();
      return storage.run(parent === undefined || parent === "" ? name : `${parent} / ${name}`, fn);
    },
    currentPhasePath: () => storage.getStore() ?? "",
  };
}
