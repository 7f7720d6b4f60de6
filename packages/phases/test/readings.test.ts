import { describe, expect, it } from "vitest";
import { type PhaseBoundary, PhaseRecorder } from "../src/index.js";

function recording(): { recorder: PhaseRecorder; boundaries: PhaseBoundary[] } {
  const boundaries: PhaseBoundary[] = [];
  const recorder = new PhaseRecorder({ onBoundary: (b) => boundaries.push(b) });
  recorder.begin("session-1");
  return { recorder, boundaries };
}

describe("PhaseOptions.readings", () => {
  it("is carried to the listener on the enter and exit of the phase that asked, and no other", async () => {
    const { recorder, boundaries } = recording();
    recorder.phase(
      "outer",
      () => {
        recorder.phase("plain", () => undefined, { metadata: { a: 1 } });
        recorder.phase("measured", () => undefined, { readings: true });
      },
      { readings: false },
    );
    await recorder.phase("async", async () => undefined, { readings: true });
    const scope = recorder.enterPhase("scope", { readings: true });
    scope.close();
    {
      using _inner = recorder.phase("using");
    }

    expect(boundaries.map((b) => `${b.eventType}:${b.scope.phasePath}:${b.scope.readings}`)).toEqual([
      "phase_enter:outer:false",
      "phase_enter:outer / plain:false",
      "phase_exit:outer / plain:false",
      "phase_enter:outer / measured:true",
      "phase_exit:outer / measured:true",
      "phase_exit:outer:false",
      "phase_enter:async:true",
      "phase_exit:async:true",
      "phase_enter:scope:true",
      "phase_exit:scope:true",
      "phase_enter:using:false",
      "phase_exit:using:false",
    ]);
  });

  it("stays out of the records' phase_scope", () => {
    const { recorder, boundaries } = recording();
    recorder.phase("measured", () => undefined, { readings: true, metadata: { batch: 2 } });
    expect(Object.keys(boundaries[0]?.phaseScope ?? {})).not.toContain("readings");
    expect(boundaries[0]?.phaseScope.attributes).toEqual({ batch: 2 });
  });
});
