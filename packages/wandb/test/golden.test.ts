import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  DiagnoseBundleNotFoundError,
  RecordingWandbClient,
  WandbConfigError,
  WandbExportInputError,
} from "../src/index.js";
import { readGoldenCaseConfig, runGoldenCaseExport } from "../src/internal.js";
import { CASES, copyCaseInput, expectedOf, plain } from "./helpers.js";

/** The Python exception the reference raises where the export threw `error`. */
function pythonTypeOf(error: unknown): string {
  if (WandbExportInputError.isInstance(error)) return error.pythonType;
  if (DiagnoseBundleNotFoundError.isInstance(error)) return "FileNotFoundError";
  if (WandbConfigError.isInstance(error)) return "ValueError";
  return `untyped ${(error as Error).name}: ${(error as Error).message}`;
}

describe.each(CASES)("golden %s", (name) => {
  it("makes the reference's calls, in order", async () => {
    const expected = expectedOf(name);
    const { input, cleanup } = copyCaseInput(name);
    try {
      const config = readGoldenCaseConfig(input);
      const client = new RecordingWandbClient({ activeRun: config.activeRun, baseDir: input });
      let raised: string | null = null;
      try {
        await runGoldenCaseExport(input, client);
      } catch (error) {
        raised = pythonTypeOf(error);
      }
      expect(raised).toBe(expected.raised);
      const actual = plain(client.calls) as Record<string, unknown>[];
      expect(actual.map((call) => call.call)).toEqual(expected.calls.map((call) => call.call));
      for (let i = 0; i < expected.calls.length; i++) {
        expect(actual[i], `call ${i}`).toEqual(expected.calls[i]);
      }
      for (const file of expected.files_written) expect(existsSync(join(input, file)), file).toBe(true);
    } finally {
      cleanup();
    }
  });
});
