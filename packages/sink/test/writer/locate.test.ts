import { closeSync, openSync, renameSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { execAsync, execSync, FILE_DELETED, FILE_ELSEWHERE, FILE_HERE } from "../../src/writer/io.js";
import { tempDir } from "../helpers.js";

// `rm -r` of the sink directory unlinks its files one by one: the open segment can go between the
// descriptor's look (fstat) and the path's (stat). `removeFirst` makes that happen on demand.
const race = vi.hoisted(() => ({ removeFirst: null as string | null }));
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  const removeNow = (): void => {
    if (race.removeFirst !== null) fs.unlinkSync(race.removeFirst);
    race.removeFirst = null;
  };
  return {
    ...fs,
    stat: (...args: Parameters<typeof fs.stat>) => {
      removeNow();
      return (fs.stat as (...rest: unknown[]) => void)(...args);
    },
    statSync: (...args: Parameters<typeof fs.statSync>) => {
      removeNow();
      return fs.statSync(...args);
    },
  };
});

afterEach(() => {
  race.removeFirst = null;
});

const locate = (how: "sync" | "async", fd: number, path: string) =>
  how === "sync"
    ? Promise.resolve(execSync({ op: "locate", fd, path }))
    : execAsync({ op: "locate", fd, path });

describe("locating the open segment", () => {
  it.each(["sync", "async"] as const)("says deleted for a file removed while it looked (%s)", async (how) => {
    const path = join(tempDir(), "segment-000001.jsonl");
    const fd = openSync(path, "w");
    try {
      race.removeFirst = path;
      expect(await locate(how, fd, path)).toMatchObject({ ok: true, value: FILE_DELETED });
    } finally {
      closeSync(fd);
    }
  });

  it.each(["sync", "async"] as const)("says here, deleted, or where it went (%s)", async (how) => {
    const dir = tempDir();
    const path = join(dir, "segment-000001.jsonl");
    const fd = openSync(path, "w");
    try {
      expect(await locate(how, fd, path)).toMatchObject({ ok: true, value: FILE_HERE });
      const moved = join(dir, "moved.jsonl");
      renameSync(path, moved);
      expect(await locate(how, fd, path)).toEqual({ ok: true, value: FILE_ELSEWHERE, path: moved });
      unlinkSync(moved);
      expect(await locate(how, fd, path)).toMatchObject({ ok: true, value: FILE_DELETED });
    } finally {
      closeSync(fd);
    }
  });
});
