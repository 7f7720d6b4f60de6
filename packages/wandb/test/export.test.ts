import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  exportDiagnoseBundleToWandb,
  exportTrackingRunToWandb,
  loadOnlineSdk,
  RecordingWandbClient,
  readOfflineRun,
  WandbConfigError,
  WandbExportInputError,
  type WandbJsSdk,
  WandbOfflineClient,
  WandbStreamingClient,
} from "../src/index.js";
import {
  sampleTimelineRows,
  tensorAttributionRows,
  trackingDashboardHtml,
  trackingTimelineRows,
} from "../src/internal.js";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-wandb-unit-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function event(index: number, type = "sample", extra: Record<string, unknown> = {}) {
  return {
    timestamp_ns: 1_700_000_000_000_000_000n + BigInt(index) * 100_000_000n,
    event_type: type,
    allocator_allocated_bytes: 1000 + index,
    allocator_reserved_bytes: 2000 + index,
    allocator_change_bytes: 1,
    device_used_bytes: 3000 + index,
    device_total_bytes: 10_000,
    context: null,
    rank: 0,
    job_id: null,
    ...extra,
  };
}

describe("timeline sampling", () => {
  it("keeps every alert and the last point, then every k-th other point", () => {
    const events = Array.from({ length: 600 }, (_, i) => event(i, i % 50 === 7 ? "warning" : "sample"));
    const rows = trackingTimelineRows(events);
    const alerts = rows.filter((row) => row.event_type === "warning");
    expect(alerts).toHaveLength(12);
    expect(rows.at(-1)?.sample_index).toBe(599);
    // 250 - 13 pinned = 237 budget; 587 others, stride ceil(587/237) = 3.
    const others = rows.filter((row) => row.event_type !== "warning" && row.sample_index !== 599);
    expect(others.slice(0, 3).map((row) => row.sample_index)).toEqual([0, 3, 6]);
    expect(rows.length).toBeLessThanOrEqual(250);
  });

  it("keeps the last 250 pinned rows when alerts alone are more", () => {
    const rows = Array.from({ length: 400 }, (_, i) => ({
      sample_index: i,
      event_type: i < 390 ? "peak" : "sample",
    }));
    const kept = sampleTimelineRows(rows);
    expect(kept).toHaveLength(250);
    expect(kept.at(-1)?.sample_index).toBe(399);
    // 391 pinned (390 peaks and the last row): the last 250 start at 141.
    expect(kept[0]?.sample_index).toBe(141);
  });
});

describe("dashboard numbers", () => {
  it("rounds exact halves to even, as Python's format does", () => {
    // 17 points: x of the 5th is 18 + (4/16) * 684 = 189.0; of the 2nd, 18 + 42.75 = 60.75 -> "60.8".
    const events = Array.from({ length: 17 }, (_, i) => event(i));
    const html = trackingDashboardHtml(trackingTimelineRows(events));
    expect(html).toContain("60.8,");
    // 146.25 is exactly representable: Python prints 146.2 where toFixed prints 146.3.
    expect((146.25).toFixed(1)).toBe("146.3");
    const rows = trackingTimelineRows(Array.from({ length: 33 }, (_, i) => event(i)));
    const page = trackingDashboardHtml(rows);
    expect(page).toContain("146.2,");
    expect(page).not.toContain("146.3,");
  });
});

describe("tensor attribution rows", () => {
  it("reads values as Python does (str of lists, booleans, int() of text) and sorts largest first, ties kept", () => {
    const dir = tempDir();
    const path = join(dir, "cuda_tensor_attribution.json");
    writeFileSync(
      path,
      JSON.stringify({
        attributed_storage_pointers: [
          {
            names: ["a", 1, true, "d"],
            storage_ptr: 7,
            tensor_count: "2",
            tensors: [{ shape: [4, 4], dtype: "f", size_bytes: 10 }],
          },
          { tensors: [{ shape: [2.5], size_bytes: 10 }, { size_bytes: true }] },
          { tensors: [{ size_bytes: 1.5 }] },
        ],
      }),
    );
    expect(tensorAttributionRows(path)).toEqual([
      ["<unnamed>", "", 2, 11, "[2.5]", ""],
      ["a, 1, True", "7", 2, 10, "[4, 4]", "f"],
      ["<unnamed>", "", 1, 0, "", ""],
    ]);
  });

  it("raises where the reference raises (a tensor count that is no number)", async () => {
    const dir = tempDir();
    writeFileSync(
      join(dir, "cuda_tensor_attribution.json"),
      JSON.stringify({ attributed_storage_pointers: [{ tensor_count: null, tensors: [] }] }),
    );
    const client = new RecordingWandbClient();
    await expect(
      exportTrackingRunToWandb(
        { enabled: true, logAttribution: true, logTables: false },
        { commandName: "t", sessionSummary: null, stats: {}, events: [], attributionBundleDir: dir },
        client,
      ),
    ).rejects.toThrow(WandbExportInputError);
    // As in the reference, the run is finished on the way out.
    expect(client.calls.map((call) => call.call)).toEqual(["init", "summary.update", "finish"]);
  });
});

