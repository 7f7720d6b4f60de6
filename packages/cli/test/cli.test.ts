import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { goldenCopy } from "../../sink/test/support/telemetry-fixtures.js";
import { COMMANDS } from "../src/main.js";
import { expectOneLineError, FIXTURES, runCli } from "./helpers.js";

const SINK = goldenCopy("python-sink/single-completed/sink");

describe("stormlog (root)", () => {
  it("lists the commands in --help", async () => {
    const run = await runCli(["--help"]);
    expect(run.code).toBe(0);
    for (const name of ["analyze", "sessions", "diagnose", "track", "export"]) {
      expect(run.stdout).toMatch(new RegExp(`^  ${name} `, "m"));
    }
  });

  it("prints the package version", async () => {
    const version = JSON.parse(readFileSync(join(import.meta.dirname, "../package.json"), "utf8")).version;
    expect((await runCli(["--version"])).stdout).toBe(`${version}\n`);
  });

  it("prints usage and fails without a command", async () => {
    const run = await runCli([]);
    expect(run.code).toBe(1);
    expect(run.stdout).toContain("Usage: stormlog <command>");
  });

  it("rejects an unknown command in one line", async () => {
    expectOneLineError(await runCli(["analyse", SINK]), /unknown command 'analyse'.*stormlog --help/);
  });

  it.each(COMMANDS.map((command) => command.help.name))("has --help with an example for %s", async (name) => {
    const run = await runCli([name, "--help"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`Usage: stormlog ${name}`);
    expect(run.stdout).toMatch(new RegExp(`Examples:\\n  stormlog ${name} `));
    expect((await runCli(["help", name])).stdout).toBe(run.stdout);
  });
});

describe("user errors", () => {
  it("a missing path", async () => {
    expectOneLineError(await runCli(["sessions"]), /^stormlog sessions: missing <path>.*--help/);
  });

  it("a path that does not exist", async () => {
    expectOneLineError(
      await runCli(["diagnose", "no/such/sink"]),
      /^stormlog diagnose: .*does not exist.*hint:/,
    );
  });

  it("an unknown session", async () => {
    expectOneLineError(
      await runCli(["export", SINK, "--format", "jsonl", "--session-id", "nope"]),
      /session_id not found: nope.*2cfda835-2b8e-4a5e-9a84-9a8adf638072.*stormlog sessions/,
    );
  });

  it("a file that is not telemetry", async () => {
    expectOneLineError(
      await runCli(["sessions", join(FIXTURES, "README.md")]),
      /^stormlog sessions: .*hint:/,
    );
  });

  it("an empty path or path flag: one line naming it, nothing read from the current directory", async () => {
    expectOneLineError(
      await runCli(["analyze", ""]),
      /^stormlog analyze: empty <path>: give the telemetry to read .*'\.' for the current directory.*analyze --help/,
    );
    expectOneLineError(await runCli(["sessions", ""]), /^stormlog sessions: empty <path>: /);
    expectOneLineError(await runCli(["query", "SELECT 1", ""]), /^stormlog query: empty <path>: /);
    expectOneLineError(
      await runCli(["export", SINK, "--format", "parquet", "-o", ""]),
      /^stormlog export: empty --output: give a file name.*export --help/,
    );
    expectOneLineError(
      await runCli(["analyze", SINK, "--cache-dir", ""]),
      /^stormlog analyze: empty --cache-dir: give a directory name/,
    );
  });

  it("an unknown flag and a bad value", async () => {
    expectOneLineError(
      await runCli(["sessions", SINK, "--colour"]),
      /Unknown option '--colour'.*sessions --help/,
    );
    expectOneLineError(
      await runCli(["sessions", SINK, "--format", "yaml"]),
      /invalid --format 'yaml': use one of txt, json/,
    );
    expectOneLineError(
      await runCli(["track", "--interval", "0", "--", "true"]),
      /invalid --interval '0': expected a number > 0/,
    );
  });

  it("an output file that cannot be written", async () => {
    expectOneLineError(
      await runCli(["export", SINK, "--format", "csv", "--output", "/no/such/dir/out.csv"]),
      /cannot access \/no\/such\/dir\/out.csv: no such file or directory/,
    );
  });
});
