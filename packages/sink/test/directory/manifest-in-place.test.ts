import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MANIFEST_FILENAME, rewriteManifestInPlaceSync } from "../../src/directory/manifest.js";
import { ManifestNoRoomInPlaceError } from "../../src/errors.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-in-place-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** A directory whose manifest.json holds `text`. */
function withManifest(text: string): string {
  const dir = mkdtempSync(join(temp, "sink-"));
  writeFileSync(join(dir, MANIFEST_FILENAME), text);
  return dir;
}

const manifest = (status: string, pad = "") =>
  `${JSON.stringify({ sessions: [{ session_id: "s", status }] }, null, 2)}${pad}\n`;

describe("rewriteManifestInPlaceSync (a full disk's last resort)", () => {
  it("pads a shorter manifest with spaces to the file's length: nothing truncated, valid JSON", () => {
    const before = manifest("running", " ".repeat(40));
    const dir = withManifest(before);
    rewriteManifestInPlaceSync(dir, manifest("done"), false);
    const after = readFileSync(join(dir, MANIFEST_FILENAME), "utf8");
    expect(after.length).toBe(before.length);
    expect(JSON.parse(after)).toEqual({ sessions: [{ session_id: "s", status: "done" }] });
  });

  it("writes a longer manifest within the file's blocks", () => {
    const dir = withManifest(manifest("running"));
    const longer = manifest("incomplete", " ");
    rewriteManifestInPlaceSync(dir, longer, false);
    expect(readFileSync(join(dir, MANIFEST_FILENAME), "utf8")).toBe(longer);
  });

  it("refuses one longer than the file's blocks (ENOSPC) and leaves the old manifest whole", () => {
    const before = manifest("running");
    const dir = withManifest(before);
    const room = Math.max(before.length, statSync(join(dir, MANIFEST_FILENAME)).blocks * 512);
    const longer = manifest("incomplete", " ".repeat(room));
    let thrown: unknown;
    try {
      rewriteManifestInPlaceSync(dir, longer, false);
    } catch (error) {
      thrown = error;
    }
    expect(ManifestNoRoomInPlaceError.isInstance(thrown)).toBe(true);
    expect(thrown).toMatchObject({ code: "ENOSPC", needed: Buffer.byteLength(longer), room });
    // One line that says what to do.
    expect((thrown as Error).message).toMatch(/^ENOSPC: .* free some space/);
    expect((thrown as Error).message).not.toContain("\n");
    expect(readFileSync(join(dir, MANIFEST_FILENAME), "utf8")).toBe(before);
  });
});
