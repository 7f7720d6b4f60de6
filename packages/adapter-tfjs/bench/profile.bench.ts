import type { PhaseHost, PhaseScope } from "@stormlog/core";
import * as tf from "@tensorflow/tfjs";
import { bench, group, run, summary } from "mitata";
import { profilePhase } from "../src/index.js";

// What opt-in kernel detail costs: a 40-kernel step on small tensors, plain vs inside profilePhase.
await tf.setBackend("cpu");

const scope: PhaseScope = {
  scopeId: "bench:1",
  name: "step",
  path: ["step"],
  phasePath: "step",
  closed: false,
  close() {},
  [Symbol.dispose]() {},
};
const host: PhaseHost = {
  phase: ((_name: string, fn?: unknown) => (typeof fn === "function" ? fn() : scope)) as PhaseHost["phase"],
  enterPhase: () => scope,
};

const x = tf.ones([8, 8]);
const step = () =>
  tf.tidy(() => {
    let y = x;
    for (let i = 0; i < 20; i += 1) y = tf.relu(tf.add(y, 1));
    return y.sum();
  });

group("tfjs profilePhase cost (40 kernels, 8x8)", () => {
  summary(() => {
    bench("tfjs/step plain", () => step().dispose());
    bench("tfjs/step in profilePhase", async () =>
      (await profilePhase(tf, host, "step", step)).result.dispose(),
    );
  });
});

await run();
x.dispose();
