/**
 * A W&B offline run written without W&B: `wandb/offline-run-<YYYYmmdd_HHMMSS>-<run id>/` holding
 * `run-<run id>.wandb` (the transaction log `wandb sync` uploads) and `files/` (media files: tables,
 * HTML), with artifact files staged beside them until the run is synced.
 */
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { type JsonObject, type JsonValue, stringifyJson } from "@stormlog/core";
import { nodeCrypto } from "@stormlog/core/internal";
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
} from "../client.js";
import { WandbConfigError, WandbOfflineRunError } from "../errors.js";
import { LevelDbLogWriter } from "./leveldb-log.js";
import {
  encodeRecord,
  FILES_POLICY_NOW,
  FILES_TYPE_MEDIA,
  type ItemMessage,
  type RecordMessage,
} from "./schema.js";

/** The settings item of the run record holding the `init` arguments as given (for readers of ours). */
export const INIT_SETTINGS_KEY = "x_stormlog_init_kwargs";
/** What the header record names as the producer. */
export const PRODUCER = "stormlog-wandb";
/** The head W&B's `wandb.Html` injects into a page (its default `inject=True`). */
export const HTML_INJECTION =
  '<base target="_blank"><link rel="stylesheet" type="text/css" href="https://app.wandb.ai/normalize.css" />';

/** A page as `wandb.Html(text)` stores it: W&B's stylesheet injected into its head, trimmed. */
export function injectHtmlHead(html: string): string {
  let parts: string[];
  if (html.includes("<head>")) {
    const at = html.indexOf("<head>");
    parts = [`${html.slice(0, at)}<head>`, html.slice(at + 6)];
  } else if (html.includes("<html>")) {
    const at = html.indexOf("<html>");
    parts = [`${html.slice(0, at)}<html><head>`, `</head>${html.slice(at + 6)}`];
  } else {
    parts = ["", html];
  }
  return `${parts[0]}${HTML_INJECTION}${parts[1]}`.trim();
}

const RUN_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** A new run id as W&B makes them: 8 characters of `[a-z0-9]`. */
export function generateRunId(length = 8): string {
  const bytes = nodeCrypto().randomBytes(length);
  let out = "";
  for (const byte of bytes) out += RUN_ID_ALPHABET[byte % RUN_ID_ALPHABET.length];
  return out;
}

/**
 * Refuses a run id W&B refuses (it names the run's directory and log file here, so `/` would also
 * lead outside `wandb/`). Throws `WandbConfigError`.
 */
