/** The tracking dashboard page, byte for byte the reference's (numbers formatted as Python does). */
import { pythonFormatFixed } from "@stormlog/core/internal";
import { htmlEscape, isPyInt } from "../python/values.js";
import { PINNED_EVENT_TYPES, type TimelineRow } from "./timeline.js";

const WIDTH = 720;
const HEIGHT = 260;
const PADDING = 18;

function integerSeries(rows: readonly TimelineRow[], key: "allocated_bytes" | "reserved_bytes"): number[] {
  const out: number[] = [];
  for (const row of rows) {
    const value = row[key];
    if (isPyInt(value)) out.push(Number(value));
  }
  return out;
}

function polylinePoints(values: readonly number[], maxValue: number): string {
  if (values.length === 0) return "";
  const innerWidth = WIDTH - PADDING * 2;
  const innerHeight = HEIGHT - PADDING * 2;
  const span = Math.max(maxValue - 0, 1.0);
  const pointCount = Math.max(values.length - 1, 1);
  const points: string[] = [];
  values.forEach((value, index) => {
    const x = PADDING + (index / pointCount) * innerWidth;
    const normalized = (value - 0) / span;
    const y = HEIGHT - PADDING - normalized * innerHeight;
    points.push(`${pythonFormatFixed(x, 1)},${pythonFormatFixed(y, 1)}`);
  });
  return points.join(" ");
}

function formatBytes(value: number): string {
  if (value < 1024) return `${value} B`;
  let scaled = value;
  let unit = "B";
  for (unit of ["KB", "MB", "GB", "TB", "PB"]) {
    scaled /= 1024.0;
    if (scaled < 1024.0) return `${pythonFormatFixed(scaled, 2)} ${unit}`;
  }
  return `${pythonFormatFixed(scaled, 2)} ${unit}`;
}

function maxOf(values: readonly number[]): number {
  let best = values[0] ?? 0;
  for (const value of values) if (value > best) best = value;
  return best;
}

/** The dashboard HTML for the sampled timeline rows. */
export function trackingDashboardHtml(rows: readonly TimelineRow[]): string {
  const allocated = integerSeries(rows, "allocated_bytes");
  const reserved = integerSeries(rows, "reserved_bytes");
  const utilization = rows
    .map((row) => row.utilization_percent)
    .filter((value): value is number => value !== null);
  const alertRows = rows.filter((row) => PINNED_EVENT_TYPES.has(row.event_type)).slice(-8);
  const chartValues = [...allocated, ...reserved];
  const chartMax = chartValues.length > 0 ? maxOf(chartValues) : 1;
  const allocatedPoints = polylinePoints(allocated, chartMax);
  const reservedPoints = polylinePoints(reserved, chartMax);
  const cards: [string, string][] = [
    ["samples", String(rows.length)],
    ["peak allocated", allocated.length > 0 ? formatBytes(maxOf(allocated)) : "n/a"],
    ["peak reserved", reserved.length > 0 ? formatBytes(maxOf(reserved)) : "n/a"],
    ["max utilization", utilization.length > 0 ? `${pythonFormatFixed(maxOf(utilization), 1)}%` : "n/a"],
  ];
  const cardHtml = cards
    .map(
      ([label, value]) =>
        `<div class='card'><div class='label'>${htmlEscape(label)}</div><div class='value'>${htmlEscape(value)}</div></div>`,
    )
    .join("");
  const alertsHtml = alertRows
    .map(
      (row) =>
        "<tr>" +
        `<td>${htmlEscape(String(row.sample_index))}</td>` +
        `<td>${htmlEscape(row.event_type)}</td>` +
        `<td>${htmlEscape(pythonFormatFixed(row.elapsed_seconds, 2))}</td>` +
        `<td>${htmlEscape(row.contextText)}</td>` +
        "</tr>",
    )
    .join("");
  const alertsBody = alertsHtml || "<tr><td colspan='4'>No alert events captured.</td></tr>";
  return (
    "<!DOCTYPE html><html><head><meta charset='utf-8'>" +
    "<style>" +
    "body{font-family:system-ui,sans-serif;margin:18px;color:#1f2937;background:#fff;}" +
    ".cards{display:grid;grid-template-columns:repeat(4,minmax(0,1fr));gap:12px;margin-bottom:18px;}" +
    ".card{border:1px solid #dbe3ea;border-radius:12px;padding:12px;background:#f8fafc;}" +
    ".label{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#64748b;}" +
    ".value{font-size:22px;font-weight:700;margin-top:6px;}" +
    ".legend{display:flex;gap:18px;margin:10px 0 14px;font-size:13px;color:#475569;}" +
    ".swatch{display:inline-block;width:10px;height:10px;border-radius:999px;margin-right:6px;}" +
    "table{width:100%;border-collapse:collapse;margin-top:16px;font-size:13px;}" +
    "th,td{padding:8px 10px;border-bottom:1px solid #e2e8f0;text-align:left;}" +
    "th{color:#475569;font-weight:600;background:#f8fafc;}" +
    "h2{margin:0 0 12px;font-size:20px;}" +
    "p{margin:0 0 10px;color:#475569;}" +
    "</style></head><body>" +
    "<h2>Stormlog Tracking Dashboard</h2>" +
    "<p>Sampled timeline exported to Weights & Biases from Stormlog tracking events.</p>" +
    `<div class='cards'>${cardHtml}</div>` +
    "<svg viewBox='0 0 720 260' width='100%' role='img' aria-label='Stormlog memory timeline'>" +
    "<rect x='0' y='0' width='720' height='260' fill='#ffffff' stroke='#e2e8f0' rx='12'/>" +
    `<polyline fill='none' stroke='#2563eb' stroke-width='3' points='${allocatedPoints}'/>` +
    `<polyline fill='none' stroke='#f97316' stroke-width='3' points='${reservedPoints}'/>` +
    "</svg>" +
    "<div class='legend'>" +
    "<span><span class='swatch' style='background:#2563eb;'></span>Allocated</span>" +
    "<span><span class='swatch' style='background:#f97316;'></span>Reserved</span>" +
    "</div>" +
    "<table><thead><tr><th>sample</th><th>event</th><th>elapsed (s)</th><th>context</th></tr></thead>" +
    `<tbody>${alertsBody}</tbody></table>` +
    "</body></html>"
  );
}
