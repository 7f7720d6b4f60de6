/**
 * `generateReport`: the analysis report (`analyzeTelemetry`) and the memory timelines (the Perfetto
 * export's trace events, `streamTraceEvents`) of one selection, made into one self-contained HTML
 * page. Both read the analysis dataset through the same index: the first builds or updates it, the
 * second reuses it.
 */
import { promises as fsPromises } from "node:fs";
import { type AnalysisReport, analyzeTelemetry } from "@stormlog/analysis";
import { ReportOptionsError } from "./errors.js";
import { loadAssets, renderPage } from "./html.js";
import { buildPageData, type ReportPageData } from "./model.js";
import { readTimelines } from "./timeline.js";
import { PACKAGE_VERSION } from "./version.js";

/** Options of `generateReport` and `writeReport`. */
export interface ReportOptions {
  /** A session's or a rank group's id (default: the view `analyzeTelemetry` picks, a job's rank group first). */
  readonly sessionId?: string;
  /** Use and maintain the analysis index beside the input (default true). */
  readonly index?: boolean;
  /** Where indexes go when the input's location is not writable (see `AnalyzeOptions.cacheDir`). */
  readonly cacheDir?: string;
  /** The page's heading (default: `Stormlog report: ` and the session or job). */
  readonly title?: string;
  /**
   * Pixel columns each rank's series are reduced to, keeping every column's minimum and maximum
   * (default 1200, from 50 to 20000): more keeps more detail when zoomed in, and a bigger file.
   */
  readonly columns?: number;
  /** Phase spans drawn per rank at most, the longest kept (default 4000). */
  readonly maxSpansPerRank?: number;
  /** Markers drawn per rank at most, spikes, OOMs and hidden-memory findings first (default 500). */
  readonly maxMarkersPerRank?: number;
  /** Told what the reading left out or distrusted (a final line cut short, an OOM dump). */
  readonly onWarning?: (message: string) => void;
}

/** A generated page and what it holds. */
export interface GeneratedReport {
  /** The whole page. */
  readonly html: string;
  /** Its size in UTF-8 bytes. */
  readonly bytes: number;
  /** The analysis the page shows. */
  readonly analysis: AnalysisReport;
  /** The data embedded in the page. */
  readonly data: ReportPageData;
}

const DEFAULTS = { columns: 1200, maxSpansPerRank: 4000, maxMarkersPerRank: 500 };

function bounded(
  name: string,
  value: number | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max)
    throw new ReportOptionsError(name, `expected an integer from ${min} to ${max}, got ${String(value)}`);
  return value;
}

/**
 * The HTML report of a telemetry path (a sink directory, a root of per-rank sinks, a `.jsonl`
 * segment or a `.json` file): one run, or a job's ranks merged. The page needs nothing else: open it
 * from disk in any browser.
 */
export async function generateReport(path: string, options: ReportOptions = {}): Promise<GeneratedReport> {
  const columns = bounded("columns", options.columns, DEFAULTS.columns, 50, 20_000);
  const maxSpansPerRank = bounded(
    "maxSpansPerRank",
    options.maxSpansPerRank,
    DEFAULTS.maxSpansPerRank,
    0,
    1e6,
  );
  const maxMarkersPerRank = bounded(
    "maxMarkersPerRank",
    options.maxMarkersPerRank,
    DEFAULTS.maxMarkersPerRank,
    0,
    1e6,
  );
  const assets = loadAssets();
  const shared = {
    ...(options.sessionId === undefined ? {} : { sessionId: options.sessionId }),
    ...(options.index === undefined ? {} : { index: options.index }),
    ...(options.cacheDir === undefined ? {} : { cacheDir: options.cacheDir }),
  };
  const analysis = await analyzeTelemetry(path, shared);
  const warnings: string[] = [];
  const onWarning = (message: string): void => {
    // The analysis already read the input: its warnings are in the report's notes.
    if (!warnings.includes(message)) warnings.push(message);
  };
  const timelines = await readTimelines(path, {
    ...shared,
    // The selection the analysis picked, so both describe the same session or rank group.
    ...(analysis.session.selected_session_id === null
      ? {}
      : { sessionId: analysis.session.selected_session_id }),
    columns,
    rangeS: analysis.summary.duration_s ?? 0,
    maxSpansPerRank,
    maxMarkersPerRank,
    onWarning,
  });
  for (const warning of warnings) options.onWarning?.(warning);
  const data = buildPageData(analysis, timelines, {
    ...(options.title === undefined ? {} : { title: options.title }),
    columns,
    generator: `@stormlog/report ${PACKAGE_VERSION}`,
  });
  const html = renderPage(data, assets);
  return { html, bytes: Buffer.byteLength(html, "utf8"), analysis, data };
}

/** `generateReport`, written to `output` (replaced if it exists). Returns what was written. */
export async function writeReport(
  path: string,
  output: string,
  options: ReportOptions = {},
): Promise<GeneratedReport> {
  const report = await generateReport(path, options);
  await fsPromises.writeFile(output, report.html, "utf8");
  return report;
}