export function checkRunId(id: string): void {
  if (/[/\\#?%:]/.test(id))
    throw new WandbConfigError(
      "runId",
      `${JSON.stringify(id)} holds one of / \\ # ? % : which W&B does not allow in a run id; use letters, digits, - and _`,
    );
}

function two(value: number): string {
  return String(value).padStart(2, "0");
}

/** `YYYYmmdd_HHMMSS` in local time, as W&B names run directories. */
export function runDirTimestamp(date: Date): string {
  return (
    `${date.getFullYear()}${two(date.getMonth() + 1)}${two(date.getDate())}_` +
    `${two(date.getHours())}${two(date.getMinutes())}${two(date.getSeconds())}`
  );
}

/** W&B's `make_file_path_upload_safe` for the simple keys the export uses: no `..`, no leading `/`. */
function safeKey(key: string): string {
  return key
    .replace(/\.\.+/g, "_")
    .replace(/^\/+/, "")
    .replace(/[\\:*?"<>|]/g, "_");
}

/** Options of {@link WandbOfflineClient}. */
export interface WandbOfflineOptions {
  /** The folder `wandb/` is created in (W&B's `dir` setting; default: the current directory). */
  dir?: string;
  /** The clock (default `Date.now`): run directory names, `_timestamp`, `_runtime`. */
  now?: () => number;
}

/** One open offline run. */
export class WandbOfflineRun implements WandbRun {
  /** `wandb/offline-run-<time>-<id>`. */
  readonly runDir: string;
  /** `files/` of the run directory. */
  readonly filesDir: string;
  /** The `.wandb` transaction log. */
  readonly logPath: string;
  readonly runId: string;
  private readonly logWriter: LevelDbLogWriter;
  private readonly startMs: number;
  private step = 0;
  private artifactCount = 0;
  private finished = false;

  constructor(
    readonly options: WandbInitOptions,
    private readonly client: WandbOfflineClient,
    dir: string,
    private readonly now: () => number,
  ) {
    this.startMs = now();
    if (options.id) checkRunId(options.id);
    this.runId = options.id || generateRunId();
    this.runDir = resolve(
      dir,
      "wandb",
      `offline-run-${runDirTimestamp(new Date(this.startMs))}-${this.runId}`,
    );
    this.filesDir = join(this.runDir, "files");
    this.logPath = join(this.runDir, `run-${this.runId}.wandb`);
    mkdirSync(this.filesDir, { recursive: true });
    this.logWriter = new LevelDbLogWriter(this.logPath);
    this.write({ header: { version_info: { producer: PRODUCER } } });
    const seconds = Math.floor(this.startMs / 1000);
    this.write({
      run: {
        run_id: this.runId,
        entity: options.entity ?? "",
        project: options.project,
        display_name: options.name ?? "",
        run_group: options.group ?? "",
        job_type: options.job_type ?? "",
        host: hostname(),
        start_time: { seconds, nanos: Math.round((this.startMs - seconds * 1000) * 1e6) },
        settings: {
          item: [{ key: INIT_SETTINGS_KEY, value_json: JSON.stringify(options) }],
        },
      },
    });
  }

  private write(record: RecordMessage): void {
    if (this.finished) throw new WandbOfflineRunError(this.runDir, "the run is finished; start a new one");
    this.logWriter.append(encodeRecord(record));
  }

  /** Writes a media file under `files/`, names it in a files record (policy NOW), returns its JSON value. */
  private mediaFile(subdir: string, key: string, extension: string, content: string): JsonObject {
    const bytes = Buffer.from(content, "utf8");
    const sha256 = nodeCrypto().createHash("sha256").update(bytes).digest("hex");
    const path = `media/${subdir}/${safeKey(key)}_${this.step}_${sha256.slice(0, 20)}${extension}`;
    const full = join(this.filesDir, ...path.split("/"));
    mkdirSync(join(full, ".."), { recursive: true });
    writeFileSync(full, bytes);
    this.write({ files: { files: [{ path, policy: FILES_POLICY_NOW, type: FILES_TYPE_MEDIA }] } });
    return { _type: subdir === "table" ? "table-file" : "html-file", sha256, size: bytes.length, path };
  }

  private tableValue(
    key: string,
    columns: readonly string[],
    data: readonly (readonly JsonValue[])[],
  ): JsonObject {
    const content = stringifyJson({ columns: [...columns], data: data.map((row) => [...row]) });
    return {
      ...this.mediaFile("table", key, ".table.json", content),
      ncols: columns.length,
      nrows: data.length,
      log_mode: "IMMUTABLE",
    };
  }

  private historyValue(key: string, value: WandbValue, items: Map<string, JsonValue>): void {
    if (value instanceof WandbTable) {
      items.set(key, this.tableValue(key, value.columns, value.data));
    } else if (value instanceof WandbHtml) {
      items.set(key, this.mediaFile("html", key, ".html", injectHtmlHead(value.html)));
    } else if (value instanceof WandbLineSeries) {
      const tableKey = `${key}_table`;
      this.write({
        config: {
          update: [
            {
              nested_key: ["_wandb", "visualize", key],
              value_json: stringifyJson(lineSeriesPanel(tableKey, value)),
            },
          ],
        },
      });
      const rows: JsonValue[][] = [];
      value.ys.forEach((line, index) => {
        const lineKey = value.keys[index] ?? `line_${index}`;
        line.forEach((y, at) => {
          if (at < value.xs.length) rows.push([value.xs[at] as number, lineKey, y]);
        });
      });
      items.set(tableKey, this.tableValue(tableKey, ["step", "lineKey", "lineVal"], rows));
    } else {
      items.set(key, value);
    }
  }

  async log(payload: WandbPayload): Promise<void> {
    const items = new Map<string, JsonValue>();
    for (const key of Object.keys(payload)) this.historyValue(key, payload[key] as WandbValue, items);
    const nowMs = this.now();
    items.set("_step", this.step);
    items.set("_runtime", (nowMs - this.startMs) / 1000);
    items.set("_timestamp", nowMs / 1000);
    const item: ItemMessage[] = [...items].map(([key, value]) => ({ key, value_json: stringifyJson(value) }));
    this.write({ history: { item, step: { num: this.step } } });
    this.step += 1;
  }

  async updateSummary(payload: WandbPayload): Promise<void> {
    const update: ItemMessage[] = [];
    for (const key of Object.keys(payload)) {
      const value = payload[key] as WandbValue;
      if (value instanceof WandbTable || value instanceof WandbHtml || value instanceof WandbLineSeries) {
        throw new WandbOfflineRunError(this.runDir, `summary value '${key}' is media; log it instead`);
      }
      update.push({ key, value_json: stringifyJson(value) });
    }
    this.write({ summary: { update } });
  }

  async logArtifact(artifact: WandbArtifact): Promise<void> {
    this.artifactCount += 1;
    const stagingDir = join(this.runDir, "artifacts", `${this.artifactCount}`);
    const entries = artifact.entries;
    const contents = entries.map((entry) => {
      const staged = join(stagingDir, ...entry.path.split("/"));
      mkdirSync(join(staged, ".."), { recursive: true });
      copyFileSync(entry.localPath, staged);
      return { path: entry.path, digest: entry.digest, size: entry.size, local_path: staged };
    });
    const digest = nodeCrypto().createHash("md5").update("wandb-artifact-manifest-v1\n");
    for (const entry of entries) digest.update(`${entry.path}:${entry.digest}\n`, "utf8");
    this.write({
      artifact: {
        run_id: this.runId,
        project: this.options.project,
        entity: this.options.entity ?? "",
        type: artifact.type,
        name: artifact.name,
        digest: digest.digest("hex"),
        user_created: false,
        use_after_commit: false,
        aliases: ["latest"],
        manifest: {
          version: 1,
          storage_policy: "wandb-storage-policy-v1",
          storage_policy_config: [{ key: "storageLayout", value_json: '"V2"' }],
          contents,
        },
        finalize: true,
        client_id: generateRunId(32),
        sequence_client_id: generateRunId(32),
      },
    });
  }

  async finish(): Promise<void> {
    if (this.finished) return;
    this.write({ exit: { exit_code: 0, runtime: Math.floor((this.now() - this.startMs) / 1000) } });
    this.finished = true;
    this.logWriter.close();
    this.client.runFinished(this);
  }

  /** The command that uploads this run. */
  syncCommand(): string {
    return `wandb sync ${JSON.stringify(this.runDir)}`;
  }
}

/** The `config._wandb.visualize.<key>` value of a `wandb/lineseries/v0` chart, as W&B's `plot_table` writes it. */
export function lineSeriesPanel(tableKey: string, series: WandbLineSeries): JsonObject {
  return {
    panel_type: "Vega2",
    panel_config: {
      panelDefId: "wandb/lineseries/v0",
      fieldSettings: { step: "step", lineKey: "lineKey", lineVal: "lineVal" },
      stringSettings: { title: series.title, xname: series.xname },
      transform: { name: "tableWithLeafColNames" },
      userQuery: {
        queryFields: [
          {
            name: "runSets",
            // W&B's own query placeholder, filled in by the W&B app.
            // biome-ignore lint/suspicious/noTemplateCurlyInString: a literal "${runSets}"
            args: [{ name: "runSets", value: "${runSets}" }],
            fields: [
              { name: "id", fields: [] },
              { name: "name", fields: [] },
              { name: "_defaultColorIndex", fields: [] },
              { name: "summaryTable", args: [{ name: "tableKey", value: tableKey }], fields: [] },
            ],
          },
        ],
      },
    },
  };
}

/**
 * Writes W&B offline runs: `init` opens `wandb/offline-run-.../` under `dir`; the run is the active
 * one (`wandb.run`) until it finishes, so an export started meanwhile logs into it.
 */
export class WandbOfflineClient implements WandbClient {
  private current: WandbOfflineRun | null = null;
  /** Every run this client opened, in order. */
  readonly runs: WandbOfflineRun[] = [];
  private readonly dir: string;
  private readonly now: () => number;

  constructor(options: WandbOfflineOptions = {}) {
    this.dir = options.dir ?? process.cwd();
    this.now = options.now ?? Date.now;
  }

  activeRun(): WandbOfflineRun | null {
    return this.current;
  }

  async init(options: WandbInitOptions): Promise<WandbOfflineRun> {
    const run = new WandbOfflineRun(options, this, this.dir, this.now);
    this.current = run;
    this.runs.push(run);
    return run;
  }

  /** @internal */
  runFinished(run: WandbOfflineRun): void {
    if (this.current === run) this.current = null;
  }
}
