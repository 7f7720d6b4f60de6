import { spawn } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import ts from "typescript";
import { afterAll, describe, expect, it } from "vitest";
import { GIVEN, readSessions, sinkDirectories } from "../doc-snippets/support.js";

// Every code block of the documentation in a language that runs is run, type-checked, or marked as partial.
// A TypeScript block is saved as `snippet.mts` in a folder of its own, beside the package.json `npm init` writes
// ("type": "commonjs"), and run with `tsx snippet.mts`, as the README's Quick start tells readers; a
// JavaScript block is saved as `snippet.mjs` (or `.cjs`) and run with node. The blocks import what
// scripts/doc-snippets installs, the workspace's packages included, under the `@stormlog/source` condition (their
// TypeScript sources, through tsx: no build needed). Every TypeScript block not marked partial is also type-checked,
// in one tsc run, with the compiler options of the README's tsconfig.json block.
//
// The marker just before a block (an HTML comment, invisible on the page) says what else to do:
//   <!-- snippet: excerpt (why) -->          partial on purpose (a signature, a loop's body): neither run nor checked
//   <!-- snippet: typecheck (why) -->        type-checked only (it needs a GPU, or a package that cannot install here)
//   <!-- snippet: run with PATH, ... (why) -->  run in a folder that holds PATH (see GIVEN in scripts/doc-snippets)

const REPO = resolve(import.meta.dirname, "../..");
const NODE_MODULES = join(REPO, "scripts/doc-snippets/node_modules");
const TSX_CLI = join(
  NODE_MODULES,
  "tsx",
  JSON.parse(readFileSync(join(NODE_MODULES, "tsx/package.json"), "utf8")).bin,
);
const TSC = join(NODE_MODULES, "typescript/bin/tsc");
const SOURCE = "--conditions=@stormlog/source";
/** A block runs at most this long. */
const RUN_LIMIT_MS = 60_000;
/** The package.json of a fresh project: what `npm init -y` writes, less what does not matter here (CommonJS). */
const FRESH_PROJECT = `${JSON.stringify({ name: "snippet", version: "1.0.0", type: "commonjs" })}\n`;

/** Pages whose blocks another test runs, and that test (which must name the page). */
const RUN_ELSEWHERE: Readonly<Record<string, string>> = {
  "docs/report-format.md": "packages/analysis/test/report/report-format-doc.test.ts",
};

const TYPESCRIPT = new Set(["ts", "typescript", "mts", "cts"]);
const JAVASCRIPT = new Set(["js", "javascript", "mjs", "cjs"]);
/** Languages that run: every block in one is run, type-checked or marked. JSX cannot run as written. */
const RUNNABLE = new Set([...TYPESCRIPT, ...JAVASCRIPT, "jsx", "tsx"]);
/** A file of the tsc run with one type error. */
const CANARY = "canary.mts";
const MARKER = /^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$/;

interface Block {
  page: string;
  /** Line of the opening fence (1-based). */
  line: number;
  lang: string;
  code: string;
  /** The text of a `<!-- snippet: ... -->` comment on the last non-blank line before the fence. */
  marker: string | undefined;
  heading: string;
}

type Mode = "run" | "typecheck" | "excerpt" | "elsewhere";
interface Plan {
  block: Block;
  mode: Mode;
  given: string[];
  /** What is wrong with the block's marker, if anything. */
  problem?: string;
}

function pages(): string[] {
  const inDir = (dir: string, name?: string) =>
    existsSync(join(REPO, dir))
      ? readdirSync(join(REPO, dir), { withFileTypes: true })
          .filter((e) =>
            name ? e.isDirectory() && existsSync(join(REPO, dir, e.name, name)) : e.name.endsWith(".md"),
          )
          .map((e) => (name ? `${dir}/${e.name}/${name}` : `${dir}/${e.name}`))
      : [];
  return [
    "README.md",
    "CONTRIBUTING.md",
    ...inDir("docs"),
    ...inDir("packages", "README.md"),
    ...inDir("examples", "README.md"),
  ]
    .filter((page) => existsSync(join(REPO, page)))
    .sort();
}

function blocksOf(page: string): Block[] {
  const lines = readFileSync(join(REPO, page), "utf8").split("\n");
  const blocks: Block[] = [];
  let heading = "";
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w+-]*)/.exec(line);
    if (!open) {
      if (/^#{1,6}\s/.test(line)) heading = line.replace(/^#+\s*/, "").trim();
      continue;
    }
    const [, indent = "", fence = "", lang = ""] = open;
    let end = i + 1;
    while (
      end < lines.length &&
      !new RegExp(`^\\s*${fence[0]}{${fence.length},}\\s*$`).test(lines[end] ?? "")
    )
      end++;
    let before = i - 1;
    while (before >= 0 && (lines[before] ?? "").trim() === "") before--;
    blocks.push({
      page,
      line: i + 1,
      lang: lang.toLowerCase(),
      code: `${lines
        .slice(i + 1, end)
        .map((l) => l.slice(Math.min(indent.length, l.length - l.trimStart().length)))
        .join("\n")}\n`,
      marker: MARKER.exec(lines[before] ?? "")?.[1],
      heading,
    });
    i = end;
  }
  return blocks;
}

