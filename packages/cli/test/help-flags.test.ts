import { describe, expect, it } from "vitest";
import { parseCommandArgs, parserOptions } from "../src/args.js";
import { CliUsageError } from "../src/errors.js";
import { COMMANDS } from "../src/main.js";
import { runCli } from "./helpers.js";

// Every flag a command's parser accepts is in its --help. The flags come from what the parser is
// given (`parserOptions`), never from a list written here: a flag added without help fails.

/** The lines of a help text's Options section. */
function optionLines(help: string): string[] {
  const lines = help.split("\n");
  const start = lines.indexOf("Options:");
  const end = lines.indexOf("", start);
  expect(start).toBeGreaterThan(0);
  return lines.slice(start + 1, end);
}

function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

describe.each(COMMANDS.map((command) => [command.help.name, command] as const))(
  "stormlog %s",
  (name, command) => {
    const accepted = Object.entries(parserOptions(command.help));

    it("accepts each flag its parser is given, and refuses others", () => {
      expect(accepted.length).toBeGreaterThan(1);
      for (const [flag, spec] of accepted) {
        const argv = spec.type === "string" ? [`--${flag}`, "x"] : [`--${flag}`];
        expect(parseCommandArgs(command.help, argv).values[flag]).toBe(spec.type === "string" ? "x" : true);
        if (spec.short !== undefined) {
          const short = spec.type === "string" ? [`-${spec.short}`, "x"] : [`-${spec.short}`];
          expect(parseCommandArgs(command.help, short).values[flag]).toBe(
            spec.type === "string" ? "x" : true,
          );
        }
      }
      expect(() => parseCommandArgs(command.help, ["--not-a-flag-of-any-command"])).toThrow(CliUsageError);
    });

    it("lists each accepted flag in --help, with its short form and a description", async () => {
      const run = await runCli([name, "--help"]);
      expect(run.code).toBe(0);
      const options = optionLines(run.stdout);
      for (const [flag, spec] of accepted) {
        const short = spec.short === undefined ? "    " : `-${spec.short}, `;
        const value = spec.type === "string" ? " \\S+" : "";
        const row = new RegExp(`^  ${escaped(short)}--${escaped(flag)}${value}\\s{2,}\\S`);
        expect(
          options.some((line) => row.test(line)),
          `--${flag} missing from 'stormlog ${name} --help'`,
        ).toBe(true);
      }
      expect(options).toHaveLength(accepted.length);
    });

    it("names every flag but --help on its usage line, or says [options]", async () => {
      const usage = (await runCli([name, "--help"])).stdout.split("\n")[0]!;
      if (usage.includes("[options]")) return;
      for (const [flag] of accepted) {
        if (flag !== "help")
          expect(usage, `--${flag} missing from the usage line of ${name}`).toContain(`--${flag}`);
      }
    });
  },
);

describe("stormlog --help", () => {
  it("lists the options main() reads itself", async () => {
    const help = (await runCli(["--help"])).stdout;
    for (const argv of [["--version"], ["-v"]]) expect((await runCli(argv)).code).toBe(0);
    expect(help).toMatch(/-h, --help/);
    expect(help).toMatch(/-v, --version/);
  });
});
