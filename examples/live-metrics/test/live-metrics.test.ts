import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const EXAMPLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");

interface Received {
  instruments: string[];
  phases: { path: string; count: number; sumS: number }[];
  memory: { collector: string; device: number; allocatedBytes: number }[];
  health: string[];
  recordedExits: Record<string, number>;
}

let work: string;
let received: Received;
let stdout: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "stormlog-live-metrics-"));
  const json = join(work, "received.json");
  const run = spawnSync(
    process.execPath,
    ["--conditions=@stormlog/source", "--import", "tsx", "src/main.ts", "--steps", "30", "--json", json],
    { cwd: EXAMPLE_DIR, encoding: "utf8", timeout: 90_000 },
  );
  if (run.error) throw run.error;
  expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
  stdout = run.stdout;
  received = JSON.parse(readFileSync(json, "utf8")) as Received;
}, 120_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("examples/live-metrics: an application's OpenTelemetry SDK MeterProvider receives the tracker's metrics", () => {
  it("receives one phase duration per phase the tracker recorded, path by path", () => {
    const paths = received.phases.map((phase) => phase.path).sort();
    expect(paths).toEqual(["train_step", "train_step / forward_backward", "train_step / load_batch"]);
    for (const phase of received.phases) {
      expect(phase.count).toBe(30);
      expect(phase.count).toBe(received.recordedExits[phase.path]);
      expect(phase.sumS).toBeGreaterThan(0);
    }
    // A step's time includes its phases'.
    const total = (path: string) => received.phases.find((phase) => phase.path === path)?.sumS ?? 0;
    expect(total("train_step")).toBeGreaterThanOrEqual(total("train_step / forward_backward"));
  });

  it("receives memory, process RSS and collector health", () => {
    expect(received.instruments).toEqual(
      expect.arrayContaining([
        "stormlog.memory.allocated",
        "stormlog.memory.reserved",
        "process.memory.usage",
        "stormlog.collector.health",
      ]),
    );
    expect(received.memory.length).toBeGreaterThan(0);
    expect(received.memory.every((entry) => entry.allocatedBytes > 0)).toBe(true);
    expect(received.health.sort()).toEqual([
      "stormlog.cpu_tracker: healthy",
      "stormlog.tfjs_tracker: healthy",
    ]);
    expect(stdout).toContain("the application's exporter received");
  });
});
