import { execFileSync } from "node:child_process";
import { join } from "node:path";

const ROOT = join(import.meta.dirname, "../../..");

/**
 * Writes a job of bench/generate-multirank.mjs into `target`: `ranks` ranks of `samples` samples with
 * nested phases, a cross-rank spike, a leak on rank 0, hidden-memory drift and alerts; `extra` are more
 * of the generator's flags.
 */
export function generateJob(
  target: string,
  ranks: number,
  samples: number,
  extra: readonly string[] = [],
): void {
  execFileSync(
    process.execPath,
    [
      "--import",
      "tsx",
      join(ROOT, "bench/generate-multirank.mjs"),
      target,
      "--ranks",
      String(ranks),
      "--samples",
      String(samples),
      "--quiet",
      ...extra,
    ],
    { cwd: ROOT, stdio: "pipe" },
  );
}
