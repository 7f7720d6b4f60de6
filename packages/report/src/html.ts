/**
 * The HTML page: one file with everything inlined (uPlot's script and style sheet, read from the
 * installed `uplot` package when the page is made; the page's script and style; the data as JSON).
 * A Content-Security-Policy allows only these inline scripts (by hash) and no request at all, so the
 * page opens from file:// and loads nothing, and an injected script would not run even if one got
 * in: the data is JSON in a `<script type="application/json">` with `<`, `>`, `&`, U+2028 and U+2029
 * escaped, and the page's script sets input text with `textContent` only.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { nodeCrypto } from "@stormlog/core/internal";
import { CLIENT_SCRIPT } from "./client.js";
import { ReportAssetError } from "./errors.js";
import type { ReportPageData } from "./model.js";

/** The inlined third-party files. */
export interface ReportAssets {
  readonly uplotScript: string;
  readonly uplotStyle: string;
}

let cached: ReportAssets | null = null;

/** uPlot's minified script and style sheet, from the installed package (read once). */
export function loadAssets(): ReportAssets {
  if (cached !== null) return cached;
  const require = createRequire(import.meta.url);
  const read = (file: string): string => {
    let path: string;
    try {
      path = require.resolve(`uplot/dist/${file}`);
    } catch (cause) {
      throw new ReportAssetError(`uplot/dist/${file}`, { cause });
    }
    try {
      return readFileSync(path, "utf8");
    } catch (cause) {
      throw new ReportAssetError(path, { cause });
    }
  };
  const uplotScript = read("uPlot.iife.min.js");
  // A script's text may not hold `</script` (it would end the element); uPlot's never does.
  if (/<\/script|<!--/i.test(uplotScript))
    throw new ReportAssetError("uplot/dist/uPlot.iife.min.js (unexpected content)");
  cached = { uplotScript, uplotStyle: read("uPlot.min.css") };
  return cached;
}

/**
 * JSON that is safe inside a `<script>` element and in any HTML context: `<`, `>` and `&` as
 * `\u003c`, `\u003e`, `\u0026`, and the line separators U+2028 and U+2029 escaped. `JSON.parse`
 * reads it back unchanged.
 */
export function embeddedJson(value: unknown): string {
  return JSON.stringify(value).replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

const PAGE_STYLE = `
:root { color-scheme: light; --fg: #111827; --muted: #6b7280; --line: #e5e7eb; --bg: #f9fafb; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
#app { max-width: 1400px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 20px; margin: 8px 0 2px; }
h2 { font-size: 16px; margin: 28px 0 6px; }
.subtitle, .intro, .note, .empty, footer { color: var(--muted); }
.intro { margin: 0 0 8px; max-width: 1000px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 10px; margin-top: 14px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; border-top: 3px solid #9ca3af; }
.card.tone-good { border-top-color: #16a34a; } .card.tone-warn { border-top-color: #d97706; } .card.tone-bad { border-top-color: #b91c1c; }
.card-label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card-value { font-size: 22px; font-weight: 600; margin: 2px 0; }
.card-detail { font-size: 12px; overflow-wrap: anywhere; }
.card-note { font-size: 12px; color: var(--muted); margin-top: 4px; }
.notes { background: #fffbeb; border: 1px solid #fde68a; border-radius: 8px; padding: 8px 8px 8px 28px; margin-top: 12px; }
.controls { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; margin: 6px 0; }
.controls button { border: 1px solid var(--line); background: #fff; border-radius: 6px; padding: 2px 10px; cursor: pointer; font: inherit; }
.legend { display: flex; flex-wrap: wrap; gap: 12px; font-size: 12px; color: var(--muted); margin-bottom: 6px; }
.legend i { display: inline-block; width: 14px; height: 3px; margin-right: 4px; vertical-align: middle; }
.legend i.marker-key { width: 3px; height: 12px; }
.legend button.toggle { border: 0; background: none; font: inherit; color: inherit; padding: 0; cursor: pointer; }
.legend button.toggle[aria-pressed="false"] { opacity: .4; text-decoration: line-through; }
.rank { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 6px 8px 4px; margin-bottom: 8px; min-height: 240px; }
.rank.suspect { border: 2px solid #db2777; }
.rank-head { display: flex; gap: 10px; align-items: baseline; flex-wrap: wrap; }
.rank-name { font-weight: 600; }
.rank-detail { color: var(--muted); font-size: 12px; }
.badge { background: #db2777; color: #fff; border-radius: 10px; padding: 0 8px; font-size: 12px; }
.chart { min-height: 170px; }
.bands { display: block; }
.readout { font-size: 12px; color: var(--muted); min-height: 18px; display: flex; flex-wrap: wrap; gap: 4px 10px; }
.readout.active { color: var(--fg); }
.ro-phase { font-weight: 600; }
.ro-value, .ro-marker { border-left: 3px solid; padding-left: 4px; }
.table-wrap { overflow-x: auto; background: #fff; border: 1px solid var(--line); border-radius: 8px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
.tight { white-space: nowrap; }
.wide { min-width: 220px; overflow-wrap: break-word; }
th { background: #f3f4f6; font-weight: 600; position: sticky; top: 0; }
.num { text-align: right; white-space: nowrap; }
footer { margin-top: 32px; font-size: 12px; }
`;

const hash = (text: string): string =>
  `'sha256-${nodeCrypto().createHash("sha256").update(text, "utf8").digest("base64")}'`;

/** The whole page for `data`. */
export function renderPage(data: ReportPageData, assets: ReportAssets = loadAssets()): string {
  const csp = [
    "default-src 'none'",
    `script-src ${hash(assets.uplotScript)} ${hash(CLIENT_SCRIPT)}`,
    "style-src 'unsafe-inline'",
    "img-src data:",
    "base-uri 'none'",
    "form-action 'none'",
  ].join("; ");
  return [
    "<!DOCTYPE html>",
    '<html lang="en">',
    "<head>",
    '<meta charset="utf-8">',
    `<meta http-equiv="Content-Security-Policy" content="${csp}">`,
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    "<title>Stormlog report</title>",
    `<style>${assets.uplotStyle}</style>`,
    `<style>${PAGE_STYLE}</style>`,
    "</head>",
    "<body>",
    '<main id="app"></main>',
    `<script type="application/json" id="stormlog-data">${embeddedJson(data)}</script>`,
    `<script>${assets.uplotScript}</script>`,
    `<script>${CLIENT_SCRIPT}</script>`,
    "</body>",
    "</html>",
    "",
  ].join("\n");
}
