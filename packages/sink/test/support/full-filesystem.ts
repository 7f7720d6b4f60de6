// A really full filesystem for tests: a small tmpfs the test mounts (the suite runs as root), filled
// by a file the test writes.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmdirSync, statfsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const mounted: string[] = [];

/** The file `fill` writes; removing it frees the space again. */
export const FILLER = "filler.bin";

/** A fresh tmpfs of `kib` KiB; `unmountSmallFilesystems` (in `afterEach`) removes it. */
export function smallFilesystem(kib: number): string {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-full-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${kib}k`, "tmpfs", dir]);
  mounted.push(dir);
  return dir;
}

export function unmountSmallFilesystems(): void {
  for (const dir of mounted.splice(0)) {
    execFileSync("umount", [dir]);
    rmdirSync(dir);
  }
}

/** Fills the filesystem until `leaveBytes` are free (0: until the write fails with ENOSPC). */
export function fill(dir: string, leaveBytes = 0): void {
  const free = Number(statfsSync(dir).bavail * statfsSync(dir).bsize);
  try {
    writeFileSync(join(dir, FILLER), Buffer.alloc(leaveBytes === 0 ? free + (1 << 20) : free - leaveBytes));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
  }
}
