import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COLLECTOR_SPECIFICATION_VERSION, InvalidConfigError, type SampleResult } from "@stormlog/core";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  detectPageSize,
  PROCESS_COLLECTOR_NAME,
  processCollector,
} from "../../src/collectors/process-collector.js";

function full(result: SampleResult) {
  if (result.kind !== "full") throw new Error(`expected a full sample, got ${JSON.stringify(result)}`);
  return result;
}

const hasProcfs = existsSync("/proc/self/statm");

describe("processCollector", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "stormlog-process-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("declares the reference's CPU mode: cpu_tracker, device -1, RSS as allocated and reserved", () => {
    const collector = processCollector();
    expect(collector.specificationVersion).toBe(COLLECTOR_SPECIFICATION_VERSION);
    expect(collector.name).toBe(PROCESS_COLLECTOR_NAME);
    expect(collector.name).toBe("stormlog.cpu_tracker");
    expect(collector.deviceId).toBe(-1);
    expect(collector.capabilities).toMatchObject({
      backend: "cpu",
      telemetry_collector: "stormlog.cpu_tracker",
      supports_allocator_allocated: true,
      supports_allocator_reserved: true,
      supports_allocator_active: false,
      supports_allocator_inactive: false,
      supports_device_used: false,
      supports_device_free: false,
      supports_device_total: false,
    });
    expect(collector.availability()).toEqual({ available: true });
    expect(collector.readSync).toBeUndefined();
    collector.close();
  });

  it.runIf(hasProcfs)("reads RSS from /proc/self/statm close to process.memoryUsage.rss()", () => {
    const collector = processCollector();
    expect(collector.capabilities.sampling_source).toBe("procfs_statm");
    const result = full(collector.sample());
    const rss = process.memoryUsage.rss();
    const allocated = result.reading.allocator_allocated_bytes!;
    expect(allocated).toBe(result.reading.allocator_reserved_bytes);
    expect(allocated % 4096).toBe(0);
    expect(Math.abs(allocated - rss) / rss).toBeLessThan(0.2);
    expect(result.metadata).toMatchObject({ rss_bytes: allocated, rss_source: "procfs_statm" });
    collector.close();
  });

  it.runIf(hasProcfs)("follows RSS growth when the process touches new memory", () => {
    const collector = processCollector();
    const before = full(collector.sample()).reading.allocator_allocated_bytes!;
    const block = Buffer.alloc(64 * 1024 * 1024, 1);
    const after = full(collector.sample()).reading.allocator_allocated_bytes!;
    expect(block[block.length - 1]).toBe(1);
    expect(after - before).toBeGreaterThan(48 * 1024 * 1024);
    collector.close();
  });

  it("reports the V8 heap and external memory on every sample, array buffers every Nth", () => {
    const collector = processCollector({ arrayBuffersEveryN: 3 });
    const metas = [0, 1, 2, 3, 4].map(() => full(collector.sample()).metadata!);
    for (const meta of metas) {
      expect(meta.v8_heap_used_bytes).toBeGreaterThan(0);
      expect(meta.v8_heap_total_bytes as number).toBeGreaterThanOrEqual(meta.v8_heap_used_bytes as number);
      expect(typeof meta.v8_external_bytes).toBe("number");
    }
    expect(metas.map((m) => "v8_array_buffers_bytes" in m)).toEqual([true, false, false, true, false]);
    expect(metas[0]!.v8_array_buffers_bytes).toBeGreaterThanOrEqual(0);
    collector.close();
  });

  it("never reads array buffers when arrayBuffersEveryN is 0", () => {
    const collector = processCollector({ arrayBuffersEveryN: 0 });
    expect(full(collector.sample()).metadata).not.toHaveProperty("v8_array_buffers_bytes");
    collector.close();
  });

  it("uses process.memoryUsage.rss() when procfs is off", () => {
    const collector = processCollector({ procfs: false });
    expect(collector.capabilities.sampling_source).toBe("process.memoryUsage");
    const result = full(collector.sample());
    expect(result.metadata?.rss_source).toBe("process.memoryUsage");
    expect(result.reading.allocator_allocated_bytes).toBeGreaterThan(1024 * 1024);
    collector.close();
  });

  it("multiplies the resident pages of statm by the page size it is given", () => {
    const path = join(dir, "statm");
    writeFileSync(path, "100000 2500 300 40 0 5000 0\n");
    const collector = processCollector({ statmPath: path, pageSize: 16384 });
    const result = full(collector.sample());
    expect(result.reading.allocator_allocated_bytes).toBe(2500 * 16384);
    expect(result.reading.allocator_reserved_bytes).toBe(2500 * 16384);
    writeFileSync(path, "100000 7 300 40 0 5000 0\n");
    expect(full(collector.sample()).reading.allocator_allocated_bytes).toBe(7 * 16384);
    collector.close();
  });

  it("falls back to process.memoryUsage.rss() when statm cannot be parsed", () => {
    const path = join(dir, "statm");
    writeFileSync(path, "garbage\n");
    const collector = processCollector({ statmPath: path });
    expect(collector.capabilities.sampling_source).toBe("process.memoryUsage");
    const result = full(collector.sample());
    expect(result.metadata?.rss_source).toBe("process.memoryUsage");
    expect(result.reading.allocator_allocated_bytes).toBeGreaterThan(1024 * 1024);
    collector.close();
  });

  it("switches to process.memoryUsage.rss() when statm goes bad mid-run", () => {
    const path = join(dir, "statm");
    writeFileSync(path, "100000 2500 300 40 0 5000 0\n");
    const collector = processCollector({ statmPath: path, pageSize: 4096 });
    expect(full(collector.sample()).reading.allocator_allocated_bytes).toBe(2500 * 4096);
    writeFileSync(path, "\n");
    const result = full(collector.sample());
    expect(result.metadata?.rss_source).toBe("process.memoryUsage");
    expect(result.reading.allocator_allocated_bytes).not.toBe(2500 * 4096);
    collector.close();
  });

  it("reports a failure, not zeros, once closed", () => {
    const collector = processCollector();
    collector.close();
    collector.close();
    expect(collector.sample()).toMatchObject({ kind: "failure" });
    expect(collector.availability()).toMatchObject({ available: false });
  });

  it("rejects invalid options with InvalidConfigError", () => {
    expect(() => processCollector({ arrayBuffersEveryN: -1 })).toThrow(InvalidConfigError);
    expect(() => processCollector({ pageSize: 0 })).toThrow(/pageSize/);
  });
});

describe("detectPageSize", () => {
  it("snaps the RSS / pages ratio to a Linux page size", () => {
    expect(detectPageSize(1000, 4096 * 1000)).toBe(4096);
    expect(detectPageSize(1000, 4096 * 1003)).toBe(4096);
    expect(detectPageSize(1000, 16384 * 1000 + 50_000)).toBe(16384);
    expect(detectPageSize(1000, 65536 * 990)).toBe(65536);
  });

  it("defaults to 4096 when either reading is unusable", () => {
    expect(detectPageSize(0, 1_000_000)).toBe(4096);
    expect(detectPageSize(100, 0)).toBe(4096);
  });
});
