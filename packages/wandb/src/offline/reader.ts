/**
 * Reads a W&B offline run directory back: checks it (header, CRCs, records in order, every media
 * file named by a files record, an exit record) and rebuilds the calls that wrote it, in the form
 * of the golden cases (`expected.json`).
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { type JsonObject, type JsonValue, parseJson } from "@stormlog/core";
import { nodeCrypto } from "@stormlog/core/internal";
import { compareCodePoints } from "../client.js";
import { WandbOfflineRunError } from "../errors.js";
import { isPyDict } from "../python/values.js";
import type { RecordedCall } from "../recorder.js";
import { readLevelDbLog, readRunFile } from "./leveldb-log.js";
import { decodeRecord, FILES_POLICY_NOW, type RecordMessage, recordKind } from "./schema.js";
import { HTML_INJECTION, INIT_SETTINGS_KEY } from "./writer.js";

/** An offline run as read back. */
export interface OfflineRunContents {
  readonly runDir: string;
  readonly runId: string;
  /** The records, decoded, in order. */
  readonly records: RecordMessage[];
  /** Their kinds (`header`, `run`, `history`, ...), in order. */
  readonly kinds: string[];
  /** The calls that wrote the run, rebuilt (artifacts without `adds`, which the log does not hold). */
  readonly calls: RecordedCall[];
  /** Media paths (relative to `files/`) named by files records. */
  readonly filesNamed: string[];
}

function parseValue(text: string | undefined, where: string, runDir: string): JsonValue {
  try {
    return parseJson(text ?? "null");
  } catch (error) {
    throw new WandbOfflineRunError(runDir, `${where}: invalid value_json (${(error as Error).message})`);
  }
}

function filesUnder(root: string, prefix = ""): string[] {
  if (!existsSync(join(root, prefix))) return [];
  const out: string[] = [];
  for (const entry of readdirSync(join(root, prefix), { withFileTypes: true })) {
    const relative = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
    if (entry.isDirectory()) out.push(...filesUnder(root, relative));
    else out.push(relative);
  }
  return out;
}

function unInject(html: string): string {
  if (html.includes(`<head>${HTML_INJECTION}</head>`) && !html.includes("<head><head>")) {
    // The page had no head: `<html><head>INJ</head>...`.
    const restored = html.replace(`<head>${HTML_INJECTION}</head>`, "");
    if (restored.includes("<html>")) return restored;
  }
  return html.replace(HTML_INJECTION, "");
}

/**
 * Reads and checks `runDir` (an `offline-run-...` folder). Throws `WandbOfflineRunError` naming what
 * is wrong: a bad header or CRC, records out of order, a media file no files record names (the sync
 * would not upload it), a missing file, no exit record.
 */
