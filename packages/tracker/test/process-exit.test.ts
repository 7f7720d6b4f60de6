import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadTelemetrySessions } from "@stormlog/sink";
import { afterEach, describe, expect, it } from "vitest";

const here = dirname(fileURLToPath(import.meta.url));
const child = join(here, "fixtures", "exit-child.ts");
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function run(mode: "signal" | "exit" | "natural" | "exit-burst", sinkThread: "worker" | "main") {
  const root = join(mkdtempSync(join(tmpdir(), "stormlog-exit-")), "sink");
  dirs.push(dirname(root));
  const result = spawnSync(
    process.execPath,
    ["--conditions=@stormlog/source", "--import", "tsx", child, root, mode, sinkThread],
    {
      encoding: "utf8",
      timeout: 30_000,
    },
  );
  return { root, result };
}

describe("process end", () => {
  it.each([
    ["natural", "worker", "completed"],
    ["exit", "worker", "completed"],
    ["signal", "worker", "interrupted"],
    ["natural", "main", "completed"],
    ["exit", "main", "completed"],
    ["signal", "main", "interrupted"],
  ] as const)(
    "records stop and closes the sink session on %s end (sink on the %s thread)",
    async (mode, thread, status) => {
      const { root, result } = run(mode, thread);
      if (mode === "signal") expect(result.signal).toBe("SIGTERM");
      else expect(result.status).toBe(0);
      const sessions = await loadTelemetrySessions(root);
      expect(sessions).toHaveLength(1);
      expect(sessions[0]?.summary.status).toBe(status);
      expect(sessions[0]?.events.at(-1)?.event_type).toBe("stop");
      expect(sessions[0]?.events.map((e) => e.event_type)).toContain("phase_exit");
    },
  );

  // The sink's worker holds a burst in its ring beyond its sink's queue (16,384): on exit it writes
  // it a batch at a time. (A sink on the training thread drops beyond its queue, as documented: a
  // loop that never yields never lets it write.)
  it("writes a burst of 60,000 records and stop on process.exit() (sink on the worker thread)", async () => {
    const { root, result } = run("exit-burst", "worker");
    expect(result.status).toBe(0);
    const sessions = await loadTelemetrySessions(root);
    expect(sessions[0]?.summary.status).toBe("completed");
    const events = sessions[0]?.events ?? [];
    expect(events.filter((event) => event.event_type === "phase_exit")).toHaveLength(30_001);
    expect(events.at(-1)?.event_type).toBe("stop");
  });
});
