import { AsyncLocalStorage } from "node:async_hooks";

/**
 * How phases follow async code.
 * - `auto` (default): AsyncLocalStorage is switched on only while a phase whose function is `async`
 *   (or returns a promise while another async phase is open) is running, and switched off again once
 *   none is open, so programs with synchronous phases only never pay for it.
 * - `always`: every `phase(name, fn)` runs `fn` in the phase's async context and the storage stays
 *   on while the tracker runs. Use it when phase functions return promises without being `async`
 *   (e.g. `() => model.fit(...)`) and open phases of their own after an await.
 * - `off`: never use AsyncLocalStorage. Concurrent async phases still get their own stacks, but a
 *   phase opened after an `await` nests under the caller's phases instead of the async phase.
 */
export type AsyncContextMode = "auto" | "always" | "off";

/** The one storage of this copy of the package: its store is the innermost async phase. */
export const phaseStorage = new AsyncLocalStorage<object>();

let openAsyncPhases = 0;
let pinned = 0;
let disableScheduled = false;

const AsyncFunction = (async () => {}).constructor;

/** True for `async function` / `async () =>` (native, not transpiled to generators). */
export function isAsyncFunction(fn: unknown): boolean {
  return (fn as { constructor?: unknown }).constructor === AsyncFunction;
}

/** True when some async phase is open, so stores are live and `getStore()` is meaningful. */
export function asyncPhasesOpen(): boolean {
  return openAsyncPhases > 0 || pinned > 0;
}

/** Counts an async phase in (the storage switches itself on at the next `run`). */
export function asyncPhaseOpened(): void {
  openAsyncPhases++;
}

/** Counts an async phase out; when none is left, switches the storage off on the next turn. */
export function asyncPhaseSettled(): void {
  openAsyncPhases--;
  if (openAsyncPhases === 0 && pinned === 0) scheduleDisable();
}

/** Keeps the storage on (mode `always`) until `unpinAsyncContext()`. */
export function pinAsyncContext(): void {
  pinned++;
}

/** Releases a `pinAsyncContext()`. */
export function unpinAsyncContext(): void {
  if (pinned > 0) pinned--;
  if (openAsyncPhases === 0 && pinned === 0) scheduleDisable();
}

// Deferred so that a loop of awaited async phases does not switch promise hooks on and off
// (about 1.5 us each time) between two iterations that never yield to the event loop.
function scheduleDisable(): void {
  if (disableScheduled) return;
  disableScheduled = true;
  const immediate = setImmediate(() => {
    disableScheduled = false;
    if (openAsyncPhases === 0 && pinned === 0) phaseStorage.disable();
  });
  immediate.unref();
}

/** Whether the storage is currently on (for tests and diagnostics). */
export function asyncContextEnabled(): boolean {
  // `enabled` is an internal field of Node's AsyncLocalStorage; absent elsewhere.
  return (phaseStorage as unknown as { enabled?: boolean }).enabled === true;
}
