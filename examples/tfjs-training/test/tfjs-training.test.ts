import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseJson, type TelemetryEvent } from "@stormlog/core";
import { loadTelemetrySessions } from "@stormlog/sink";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const EXAMPLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const STEP_PHASES = ["train / load_batch", "train / forward", "train / backward", "train / optimizer_step"];
// What --leak keeps each step: a copy of the first layer's gradient, 64 features x 128 hidden float32.
const LEAKED_BYTES = 64 * 128 * 4;
/** 3 epochs x 25 batches in the custom loop. */
const STEPS = 75;

interface LiveGroup {
  dtype: string;
  shape: number[];
  bytes: number;
  count: number;
}
type LiveByPhase = Record<string, { tensors: number; bytes: number; largest: LiveGroup[] }>;

interface Leak {
  births: { birth_phase: string } | null;
  phase_path: string;
  verdict: string;
  confidence: number;
  message: string;
  bytes_per_occurrence: number | null;
  tensors_per_occurrence: number | null;
}
interface Report {
  session: { selected_session_id: string; status: string };
  phases: { phase_path: string; occurrences: number }[];
  leaks: Leak[];
}

interface Run {
  result: SpawnSyncReturns<string>;
  sink: string;
  report: Report;
}

/** Runs the example as `pnpm start` does, into a sink of its own. */
function runExample(name: string, args: string[]): Run {
  const sink = join(work, name);
  const json = join(work, `${name}.json`);
  const result = spawnSync(
    process.execPath,
    [
      "--conditions=@stormlog/source",
      "--import",
      "tsx",
      "src/main.ts",
      "--out",
      sink,
      "--json",
      json,
      ...args,
    ],
    { cwd: EXAMPLE_DIR, encoding: "utf8", timeout: 90_000, env: { ...process.env, INIT_CWD: EXAMPLE_DIR } },
  );
  if (result.error) throw result.error;
  expect(result.status, `exit ${result.status}\n${result.stdout}\n${result.stderr}`).toBe(0);
  return { result, sink, report: parseJson(readFileSync(json, "utf8")) as unknown as Report };
}

// The CLI as this project depends on it (a devDependency), run from source.
const CLI = join(
  dirname(createRequire(join(EXAMPLE_DIR, "package.json")).resolve("@stormlog/cli/package.json")),
  "src/bin.ts",
);

function cli(args: string[]): SpawnSyncReturns<string> {
  const result = spawnSync(
    process.execPath,
    ["--conditions=@stormlog/source", "--import", "tsx", CLI, ...args],
    {
      cwd: EXAMPLE_DIR,
      encoding: "utf8",
      timeout: 60_000,
    },
  );
  if (result.error) throw result.error;
  return result;
}

/** A sample the tracker read, with the collector's detail (not a high-water mark between readings). */
const read = (event: TelemetryEvent): boolean =>
  event.event_type === "sample" && event.metadata.high_water_mark !== true;