export function readOfflineRun(runDir: string): OfflineRunContents {
  const fail = (message: string): never => {
    throw new WandbOfflineRunError(runDir, message);
  };
  const logs = readdirSync(runDir).filter((name) => /^run-.+\.wandb$/.test(name));
  if (logs.length !== 1) fail(`expected one run-<id>.wandb file, found ${logs.length}`);
  const logName = logs[0] as string;
  const runId = logName.slice(4, -6);
  const records = readLevelDbLog(join(runDir, logName)).map((bytes) => decodeRecord(bytes));
  const kinds = records.map(recordKind);
  if (kinds[0] !== "header") fail(`the first record is ${kinds[0] ?? "missing"}, not the header`);
  if (kinds[1] !== "run") fail(`the second record is ${kinds[1] ?? "missing"}, not the run`);
  const exitAt = kinds.indexOf("exit");
  if (exitAt < 0) fail("no exit record: the run was not finished");
  if (exitAt !== kinds.length - 1)
    fail(`records after the exit record (${kinds.slice(exitAt + 1).join(", ")})`);
  if (kinds.slice(2).some((kind) => kind === "header" || kind === "run"))
    fail("a second header or run record");
  const run = records[1]?.run ?? {};
  if (run.run_id !== runId) fail(`the run record's id ${run.run_id} is not the file's ${runId}`);

  const filesDir = join(runDir, "files");
  const named = new Set<string>();
  const calls: RecordedCall[] = [];
  const visualize = new Map<string, JsonObject>();
  const initItem = run.settings?.item?.find((item) => item.key === INIT_SETTINGS_KEY);
  const kwargs: JsonObject = initItem
    ? (parseValue(initItem.value_json, "run settings", runDir) as JsonObject)
    : {
        project: run.project ?? "",
        ...(run.entity ? { entity: run.entity } : {}),
        ...(run.display_name ? { name: run.display_name } : {}),
        ...(run.run_group ? { group: run.run_group } : {}),
        ...(run.job_type ? { job_type: run.job_type } : {}),
      };
  calls.push({ call: "init", kwargs });

  const mediaFile = (value: JsonObject, key: string, step: number): string => {
    const path = value.path;
    if (typeof path !== "string") return fail(`step ${step} '${key}': a media value without a path`);
    if (!named.has(path))
      fail(`step ${step} '${key}': media file ${path} is named by no files record before it`);
    const full = join(filesDir, ...path.split("/"));
    if (!existsSync(full)) fail(`step ${step} '${key}': media file ${path} is missing`);
    const bytes = readRunFile(full, fail);
    const sha = nodeCrypto().createHash("sha256").update(bytes).digest("hex");
    if (value.sha256 !== undefined && value.sha256 !== sha)
      fail(`media file ${path}: sha256 differs from the history's`);
    return bytes.toString("utf8");
  };

  for (const [index, record] of records.entries()) {
    const kind = kinds[index];
    if (kind === "files") {
      for (const file of record.files?.files ?? []) {
        if (file.path === undefined) fail(`record ${index}: a files item without a path`);
        if ((file.policy ?? 0) !== FILES_POLICY_NOW)
          fail(`record ${index}: ${file.path} is not uploaded NOW`);
        named.add(file.path as string);
      }
    } else if (kind === "config") {
      for (const item of record.config?.update ?? []) {
        const nested = item.nested_key ?? [];
        if (nested.length === 3 && nested[0] === "_wandb" && nested[1] === "visualize") {
          const value = parseValue(item.value_json, `record ${index} config`, runDir);
          if (isPyDict(value)) visualize.set(nested[2] as string, value);
        }
      }
    } else if (kind === "summary") {
      const payload: JsonObject = {};
      for (const item of record.summary?.update ?? []) {
        payload[item.key ?? ""] = parseValue(item.value_json, `record ${index} summary`, runDir);
      }
      calls.push({ call: "summary.update", payload });
    } else if (kind === "history") {
      const step = record.history?.step?.num ?? 0;
      const values = new Map<string, JsonValue>();
      for (const item of record.history?.item ?? []) {
        values.set(item.key ?? "", parseValue(item.value_json, `record ${index} history`, runDir));
      }
      for (const required of ["_step", "_runtime", "_timestamp"]) {
        if (!values.has(required)) fail(`record ${index}: history step ${step} has no ${required}`);
      }
      const payload: JsonObject = {};
      for (const [key, value] of values) {
        if (key === "_step" || key === "_runtime" || key === "_timestamp") continue;
        if (isPyDict(value) && value._type === "table-file") {
          const parsed = parseJson(mediaFile(value, key, step));
          const table: JsonObject = isPyDict(parsed)
            ? parsed
            : fail(`step ${step} '${key}': the table file is not an object`);
          const chartKey = key.endsWith("_table") ? key.slice(0, -6) : null;
          const panel = chartKey === null ? undefined : visualize.get(chartKey);
          if (chartKey !== null && panel !== undefined) {
            payload[chartKey] = lineSeriesOf(table, panel);
          } else {
            payload[key] = { _type: "table", columns: table.columns ?? [], data: table.data ?? [] };
          }
        } else if (isPyDict(value) && value._type === "html-file") {
          payload[key] = { _type: "html", html: unInject(mediaFile(value, key, step)) };
        } else {
          payload[key] = value;
        }
      }
      calls.push({ call: "log", payload });
    } else if (kind === "artifact") {
      const artifact = record.artifact ?? {};
      const entries = (artifact.manifest?.contents ?? []).map((entry) => {
        const local = entry.local_path ?? "";
        if (!existsSync(local)) fail(`artifact ${artifact.name}: staged file ${local} is missing`);
        const digest = nodeCrypto().createHash("md5").update(readRunFile(local, fail)).digest("base64");
        if (digest !== entry.digest) fail(`artifact ${artifact.name}: ${entry.path} differs from its digest`);
        return { path: entry.path ?? "", size: entry.size ?? 0, digest: entry.digest ?? "" };
      });
      const sorted = [...entries].sort((a, b) => compareCodePoints(a.path, b.path));
      if (sorted.some((entry, at) => entry.path !== entries[at]?.path)) {
        fail(`artifact ${artifact.name}: manifest entries are not sorted by path`);
      }
      calls.push({
        call: "log_artifact",
        name: artifact.name ?? "",
        type: artifact.type ?? "",
        adds: [],
        entries,
      });
    } else if (kind === "exit") {
      calls.push({ call: "finish" });
    } else if (kind === "unknown") {
      fail(`record ${index} is of a type this reader does not know`);
    }
  }

  for (const file of filesUnder(join(filesDir, "media"))) {
    if (!named.has(`media/${file}`))
      fail(`files/media/${file} is named by no files record (the sync would skip it)`);
  }
  return { runDir, runId, records, kinds, calls, filesNamed: [...named] };
}

function lineSeriesOf(table: JsonObject, panel: JsonObject): JsonObject {
  const config = isPyDict(panel.panel_config) ? panel.panel_config : {};
  const strings = isPyDict(config.stringSettings) ? config.stringSettings : {};
  const rows = Array.isArray(table.data) ? table.data : [];
  const keys: string[] = [];
  const byKey = new Map<string, { xs: JsonValue[]; ys: JsonValue[] }>();
  for (const row of rows) {
    if (!Array.isArray(row)) continue;
    const key = String(row[1]);
    let line = byKey.get(key);
    if (line === undefined) {
      line = { xs: [], ys: [] };
      byKey.set(key, line);
      keys.push(key);
    }
    const y = row[2];
    line.xs.push(row[0] ?? null);
    line.ys.push(typeof y === "number" && Number.isNaN(y) ? null : (y ?? null));
  }
  return {
    _type: "line_series",
    xs: byKey.get(keys[0] ?? "")?.xs ?? [],
    ys: keys.map((key) => byKey.get(key)?.ys ?? []),
    keys,
    title: strings.title ?? "",
    xname: strings.xname ?? "",
  };
}

/** The `offline-run-*` folders under `<dir>/wandb`, sorted. */
export function listOfflineRuns(dir: string): string[] {
  const root = join(dir, "wandb");
  if (!existsSync(root)) return [];
  return readdirSync(root)
    .filter((name) => name.startsWith("offline-run-"))
    .sort()
    .map((name) => join(root, name));
}
