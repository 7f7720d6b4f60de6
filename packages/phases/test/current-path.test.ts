import { describe, expect, it } from "vitest";
import { PhaseRecorder } from "../src/index.js";

describe("PhaseRecorder.currentPhasePath", () => {
  it("names the innermost open phase where code runs, and '' outside phases or sessions", async () => {
    const recorder = new PhaseRecorder({ onBoundary: () => undefined });
    expect(recorder.phase("idle", () => recorder.currentPhasePath())).toBe("");
    recorder.begin("session");
    expect(recorder.currentPhasePath()).toBe("");
    const seen: string[] = [];
    await recorder.phase("train", async () => {
      seen.push(recorder.currentPhasePath());
      await new Promise<void>((resolve) => setImmediate(resolve));
      const scope = recorder.enterPhase("forward");
      seen.push(recorder.currentPhasePath());
      scope.close();
      seen.push(recorder.currentPhasePath());
    });
    seen.push(recorder.currentPhasePath());
    expect(seen).toEqual(["train", "train / forward", "train", ""]);
    recorder.end();
    expect(recorder.currentPhasePath()).toBe("");
  });
});
