/**
 * Where Stormlog's own time goes inside real training steps: the example's custom loop, tracked with
 * a sink (tfjs + process collectors, 100 ms sampling), under V8's sampling profiler; samples are
 * split by source (Stormlog's packages, garbage collection, everything else) and Stormlog's busiest
 * functions are listed. Inside a step Stormlog's code runs with caches full of tfjs's data, so it
 * costs several times what the same calls cost in a tight loop (the overhead bench's last line).
 *
 *   pnpm --filter tfjs-training bench:in-situ
 *
 * STEPS (default 400) steps are profiled after 100 of warm-up; PROFILE=path also writes the profile.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { trainCustomLoop } from "../src/train.js";
import { benchTracker, benchTraining } from "./setup.js";

const STEPS = Number(process.env.STEPS ?? 400);
const { tf, config, model, optimizer, data } = await benchTraining(100);
const sinkDir = mkdtempSync(join(tmpdir(), "stormlog-in-situ-"));
const tracker = benchTracker(tf, { sinkDir });
await tracker.start();
await trainCustomLoop(tf, tracker, model, optimizer, data, config);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
}
const session = new Session();
session.connect();
await session.post("Profiler.enable");
await session.post("Profiler.setSamplingInterval", { interval: 50 });
await session.post("Profiler.start");
const started = performance.now();
await trainCustomLoop(tf, tracker, model, optimizer, data, { ...config, batchesPerEpoch: STEPS });
const wall = performance.now() - started;
const { profile } = await session.post("Profiler.stop");
await tracker.stop();
rmSync(sinkDir, { recursive: true, force: true });
if (process.env.PROFILE) writeFileSync(process.env.PROFILE, JSON.stringify(profile));

const nodes = new Map<number, ProfileNode>((profile.nodes as ProfileNode[]).map((node) => [node.id, node]));
const ownCode = /\/packages\/[^/]+\/(src|dist)\//;
const byKind = new Map<string, number>();
const byFunction = new Map<string, number>();
const add = (map: Map<string, number>, key: string, us: number) => map.set(key, (map.get(key) ?? 0) + us);
const samples = profile.samples ?? [];
const deltas = profile.timeDeltas ?? [];
for (let i = 0; i < samples.length; i++) {
  const { functionName, url } = nodes.get(samples[i]!)!.callFrame;
  const us = deltas[i] ?? 0;
  if (ownCode.test(url)) {
    add(byKind, "Stormlog", us);
    add(byFunction, `${functionName || "(anonymous)"} (${url.slice(url.lastIndexOf("/") + 1)})`, us);
  } else if (functionName === "(garbage collector)") add(byKind, "garbage collection", us);
  else add(byKind, "tfjs, Node and the rest", us);
}
const total = [...byKind.values()].reduce((sum, us) => sum + us, 0);
console.log(`${STEPS} tracked steps in ${wall.toFixed(0)} ms; profiler samples by source:`);
for (const [kind, us] of [...byKind].sort((a, b) => b[1] - a[1]))
  console.log(
    `  ${kind.padEnd(26)} ${(us / 1000).toFixed(1).padStart(9)} ms  ${((us / total) * 100).toFixed(2).padStart(6)} %`,
  );
console.log(
  `Stormlog per step: ${((byKind.get("Stormlog") ?? 0) / STEPS).toFixed(0)} us; busiest functions:`,
);
for (const [name, us] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, 12))
  console.log(`  ${(us / 1000).toFixed(1).padStart(7)} ms  ${name}`);
