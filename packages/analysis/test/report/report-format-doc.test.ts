import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseJson } from "@stormlog/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderTelemetryAnalysis } from "../../src/index.js";
import { trackedJob } from "../support/tracked-job.js";

// docs/report-format.md: its JavaScript and Python blocks run as written, in a folder holding the
// report.json of a tracked job and the node_modules an installed @stormlog/analysis and ajv would give.
const PACKAGES = join(import.meta.dirname, "../../..");
const DOC = readFileSync(join(PACKAGES, "../docs/report-format.md"), "utf8");
const blocks = [...DOC.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((match) => ({
  lang: match[1]!,
  code: match[2]!,
}));
const require = createRequire(import.meta.url);
const TSX = pathToFileURL(require.resolve("tsx")).href;

/** Whether this Node.js passes JSON.parse revivers the source text without a flag (V8 11.4+). */
let revivesSource = false;
JSON.parse("1", (_key, value, context?: { source?: string }) => {
  revivesSource = context?.source === "1";
  return value;
});

let dir = "";
let startedAtNs = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-report-doc-"));
  const job = trackedJob();
  try {
    const text = await renderTelemetryAnalysis(job.root, { format: "json", index: false });
    writeFileSync(join(dir, "report.json"), text);
    startedAtNs = String((parseJson(text) as { session: { started_at_ns: bigint } }).session.started_at_ns);
  } finally {
    job.remove();
  }
  mkdirSync(join(dir, "node_modules/@stormlog"), { recursive: true });
  symlinkSync(join(PACKAGES, "analysis"), join(dir, "node_modules/@stormlog/analysis"));
  symlinkSync(join(PACKAGES, "core"), join(dir, "node_modules/@stormlog/core"));
  symlinkSync(dirname(require.resolve("ajv/package.json")), join(dir, "node_modules/ajv"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs a JavaScript block as an ES module in `dir`, with the workspace's TypeScript sources. */
function runJs(code: string, flags: readonly string[] = []) {
  return spawnSync(
    process.execPath,
    ["--conditions=@stormlog/source", "--import", TSX, ...flags, "--input-type=module", "--eval", code],
    { cwd: dir, encoding: "utf8", timeout: 60_000 },
  );
}

const sourceFlag = revivesSource ? [] : ["--harmony-json-parse-with-source"];
const js = blocks.filter((block) => block.lang === "js").map((block) => block.code);
const python = blocks.filter((block) => block.lang === "python").map((block) => block.code);

describe("docs/report-format.md", () => {
  it("marks every code block as js, python (run here) or sh (shell: needs the CLI or jq)", () => {
    expect(new Set(blocks.map((block) => block.lang))).toEqual(new Set(["js", "python", "sh"]));
    expect(js.length).toBeGreaterThanOrEqual(3);
    expect(python.length).toBeGreaterThanOrEqual(1);
  });

  it.each(js)("runs JavaScript block %#", (code) => {
    const run = runJs(code, sourceFlag);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(run.stdout.trim()).not.toBe("");
    // A block that reads a timestamp prints it exactly, where JSON.parse would print 1760000000123456800.
    if (code.includes("started_at_ns")) expect(run.stdout).toContain(`started_at_ns ${startedAtNs}`);
  });

  it("its JavaScript blocks read the timestamp in full (it is not a double)", () => {
    expect(BigInt(Number(startedAtNs))).not.toBe(BigInt(startedAtNs));
    expect(js.filter((code) => code.includes("started_at_ns"))).toHaveLength(2);
  });

  it("the reviver block refuses to run where JSON.parse passes no source text, as it says", () => {
    const reviver = js.find((code) => code.includes("context.source"));
    expect(reviver).toBeDefined();
    const run = runJs(reviver!);
    if (revivesSource) expect(run.stdout).toContain(`started_at_ns ${startedAtNs}`);
    else {
      expect(run.status).not.toBe(0);
      expect(run.stderr).toContain("gives JSON.parse revivers no source text");
    }
  });

  it.each(python)("runs the Python block %#", (code) => {
    const run = spawnSync("python3", ["-c", code], { cwd: dir, encoding: "utf8", timeout: 60_000 });
    if (run.error)
      throw new Error(`python3 is needed (bash scripts/setup.sh installs it): ${run.error.message}`);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(run.stdout).toContain(`started_at_ns ${startedAtNs}`);
  });
});
