import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { classifyOOMError } from "../../src/oom/oom.js";
import { full, makeTracker, reading, SequencedCollector } from "../helpers.js";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function oomTracker(options: { maxDumps?: number; maxTotalMb?: number; bufferSize?: number } = {}) {
  const dumpDir = mkdtempSync(join(tmpdir(), "stormlog-oom-"));
  dirs.push(dumpDir);
  const made = makeTracker([new SequencedCollector([full(reading({ allocated: 1000, reserved: 2000 }))])], {
    oom: { enabled: true, dumpDir, ...options },
  });
  return { ...made, dumpDir };
}

describe("OOM classification", () => {
  it("uses the reference's reasons", () => {
    class ResourceExhaustedError extends Error {}
    expect(classifyOOMError(new ResourceExhaustedError("OOM when allocating tensor"))).toEqual({
      isOOM: true,
      reason: "tensorflow.ResourceExhaustedError",
    });
    expect(classifyOOMError(new Error("CUDA out of memory. Tried to allocate 2 GiB"))).toEqual({
      isOOM: true,
      reason: "message_pattern:out of memory",
    });
    expect(classifyOOMError(new RangeError("Array buffer allocation failed")).reason).toBe(
      "message_pattern:allocation failed",
    );
    expect(
      classifyOOMError(new Error("[ONNXRuntimeError] Failed to allocate memory for requested buffer")).reason,
    ).toBe("message_pattern:failed to allocate");
    expect(classifyOOMError(new Error("run failed", { cause: new Error("std::bad_alloc") })).reason).toBe(
      "message_pattern:std::bad_alloc",
    );
    expect(classifyOOMError(new Error("shape mismatch"))).toEqual({ isOOM: false, reason: null });
    expect(classifyOOMError("resource exhausted").isOOM).toBe(true);
  });
});

describe("OOM flight recorder", () => {
  it("records an error event and dumps a bundle, then rethrows", async () => {
    const { tracker, dumpDir } = oomTracker();
    await tracker.start();
    await tracker.sampleNow();
    const failure = new Error("CUDA out of memory");
    expect(() =>
      tracker.captureOOM(
        () => {
          throw failure;
        },
        { context: "train_step", metadata: { step: 12 } },
      ),
    ).toThrow(failure);
    const error = tracker.getEvents({ eventType: "error" })[0];
    expect(error?.context).toBe("OOM detected (message_pattern:out of memory)");
    expect(error?.metadata.oom_reason).toBe("message_pattern:out of memory");

    const stats = tracker.getStatistics();
    const bundle = stats.lastOomDumpPath as string;
    expect(bundle).toMatch(/oom_dump_\d{8}T\d{6}Z_\d+_cuda_1$/);
    expect(readdirSync(bundle).sort()).toEqual([
      "environment.json",
      "events.json",
      "manifest.json",
      "metadata.json",
    ]);
    const manifest = JSON.parse(readFileSync(join(bundle, "manifest.json"), "utf8"));
    expect(manifest).toMatchObject({
      schema_version: 2,
      reason: "message_pattern:out of memory",
      backend: "cuda",
      session_id: tracker.getSessionSummary()?.session_id,
      session_status: "running",
      files: ["manifest.json", "events.json", "metadata.json", "environment.json"],
    });
    expect(manifest.created_at_utc).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
    const metadata = JSON.parse(readFileSync(join(bundle, "metadata.json"), "utf8"));
    expect(metadata).toMatchObject({
      reason: "message_pattern:out of memory",
      exception_type: "Error",
      exception_message: "CUDA out of memory",
      context: "train_step",
      captured_event_count: 4,
    });
    expect(metadata.custom_metadata).toMatchObject({
      step: 12,
      sample_allocated_bytes: 1000,
      sample_device_id: 0,
    });
    expect(metadata.custom_metadata.tracker_stats.peak_memory).toBe(1000);
    const events = JSON.parse(readFileSync(join(bundle, "events.json"), "utf8"));
    expect(events.map((e: { event_type: string }) => e.event_type)).toEqual([
      "start",
      "peak",
      "sample",
      "error",
    ]);
    expect(Object.keys(events[2])).toEqual([
      "timestamp",
      "event_type",
      "session_id",
      "memory_allocated",
      "memory_reserved",
      "memory_change",
      "device_id",
      "context",
      "job_id",
      "rank",
      "local_rank",
      "world_size",
      "metadata",
      "active_memory",
      "inactive_memory",
      "device_used",
      "device_free",
      "device_total",
      "backend",
    ]);
    expect(dumpDir).toBe(join(bundle, ".."));
  });

  it("handles rejected promises and ignores errors that are not OOMs", async () => {
    const { tracker } = oomTracker();
    await tracker.start();
    await expect(
      tracker.captureOOM(async () => Promise.reject(new Error("resource exhausted"))),
    ).rejects.toThrow("resource exhausted");
    expect(tracker.getStatistics().lastOomDumpPath).not.toBeNull();
    expect(tracker.handleError(new Error("bad shape"))).toBeNull();
    expect(tracker.captureOOM(() => 5)).toBe(5);
  });

  it("keeps the newest bundles and a bounded ring", async () => {
    const { tracker, dumpDir } = oomTracker({ maxDumps: 2, bufferSize: 3 });
    await tracker.start();
    for (let i = 0; i < 4; i++) await tracker.sampleNow();
    const paths = [0, 1, 2].map(() => tracker.handleError(new Error("out of memory")) as string);
    const kept = readdirSync(dumpDir).sort();
    expect(kept).toHaveLength(2);
    expect(existsSync(paths[0] as string)).toBe(false);
    expect(existsSync(paths[2] as string)).toBe(true);
    const events = JSON.parse(readFileSync(join(paths[2] as string, "events.json"), "utf8"));
    expect(events).toHaveLength(3);
    expect(tracker.oomBufferSize).toBe(3);
  });

  it("records the event but writes nothing when the recorder is disabled", async () => {
    const { tracker } = makeTracker([new SequencedCollector([full(reading({ allocated: 1, reserved: 1 }))])]);
    await tracker.start();
    expect(tracker.handleError(new Error("out of memory"))).toBeNull();
    expect(tracker.getEvents({ eventType: "error" })).toHaveLength(1);
    expect(tracker.getStatistics().oomFlightRecorderEnabled).toBe(false);
  });
});