function plan(block: Block): Plan {
  const at = { block, given: [] as string[] };
  if (!RUNNABLE.has(block.lang)) {
    return block.marker === undefined
      ? { ...at, mode: "excerpt" }
      : {
          ...at,
          mode: "excerpt",
          problem: `a snippet marker before a ${block.lang || "plain"} block, which never runs`,
        };
  }
  if (RUN_ELSEWHERE[block.page]) {
    return block.marker === undefined
      ? { ...at, mode: "elsewhere" }
      : {
          ...at,
          mode: "elsewhere",
          problem: `${RUN_ELSEWHERE[block.page]} runs this page's blocks: no marker`,
        };
  }
  if (block.marker === undefined) {
    return ["jsx", "tsx"].includes(block.lang)
      ? {
          ...at,
          mode: "excerpt",
          problem: "JSX does not run as written: mark it <!-- snippet: excerpt (why) -->",
        }
      : { ...at, mode: "run" };
  }
  const m = /^(excerpt|typecheck|run with ([^()]+?))\s*\((.*\S.*)\)$/.exec(block.marker);
  if (!m) {
    return {
      ...at,
      mode: "excerpt",
      problem: `unknown marker "${block.marker}": use excerpt (why), typecheck (why) or run with PATH (why)`,
    };
  }
  if (m[1] === "excerpt") return { ...at, mode: "excerpt" };
  if (m[1] === "typecheck") {
    return TYPESCRIPT.has(block.lang)
      ? { ...at, mode: "typecheck" }
      : { ...at, mode: "typecheck", problem: "only TypeScript blocks can be type-checked" };
  }
  const given = (m[2] ?? "").split(",").map((path) => path.trim());
  const unknown = given.filter((path) => !GIVEN[path]);
  return unknown.length === 0
    ? { block, mode: "run", given }
    : {
        block,
        mode: "run",
        given,
        problem: `nothing gives ${unknown.join(", ")}: add it to GIVEN (scripts/doc-snippets)`,
      };
}

const PAGES = pages();
const PLANS = PAGES.flatMap(blocksOf).map(plan);
const where = (block: Block) => `${block.page}:${block.line}`;
const planned = (mode: Mode) => PLANS.filter((p) => p.mode === mode && RUNNABLE.has(p.block.lang));
const QUICK_START = PLANS.find(
  (p) => p.block.page === "README.md" && p.block.heading === "Quick start" && p.mode === "run",
);

/** The README's tsconfig.json block: what a reader compiles the blocks with. */
function readmeCompilerOptions(): Record<string, unknown> {
  const block = PLANS.map((p) => p.block).find(
    (b) => b.page === "README.md" && b.lang === "json" && b.code.includes('"compilerOptions"'),
  );
  if (!block) throw new Error("README.md has no tsconfig.json block (```json with compilerOptions)");
  return JSON.parse(block.code).compilerOptions;
}

const WORK = mkdtempSync(join(tmpdir(), "stormlog-doc-snippets-"));
afterAll(() => rmSync(WORK, { recursive: true, force: true }));

/** A folder of its own, set up as a fresh project that has installed what the blocks import. */
function project(name: string, packageJson = FRESH_PROJECT): string {
  const dir = mkdtempSync(join(WORK, `${name.replace(/[^\w.-]+/g, "-")}-`));
  symlinkSync(NODE_MODULES, join(dir, "node_modules"), "dir");
  writeFileSync(join(dir, "package.json"), packageJson);
  return dir;
}

// The machine is shared with the other test files: at most one child per core at a time.
let running = 0;
const waiting: (() => void)[] = [];
const SLOTS = Math.max(2, availableParallelism());
async function slot<T>(job: () => Promise<T>): Promise<T> {
  if (running >= SLOTS) await new Promise<void>((go) => waiting.push(go));
  running++;
  try {
    return await job();
  } finally {
    running--;
    waiting.shift()?.();
  }
}

interface Exit {
  code: number | null;
  signal: string | null;
  output: string;
  timedOut: boolean;
}
const ENV: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
delete ENV.NODE_OPTIONS;

