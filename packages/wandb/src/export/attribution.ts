/** Attribution outputs: the PyTorch attribution files as an artifact, the preview HTML, the tensor table. */
import type { JsonObject, JsonValue } from "@stormlog/core";
import { WandbArtifact, type WandbCell, WandbHtml, type WandbRun, WandbTable } from "../client.js";
import {
  existingFile,
  intValue,
  isFloatAt,
  isPyDict,
  isPyInt,
  pathExists,
  pyGet,
  pyInt,
  pyStr,
  pyStrAt,
} from "../python/values.js";
import { pythonStep, readJsonObjectIfExists } from "./common.js";

/** The file names the reference looks for in an attribution (or OOM dump, or diagnose) folder. */
export const ATTRIBUTION_FILES = {
  snapshotPickle: "cuda_allocator_snapshot.pickle",
  traceHtml: "cuda_allocator_state_history.html",
  traceHtmlAnnotated: "cuda_allocator_state_history_annotated.html",
  tensorAttribution: "cuda_tensor_attribution.json",
  allocationAttribution: "cuda_allocation_attribution.json",
  debugMetadata: "cuda_native_debug_metadata.json",
} as const;

const TENSOR_COLUMNS = ["name", "storage_ptr", "tensor_count", "total_size_bytes", "shape", "dtype"] as const;

/** One row of the tensor table: name, storage pointer, tensor count, total bytes, shape, dtype. */
export type TensorRow = [string, string, number | bigint, number | bigint, string, string];

/** The rows of `cuda_tensor_attribution.json`, largest total first (ties in file order). */
export function tensorAttributionRows(path: string): TensorRow[] {
  const payload = readJsonObjectIfExists(path);
  if (payload === null) return [];
  const entries = pyGet(payload, "attributed_storage_pointers");
  if (!Array.isArray(entries)) return [];
  const rows: { row: TensorRow; total: bigint }[] = [];
  entries.forEach((entry, entryIndex) => {
    if (!isPyDict(entry)) return;
    const rawTensors = pyGet(entry, "tensors");
    const tensors: JsonValue[] = Array.isArray(rawTensors) ? rawTensors : [];
    let total = 0n;
    let shape = "";
    let dtype = "";
    if (tensors.length > 0) {
      const first: JsonObject = isPyDict(tensors[0]) ? tensors[0] : {};
      shape = Object.hasOwn(first, "shape") ? pyStrAt(first, "shape") : "";
      dtype = Object.hasOwn(first, "dtype") ? pyStrAt(first, "dtype") : "";
      for (const tensor of tensors) {
        if (!isPyDict(tensor)) continue;
        const size = Object.hasOwn(tensor, "size_bytes") ? tensor.size_bytes : 0;
        if (typeof size === "boolean") total += size ? 1n : 0n;
        else if (isPyInt(size, isFloatAt(tensor, "size_bytes"))) total += BigInt(size);
      }
    }
    const names = pyGet(entry, "names");
    let name = "<unnamed>";
    if (Array.isArray(names) && names.length > 0) {
      name = names
        .slice(0, 3)
        .map((_, index) => pyStrAt(names, index))
        .join(", ");
    }
    const storagePtr = Object.hasOwn(entry, "storage_ptr") ? pyStrAt(entry, "storage_ptr") : "";
    const count = pythonStep(`${path}: attributed_storage_pointers[${entryIndex}].tensor_count`, () =>
      Object.hasOwn(entry, "tensor_count") ? pyInt(entry.tensor_count) : BigInt(tensors.length),
    );
    rows.push({ row: [name, storagePtr, intValue(count), intValue(total), shape, dtype], total });
  });
  // Python's stable sort with reverse=True keeps ties in their original order.
  rows.sort((a, b) => (a.total === b.total ? 0 : a.total > b.total ? -1 : 1));
  return rows.map((item) => item.row);
}

function escapeHtml(value: string): string {
  return value
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;");
}

