// A new user's first run, as the README tells it, outside this workspace: the packages packed into
// tarballs, installed into a fresh npm project with TensorFlow.js and tsx, the Quick start run there,
// and `npx stormlog analyze` on the sink it wrote. Then `check:packages`: every tarball within its size
// budget, with its LICENSE and metadata. Needs the packages built (CI builds before it tests) and the
// npm registry (for @tensorflow/tfjs and tsx).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const repo = resolve(import.meta.dirname, "../..");
const readme = readFileSync(join(repo, "README.md"), "utf8");
const made: string[] = [];
/** The packages the repository publishes: every packages/<name> that is not private. */
const PUBLISHED = readdirSync(join(repo, "packages")).filter((name) => {
  const manifest = join(repo, "packages", name, "package.json");
  return (
    existsSync(manifest) &&
    (JSON.parse(readFileSync(manifest, "utf8")) as { private?: boolean }).private !== true
  );
}).length;
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** The README's fenced blocks under the `## heading` section, in order, with their language. */
function sectionBlocks(heading: string): { language: string; code: string }[] {
  const start = readme.indexOf(`\n## ${heading}\n`);
  expect(start, `the README has a "## ${heading}" section`).toBeGreaterThanOrEqual(0);
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    language: m[1] ?? "",
    code: m[2] ?? "",
  }));
}

// npm as a user's, without its noise; a clean environment (no source condition, no test loaders).
const { NODE_OPTIONS: _options, VITEST: _vitest, ...inherited } = process.env;
/** Each test packs and installs with npm: ~20-30 s on this VM, longer on a loaded one (the commands keep their own limits). */
const INSTALL_TEST_TIMEOUT_MS = 900_000;

function run(command: string, cwd: string, home: string, timeoutMs = 300_000) {
  const result = spawnSync("bash", ["-euo", "pipefail", "-c", command], {
    cwd,
    encoding: "utf8",
    timeout: timeoutMs,
    env: {
      ...inherited,
      HOME: home,
      npm_config_audit: "false",
      npm_config_fund: "false",
      npm_config_update_notifier: "false",
      npm_config_loglevel: "error",
      npm_config_cache: join(inherited.HOME ?? tmpdir(), ".npm"),
      NO_COLOR: "1",
      TURBO_TELEMETRY_DISABLED: "1",
    },
  });
  const output = `${result.stdout ?? ""}${result.stderr ?? ""}`;
  expect(result.status, `\`${command}\` in ${cwd} failed:\n${output.slice(-4000)}`).toBe(0);
  return output;
}

describe("a new user's first run, from the README", () => {
  it("packs, installs into a fresh project, runs the Quick start and analyzes its sink", {
    timeout: INSTALL_TEST_TIMEOUT_MS,
  }, () => {
    expect(
      existsSync(join(repo, "packages/tracker/dist/index.js")),
      "build the packages first (pnpm build)",
    ).toBe(true);
    const home = mkdtempSync(join(tmpdir(), "stormlog-user-home-"));
    const project = mkdtempSync(join(tmpdir(), "stormlog-user-project-"));
    made.push(home, project);

    // Install: the first block packs from the clone (its setup-and-build line is what CI ran already),
    // the second installs into the project.
    const [pack, install] = sectionBlocks("Install").filter((block) => block.language === "sh");
    const packLines = (pack?.code ?? "").split("\n").filter((line) => line.trim() !== "");
    expect(packLines[0]).toMatch(/^bash scripts\/setup\.sh && pnpm build$/);
    run(packLines.slice(1).join("\n"), repo, home, 600_000);
    const tarballs = readdirSync(join(home, "stormlog-tarballs"));
    expect(tarballs.filter((name) => name.endsWith(".tgz"))).toHaveLength(PUBLISHED);
    run("npm init -y >/dev/null", project, home);
    run(install?.code ?? "", project, home, 600_000);

    // Quick start: saved as train.mts and run with npx tsx, as the README says.
    const [quickStart] = sectionBlocks("Quick start").filter((block) => block.language === "ts");
    expect(readme).toContain("Save it as `train.mts` and run `npx tsx train.mts`");
    writeFileSync(join(project, "train.mts"), quickStart?.code ?? "");
    run("npx tsx train.mts", project, home);

    const analysis = run("npx stormlog analyze ./stormlog-sink", project, home);
    expect(analysis).toContain(`Input directory: ${join(project, "stormlog-sink")}`);
    expect(analysis).toMatch(/Telemetry session selected: \S+ \(completed, started \d{4}-\d\d-\d\dT/);
    // Its phases, occurrence for occurrence (ten batches of the Quick start).
    expect(analysis).toMatch(/^ {2}train_on_batch +10 /m);
    expect(analysis).toMatch(/^ {2}log +10 /m);
    // tfjs alone on the CPU: its figures are tfjs's, not the process's resident memory.
    expect(analysis).toMatch(/^ {2}Peak allocated +\S+ \S+ {2}rank 0, /m);
    expect(analysis).not.toContain("RSS");

    // The page the README names next, from the installed packages (uPlot read from the report's own install).
    const report = run("npx stormlog report ./stormlog-sink -o report.html", project, home);
    expect(report).toContain(join(project, "report.html"));
    const page = readFileSync(join(project, "report.html"), "utf8");
    expect(page).toContain("train_on_batch");
    expect(page).toMatch(/uPlot/);
  });

  it("keeps every tarball and its install within budget, with its LICENSE and metadata (check:packages)", {
    timeout: INSTALL_TEST_TIMEOUT_MS,
  }, () => {
    const home = mkdtempSync(join(tmpdir(), "stormlog-user-home-"));
    made.push(home);
    const output = run("node scripts/check-packages.mjs --skip-build", repo, home, 600_000);
    expect(output).toMatch(
      new RegExp(
        `${PUBLISHED} package\\(s\\) pass publint, attw, import, require, bin, LICENSE, metadata and size checks`,
      ),
    );
  });
});
