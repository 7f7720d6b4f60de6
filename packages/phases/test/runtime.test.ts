import { threadId } from "node:worker_threads";
import type { JsonObject, PhaseScope } from "@stormlog/core";
import { StormlogError } from "@stormlog/core";
import { afterEach, describe, expect, it } from "vitest";
import { asyncContextEnabled } from "../src/async-context.js";
import {
  clearGlobalPhaseHost,
  enterPhase,
  getPhaseHost,
  InvalidPhaseNameError,
  noopPhaseHost,
  type PhaseBoundary,
  PhaseProtocolError,
  PhaseRecorder,
  type PhaseRecorderOptions,
  PhaseReplayIndex,
  phase,
  type RecordedPhase,
  setGlobalPhaseHost,
} from "../src/index.js";
import { NoopPhaseScope } from "../src/noop.js";

const SESSION = "session-1";

interface Recorded {
  recorder: PhaseRecorder;
  boundaries: PhaseBoundary[];
  /** Boundaries as minimal telemetry events (1 ns apart), for the replay index. */
  events(): JsonObject[];
}

function record(options: Partial<PhaseRecorderOptions> = {}): Recorded {
  const boundaries: PhaseBoundary[] = [];
  const recorder = new PhaseRecorder({ ...options, onBoundary: (b) => boundaries.push(b) });
  recorder.begin(SESSION);
  return {
    recorder,
    boundaries,
    events: () =>
      boundaries.map((b, i) => ({
        session_id: SESSION,
        timestamp_ns: BigInt(1_000 + i),
        rank: 0,
        event_type: b.eventType,
        metadata: { phase_scope: b.phaseScope as unknown as JsonObject },
      })),
  };
}

const tick = () => new Promise<void>((resolve) => setTimeout(resolve, 1));
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

function summary(boundaries: PhaseBoundary[]): string[] {
  return boundaries.map(
    (b) => `${b.phaseScope.action}:${b.phaseScope.path.join("/")}@${b.phaseScope.thread_id}`,
  );
}

afterEach(() => {
  setGlobalPhaseHost(undefined);
});

