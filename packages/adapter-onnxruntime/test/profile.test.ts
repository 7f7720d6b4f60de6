import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { recordingHost } from "../../adapter-tfjs/test/support/recording-host.js";
import {
  createInstrumentedSession,
  ingestSessionProfile,
  instrumentSession,
  OnnxProfileError,
  parseOnnxProfile,
  profileReadings,
  profileSummaryMetadata,
  readOnnxProfile,
} from "../src/index.js";
import { findProfileFile } from "../src/profile.js";
import { sessionInstrumentation } from "../src/session.js";
import { tinyMatMulAddModel } from "./support/model.js";

const fixture = join(import.meta.dirname, "fixtures/onnxruntime-node-1.30-cpu-profile.json");

describe("parseOnnxProfile on a profile written by onnxruntime-node 1.30 (CPU)", () => {
  it("reads runs, node executions and the arena fields onnxruntime writes as strings", async () => {
    const profile = await readOnnxProfile(fixture);
    expect(profile.pid).toBe(7022);
    expect(profile.modelLoadUs).toBe(838);
    expect(profile.sessionInitUs).toBe(12050);
    expect(profile.hasArenaStats).toBe(true);
    expect(profile.runs.map((r) => [r.index, r.nodes, r.outputBytes])).toEqual([
      [0, 1, 32],
      [1, 1, 48],
      [2, 1, 32],
    ]);
    expect(profile.runs[0]).toMatchObject({ inUsePeakBytes: 512, arenaHeldBytes: 1048832 });
    expect(profile.nodes).toHaveLength(3);
    expect(profile.nodes[0]).toEqual({
      node: "mm/MatMulAddFusion",
      opName: "Gemm",
      provider: "CPUExecutionProvider",
      tsUs: 16898,
      durUs: 137,
      runIndex: 0,
      activationSize: 64,
      parameterSize: 0,
      outputSize: 32,
      memBytesInUse: 512,
      memBytesRequestedInUse: 288,
      memInUsePeak: 512,
      memArenaHeld: 1048832,
      memInUseDelta: 256,
      memRequestedInUseDelta: 32,
      memArenaHeldDelta: 1048576,
    });
    expect(profile.nodes[1]).toMatchObject({ runIndex: 1, activationSize: 96, memArenaHeldDelta: 0 });
  });

  it("turns arena statistics into allocated (in use) and reserved (held) readings", async () => {
    const profile = await readOnnxProfile(fixture);
    const readings = profileReadings(profile, { anchorNs: 1_000_000_000_000n });
    expect(readings).toHaveLength(3);
    expect(readings[0]).toEqual({
      tsUs: 16898,
      timestampNs: 1_000_000_000_000n + 16_898_000n,
      provider: "CPUExecutionProvider",
      reading: { allocator_allocated_bytes: 512, allocator_reserved_bytes: 1048832 },
      metadata: {
        onnx_node: "mm/MatMulAddFusion",
        onnx_op: "Gemm",
        onnx_provider: "CPUExecutionProvider",
        onnx_profile_run: 0,
        onnx_in_use_peak_bytes: 512,
        onnx_requested_in_use_bytes: 288,
      },
    });
    expect(profileReadings(profile)[0]!.timestampNs).toBeUndefined();
  });

  it("summarises the profile for phase metadata", async () => {
    const metadata = profileSummaryMetadata(await readOnnxProfile(fixture));
    expect(metadata).toEqual({
      onnx_profile_runs: 3,
      onnx_profile_node_executions: 3,
      onnx_profile_arena_stats: true,
      onnx_arena_held_bytes: 1048832,
      onnx_arena_held_max_bytes: 1048832,
      onnx_arena_growth_bytes: 1048576,
      onnx_in_use_peak_bytes: 512,
      onnx_model_load_us: 838,
      onnx_session_init_us: 12050,
      onnx_largest_outputs: [
        {
          node: "mm/MatMulAddFusion",
          output_size: 48,
          op: "Gemm",
          provider: "CPUExecutionProvider",
          activation_size: 96,
          parameter_size: 0,
        },
      ],
    });
  });

  it("handles builds without arena fields: sizes only, no readings, null arena figures", () => {
    const profile = parseOnnxProfile([
      { cat: "Session", name: "model_run", ts: 100, dur: 50, pid: 1, args: {} },
      {
        cat: "Node",
        name: "conv1_kernel_time",
        ts: 110,
        dur: 10,
        args: {
          op_name: "Conv",
          provider: "CUDAExecutionProvider",
          activation_size: "100",
          output_size: "200",
        },
      },
      { cat: "Node", name: "conv1_fence_before", ts: 105, dur: 1, args: { op_name: "Conv" } },
    ]);
    expect(profile.hasArenaStats).toBe(false);
    expect(profile.nodes).toHaveLength(1);
    expect(profile.nodes[0]).toMatchObject({
      node: "conv1",
      runIndex: 0,
      outputSize: 200,
      memArenaHeld: undefined,
    });
    expect(profileReadings(profile)).toEqual([]);
    expect(profileSummaryMetadata(profile)).toMatchObject({
      onnx_profile_arena_stats: false,
      onnx_arena_held_bytes: null,
      onnx_arena_growth_bytes: null,
      onnx_in_use_peak_bytes: null,
    });
  });

  it("accepts { traceEvents } and rejects what is not a Chrome trace", () => {
    expect(parseOnnxProfile({ traceEvents: [] }).runs).toEqual([]);
    expect(() => parseOnnxProfile("{not json")).toThrow(OnnxProfileError);
    expect(() => parseOnnxProfile({ events: [] })).toThrow(/Chrome trace/);
  });
});

