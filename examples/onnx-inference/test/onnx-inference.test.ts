import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type JsonObject, parseJson } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildMlpModel, DEFAULT_SHAPE } from "../src/model.js";

const EXAMPLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const CYCLES = 4;
const RUNS_PER_CYCLE = 6;

interface PhaseStat {
  phase_path: string;
  occurrences: number;
  net_allocated_bytes: { count: number } | null;
  peak_allocated_bytes: { value: number } | null;
}

let work: string;
let result: SpawnSyncReturns<string>;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "stormlog-onnx-"));
  result = spawnSync(
    process.execPath,
    [
      "--conditions=@stormlog/source",
      "--import",
      "tsx",
      "src/main.ts",
      "--cycles",
      String(CYCLES),
      "--out",
      join(work, "sink"),
      "--json",
      join(work, "report.json"),
    ],
    { cwd: EXAMPLE_DIR, encoding: "utf8", timeout: 60_000, env: { ...process.env, INIT_CWD: EXAMPLE_DIR } },
  );
  if (result.error) throw result.error;
}, 90_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Phase enter records by path, with their attributes, in order. */
async function phaseEnters(): Promise<Map<string, JsonObject[]>> {
  const [session] = await loadTelemetrySessions(join(work, "sink"));
  const byPath = new Map<string, JsonObject[]>();
  for (const event of session!.events) {
    if (event.event_type !== "phase_enter") continue;
    const scope = event.metadata.phase_scope as { path: string[]; attributes?: JsonObject };
    const path = scope.path.join(" / ");
    const list = byPath.get(path) ?? [];
    list.push(scope.attributes ?? {});
    byPath.set(path, list);
  }
  return byPath;
}

describe("examples/onnx-inference", () => {
  it("the generated model runs in onnxruntime-node", async () => {
    const session = await ort.InferenceSession.create(buildMlpModel());
    const x = new ort.Tensor("float32", new Float32Array(3 * DEFAULT_SHAPE.inputs).fill(0.5), [
      3,
      DEFAULT_SHAPE.inputs,
    ]);
    const { y } = (await session.run({ x })) as { y: ort.Tensor };
    expect(y.dims).toEqual([3, DEFAULT_SHAPE.outputs]);
    expect(Array.from(y.data as Float32Array).every(Number.isFinite)).toBe(true);
    await session.release();
  });

  it("serves every cycle and prints RSS per cycle and the analysis", () => {
    expect(result.status, `exit ${result.status}\n${result.stdout}\n${result.stderr}`).toBe(0);
    for (let cycle = 1; cycle <= CYCLES; cycle++)
      expect(result.stdout).toMatch(new RegExp(`^ +${cycle} +\\d+(\\.\\d+)? [KMG]?B `, "m"));
    expect(result.stdout).toContain("RSS after create");
    expect(result.stdout).toMatch(/^ {6}run +24 /m); // the analysis's phase table
    expect(result.stdout).toContain("Leaks:");
  });

  it("records create, run and release phases with cycles and input shapes", async () => {
    const enters = await phaseEnters();
    expect(enters.get("serve")?.map((a) => a.cycle)).toEqual([1, 2, 3, 4]);
    expect(enters.get("serve / onnx:mlp / create")?.map((a) => a.onnx_cycle)).toEqual([1, 2, 3, 4]);
    expect(enters.get("serve / onnx:mlp / release")).toHaveLength(CYCLES);
    const runs = enters.get("serve / onnx:mlp / run")!;
    expect(runs).toHaveLength(CYCLES * RUNS_PER_CYCLE);
    // Every cycle: batches 1, 8, 32, 8, 1, 512, each shape new to its session.
    expect(runs.slice(0, RUNS_PER_CYCLE).map((a) => (a.onnx_input_shapes as { x: number[] }).x)).toEqual([
      [1, 64],
      [8, 64],
      [32, 64],
      [8, 64],
      [1, 64],
      [512, 64],
    ]);
    expect(runs.slice(0, RUNS_PER_CYCLE).map((a) => a.onnx_new_input_signature)).toEqual([
      true,
      true,
      true,
      false,
      false,
      true,
    ]);
    const lastCycle = runs.slice(-RUNS_PER_CYCLE);
    expect(lastCycle.map((a) => a.onnx_cycle)).toEqual(Array(RUNS_PER_CYCLE).fill(CYCLES));
    expect(lastCycle.map((a) => a.onnx_new_input_signature)).toEqual([true, true, true, false, false, true]);
  });

  it("phase records carry RSS read at their enter and exit, so each phase shows its own growth", async () => {
    const [session] = await loadTelemetrySessions(join(work, "sink"));
    const entered = new Map<string, number>();
    const growth = new Map<string, number[]>();
    for (const event of session!.events) {
      if (event.event_type !== "phase_enter" && event.event_type !== "phase_exit") continue;
      // Only the process collector reads here, and it has no readSync(): every phase asks for readings.
      expect(event.metadata.phase_counters).toBe("boundary_read");
      const scope = event.metadata.phase_scope as { path: string[]; scope_id: string };
      const rss = event.allocator_allocated_bytes as number;
      if (event.event_type === "phase_enter") entered.set(scope.scope_id, rss);
      else {
        const path = scope.path.join(" / ");
        growth.set(path, [...(growth.get(path) ?? []), rss - (entered.get(scope.scope_id) as number)]);
      }
    }
    expect(growth.get("serve / onnx:mlp / run")).toHaveLength(CYCLES * RUNS_PER_CYCLE);
    // The first create sets up onnxruntime's session state and arena: megabytes of RSS, in its own records.
    expect(growth.get("serve / onnx:mlp / create")?.[0]).toBeGreaterThan(1024 * 1024);
    expect(growth.get("serve")?.[0]).toBeGreaterThan(1024 * 1024);
    // Runs differ: some grow, and their readings are not one sample repeated.
    expect(growth.get("serve / onnx:mlp / run")?.some((bytes) => bytes !== 0)).toBe(true);
    expect(new Set(entered.values()).size).toBeGreaterThan(1);
  });

  it("the analysis has per-run phases and the change per cycle", () => {
    const report = parseJson(readFileSync(join(work, "report.json"), "utf8")) as unknown as {
      phases: PhaseStat[];
      summary: { peaks: { allocator_allocated_bytes: { value: number } | null } };
    };
    const phases = new Map(report.phases.map((p) => [p.phase_path, p]));
    expect(phases.get("serve / onnx:mlp / run")?.occurrences).toBe(CYCLES * RUNS_PER_CYCLE);
    expect(phases.get("serve / onnx:mlp / create")?.occurrences).toBe(CYCLES);
    const serve = phases.get("serve")!;
    expect(serve.occurrences).toBe(CYCLES);
    expect(serve.net_allocated_bytes?.count).toBe(CYCLES);
    // Host memory (RSS) is what the process collector reads: a Node.js process holds tens of MB.
    expect(report.summary.peaks.allocator_allocated_bytes?.value).toBeGreaterThan(20 * 1024 * 1024);
  });
});
