import { StormlogError } from "@stormlog/core";

const ASSET_MARKER = Symbol.for("stormlog.error.report_asset");

/**
 * A file the page inlines (uPlot's script or style sheet) could not be read. The package's
 * dependency `uplot` is missing or damaged: reinstall `@stormlog/report` (and `uplot` 1.6).
 */
export class ReportAssetError extends StormlogError {
  readonly [ASSET_MARKER] = true;
  override readonly name = "ReportAssetError";
  /** The file that could not be read (or the module that could not be resolved). */
  readonly asset: string;

  constructor(asset: string, options?: { cause?: unknown }) {
    super(
      `Cannot read ${asset}, which the HTML report inlines: the \`uplot\` package is missing or damaged; ` +
        "reinstall @stormlog/report (npm install @stormlog/report) so that uplot 1.6 is installed beside it",
      options,
    );
    this.asset = asset;
  }

  static override isInstance(error: unknown): error is ReportAssetError {
    return StormlogError.hasMarker(error, ASSET_MARKER);
  }
}

const OPTIONS_MARKER = Symbol.for("stormlog.error.report_options");

/** An option of `generateReport` is out of range; the message names it and what it accepts. */
export class ReportOptionsError extends StormlogError {
  readonly [OPTIONS_MARKER] = true;
  override readonly name = "ReportOptionsError";
  /** The option's name. */
  readonly option: string;

  constructor(option: string, message: string) {
    super(`Report option ${option}: ${message}`);
    this.option = option;
  }

  static override isInstance(error: unknown): error is ReportOptionsError {
    return StormlogError.hasMarker(error, OPTIONS_MARKER);
  }
}
