import { bench, do_not_optimize, group, run, summary } from "mitata";
import { enterPhase, noopPhaseHost, PhaseRecorder, phase } from "../src/index.js";

// Phase enter+exit cost without a tracker (goal <= 50 ns), the recorder alone (what a tracker adds on
// top is measured in packages/tracker/bench), and what async phases cost the user's own awaits.
const idle = new PhaseRecorder({ onBoundary: () => undefined });
let records = 0;
const active = new PhaseRecorder({
  onBoundary: () => {
    records++;
  },
});
active.begin("bench-session");
const step = () => 1;

group("phase enter+exit, no tracker", () => {
  summary(() => {
    bench("phases/noop phase(name, fn)", () => do_not_optimize(noopPhaseHost.phase("forward", step)));
    bench("phases/noop phase(name) + close()", () => noopPhaseHost.phase("forward").close());
    bench("phases/noop using scope", () => {
      using scope = noopPhaseHost.phase("forward");
      do_not_optimize(scope);
    });
    bench("phases/global phase(name, fn) unregistered", () => do_not_optimize(phase("forward", step)));
    bench("phases/global enterPhase+close unregistered", () => enterPhase("forward").close());
    bench("phases/inactive recorder phase(name, fn)", () => do_not_optimize(idle.phase("forward", step)));
  });
});

group("phase enter+exit, recorder only", () => {
  summary(() => {
    bench("phases/recorder phase(name, fn)", () => do_not_optimize(active.phase("forward", step)));
    bench("phases/recorder nested using (2 phases)", () => {
      using outer = active.phase("train");
      using inner = active.phase("forward");
      do_not_optimize(inner);
      do_not_optimize(outer);
    });
  });
});

// 1000 awaits of an async function per iteration: the user's own async code. With sync phases only,
// AsyncLocalStorage stays off; inside an async phase it is on (promise hooks on every await). Each
// bench has its own copy of the loop: mitata re-running one async function in a later bench measures
// it deoptimised.
async function leaf(i: number): Promise<number> {
  return i;
}
async function loopNoPhase(): Promise<number> {
  let sum = 0;
  for (let i = 0; i < 1000; i++) sum += await leaf(i);
  return sum;
}
async function loopAfterSyncPhase(): Promise<number> {
  let sum = 0;
  for (let i = 0; i < 1000; i++) sum += await leaf(i);
  return sum;
}
async function loopInAsyncPhase(): Promise<number> {
  let sum = 0;
  for (let i = 0; i < 1000; i++) sum += await leaf(i);
  return sum;
}

group("user awaits (1000 per iteration)", () => {
  summary(() => {
    bench("phases/await loop, no phase", async () => do_not_optimize(await loopNoPhase()));
    bench("phases/await loop, after a sync phase", async () => {
      active.phase("forward", step);
      do_not_optimize(await loopAfterSyncPhase());
    });
    bench("phases/await loop, inside an async phase", async () =>
      do_not_optimize(await active.phase("forward", async () => loopInAsyncPhase())),
    );
  });
});

await run();
if (records === 0) throw new Error("the recorder recorded nothing");
