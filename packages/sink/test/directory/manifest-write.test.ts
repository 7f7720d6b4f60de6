// The asynchronous manifest write (manifest.tmp, then a rename) when the exit path overtook it.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MANIFEST_FILENAME, writeManifestText } from "../../src/directory/manifest.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-manifest-write-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe("writeManifestText", () => {
  it("renames its copy over the manifest while it is current", async () => {
    const dir = mkdtempSync(join(temp, "sink-"));
    writeFileSync(join(dir, MANIFEST_FILENAME), "old\n");
    await writeManifestText(dir, "new\n", false);
    expect(readdirSync(dir)).toEqual([MANIFEST_FILENAME]);
    expect(readFileSync(join(dir, MANIFEST_FILENAME), "utf8")).toBe("new\n");
  });

  it("leaves the newer manifest alone and removes its own copy once overtaken", async () => {
    const dir = mkdtempSync(join(temp, "sink-"));
    writeFileSync(join(dir, MANIFEST_FILENAME), "written by the exit path\n");
    await writeManifestText(dir, "older\n", false, () => false);
    expect(readdirSync(dir)).toEqual([MANIFEST_FILENAME]);
    expect(readFileSync(join(dir, MANIFEST_FILENAME), "utf8")).toBe("written by the exit path\n");
  });
});