/** Runs a command in `cwd`, killing its whole process group (tsx starts a child) after RUN_LIMIT_MS. */
function exec(args: string[], cwd: string): Promise<Exit> {
  return slot(
    () =>
      new Promise((done) => {
        const child = spawn(process.execPath, args, {
          cwd,
          env: ENV,
          detached: true,
          stdio: ["ignore", "pipe", "pipe"],
        });
        let output = "";
        child.stdout.on("data", (chunk) => (output += chunk));
        child.stderr.on("data", (chunk) => (output += chunk));
        let timedOut = false;
        const timer = setTimeout(() => {
          timedOut = true;
          if (child.pid) process.kill(-child.pid, "SIGKILL");
        }, RUN_LIMIT_MS);
        child.on("close", (code, signal) => {
          clearTimeout(timer);
          done({ code, signal, output, timedOut });
        });
      }),
  );
}

function describeExit(exit: Exit, what: string): string {
  const how = exit.timedOut
    ? `still running after ${RUN_LIMIT_MS / 1000} s`
    : `exit ${exit.code ?? exit.signal}`;
  return `${what}: ${how}\n${exit.output.slice(-4000)}`;
}

/** Checks that the sinks a block wrote, if any, hold only completed sessions with events. */
async function expectReadableSinks(dir: string, code: string, given: readonly string[]): Promise<void> {
  const sinks = sinkDirectories(
    dir,
    given.map((path) => join(dir, path)),
  );
  // A block that gives a sink its directory (`rootDir`, in every API) and then closes it must leave one.
  if (/\brootDir\b/.test(code) && /\.(stop|close)\(\)|await using/.test(code)) {
    expect(sinks, "the block writes a sink").not.toEqual([]);
  }
  for (const sink of sinks) {
    const sessions = await readSessions(sink);
    expect(sessions.length, relative(dir, sink)).toBeGreaterThan(0);
    for (const session of sessions) {
      expect(session.summary.status, `${relative(dir, sink)}: ${session.summary.session_id}`).toBe(
        "completed",
      );
      expect(session.eventCount).toBeGreaterThan(0);
    }
  }
}

const extension = (lang: string) =>
  TYPESCRIPT.has(lang) ? (lang === "cts" ? ".cts" : ".mts") : lang === "cjs" ? ".cjs" : ".mjs";

/** Runs a block as its page tells readers to: TypeScript with tsx, JavaScript with node. */
async function runBlock(
  block: Block,
  given: readonly string[],
  file = `snippet${extension(block.lang)}`,
  packageJson?: string,
) {
  const dir = project(`${block.page}-${block.line}`, packageJson);
  for (const path of given) GIVEN[path]?.(join(dir, path));
  writeFileSync(join(dir, file), block.code);
  const args = TYPESCRIPT.has(block.lang) ? [TSX_CLI, SOURCE, file] : [SOURCE, "--import", "tsx", file];
  const exit = await exec(args, dir);
  expect(exit.code, describeExit(exit, `${where(block)} (${file})`)).toBe(0);
  await expectReadableSinks(dir, block.code, given);
}

