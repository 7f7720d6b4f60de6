/**
 * Symbolic links in a telemetry input: followed while they lead to a place inside the input, never
 * out of it (the one place where the readers decide, and word the warning).
 */
import { realpathSync } from "node:fs";
import { sep } from "node:path";
import { fileSystemErrorCode, TelemetryInputAccessError } from "../errors.js";

/** True when the resolved path `real` is `root` or inside it. */
function isInside(real: string, root: string): boolean {
  return real === root || real.startsWith(root.endsWith(sep) ? root : `${root}${sep}`);
}

/**
 * Where `path` leads (its real path) when that is inside `root` (a real path); null when it leads
 * nowhere (a dangling link), or out of the input: then it is not followed, and `warn` says so.
 * Other file-system errors (a link loop) are thrown as `TelemetryInputAccessError`.
 */
export function linkInsideInput(path: string, root: string, warn: (message: string) => void): string | null {
  let real: string;
  try {
    real = realpathSync(path);
  } catch (error) {
    if (fileSystemErrorCode(error) === "ENOENT") return null;
    throw TelemetryInputAccessError.wrap(path, error);
  }
  if (isInside(real, root)) return real;
  warn(
    `${path} not read: it is a symbolic link that leads out of the input (to ${real}); links are not followed out of it`,
  );
  return null;
}
