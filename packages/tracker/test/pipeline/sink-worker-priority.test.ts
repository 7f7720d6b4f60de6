import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { temporaryDirectories, trackerWithSink } from "../helpers.js";

const tempDir = temporaryDirectories("stormlog-sink-priority-");

/** A thread's nice value: field 19 of /proc/<pid>/task/<tid>/stat. */
const niceOf = (task: string): number =>
  Number(readFileSync(`/proc/${process.pid}/task/${task}/stat`, "utf8").split(") ")[1]?.split(" ")[16]);
const threads = (): string[] => readdirSync(`/proc/${process.pid}/task`);

// Its own file, so its own process: the sink worker (one a process, kept for later sessions) starts here.
describe("the sink's worker thread", () => {
  it("runs at the process's priority (a lower one starves it where every core is busy)", async () => {
    const before = new Set(threads());
    const { tracker } = trackerWithSink(join(tempDir(), "sink"));
    await tracker.start();
    const started = threads().filter((task) => !before.has(task));
    const nices = started.map(niceOf);
    await tracker.stop();
    // The worker's thread is among them (V8 and libuv may start some of their own too).
    expect(started.length).toBeGreaterThan(0);
    expect(new Set(nices)).toEqual(new Set([niceOf(String(process.pid))]));
  });
});