/** The compact preview page (the reference's fallback when no allocator snapshot is readable). */
export function compactAttributionSummaryHtml(
  rows: readonly TensorRow[],
  metadata: JsonObject | null,
): string {
  const history = metadata === null ? undefined : pyGet(metadata, "history_recorded");
  const pointers = metadata === null ? undefined : pyGet(metadata, "storage_pointer_count");
  const offenders = rows.slice(0, 12);
  const offenderRows = offenders
    .map(
      (row) =>
        "<tr>" +
        `<td>${escapeHtml(row[0])}</td>` +
        `<td>${escapeHtml(String(row[3]))}</td>` +
        `<td>${escapeHtml(row[4] || "\u2014")}</td>` +
        `<td>${escapeHtml(row[5] || "\u2014")}</td>` +
        "</tr>",
    )
    .join("");
  const pointerText =
    pointers === null || pointers === undefined
      ? String(rows.length)
      : pyStr(pointers, metadata !== null && isFloatAt(metadata, "storage_pointer_count"));
  const historyText =
    history === null || history === undefined
      ? "unknown"
      : pyStr(history, metadata !== null && isFloatAt(metadata, "history_recorded"));
  const note =
    "Snapshot data was unavailable for this inline preview. " +
    "Download the attribution artifact for the full interactive explorer.";
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Stormlog GPU Attribution Preview</title>
<style>
body { margin: 0; padding: 20px; background: #0d1117; color: #e6edf3; font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", sans-serif; }
.panel { background: #161b22; border: 1px solid #30363d; border-radius: 12px; padding: 16px; }
.stats { display: flex; gap: 12px; margin: 16px 0; }
.stat { background: #0d1117; border: 1px solid #30363d; border-radius: 10px; padding: 10px 12px; min-width: 110px; }
.stat-value { color: #58a6ff; font-family: ui-monospace, SFMono-Regular, monospace; font-weight: 700; font-size: 18px; }
.stat-label { color: #8b949e; font-size: 11px; margin-top: 4px; text-transform: uppercase; }
table { width: 100%; border-collapse: collapse; font-size: 12px; }
th, td { text-align: left; padding: 8px 0; border-top: 1px solid #21262d; }
th { border-top: none; color: #8b949e; }
</style>
</head>
<body>
  <div class="panel">
    <h1 style="margin:0;font-size:20px">Stormlog GPU Attribution Preview</h1>
    <p style="margin:8px 0 0;color:#8b949e">${note}</p>
    <div class="stats">
      <div class="stat"><div class="stat-value">${escapeHtml(pointerText)}</div><div class="stat-label">Tensors</div></div>
      <div class="stat"><div class="stat-value">${escapeHtml(historyText)}</div><div class="stat-label">History</div></div>
      <div class="stat"><div class="stat-value">${offenders.length}</div><div class="stat-label">Shown</div></div>
    </div>
    <table>
      <thead><tr><th>Name</th><th>Total Size (bytes)</th><th>Shape</th><th>Dtype</th></tr></thead>
      <tbody>${offenderRows}</tbody>
    </table>
  </div>
</body>
</html>`;
}

/**
 * The preview page of an attribution folder. A PyTorch allocator snapshot (a pickle) is not read
 * here, so this is always the compact page, which the reference also shows when it cannot read one.
 */
export function attributionPreviewHtml(root: string): string {
  return compactAttributionSummaryHtml(
    tensorAttributionRows(`${root}/${ATTRIBUTION_FILES.tensorAttribution}`),
    readJsonObjectIfExists(`${root}/${ATTRIBUTION_FILES.debugMetadata}`),
  );
}

/** Logs the attribution outputs of `root`; returns the summary fields to add. */
export async function logAttributionOutputs(
  run: WandbRun,
  root: string,
  sessionSlug: string,
  allowArtifactLogging: boolean,
): Promise<Record<string, JsonValue>> {
  const fields: Record<string, JsonValue> = {};
  const candidates = [
    ATTRIBUTION_FILES.traceHtmlAnnotated,
    ATTRIBUTION_FILES.traceHtml,
    ATTRIBUTION_FILES.tensorAttribution,
    ATTRIBUTION_FILES.allocationAttribution,
    ATTRIBUTION_FILES.debugMetadata,
  ];
  const existing = candidates.filter((name) => existingFile(`${root}/${name}`) !== null);
  if (allowArtifactLogging && existing.length > 0) {
    const artifact = new WandbArtifact(`stormlog-attribution-${sessionSlug}`, "stormlog-attribution");
    for (const name of existing) await artifact.addFile(`${root}/${name}`, name);
    await run.logArtifact(artifact);
  }
  if (pathExists(`${root}/${ATTRIBUTION_FILES.traceHtmlAnnotated}`)) {
    await run.log({ stormlog_attribution_html: new WandbHtml(attributionPreviewHtml(root)) });
    fields.stormlog_attribution_html_file = ATTRIBUTION_FILES.traceHtmlAnnotated;
  }
  const rows = tensorAttributionRows(`${root}/${ATTRIBUTION_FILES.tensorAttribution}`);
  if (rows.length > 0) {
    const data: WandbCell[][] = rows.slice(0, 200).map((row) => [...row]);
    await run.log({ stormlog_tensor_attribution: new WandbTable(TENSOR_COLUMNS, data) });
    fields.stormlog_tensor_attribution_rows = rows.length;
  }
  const metadata = readJsonObjectIfExists(`${root}/${ATTRIBUTION_FILES.debugMetadata}`);
  if (metadata !== null) {
    const history = pyGet(metadata, "history_recorded");
    if (typeof history === "boolean") fields.stormlog_attribution_history_recorded = history;
  }
  return fields;
}