describe("settings", () => {
  it("does nothing unless enabled, and refuses an unknown mode", async () => {
    const client = new RecordingWandbClient();
    await exportTrackingRunToWandb(
      {},
      { commandName: "t", sessionSummary: null, stats: {}, events: [] },
      client,
    );
    expect(client.calls).toEqual([]);
    await expect(
      exportDiagnoseBundleToWandb(
        { enabled: true, mode: "sometimes" as "online" },
        { commandName: "d", artifactDir: "." },
        client,
      ),
    ).rejects.toThrow(WandbConfigError);
  });

  it("refuses a run id W&B refuses, which would also name a folder outside wandb/", async () => {
    const dir = tempDir();
    const client = new WandbOfflineClient({ dir });
    const input = { commandName: "t", sessionSummary: null, stats: {}, events: [] };
    await expect(
      exportTrackingRunToWandb({ enabled: true, runId: "../../escape" }, input, client),
    ).rejects.toThrow(WandbConfigError);
    await expect(client.init({ project: "p", id: "a\\b" })).rejects.toThrow(/run id; use letters/);
    expect(client.runs).toEqual([]);
    await exportTrackingRunToWandb({ enabled: true, runId: "run_01-a" }, input, client);
    expect(client.runs.map((run) => run.runId)).toEqual(["run_01-a"]);
  });

  it("passes the job id of a manifest through as the group, whatever its type", async () => {
    const dir = tempDir();
    const bundle = join(dir, "bundle");
    mkdirSync(bundle);
    writeFileSync(
      join(bundle, "manifest.json"),
      JSON.stringify({
        session: {
          session_id: "s-123456789",
          source: "x",
          status: "Completed ",
          started_at_ns: 1,
          host: "h",
          job_id: 42,
        },
      }),
    );
    const client = new RecordingWandbClient();
    await exportDiagnoseBundleToWandb({ enabled: true }, { commandName: "d", artifactDir: bundle }, client);
    expect(client.calls[0]).toEqual({
      call: "init",
      kwargs: { project: "stormlog", name: "d-s-123456", group: 42, job_type: "d" },
    });
  });
});

describe("a diagnose bundle's files that are not regular files", () => {
  // A FIFO named like the manifest would make the read wait forever for a writer: it reads as unreadable.
  it("exports as if they were missing, without waiting", async () => {
    const bundle = join(tempDir(), "bundle");
    mkdirSync(bundle);
    execFileSync("mkfifo", [join(bundle, "manifest.json")]);
    mkdirSync(join(bundle, "diagnostic_summary.json"));
    const fromSpecial = new RecordingWandbClient();
    await exportDiagnoseBundleToWandb(
      { enabled: true },
      { commandName: "d", artifactDir: bundle },
      fromSpecial,
    );
    const empty = join(tempDir(), "empty");
    mkdirSync(empty);
    const fromMissing = new RecordingWandbClient();
    await exportDiagnoseBundleToWandb(
      { enabled: true },
      { commandName: "d", artifactDir: empty },
      fromMissing,
    );
    expect(fromSpecial.calls.length).toBeGreaterThan(0);
    expect(fromSpecial.calls[0]).toEqual(fromMissing.calls[0]);
  });
});

describe("online streaming", () => {
  it("says what is missing without an API key or the SDK", async () => {
    expect(await loadOnlineSdk({})).toMatchObject({
      available: false,
      reason: expect.stringMatching(/WANDB_API_KEY/),
    });
    const missing = await loadOnlineSdk({ WANDB_API_KEY: "k" }, () => Promise.reject(new Error("not found")));
    expect(missing).toMatchObject({ available: false, reason: expect.stringMatching(/@wandb\/sdk/) });
  });

  it("writes the whole offline run when the live run cannot start, and says why", async () => {
    const errors: unknown[] = [];
    const sdk: WandbJsSdk = { init: () => Promise.reject(new Error("401 Unauthorized")) };
    const offline = new WandbOfflineClient({ dir: tempDir() });
    const client = new WandbStreamingClient(offline, sdk, (error) => errors.push(error));
    const events = Array.from({ length: 3 }, (_, i) => event(i));
    await exportTrackingRunToWandb(
      { enabled: true, project: "p" },
      { commandName: "t", sessionSummary: null, stats: { peak_memory: 5 }, events },
      client,
    );
    expect(errors.map((error) => (error as Error).message)).toEqual(["401 Unauthorized"]);
    const calls = readOfflineRun(offline.runs[0]?.runDir as string).calls;
    expect(calls.at(-1)).toEqual({ call: "finish" });
    expect(calls.filter((call) => call.call === "log").length).toBeGreaterThanOrEqual(3);
    expect(client.activeRun()).toBeNull();
  });

  it("streams scalars to the live run and keeps everything in the offline run", async () => {
    const logged: Record<string, unknown>[] = [];
    const inits: Record<string, unknown>[] = [];
    let finished = 0;
    const sdk: WandbJsSdk = {
      async init(options) {
        inits.push(options);
        return {
          log: (data) => logged.push(data),
          finish: async () => {
            finished++;
          },
        };
      },
    };
    const loaded = await loadOnlineSdk({ WANDB_API_KEY: "k" }, async () => ({ default: sdk }));
    expect(loaded.available).toBe(true);
    const offline = new WandbOfflineClient({ dir: tempDir() });
    const client = new WandbStreamingClient(offline, sdk);
    const events = Array.from({ length: 5 }, (_, i) => event(i, i === 2 ? "peak" : "sample"));
    await exportTrackingRunToWandb(
      { enabled: true, project: "p" },
      { commandName: "t", sessionSummary: null, stats: { peak_memory: 5 }, events },
      client,
    );
    expect(inits).toHaveLength(1);
    expect(inits[0]).toMatchObject({ project: "p", id: offline.runs[0]?.runId });
    expect(finished).toBe(1);
    // Summary, then 5 timeline steps; tables, charts and HTML only offline.
    expect(logged).toHaveLength(6);
    expect(logged[0]).toMatchObject({ stormlog_peak_memory_bytes: 5, stormlog_chart_point_count: 5 });
    const calls = readOfflineRun(offline.runs[0]?.runDir as string).calls;
    expect(calls.filter((call) => call.call === "log")).toHaveLength(5 + 5);
    expect(client.activeRun()).toBeNull();
  });
});
