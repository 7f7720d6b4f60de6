import { StormlogError } from "@stormlog/core";

const CONFIG_MARKER = Symbol.for("stormlog.error.wandb_config");

/** A W&B export setting is invalid (the reference's `ValueError` for a bad `mode`). */
export class WandbConfigError extends StormlogError {
  readonly [CONFIG_MARKER] = true;
  override readonly name = "WandbConfigError";
  readonly setting: string;

  constructor(setting: string, message: string) {
    super(`Invalid W&B setting '${setting}': ${message}`);
    this.setting = setting;
  }

  static override isInstance(error: unknown): error is WandbConfigError {
    return StormlogError.hasMarker(error, CONFIG_MARKER);
  }
}

const BUNDLE_MARKER = Symbol.for("stormlog.error.wandb_diagnose_bundle_not_found");

/** The diagnose bundle folder to export is not there (the reference's `FileNotFoundError`). */
export class DiagnoseBundleNotFoundError extends StormlogError {
  readonly [BUNDLE_MARKER] = true;
  override readonly name = "DiagnoseBundleNotFoundError";
  readonly path: string;

  constructor(path: string) {
    super(
      `Diagnose artifact directory not found: ${path} (pass a folder a diagnose run wrote: ` +
        "manifest.json, diagnostic_summary.json)",
    );
    this.path = path;
  }

  static override isInstance(error: unknown): error is DiagnoseBundleNotFoundError {
    return StormlogError.hasMarker(error, BUNDLE_MARKER);
  }
}

const INPUT_MARKER = Symbol.for("stormlog.error.wandb_export_input");

/**
 * The export met input the Python reference raises on (a `TypeError`, `ValueError` or
 * `OverflowError` where it reads a value of the wrong type, such as a tensor count that is no
 * number). `pythonType` names the exception the reference raises.
 */
export class WandbExportInputError extends StormlogError {
  readonly [INPUT_MARKER] = true;
  override readonly name = "WandbExportInputError";
  readonly pythonType: string;

  constructor(pythonType: string, message: string, where: string) {
    super(
      `${where}: ${message} (the Python Stormlog raises ${pythonType} here too; fix or remove the value)`,
    );
    this.pythonType = pythonType;
  }

  static override isInstance(error: unknown): error is WandbExportInputError {
    return StormlogError.hasMarker(error, INPUT_MARKER);
  }
}

const OFFLINE_MARKER = Symbol.for("stormlog.error.wandb_offline_run");

/** An offline run directory cannot be written or read (a bad `.wandb` file, a failed check). */
export class WandbOfflineRunError extends StormlogError {
  readonly [OFFLINE_MARKER] = true;
  override readonly name = "WandbOfflineRunError";
  readonly path: string;

  constructor(path: string, message: string) {
    super(`${path}: ${message}`);
    this.path = path;
  }

  static override isInstance(error: unknown): error is WandbOfflineRunError {
    return StormlogError.hasMarker(error, OFFLINE_MARKER);
  }
}