describe("documentation code blocks", () => {
  it("every block in a language that runs is run, type-checked or marked with a reason", () => {
    const problems = PLANS.filter((p) => p.problem).map((p) => `${where(p.block)}: ${p.problem}`);
    // A marker must sit right before a block.
    for (const page of PAGES) {
      const lines = readFileSync(join(REPO, page), "utf8").split("\n");
      lines.forEach((line, i) => {
        if (!MARKER.test(line)) return;
        const next = lines.slice(i + 1).find((l) => l.trim() !== "");
        if (!next || !/^\s*(```|~~~)/.test(next))
          problems.push(`${page}:${i + 1}: a snippet marker not followed by a block`);
      });
    }
    expect(problems).toEqual([]);
    expect(planned("run").length).toBeGreaterThan(10);
    expect(QUICK_START, "README.md's Quick start block").toBeDefined();
  });

  it.each(Object.entries(RUN_ELSEWHERE).filter(([page]) => existsSync(join(REPO, page))))(
    "%s: its blocks are run by %s",
    (page, test) => {
      expect(existsSync(join(REPO, test)), test).toBe(true);
      expect(readFileSync(join(REPO, test), "utf8")).toContain(page.split("/").pop());
    },
  );

  it("pages whose TypeScript blocks run say how to run them", () => {
    const silent = [...new Set(planned("run").map((p) => p.block.page))].filter(
      (page) => !readFileSync(join(REPO, page), "utf8").includes("npx tsx"),
    );
    expect(silent).toEqual([]);
  });

  // Queued behind SLOTS, a test may wait for others before its own RUN_LIMIT_MS starts.
  describe.concurrent("runs", { timeout: 240_000 }, () => {
    it.for(planned("run").map((p) => ({ ...p, name: where(p.block) })))("$name", async ({ block, given }) => {
      await runBlock(block, given);
    });

    it('the Quick start, saved as train.ts in a package with "type": "module"', async () => {
      if (!QUICK_START) throw new Error("README.md has no Quick start block");
      await runBlock(
        QUICK_START.block,
        [],
        "train.ts",
        `${JSON.stringify({ name: "train", type: "module" })}\n`,
      );
    });

    it("the Quick start fails as train.ts in a fresh (CommonJS) project, as the README says", async () => {
      if (!QUICK_START) throw new Error("README.md has no Quick start block");
      const dir = project("quick-start-cjs");
      writeFileSync(join(dir, "train.ts"), QUICK_START.block.code);
      const exit = await exec([TSX_CLI, SOURCE, "train.ts"], dir);
      expect(exit.code).not.toBe(0);
      expect(exit.output).toContain(
        'Top-level await is currently not supported with the "cjs" output format',
      );
    });

    it("the Quick start compiled by TypeScript with the README's options: `using` downlevelled, run by Node", async () => {
      if (!QUICK_START) throw new Error("README.md has no Quick start block");
      const dir = project("quick-start-tsc");
      const { options, errors } = ts.convertCompilerOptionsFromJson(readmeCompilerOptions(), dir);
      expect(errors.map((e) => ts.flattenDiagnosticMessageText(e.messageText, "\n"))).toEqual([]);
      const js = ts.transpileModule(QUICK_START.block.code, {
        compilerOptions: options,
        fileName: "train.mts",
      }).outputText;
      expect(QUICK_START.block.code).toMatch(/^\s*using \w+ =/m);
      expect(js).not.toMatch(/^\s*(await\s+)?using \w+ =/m);
      // Node 20 cannot parse `using` (the block has no other TypeScript syntax), but parses the output without a loader;
      // running it needs tsx only for the workspace's TypeScript sources.
      writeFileSync(join(dir, "train.mjs"), QUICK_START.block.code);
      const raw = await exec(["--check", "train.mjs"], dir);
      expect(raw.output).toContain("SyntaxError: Unexpected identifier 'scope'");
      writeFileSync(join(dir, "train.mjs"), js);
      const check = await exec(["--check", "train.mjs"], dir);
      expect(check.code, describeExit(check, "node --check train.mjs")).toBe(0);
      const exit = await exec([SOURCE, "--import", "tsx", "train.mjs"], dir);
      expect(exit.code, describeExit(exit, "node train.mjs")).toBe(0);
      await expectReadableSinks(dir, QUICK_START.block.code, []);
    });

    it("type-checks every TypeScript block that is not an excerpt, in one tsc run", async () => {
      const checked = PLANS.filter(
        (p) => (p.mode === "run" || p.mode === "typecheck") && TYPESCRIPT.has(p.block.lang),
      );
      expect(planned("typecheck").length).toBeGreaterThan(0);
      const dir = project("typecheck");
      const files = new Map<string, Block>();
      checked.forEach(({ block }, i) => {
        const file = `${String(i).padStart(2, "0")}-${block.page.replace(/\W+/g, "-")}-${block.line}${extension(block.lang)}`;
        files.set(file, block);
        writeFileSync(join(dir, file), block.code);
      });
      // tfjs-node-gpu cannot install here; its API is tfjs's (it re-exports @tensorflow/tfjs).
      writeFileSync(join(dir, CANARY), 'export const wrong: number = "1";\n');
      writeFileSync(
        join(dir, "shims.d.ts"),
        'declare module "@tensorflow/tfjs-node-gpu" {\n  export * from "@tensorflow/tfjs";\n}\n',
      );
      const tsconfig = {
        compilerOptions: { ...readmeCompilerOptions(), noEmit: true, customConditions: ["@stormlog/source"] },
        files: ["shims.d.ts", CANARY, ...files.keys()],
      };
      writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(tsconfig, null, 2));
      const exit = await exec([TSC, "-p", ".", "--pretty", "false"], dir);
      expect(exit.timedOut, describeExit(exit, "tsc")).toBe(false);
      // Errors in the blocks, at their lines in the pages, and errors of no file (the options). The packages' own
      // sources are checked by `pnpm typecheck` with their own settings; readers compile against their declarations.
      const errors: string[] = [];
      for (const line of exit.output.split("\n")) {
        const m = /^([^(\s]+)\((\d+),(\d+)\): (error .*)$/.exec(line);
        if (!m) {
          if (line.startsWith("error")) errors.push(line);
          continue;
        }
        const [, file = "", row = "0", column, message] = m;
        const block = files.get(file);
        if (block) errors.push(`${where({ ...block, line: block.line + Number(row) })}:${column} ${message}`);
        else if (file === CANARY || file === "shims.d.ts") errors.push(`${file}(${row}): ${message}`);
      }
      // The canary proves that a wrong type in a block would be reported.
      expect(errors).toEqual([
        `${CANARY}(1): error TS2322: Type 'string' is not assignable to type 'number'.`,
      ]);
    });
  });
});
