import type { PhaseHost, PhaseOptions, PhaseScope } from "@stormlog/core";
import { noopPhaseHost } from "./noop.js";

// Versioned so that two copies of the package (ESM and CJS, or two versions) share one slot.
const GLOBAL_HOST_KEY = Symbol.for("stormlog.phases.global_host.v1");

interface GlobalSlot {
  [GLOBAL_HOST_KEY]?: PhaseHost | undefined;
}

const slot = globalThis as GlobalSlot;

/**
 * The process-wide phase host: the tracker registered with `setGlobalPhaseHost()` (a running
 * `MemoryTracker` registers itself unless told not to), or `noopPhaseHost`. Libraries instrument
 * their code with it and cost next to nothing when no tracker runs.
 */
export function getPhaseHost(): PhaseHost {
  return slot[GLOBAL_HOST_KEY] ?? noopPhaseHost;
}

/** Registers (or with `undefined`, clears) the process-wide phase host. Returns the previous one. */
export function setGlobalPhaseHost(host: PhaseHost | undefined): PhaseHost | undefined {
  const previous = slot[GLOBAL_HOST_KEY];
  slot[GLOBAL_HOST_KEY] = host;
  return previous;
}

/** Clears the process-wide host only if it is still `host` (what a stopping tracker calls). */
export function clearGlobalPhaseHost(host: PhaseHost): boolean {
  if (slot[GLOBAL_HOST_KEY] !== host) return false;
  slot[GLOBAL_HOST_KEY] = undefined;
  return true;
}

/** `getPhaseHost().phase(...)`: runs `fn` inside a phase of the registered tracker, if any. */
export function phase<T>(name: string, fn: () => T, options?: PhaseOptions): T;
/** `getPhaseHost().phase(name)`: `using scope = phase("forward")`. */
export function phase(name: string, options?: PhaseOptions): PhaseScope;
export function phase<T>(
  name: string,
  fnOrOptions?: (() => T) | PhaseOptions,
  options?: PhaseOptions,
): T | PhaseScope {
  const host = slot[GLOBAL_HOST_KEY] ?? noopPhaseHost;
  if (typeof fnOrOptions === "function") return host.phase(name, fnOrOptions, options);
  return host.phase(name, fnOrOptions);
}

/** `getPhaseHost().enterPhase(name)`: a phase closed with `close()`. */
export function enterPhase(name: string, options?: PhaseOptions): PhaseScope {
  return (slot[GLOBAL_HOST_KEY] ?? noopPhaseHost).enterPhase(name, options);
}
