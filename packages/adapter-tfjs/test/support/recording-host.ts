import type { JsonObject, PhaseHost, PhaseOptions, PhaseScope } from "@stormlog/core";

/** One phase boundary seen by {@link recordingHost}. */
export interface RecordedBoundary {
  readonly type: "enter" | "exit";
  readonly path: readonly string[];
  readonly attributes: JsonObject | undefined;
}

/** A PhaseHost that keeps a stack and records every enter and exit, for adapter tests. */
export interface RecordingHost extends PhaseHost {
  readonly boundaries: RecordedBoundary[];
  /** Paths of the phases still open, outermost first. */
  openPaths(): string[];
  /** `path` joined with " / " of every enter, in order. */
  entered(): string[];
}

/** A minimal stand-in for the tracker's phase API (same overloads as core's PhaseHost). */
export function recordingHost(): RecordingHost {
  const boundaries: RecordedBoundary[] = [];
  const stack: PhaseScope[] = [];
  let sequence = 0;

  const open = (name: string, options?: PhaseOptions): PhaseScope => {
    const parent = stack.at(-1);
    const path = [...(parent?.path ?? []), name];
    const attributes = options?.metadata;
    boundaries.push({ type: "enter", path, attributes });
    let closed = false;
    const scope: PhaseScope = {
      scopeId: `test:${++sequence}`,
      name,
      path,
      phasePath: path.join(" / "),
      get closed() {
        return closed;
      },
      close() {
        if (closed) return;
        closed = true;
        const index = stack.indexOf(scope);
        if (index >= 0) stack.splice(index, 1);
        boundaries.push({ type: "exit", path, attributes });
      },
      [Symbol.dispose]() {
        scope.close();
      },
    };
    stack.push(scope);
    return scope;
  };

  function phase<T>(name: string, fn: () => T, options?: PhaseOptions): T;
  function phase(name: string, options?: PhaseOptions): PhaseScope;
  function phase<T>(
    name: string,
    fnOrOptions?: (() => T) | PhaseOptions,
    options?: PhaseOptions,
  ): T | PhaseScope {
    if (typeof fnOrOptions !== "function") return open(name, fnOrOptions);
    const scope = open(name, options);
    let result: T;
    try {
      result = fnOrOptions();
    } catch (error) {
      scope.close();
      throw error;
    }
    if (result instanceof Promise) {
      return result.finally(() => scope.close()) as T;
    }
    scope.close();
    return result;
  }

  return {
    boundaries,
    phase,
    enterPhase: open,
    openPaths: () => stack.map((scope) => scope.phasePath),
    entered: () => boundaries.filter((b) => b.type === "enter").map((b) => b.path.join(" / ")),
  };
}
