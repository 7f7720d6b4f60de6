import { accessSync, constants, existsSync } from "node:fs";
import { delimiter, isAbsolute, join } from "node:path";

/** Where a bare NVML library name (`libnvidia-ml.so.1`) is usually found, besides LD_LIBRARY_PATH. */
const LIBRARY_DIRS = [
  "/usr/lib/x86_64-linux-gnu",
  "/usr/lib64",
  "/usr/lib/aarch64-linux-gnu",
  "/usr/lib/wsl/lib",
  "/usr/lib",
  // Containers started by the NVIDIA container toolkit.
  "/usr/local/nvidia/lib64",
];

/**
 * The path of the first of `candidates` (NVML library paths or bare names) that exists on disk, without
 * loading it. Only a hint that a driver is installed: the dynamic loader may still refuse the file.
 */
export function findLibraryFile(
  candidates: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): string | undefined {
  const dirs = [...(env.LD_LIBRARY_PATH ?? "").split(delimiter).filter((dir) => dir !== ""), ...LIBRARY_DIRS];
  for (const candidate of candidates) {
    if (isAbsolute(candidate) || candidate.includes("/") || candidate.includes("\\")) {
      if (existsSync(candidate)) return candidate;
      continue;
    }
    for (const dir of dirs) {
      const path = join(dir, candidate);
      if (existsSync(path)) return path;
    }
  }
  return undefined;
}

/** The path of `command` when it is an executable file (a path) or found on `path` (a PATH value). */
export function findExecutable(command: string, path: string | undefined): string | undefined {
  const executable = (file: string) => {
    try {
      accessSync(file, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  if (command.includes("/") || command.includes("\\")) return executable(command) ? command : undefined;
  const extensions = process.platform === "win32" ? ["", ".exe"] : [""];
  for (const dir of (path ?? "").split(delimiter)) {
    if (dir === "") continue;
    for (const ext of extensions) {
      const file = join(dir, command + ext);
      if (executable(file)) return file;
    }
  }
  return undefined;
}