describe("ingestSessionProfile with onnxruntime-node", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "stormlog-onnx-profile-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("ends profiling, finds the file, records a profile phase and returns readings", async () => {
    const host = recordingHost();
    const prefix = join(dir, "tiny");
    const session = await createInstrumentedSession(
      ort,
      tinyMatMulAddModel(),
      { enableProfiling: true, profileFilePrefix: prefix },
      host,
      { name: "tiny" },
    );
    for (const rows of [2, 64, 2]) {
      await session.run({ x: new ort.Tensor("float32", new Float32Array(rows * 4), [rows, 4]) });
    }
    const ingested = await ingestSessionProfile(session, host);
    expect(ingested.path.startsWith(`${prefix}_`)).toBe(true);
    expect(ingested.profile.runs).toHaveLength(3);
    expect(ingested.profile.nodes.length).toBeGreaterThanOrEqual(3);
    expect(ingested.profile.runs[1]!.outputBytes).toBe(64 * 4 * 4);

    // onnxruntime-node 1.30's CPU runtime writes the arena fields on every node.
    expect(ingested.profile.hasArenaStats).toBe(true);
    expect(ingested.readings.length).toBeGreaterThanOrEqual(3);
    const createdAtNs = sessionInstrumentation(session)!.createdAtNs!;
    for (const { reading, timestampNs } of ingested.readings) {
      expect(reading.allocator_reserved_bytes!).toBeGreaterThanOrEqual(reading.allocator_allocated_bytes!);
      expect(timestampNs! > createdAtNs).toBe(true);
      expect(timestampNs! < createdAtNs + 60_000_000_000n).toBe(true);
    }
    const profilePhase = host.boundaries.find((b) => b.type === "enter" && b.path.at(-1) === "profile");
    expect(profilePhase?.path).toEqual(["onnx:tiny", "profile"]);
    expect(profilePhase?.attributes).toMatchObject({
      onnx_session: "tiny",
      onnx_profile_file: ingested.path,
      onnx_profile_runs: 3,
    });
    expect(host.openPaths()).toEqual([]);
    await session.release();
  });

  it("deletes the file when asked, and names what is missing when there is no file", async () => {
    const host = recordingHost();
    const prefix = join(dir, "gone");
    const session = await createInstrumentedSession(
      ort,
      tinyMatMulAddModel(),
      { enableProfiling: true, profileFilePrefix: prefix },
      host,
      { name: "gone" },
    );
    await session.run({ x: new ort.Tensor("float32", new Float32Array(4), [1, 4]) });
    const { path } = await ingestSessionProfile(session, host, { deleteFile: true });
    expect(existsSync(path)).toBe(false);
    await session.release();

    const plain = instrumentSession(await ort.InferenceSession.create(tinyMatMulAddModel()), host, {
      name: "plain",
    });
    await expect(ingestSessionProfile(plain, host, { profileFilePrefix: join(dir, "none") })).rejects.toThrow(
      /enableProfiling: true/,
    );
    await plain.release();
  });

  it("needs a name for sessions it did not instrument", async () => {
    const session = await ort.InferenceSession.create(tinyMatMulAddModel());
    await expect(ingestSessionProfile(session, recordingHost())).rejects.toThrow(OnnxProfileError);
    await session.release();
  });
});

describe("findProfileFile", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "stormlog-onnx-find-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("picks the newest file named <prefix>_<date>.json, no older than sinceMs", () => {
    const write = (name: string, mtimeS: number) => {
      const path = join(dir, name);
      writeFileSync(path, "[]");
      utimesSync(path, mtimeS, mtimeS);
      return path;
    };
    write("run_2026-01-01_10-00-00.json", 1000);
    const newest = write("run_2026-01-01_10-00-05_123.json", 2000);
    write("run_other_2026-01-01_10-00-09.json", 3000);
    write("runx_2026-01-01_10-00-09.json", 3000);
    write("onnxruntime_profile__2026-01-01_10-00-09.json", 3000);
    expect(findProfileFile(join(dir, "run"))).toBe(newest);
    expect(findProfileFile(join(dir, "run"), 2500 * 1000)).toBeUndefined();
    expect(findProfileFile(join(dir, "onnxruntime_profile_"))).toBe(
      join(dir, "onnxruntime_profile__2026-01-01_10-00-09.json"),
    );
    expect(findProfileFile(join(dir, "missing", "run"))).toBeUndefined();
    expect(JSON.parse(readFileSync(newest, "utf8"))).toEqual([]);
  });
});
