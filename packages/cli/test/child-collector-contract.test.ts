import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describeCollectorContract } from "@stormlog/core/testing";
import { afterAll, beforeAll, describe, it } from "vitest";
import { type ChildProcessCollector, childProcessCollector } from "../src/index.js";
import { tempDir } from "./helpers.js";

let dir: ReturnType<typeof tempDir>;

/** A fake /proc entry: status with VmRSS/VmHWM (kB) and, unless null, the children of its one task. */
function proc(pid: number, rssKb: number, children: number[] | null): void {
  const base = join(dir.path, String(pid));
  mkdirSync(join(base, "task", String(pid)), { recursive: true });
  writeFileSync(join(base, "status"), `Name:\tnode\nVmHWM:\t${rssKb * 2} kB\nVmRSS:\t${rssKb} kB\n`);
  if (children !== null)
    writeFileSync(join(base, "task", String(pid), "children"), children.map((c) => `${c} `).join(""));
}

beforeAll(() => {
  dir = tempDir("stormlog-contract-proc-");
  proc(100, 1000, [101, 102]);
  proc(101, 200, []);
  proc(102, 30, []);
  proc(200, 500, null);
});
afterAll(() => dir.remove());

function attached(
  pid: number,
  options: Parameters<typeof childProcessCollector>[0] = {},
): ChildProcessCollector {
  const collector = childProcessCollector({ procRoot: dir.path, ...options });
  collector.attach(pid);
  return collector;
}

describeCollectorContract("the CLI's child collector on a process tree", () => attached(100), {
  describe,
  it,
});
describeCollectorContract("the CLI's child collector without children files", () => attached(200), {
  describe,
  it,
});
describeCollectorContract(
  "the CLI's child collector on the root process alone",
  () => attached(100, { descendants: false }),
  {
    describe,
    it,
  },
);
// The real procfs where there is one (Linux); elsewhere the collector must say why it cannot read.
const procfs = existsSync("/proc/self/status");
describeCollectorContract(
  "the CLI's child collector on this process through /proc",
  () => {
    const collector = childProcessCollector();
    collector.attach(process.pid);
    return collector;
  },
  { describe, it, available: procfs, kinds: procfs ? ["full"] : ["failure"] },
);
describeCollectorContract(
  "the CLI's child collector with no process attached",
  () => childProcessCollector({ procRoot: dir.path }),
  {
    describe,
    it,
    available: false,
    kinds: ["failure"],
  },
);
describeCollectorContract("the CLI's child collector on a process that exited", () => attached(300), {
  describe,
  it,
  available: false,
  kinds: ["failure"],
});
