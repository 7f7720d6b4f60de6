import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { childProcessCollector } from "../src/index.js";
import { tempDir } from "./helpers.js";

let dir: ReturnType<typeof tempDir>;
beforeEach(() => {
  dir = tempDir("stormlog-proc-");
});
afterEach(() => dir.remove());

/** A fake /proc entry: status with VmRSS/VmHWM (kB) and, optionally, children per task. */
function proc(pid: number, rssKb: number, hwmKb: number, children: number[] | null, tasks = [pid]): void {
  const base = join(dir.path, String(pid));
  mkdirSync(base, { recursive: true });
  writeFileSync(
    join(base, "status"),
    `Name:\tnode\nState:\tS (sleeping)\nVmHWM:\t${hwmKb} kB\nVmRSS:\t${rssKb} kB\n`,
  );
  for (const task of tasks) {
    mkdirSync(join(base, "task", String(task)), { recursive: true });
    if (children !== null) {
      const mine = task === tasks[0] ? children : [];
      writeFileSync(join(base, "task", String(task), "children"), mine.map((child) => `${child} `).join(""));
    }
  }
}

describe("childProcessCollector", () => {
  it("sums the resident memory of the process tree and keeps the root's peak", () => {
    proc(100, 1000, 5000, [101, 102], [100, 105]);
    proc(101, 200, 200, [103]);
    proc(102, 30, 30, []);
    proc(103, 4, 4, []);
    const collector = childProcessCollector({ procRoot: dir.path });
    expect(collector.availability()).toMatchObject({ available: false });
    collector.attach(100);
    expect(collector.availability()).toEqual({ available: true });
    const result = collector.sample();
    expect(result).toMatchObject({
      kind: "full",
      reading: { allocator_allocated_bytes: 1234 * 1024, allocator_reserved_bytes: 1234 * 1024 },
      metadata: {
        tracked_pid: 100,
        process_count: 4,
        rss_scope: "process_tree",
        root_rss_peak_bytes: 5000 * 1024,
      },
    });
    expect(collector.peakRssBytes).toBe(5000 * 1024);
  });

  it("reads the root alone when the kernel has no children files, or when asked", () => {
    proc(200, 1000, 1000, null);
    const collector = childProcessCollector({ procRoot: dir.path });
    collector.attach(200);
    expect(collector.sample()).toMatchObject({
      reading: { allocator_allocated_bytes: 1000 * 1024 },
      metadata: { rss_scope: "process" },
    });
    proc(300, 10, 10, [301]);
    proc(301, 90, 90, []);
    const rootOnly = childProcessCollector({ procRoot: dir.path, descendants: false });
    rootOnly.attach(300);
    expect(rootOnly.sample()).toMatchObject({ reading: { allocator_allocated_bytes: 10 * 1024 } });
  });

  it("fails (never reports zeros) once the process is gone, after its exit was handled", async () => {
    proc(400, 10, 10, []);
    let handled: () => void = () => undefined;
    const exited = new Promise<void>((resolve) => {
      handled = resolve;
    });
    const collector = childProcessCollector({ procRoot: dir.path, exited });
    collector.attach(400);
    expect(collector.sample()).toMatchObject({ kind: "full" });
    rmSync(join(dir.path, "400"), { recursive: true });
    const pending = collector.sample();
    expect(pending).toBeInstanceOf(Promise);
    let settled = false;
    void (pending as Promise<unknown>).then(() => {
      settled = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(settled).toBe(false);
    handled();
    expect(await pending).toEqual({ kind: "failure", error: "process 400 has exited" });
  });

  it("is unavailable without procfs", () => {
    const collector = childProcessCollector({ procRoot: join(dir.path, "no-proc") });
    collector.attach(1);
    const availability = collector.availability();
    expect(availability.available).toBe(false);
    expect(availability.available === false && availability.reason).toMatch(/needs Linux procfs/);
  });
});

describe("childProcessCollector's high-water mark (VmHWM between samples)", () => {
  it("reports the root's peak when it rose between two samples above both of theirs", () => {
    proc(300, 1000, 1000, []);
    const collector = childProcessCollector({ procRoot: dir.path });
    collector.attach(300);
    collector.sample();
    expect(collector.takeHighWater()).toBeNull();
    // A spike to 9000 kB between the samples, gone by the next one.
    proc(300, 1200, 9000, []);
    collector.sample();
    expect(collector.takeHighWater()).toEqual({
      allocator_allocated_bytes: 9000 * 1024,
      allocator_reserved_bytes: 9000 * 1024,
    });
    // Once: the next window starts at that peak.
    collector.sample();
    expect(collector.takeHighWater()).toBeNull();
  });

  it("reports nothing for a rise that stays, a spike below an earlier peak, or a tree of processes", () => {
    proc(400, 1000, 5000, []);
    const collector = childProcessCollector({ procRoot: dir.path });
    collector.attach(400);
    collector.sample();
    collector.takeHighWater();
    // Rose and stayed: the sample shows it.
    proc(400, 6000, 6000, []);
    collector.sample();
    expect(collector.takeHighWater()).toBeNull();
    // Below the lifetime peak: VmHWM does not move.
    proc(400, 1000, 6000, []);
    collector.sample();
    expect(collector.takeHighWater()).toBeNull();
    // With a child, the root's peak is not the tree's.
    proc(400, 1000, 9000, [401]);
    proc(401, 500, 500, []);
    collector.sample();
    expect(collector.takeHighWater()).toBeNull();
  });
});
