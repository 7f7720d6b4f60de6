/**
 * A W&B client that records the calls made on it, in the form of the golden cases recorded from the
 * Python reference (`expected.json`): for tests, and to see what an export would send.
 */
import { tmpdir } from "node:os";
import { sep } from "node:path";
import type { JsonObject, JsonValue } from "@stormlog/core";
import {
  type WandbArtifact,
  type WandbClient,
  WandbHtml,
  type WandbInitOptions,
  WandbLineSeries,
  type WandbPayload,
  type WandbRun,
  WandbTable,
  type WandbValue,
} from "./client.js";
import { TEMP_DIR_PREFIX } from "./export/common.js";
import { purePath } from "./python/values.js";

/** One recorded call. */
export type RecordedCall =
  | { call: "init"; kwargs: JsonObject }
  | { call: "summary.update"; payload: JsonObject }
  | { call: "log"; payload: JsonObject }
  | {
      call: "log_artifact";
      name: string;
      type: string;
      adds: JsonObject[];
      entries: { path: string; size: number; digest: string }[];
    }
  | { call: "finish" };

/** A payload value in the recorded form: tables, HTML and line charts as `{"_type": ...}` objects. */
export function recordedValue(value: WandbValue): JsonValue {
  if (value instanceof WandbTable) {
    return { _type: "table", columns: [...value.columns], data: value.data.map((row) => [...row]) };
  }
  if (value instanceof WandbHtml) return { _type: "html", html: value.html };
  if (value instanceof WandbLineSeries) {
    const point = (x: number): JsonValue => (Number.isNaN(x) ? null : x);
    return {
      _type: "line_series",
      xs: value.xs.map(point),
      ys: value.ys.map((line) => line.map(point)),
      keys: [...value.keys],
      title: value.title,
      xname: value.xname,
    };
  }
  return value;
}

function recordedPayload(payload: WandbPayload): JsonObject {
  const out: JsonObject = {};
  for (const key of Object.keys(payload)) out[key] = recordedValue(payload[key] as WandbValue);
  return out;
}

/** Options of a {@link RecordingWandbClient}. */
export interface RecordingOptions {
  /** A run already active: the export logs into it without `init` and `finish`. */
  activeRun?: boolean;
  /** Artifact sources under this folder are recorded relative to it. */
  baseDir?: string;
}

/** Records every call; `calls` holds them in order. */
export class RecordingWandbClient implements WandbClient {
  readonly calls: RecordedCall[] = [];
  private readonly run: WandbRun;
  private readonly active: boolean;
  private readonly baseDir: string | undefined;

  constructor(options: RecordingOptions = {}) {
    this.active = options.activeRun ?? false;
    this.baseDir = options.baseDir === undefined ? undefined : purePath(options.baseDir);
    const calls = this.calls;
    const source = (path: string): string => this.recordedSource(path);
    this.run = {
      async updateSummary(payload) {
        calls.push({ call: "summary.update", payload: recordedPayload(payload) });
      },
      async log(payload) {
        calls.push({ call: "log", payload: recordedPayload(payload) });
      },
      async logArtifact(artifact: WandbArtifact) {
        calls.push({
          call: "log_artifact",
          name: artifact.name,
          type: artifact.type,
          adds: artifact.adds.map((add) => ({
            op: add.op,
            source: source(add.source),
            name: add.name,
            ...(add.files === undefined ? {} : { files: [...add.files] }),
          })),
          entries: artifact.entries.map((entry) => ({
            path: entry.path,
            size: entry.size,
            digest: entry.digest,
          })),
        });
      },
      async finish() {
        calls.push({ call: "finish" });
      },
    };
  }

  private recordedSource(path: string): string {
    const pure = purePath(path);
    if (this.baseDir !== undefined && pure.startsWith(`${this.baseDir}/`))
      return pure.slice(this.baseDir.length + 1);
    const tempRoot = purePath(tmpdir().split(sep).join("/"));
    const parts = pure.split("/");
    const parent = parts.slice(0, -1).join("/");
    if (parent.startsWith(`${tempRoot}/${TEMP_DIR_PREFIX}`)) return `$TMP/${parts[parts.length - 1]}`;
    return pure;
  }

  activeRun(): WandbRun | null {
    return this.active ? this.run : null;
  }

  async init(options: WandbInitOptions): Promise<WandbRun> {
    this.calls.push({ call: "init", kwargs: { ...options } });
    return this.run;
  }
}
