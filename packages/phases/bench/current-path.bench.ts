import { bench, do_not_optimize, group, run, summary } from "mitata";
import { PhaseRecorder } from "../src/index.js";

// What collectors that attribute allocations to phases pay per allocation (the tfjs collector's birth
// phases): `currentPhasePath()` of the tracker's recorder, outside phases, in sync and in async phases.
const recorder = new PhaseRecorder({ onBoundary: () => undefined });
recorder.begin("bench-session");
const lookup = () => do_not_optimize(recorder.currentPhasePath());

group("currentPhasePath()", () => {
  summary(() => {
    bench("phases/currentPhasePath outside phases", lookup);
    bench("phases/currentPhasePath in sync phases (train / forward)", function* () {
      const train = recorder.enterPhase("train");
      const forward = recorder.enterPhase("forward");
      yield lookup;
      forward.close();
      train.close();
    });
  });
});

// Inside an async phase the recorder finds its context through AsyncLocalStorage: timed per 1000
// lookups from inside the phase.
let release: () => void = () => undefined;
let inside: () => void = () => undefined;
const ready = new Promise<void>((resolve) => {
  void recorder.phase("train", async () => {
    await recorder.phase("backward", async () => {
      inside = () => {
        for (let i = 0; i < 1000; i++) do_not_optimize(recorder.currentPhasePath());
      };
      resolve();
      await new Promise<void>((done) => {
        release = done;
      });
    });
  });
});
await ready;
group("currentPhasePath() in an async phase", () => {
  bench("phases/currentPhasePath x1000 in async phases (train / backward)", () => inside());
});

await run();
release();
