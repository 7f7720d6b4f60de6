/**
 * What the export asks of W&B, as the Python SDK names it: `init`, `run.summary.update`, `run.log`
 * with tables, HTML and line charts, `run.log_artifact`, `run.finish`. The offline run writer, the
 * online streamer and the test recorder implement it.
 */
import { createReadStream, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { JsonValue } from "@stormlog/core";
import { nodeCrypto } from "@stormlog/core/internal";
import { purePath } from "./python/values.js";

/** `wandb.init` keyword arguments; unset ones are absent (`id` comes with `resume: "allow"`). */
export interface WandbInitOptions {
  project: string;
  entity?: string;
  mode?: string;
  name?: string;
  group?: string;
  job_type?: string;
  id?: string;
  resume?: "allow";
}

/** A table cell: a number, text, a boolean or null. */
export type WandbCell = JsonValue;

/** `wandb.Table(columns=..., data=...)`. */
export class WandbTable {
  readonly kind = "table";
  constructor(
    readonly columns: readonly string[],
    readonly data: readonly (readonly WandbCell[])[],
  ) {}
}

/** `wandb.Html(text)`: an HTML panel. */
export class WandbHtml {
  readonly kind = "html";
  constructor(readonly html: string) {}
}

/** `wandb.plot.line_series(...)`: one line per key over shared x values; NaN is a missing point. */
export class WandbLineSeries {
  readonly kind = "line_series";
  constructor(
    readonly xs: readonly number[],
    readonly ys: readonly (readonly number[])[],
    readonly keys: readonly string[],
    readonly title: string,
    readonly xname: string,
  ) {}
}

/** A value of a `log` or summary payload. */
export type WandbValue = JsonValue | WandbTable | WandbHtml | WandbLineSeries;

/** One `log` or summary payload, keys to values. */
export type WandbPayload = Readonly<Record<string, WandbValue>>;

/** One `add_file` / `add_dir` call on an artifact. */
export interface ArtifactAdd {
  readonly op: "add_file" | "add_dir";
  /** The local path given. */
  readonly source: string;
  /** The name given. */
  readonly name: string;
  /** For `add_dir`: the folder's files at that moment, relative (with `/`), sorted. */
  readonly files?: readonly string[];
}

/** One file of an artifact, by its path inside the artifact. */
export interface ArtifactEntry {
  readonly path: string;
  readonly localPath: string;
  readonly size: number;
  /** Base64 MD5 of the content, as in a W&B artifact manifest. */
  readonly digest: string;
}

async function md5Base64(path: string): Promise<string> {
  const hash = nodeCrypto().createHash("md5");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("base64");
}

function filesUnder(root: string, prefix = ""): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, prefix), { withFileTypes: true })) {
    const relative = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
    let isDir = entry.isDirectory();
    let isFile = entry.isFile();
    if (entry.isSymbolicLink()) {
      const target = statSync(join(root, relative), { throwIfNoEntry: false });
      // os.walk (which W&B's add_dir uses) does not descend into linked folders.
      isDir = false;
      isFile = target?.isFile() ?? false;
    }
    if (isDir) out.push(...filesUnder(root, relative));
    else if (isFile) out.push(relative);
  }
  return out;
}

/** Code-point order, as Python's `sorted()` of strings. */
export function compareCodePoints(a: string, b: string): number {
  const left = Array.from(a);
  const right = Array.from(b);
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const diff = (left[i]?.codePointAt(0) ?? 0) - (right[i]?.codePointAt(0) ?? 0);
    if (diff !== 0) return diff;
  }
  return left.length - right.length;
}

/** `wandb.Artifact(name, type)`: files are read (size, MD5) when added, as W&B does. */
export class WandbArtifact {
  readonly adds: ArtifactAdd[] = [];
  private readonly byPath = new Map<string, ArtifactEntry>();

  constructor(
    readonly name: string,
    readonly type: string,
  ) {}

  /** The artifact's files by path, sorted as a W&B manifest lists them. */
  get entries(): ArtifactEntry[] {
    return [...this.byPath.values()].sort((a, b) => compareCodePoints(a.path, b.path));
  }

  private async addEntry(path: string, localPath: string): Promise<void> {
    const size = statSync(localPath).size;
    this.byPath.set(path, { path, localPath, size, digest: await md5Base64(localPath) });
  }

  /** `artifact.add_file(local_path, name)`. */
  async addFile(localPath: string, name: string): Promise<void> {
    this.adds.push({ op: "add_file", source: localPath, name });
    await this.addEntry(name, purePath(localPath));
  }

  /** `artifact.add_dir(local_path, name)`: every file below, as `<name>/<relative path>`. */
  async addDir(localPath: string, name: string): Promise<void> {
    const root = purePath(localPath);
    const files = filesUnder(root).sort(compareCodePoints);
    this.adds.push({ op: "add_dir", source: localPath, name, files });
    for (const file of files) await this.addEntry(`${name}/${file}`, join(root, file));
  }
}

/** A W&B run the export logs into. */
export interface WandbRun {
  /** `run.summary.update(payload)`. */
  updateSummary(payload: WandbPayload): Promise<void>;
  /** `run.log(payload)`: one step. */
  log(payload: WandbPayload): Promise<void>;
  /** `run.log_artifact(artifact)`. */
  logArtifact(artifact: WandbArtifact): Promise<void>;
  /** `run.finish()`. */
  finish(): Promise<void>;
}

/** The W&B module as the export sees it: the active run, if any, and `init`. */
export interface WandbClient {
  /** `wandb.run`: a run already active in this process, which the export logs into without finishing. */
  activeRun(): WandbRun | null;
  /** `wandb.init(**options)`. */
  init(options: WandbInitOptions): Promise<WandbRun>;
}