describe("phase records", () => {
  it("emits phase_enter/phase_exit with the reference phase_scope fields in order", () => {
    const { recorder, boundaries } = record();
    const outer = recorder.enterPhase("train");
    const inner = recorder.enterPhase(" forward ", { metadata: { batch: 3 } });
    inner.close();
    outer.close();

    expect(boundaries.map((b) => b.eventType)).toEqual([
      "phase_enter",
      "phase_enter",
      "phase_exit",
      "phase_exit",
    ]);
    expect(boundaries.map((b) => b.context)).toEqual([
      "Phase entered: train",
      "Phase entered: train / forward",
      "Phase exited: train / forward",
      "Phase exited: train",
    ]);
    const enterForward = boundaries[1]?.phaseScope;
    expect(Object.keys(enterForward ?? {})).toEqual([
      "action",
      "name",
      "path",
      "depth",
      "scope_id",
      "parent_scope_id",
      "thread_id",
      "thread_name",
      "sequence",
      "attributes",
    ]);
    expect(enterForward).toEqual({
      action: "enter",
      name: "forward",
      path: ["train", "forward"],
      depth: 2,
      scope_id: "session-1:2",
      parent_scope_id: "session-1:1",
      thread_id: threadId,
      thread_name: "main",
      sequence: 2,
      attributes: { batch: 3 },
    });
    const exitForward = boundaries[2]?.phaseScope;
    expect(exitForward).toMatchObject({
      action: "exit",
      scope_id: "session-1:2",
      sequence: 3,
      attributes: { batch: 3 },
    });
    const exitTrain = boundaries[3]?.phaseScope;
    expect(exitTrain).toMatchObject({
      action: "exit",
      scope_id: "session-1:1",
      parent_scope_id: null,
      sequence: 4,
    });
    expect(exitTrain && "attributes" in exitTrain).toBe(false);
  });

  it("copies attributes at enter and omits empty ones", () => {
    const { recorder, boundaries } = record();
    const metadata: JsonObject = { lr: 0.1 };
    const scope = recorder.enterPhase("step", { metadata });
    metadata.lr = 0.2;
    scope.close();
    recorder.enterPhase("empty", { metadata: {} }).close();
    expect(boundaries[0]?.phaseScope.attributes).toEqual({ lr: 0.1 });
    expect(boundaries[1]?.phaseScope.attributes).toEqual({ lr: 0.1 });
    expect("attributes" in (boundaries[2]?.phaseScope ?? {})).toBe(false);
  });

  it("allows duplicate names and keeps scope ids unique", () => {
    const { recorder, boundaries } = record();
    recorder.phase("train", () => recorder.phase("train", () => undefined));
    expect(boundaries[1]?.phaseScope.path).toEqual(["train", "train"]);
    expect(new Set(boundaries.map((b) => b.phaseScope.scope_id))).toEqual(
      new Set(["session-1:1", "session-1:2"]),
    );
  });

  it("shares one path list per path among scopes, and gives each record a list of its own", () => {
    const { recorder, boundaries } = record();
    for (let step = 0; step < 2; step++) recorder.phase("train", () => recorder.phase("forward", () => 1));
    const [first, , , , second] = boundaries;
    expect(first?.scope.pathKey).toBe(second?.scope.pathKey);
    expect(Object.isFrozen(first?.scope.path)).toBe(true);
    const payload = first!.phaseScope;
    payload.path.push("changed by a reader");
    expect(second?.phaseScope.path).toEqual(["train"]);
    expect(first?.scope.path).toEqual(["train"]);
  });

  it("exposes the scope handle fields", () => {
    const { recorder } = record();
    using outer = recorder.enterPhase("train");
    const inner = recorder.enterPhase("eval");
    expect(inner.scopeId).toBe("session-1:2");
    expect(inner.path).toEqual(["train", "eval"]);
    expect(inner.phasePath).toBe("train / eval");
    expect(inner.parentScopeId).toBe(outer.scopeId);
    expect(inner.depth).toBe(2);
    expect(inner.threadName).toBe("main");
    inner.close();
    expect(inner.closed).toBe(true);
  });
});

describe("names", () => {
  it("strips names and rejects blank ones, with or without a session", () => {
    const { recorder, boundaries } = record();
    recorder.phase("  step\t", () => undefined);
    expect(boundaries[0]?.phaseScope.name).toBe("step");
    expect(() => recorder.enterPhase("   ")).toThrow(InvalidPhaseNameError);
    expect(() => recorder.enterPhase("")).toThrow(/phase name must be a non-empty string/);
    const idle = new PhaseRecorder({ onBoundary: () => undefined });
    expect(() => idle.phase(" ", () => 1)).toThrow(InvalidPhaseNameError);
    expect(() => noopPhaseHost.enterPhase("")).toThrow(InvalidPhaseNameError);
    try {
      recorder.enterPhase(" ");
    } catch (error) {
      expect(StormlogError.isInstance(error)).toBe(true);
      expect(InvalidPhaseNameError.isInstance(error)).toBe(true);
    }
  });
});