let work: string;
let clean: Run;
let leaking: Run;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "stormlog-tfjs-training-"));
  clean = runExample("clean", []);
  leaking = runExample("leak", ["--leak"]);
}, 180_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("examples/tfjs-training", () => {
  it("records the custom loop's phases and model.fit's into one completed session", async () => {
    const sessions = await loadTelemetrySessions(clean.sink);
    expect(sessions).toHaveLength(1);
    const [session] = sessions;
    expect(session!.summary.status).toBe("completed");
    expect(clean.report.session.selected_session_id).toBe(session!.summary.session_id);

    const enters = new Map<string, number>();
    for (const event of session!.events) {
      if (event.event_type !== "phase_enter") continue;
      const scope = event.metadata.phase_scope as { path: string[] };
      const path = scope.path.join(" / ");
      enters.set(path, (enters.get(path) ?? 0) + 1);
    }
    // 3 epochs x 25 batches in the custom loop; 2 epochs x 25 batches through model.fit.
    for (const path of ["train", ...STEP_PHASES]) expect(enters.get(path), path).toBe(75);
    expect(enters.get("fit")).toBe(1);
    expect(enters.get("fit / epoch")).toBe(2);
    expect(enters.get("fit / epoch / batch")).toBe(50);
    expect(session!.events.filter((e) => e.event_type === "sample").length).toBeGreaterThan(5);

    // The analysis has the same phases.
    const occurrences = new Map(clean.report.phases.map((p) => [p.phase_path, p.occurrences]));
    for (const path of STEP_PHASES) expect(occurrences.get(path), path).toBe(75);
    expect(occurrences.get("fit / epoch / batch")).toBe(50);
  });

  it("reports no leak without --leak", () => {
    expect(clean.report.leaks.filter((leak) => leak.verdict === "leaking")).toEqual([]);
    expect(clean.result.stdout).not.toMatch(/keeps .* per occurrence/);
  });

  it("with --leak reports the step leaking, with the tensor and bytes kept per step", () => {
    const leaks = leaking.report.leaks.filter((leak) => leak.verdict === "leaking");
    const step = leaks.find((leak) => leak.phase_path === "train");
    expect(step, JSON.stringify(leaks, null, 2)).toBeDefined();
    expect(step!.bytes_per_occurrence).toBe(LEAKED_BYTES);
    // Tensor counts come from tfjs_num_tensors on the phase boundary records.
    expect(step!.tensors_per_occurrence, "tensors kept per step (tfjs_num_tensors on boundaries)").toBe(1);
    expect(leaking.result.stdout).toContain(step!.message);
  });

  it("with --leak names `train / backward` from the tensors' birth phase and calls the loader not leaking", () => {
    const backward = leaking.report.leaks.find((leak) => leak.phase_path === "train / backward");
    expect(backward?.verdict, JSON.stringify(leaking.report.leaks, null, 2)).toBe("leaking");
    expect(backward!.births).toMatchObject({
      birth_phase: "train / backward",
      unit_path: "train",
      tensors_per_occurrence: 1,
      bytes_per_occurrence: LEAKED_BYTES,
      largest: [{ dtype: "float32", shape: [64, 128] }],
    });
    expect(backward!.message).toMatch(
      /^`train \/ backward`: 1 tensor \(32\.00 KB, float32 \[64, 128\]\) born here per step is still alive \d+ steps later/,
    );
    expect(leaking.result.stdout).toContain(backward!.message);
    for (const path of ["train / load_batch", "train / forward", "train / optimizer_step"])
      expect(leaking.report.leaks.find((leak) => leak.phase_path === path)?.verdict, path).not.toBe(
        "leaking",
      );
  });

  it("with --leak, diagnose flags the leak (exit 2) and the Perfetto memory counters rise", () => {
    const diagnosed = cli(["diagnose", leaking.sink]);
    expect(diagnosed.status, `${diagnosed.stdout}\n${diagnosed.stderr}`).toBe(2);
    expect(diagnosed.stdout).toContain("leak:train / backward");
    expect(cli(["diagnose", clean.sink]).status).toBe(0);
    const trace = join(work, "leak-trace.json");
    const exported = cli(["export", leaking.sink, "--format", "perfetto", "--output", trace]);
    expect(exported.status, exported.stderr).toBe(0);
    const { traceEvents } = parseJson(readFileSync(trace, "utf8")) as unknown as {
      traceEvents: { ph: string; name: string; ts: number; args?: Record<string, number> }[];
    };
    const allocated = traceEvents
      .filter((event) => event.ph === "C" && event.name === "allocated" && event.args?.bytes !== undefined)
      .map((event) => event.args!.bytes!);
    // Boundary readings make the counter track each step: the 75 kept copies show as growth.
    expect(allocated.length).toBeGreaterThan(STEPS * 2);
    expect(Math.max(...allocated) - allocated[0]!).toBeGreaterThanOrEqual(STEPS * LEAKED_BYTES);
  });

  it("with --leak, samples attribute live tensors to their birth phase: backward grows, the loader keeps none", async () => {
    const [session] = await loadTelemetrySessions(leaking.sink);
    const samples = session!.events.filter(read);
    expect(samples.length).toBeGreaterThan(5);
    for (const sample of samples) expect(sample.metadata.tfjs_attribution).toBe("birth_phase");
    const live = samples.map((sample) => sample.metadata.tfjs_live_by_phase as unknown as LiveByPhase);

    // The gradient copies kept in `train / backward`: never fewer from one sample to the next, one
    // per step in the end, and seen growing over the loop.
    const backward = live.map((byPhase) => byPhase["train / backward"]?.tensors ?? 0);
    for (let i = 1; i < backward.length; i++) expect(backward[i]).toBeGreaterThanOrEqual(backward[i - 1]!);
    expect(new Set(backward).size, backward.join(",")).toBeGreaterThan(3);
    expect(live.at(-1)!["train / backward"]).toEqual({
      tensors: STEPS,
      bytes: STEPS * LEAKED_BYTES,
      largest: [{ dtype: "float32", shape: [64, 128], bytes: STEPS * LEAKED_BYTES, count: STEPS }],
    });
    // The loader's batch tensors are disposed by the step that asked for them: samples, taken
    // between steps, never find one alive, although each load_batch ends with two more tensors.
    expect(live.filter((byPhase) => byPhase["train / load_batch"] !== undefined)).toEqual([]);
    // Every live tensor is attributed: the phases' counts add up to tfjs's own.
    samples.forEach((sample, i) => {
      const attributed = Object.values(live[i]!).reduce((sum, phase) => sum + phase.tensors, 0);
      expect(attributed).toBe(sample.metadata.tfjs_num_tensors);
    });
  });

  it("without --leak, nothing born in backward survives its step", async () => {
    const [session] = await loadTelemetrySessions(clean.sink);
    const live = session!.events
      .filter(read)
      .map((sample) => sample.metadata.tfjs_live_by_phase as unknown as LiveByPhase);
    expect(live.length).toBeGreaterThan(5);
    expect(live.filter((byPhase) => byPhase["train / backward"] !== undefined)).toEqual([]);
    // The model's weights, made before the tracker started, are live throughout, outside any phase.
    expect(live.every((byPhase) => (byPhase[""]?.tensors ?? 0) >= 6)).toBe(true);
  });

  it("prints what a new user needs: what was tracked, the report, the sink, what to try next", () => {
    const out = clean.result.stdout;
    expect(out).toContain("train / load_batch, forward, backward, optimizer_step");
    expect(out).toContain("stormlogCallback");
    expect(out).toContain(`Telemetry: ${clean.sink}`);
    // The HTML report, written beside the sink.
    const page = join(dirname(clean.sink), "stormlog-report.html");
    expect(out).toContain(`Report: ${page} (`);
    expect(readFileSync(page, "utf8")).toContain('<script type="application/json" id="stormlog-data">');
    expect(out).toContain(`pnpm exec stormlog analyze ${clean.sink}`);
    expect(out).toContain("--leak");
  });
});
