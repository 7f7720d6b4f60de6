import type { PhaseHost, PhaseOptions, PhaseScope } from "@stormlog/core";
import { InvalidPhaseNameError } from "./errors.js";

/** The reference's name rule: `String(name).trim()`, which must not be empty. Throws `InvalidPhaseNameError`. */
export function normalizePhaseName(name: unknown): string {
  const text = typeof name === "string" ? name : String(name);
  // Most names start and end with a visible ASCII character: nothing to trim (trim() itself costs
  // a few nanoseconds of every phase).
  const last = text.length - 1;
  if (last >= 0 && isVisibleAscii(text.charCodeAt(0)) && isVisibleAscii(text.charCodeAt(last))) return text;
  const normalized = text.trim();
  if (normalized.length === 0) throw new InvalidPhaseNameError(name);
  return normalized;
}

function isVisibleAscii(code: number): boolean {
  return code > 32 && code < 127;
}

/** The scope returned while nothing records phases: it remembers its name and whether it was closed. */
export class NoopPhaseScope implements PhaseScope {
  readonly scopeId = "";
  closed = false;

  constructor(readonly name: string) {}

  get path(): readonly string[] {
    return [this.name];
  }

  get phasePath(): string {
    return this.name;
  }

  close(): void {
    this.closed = true;
  }

  [Symbol.dispose](): void {
    this.closed = true;
  }
}

function noopPhase<T>(
  name: string,
  fnOrOptions?: (() => T) | PhaseOptions,
  _options?: PhaseOptions,
): T | PhaseScope {
  const normalized = normalizePhaseName(name);
  if (typeof fnOrOptions === "function") return fnOrOptions();
  return new NoopPhaseScope(normalized);
}

/**
 * The phase host used when no tracker runs (as OpenTelemetry's API without an SDK): `phase(name, fn)`
 * only checks the name and calls `fn`; scopes record nothing.
 */
export const noopPhaseHost: PhaseHost = {
  phase: noopPhase as PhaseHost["phase"],
  enterPhase(name: string, _options?: PhaseOptions): PhaseScope {
    return new NoopPhaseScope(normalizePhaseName(name));
  },
};