describe("sequence and sessions", () => {
  it("increments one counter on every enter and exit and resets it per session", () => {
    const { recorder, boundaries } = record();
    recorder.phase("a", () => recorder.phase("b", () => undefined));
    recorder.phase("c", () => undefined);
    expect(boundaries.map((b) => b.phaseScope.sequence)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(boundaries.map((b) => b.phaseScope.scope_id)).toEqual([
      "session-1:1",
      "session-1:2",
      "session-1:2",
      "session-1:1",
      "session-1:5",
      "session-1:5",
    ]);
    recorder.begin("session-2");
    recorder.phase("d", () => undefined);
    expect(boundaries[6]?.phaseScope).toMatchObject({ scope_id: "session-2:1", sequence: 1 });
  });

  it("drops open phases at end() and makes their handles no-ops", () => {
    const { recorder, boundaries } = record();
    const scope = recorder.enterPhase("train");
    recorder.end();
    expect(recorder.active).toBe(false);
    scope.close();
    expect(scope.closed).toBe(true);
    expect(boundaries).toHaveLength(1);
    recorder.begin("session-2");
    recorder.phase("next", () => undefined);
    expect(boundaries[1]?.phaseScope).toMatchObject({ path: ["next"], parent_scope_id: null });
  });

  it("records nothing while inactive and still returns what fn returns", () => {
    const boundaries: PhaseBoundary[] = [];
    const recorder = new PhaseRecorder({ onBoundary: (b) => boundaries.push(b) });
    expect(recorder.phase("x", () => 42)).toBe(42);
    const scope = recorder.phase("y");
    expect(scope).toBeInstanceOf(NoopPhaseScope);
    expect(scope.phasePath).toBe("y");
    scope.close();
    expect(scope.closed).toBe(true);
    expect(boundaries).toHaveLength(0);
  });
});

describe("closing", () => {
  it("raises the reference LIFO error and recovers when closed in order", () => {
    const { recorder, boundaries } = record();
    const outer = recorder.enterPhase("train");
    const inner = recorder.enterPhase("forward");
    expect(() => outer.close()).toThrow(PhaseProtocolError);
    expect(() => outer.close()).toThrow(/^Phase handles must be closed in strict LIFO order per thread\./);
    expect(outer.closed).toBe(false);
    inner.close();
    outer.close();
    expect(summary(boundaries)).toEqual([
      `enter:train@${threadId}`,
      `enter:train/forward@${threadId}`,
      `exit:train/forward@${threadId}`,
      `exit:train@${threadId}`,
    ]);
  });

  it("makes close() idempotent and closes `using` scopes at the end of the block", () => {
    const { recorder, boundaries } = record();
    const scope = recorder.enterPhase("eval");
    scope.close();
    scope.close();
    {
      using _scope = recorder.phase("block");
      expect(boundaries).toHaveLength(3);
    }
    expect(boundaries.map((b) => b.context)).toEqual([
      "Phase entered: eval",
      "Phase exited: eval",
      "Phase entered: block",
      "Phase exited: block",
    ]);
  });

  it("returns fn's value and closes the phase when fn throws", () => {
    const { recorder, boundaries } = record();
    expect(recorder.phase("ok", () => "value")).toBe("value");
    const failure = new Error("boom");
    expect(() =>
      recorder.phase("bad", () => {
        throw failure;
      }),
    ).toThrow(failure);
    expect(summary(boundaries).map((s) => s.split("@")[0])).toEqual([
      "enter:ok",
      "exit:ok",
      "enter:bad",
      "exit:bad",
    ]);
    expect(recorder.openPhases()).toHaveLength(0);
  });

  it("unwinds scopes left open by a failing phase without masking its error", () => {
    const { recorder, boundaries } = record();
    const failure = new Error("oom");
    expect(() =>
      recorder.phase("train", () => {
        recorder.enterPhase("forward");
        throw failure;
      }),
    ).toThrow(failure);
    expect(summary(boundaries).map((s) => s.split("@")[0])).toEqual([
      "enter:train",
      "enter:train/forward",
      "exit:train/forward",
      "exit:train",
    ]);
    recorder.phase("next", () => undefined);
    expect(boundaries[4]?.phaseScope.path).toEqual(["next"]);
  });

  it("reports a scope leaked by a phase that returned, after recording both exits", () => {
    const { recorder, boundaries } = record();
    expect(() => recorder.phase("train", () => void recorder.enterPhase("forward"))).toThrow(
      /strict LIFO order.*'train \/ forward'.*still open when 'train' ended/,
    );
    expect(boundaries.map((b) => b.eventType)).toEqual([
      "phase_enter",
      "phase_enter",
      "phase_exit",
      "phase_exit",
    ]);
    expect(recorder.openPhases()).toHaveLength(0);
  });

  it("keeps recording when the listener throws", () => {
    const errors: unknown[] = [];
    const recorder = new PhaseRecorder({
      onBoundary: () => {
        throw new Error("listener bug");
      },
      onListenerError: (error) => errors.push(error),
    });
    recorder.begin(SESSION);
    expect(recorder.phase("x", () => 7)).toBe(7);
    expect(errors).toHaveLength(2);
  });
});

describe("async phases", () => {
  it("returns fn's promise value and closes on reject", async () => {
    const { recorder, boundaries } = record();
    await expect(recorder.phase("load", async () => 5)).resolves.toBe(5);
    await expect(
      recorder.phase("fail", async () => {
        await tick();
        throw new Error("rejected");
      }),
    ).rejects.toThrow("rejected");
    expect(summary(boundaries).map((s) => s.split("@")[0])).toEqual([
      "enter:load",
      "exit:load",
      "enter:fail",
      "exit:fail",
    ]);
  });

  it("keeps awaited nesting on one thread and nests phases opened after awaits", async () => {
    const { recorder, boundaries } = record();
    await recorder.phase("train", async () => {
      for (let step = 0; step < 2; step++) {
        await recorder.phase("step", async () => {
          await tick();
          recorder.phase("forward", () => undefined);
          await tick();
          using _scope = recorder.phase("backward");
          await tick();
        });
      }
    });
    expect(new Set(boundaries.map((b) => b.phaseScope.thread_id))).toEqual(new Set([threadId]));
    expect(
      boundaries.filter((b) => b.eventType === "phase_enter").map((b) => b.phaseScope.path.join("/")),
    ).toEqual([
      "train",
      "train/step",
      "train/step/forward",
      "train/step/backward",
      "train/step",
      "train/step/forward",
      "train/step/backward",
    ]);
  });

  it("gives concurrent tasks their own stacks, which the replay index rebuilds exactly", async () => {
    const rec = record();
    const { recorder, boundaries } = rec;
    const task = (name: string, delay: number) =>
      recorder.phase(name, async () => {
        await new Promise((resolve) => setTimeout(resolve, delay));
        await recorder.phase("load", async () => {
          await tick();
        });
        using _compute = recorder.phase("compute");
        await new Promise((resolve) => setTimeout(resolve, delay));
        return name;
      });
    const results = await recorder.phase("serve", () =>
      Promise.all([task("a", 5), task("b", 1), task("c", 3)]),
    );
    expect(results).toEqual(["a", "b", "c"]);

    const enters = boundaries.filter((b) => b.eventType === "phase_enter").map((b) => b.phaseScope);
    const threadOf = (path: string) => enters.find((s) => s.path.join("/") === path)?.thread_id;
    expect(new Set([threadOf("serve/a"), threadOf("serve/b"), threadOf("serve/c")]).size).toBe(3);
    for (const name of ["a", "b", "c"]) {
      const enteredHere = enters.filter((s) => s.path[1] === name);
      expect(enteredHere.map((s) => s.path.join("/")).sort()).toEqual([
        `serve/${name}`,
        `serve/${name}/compute`,
        `serve/${name}/load`,
      ]);
      expect(new Set(enteredHere.map((s) => s.thread_id)).size).toBe(1);
    }

    const index = PhaseReplayIndex.fromEvents(rec.events());
    const spans = index.spansFor(SESSION, 0);
    expect(spans).toHaveLength(10);
    expect(spans.every((span) => !span.syntheticEnd)).toBe(true);
    expect(spans.map((span) => span.phasePath).sort()).toEqual(
      [
        "serve",
        "serve / a",
        "serve / a / compute",
        "serve / a / load",
        "serve / b",
        "serve / b / compute",
        "serve / b / load",
        "serve / c",
        "serve / c / compute",
        "serve / c / load",
      ].sort(),
    );
    expect(recorder.openPhases()).toHaveLength(0);
  });

  it("raises the different-thread error when another task closes a scope, then closes in its own", async () => {
    const { recorder } = record();
    let scope: ReturnType<PhaseRecorder["enterPhase"]> | undefined;
    let opened!: () => void;
    const isOpen = new Promise<void>((resolve) => {
      opened = resolve;
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const owner = recorder.phase("owner", async () => {
      scope = recorder.enterPhase("held");
      opened();
      await released;
      scope.close();
    });
    let error: unknown;
    const other = recorder.phase("other", async () => {
      await isOpen;
      try {
        scope?.close();
      } catch (caught) {
        error = caught;
      }
      release();
    });
    await Promise.all([owner, other]);
    expect(PhaseProtocolError.isInstance(error)).toBe(true);
    expect(String((error as Error).message)).toMatch(
      /^Phase handle was closed from a different thread than it was opened\./,
    );
    expect(scope?.closed).toBe(true);
    expect(recorder.openPhases()).toHaveLength(0);
  });

  it("defers the exit of a phase whose fire-and-forget child outlives it", async () => {
    const rec = record();
    const { recorder, boundaries } = rec;
    let background: Promise<void> | undefined;
    recorder.phase("step", () => {
      background = recorder.phase("prefetch", async () => {
        await tick();
      });
    });
    recorder.phase("next", () => undefined);
    await background;
    expect(summary(boundaries).map((s) => s.split("@")[0])).toEqual([
      "enter:step",
      "enter:step/prefetch",
      "enter:next",
      "exit:next",
      "exit:step/prefetch",
      "exit:step",
    ]);
    const next = boundaries[2]?.phaseScope;
    expect(next?.thread_id).not.toBe(boundaries[0]?.phaseScope.thread_id);
    const spans = PhaseReplayIndex.fromEvents(rec.events()).spansFor(SESSION, 0);
    expect(spans.every((span) => !span.syntheticEnd)).toBe(true);
    expect(spans).toHaveLength(3);
  });

  it("keeps concurrent promise-returning phases apart without AsyncLocalStorage", async () => {
    const rec = record({ asyncContext: "off" });
    const { recorder } = rec;
    const work = (name: string, ms: number) =>
      recorder.phase(name, () => new Promise((resolve) => setTimeout(() => resolve(name), ms)));
    expect(await Promise.all([work("a", 4), work("b", 1)])).toEqual(["a", "b"]);
    const spans = PhaseReplayIndex.fromEvents(rec.events()).spansFor(SESSION, 0);
    expect(spans.map((s) => s.phasePath).sort()).toEqual(["a", "b"]);
    expect(spans.every((s) => !s.syntheticEnd)).toBe(true);
    expect(new Set(spans.map((s) => s.threadId)).size).toBe(2);
  });

  it("switches AsyncLocalStorage on only while async phases are open", async () => {
    const { recorder } = record();
    recorder.phase("sync", () => undefined);
    await nextTurn();
    expect(asyncContextEnabled()).toBe(false);
    let during = false;
    await recorder.phase("async", async () => {
      during = asyncContextEnabled();
      await tick();
    });
    expect(during).toBe(true);
    await nextTurn();
    await nextTurn();
    expect(asyncContextEnabled()).toBe(false);
  });

  it("runs every phase function in its context with asyncContext 'always'", async () => {
    const { recorder, boundaries } = record({ asyncContext: "always" });
    await recorder.phase("fit", () =>
      tick().then(() => {
        recorder.phase("batch", () => undefined);
      }),
    );
    expect(boundaries[1]?.phaseScope.path).toEqual(["fit", "batch"]);
    recorder.end();
    await nextTurn();
    await nextTurn();
    expect(asyncContextEnabled()).toBe(false);
  });
});

describe("global host", () => {
  it("uses the no-op host until one is registered", () => {
    expect(getPhaseHost()).toBe(noopPhaseHost);
    expect(phase("free", () => 3)).toBe(3);
    expect(enterPhase("free")).toBeInstanceOf(NoopPhaseScope);

    const { recorder, boundaries } = record();
    expect(setGlobalPhaseHost(recorder)).toBeUndefined();
    expect(phase("global", () => 4)).toBe(4);
    using _scope = phase("scoped");
    expect(boundaries.map((b) => b.context)).toEqual([
      "Phase entered: global",
      "Phase exited: global",
      "Phase entered: scoped",
    ]);
    expect(clearGlobalPhaseHost(noopPhaseHost)).toBe(false);
    expect(clearGlobalPhaseHost(recorder)).toBe(true);
    expect(getPhaseHost()).toBe(noopPhaseHost);
  });
});

describe("reused scopes (reuseScopes)", () => {
  /** Runs the same phases through a recorder; returns each boundary's payload as built when it came. */
  async function scenario(reuseScopes: boolean) {
    const payloads: unknown[] = [];
    const scopes: RecordedPhase[] = [];
    const recorder = new PhaseRecorder({
      reuseScopes,
      onBoundary: (b) => {
        payloads.push(b.phaseScope);
        scopes.push(b.scope);
      },
    });
    recorder.begin(SESSION);
    let exposed: PhaseScope | undefined;
    let listed: RecordedPhase[] = [];
    let detached: Promise<unknown> | undefined;
    for (let step = 0; step < 3; step++) {
      recorder.phase("train", () => {
        recorder.phase("forward", () => step);
        if (step === 0) listed = recorder.openPhases();
        if (step === 1) {
          exposed = recorder.enterPhase("inspect");
          exposed.close();
        }
        recorder.phase("eval", () => step, { metadata: { step } });
        // An async phase started inside a sync one runs on after it: the sync one's exit waits.
        if (step === 2) detached = recorder.phase("upload", async () => tick());
      });
    }
    await detached;
    recorder.phase("after", () => undefined);
    return { payloads, scopes, exposed: exposed as RecordedPhase, listed };
  }

  it("records the same boundaries as fresh scopes, and reuses the scopes of closed sync phases", async () => {
    const fresh = await scenario(false);
    const reused = await scenario(true);
    expect(reused.payloads).toEqual(fresh.payloads);
    // A closed `forward` scope came back as a later phase's.
    expect(new Set(reused.scopes).size).toBeLessThan(reused.scopes.length);
    expect(new Set(fresh.scopes).size).toBe(fresh.scopes.length / 2);
  });

  it("a session ended and begun inside a sync phase: its scope is not reused, the new session's ids are right", () => {
    const payloads: unknown[] = [];
    let outer: RecordedPhase | undefined;
    const recorder = new PhaseRecorder({
      reuseScopes: true,
      onBoundary: (b) => {
        payloads.push(b.phaseScope);
        // Kept against the rule for listeners, to see whether it is handed out again.
        if (b.scope.name === "outer") outer = b.scope;
      },
    });
    recorder.begin("first");
    recorder.phase("outer", () => {
      recorder.end();
      recorder.begin("second");
    });
    for (let i = 0; i < 3; i++) recorder.phase("step", () => i);
    expect(outer?.scopeId).toBe("first:1");
    expect(payloads.map((p) => (p as { scope_id: string; action: string }).scope_id)).toEqual([
      "first:1",
      "second:1",
      "second:1",
      "second:3",
      "second:3",
      "second:5",
      "second:5",
    ]);
  });

  it("never reuses a scope the listener handed to code while it opened (openPhases() in onBoundary)", () => {
    let listed: RecordedPhase[] = [];
    const recorder: PhaseRecorder = new PhaseRecorder({
      reuseScopes: true,
      onBoundary: (b) => {
        if (b.eventType === "phase_enter" && b.scope.name === "a") listed = recorder.openPhases();
      },
    });
    recorder.begin(SESSION);
    recorder.phase("a", () => undefined);
    recorder.phase("b", () => undefined);
    expect(listed.map((scope) => [scope.scopeId, scope.phasePath])).toEqual([[`${SESSION}:1`, "a"]]);
  });

  it("never reuses a scope handed to code (enterPhase, openPhases()) nor one with attributes", async () => {
    const { exposed, listed, scopes } = await scenario(true);
    // Read after every later phase ran: still its own ids.
    expect([exposed.scopeId, exposed.parentScopeId, exposed.phasePath]).toEqual([
      `${SESSION}:10`,
      `${SESSION}:7`,
      "train / inspect",
    ]);
    expect(listed.map((scope) => [scope.scopeId, scope.phasePath])).toEqual([[`${SESSION}:1`, "train"]]);
    const withAttributes = scopes.filter((scope) => scope.attributes !== undefined);
    expect(withAttributes.map((scope) => scope.attributes)).toEqual([
      { step: 0 },
      { step: 0 },
      { step: 1 },
      { step: 1 },
      { step: 2 },
      { step: 2 },
    ]);
  });
});
