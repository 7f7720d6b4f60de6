/**
 * @stormlog/wandb: Weights & Biases export of Stormlog tracking sessions and diagnose bundles, call for
 * call the Python Stormlog's, written as W&B offline runs that `wandb sync` uploads (and streamed to a
 * live run through the W&B JS SDK when it is installed).
 *
 * Named exports only: each one is a promise to users; `test/public-api.json` lists the runtime names.
 */

// Exporting: a tracking session, a diagnose bundle, and their settings.

export {
  type ExportSession,
  type ResolvedWandbConfig,
  resolveWandbConfig,
  type WandbExportConfig,
} from "./export/common.js";
export { type DiagnoseExportInput, exportDiagnoseBundleToWandb } from "./export/diagnose.js";
export type { ExportEvent } from "./export/timeline.js";
export { exportTrackingRunToWandb, type TrackingExportInput } from "./export/tracking.js";

// The W&B calls the export makes, and a client that records them.

export {
  type ArtifactAdd,
  type ArtifactEntry,
  WandbArtifact,
  type WandbCell,
  type WandbClient,
  WandbHtml,
  type WandbInitOptions,
  WandbLineSeries,
  type WandbPayload,
  type WandbRun,
  WandbTable,
  type WandbValue,
} from "./client.js";
export { type RecordedCall, type RecordingOptions, RecordingWandbClient } from "./recorder.js";

// W&B offline runs: written as W&B's own client writes them in offline mode, for `wandb sync`; read back.

export { listOfflineRuns, type OfflineRunContents, readOfflineRun } from "./offline/reader.js";
export {
  WandbOfflineClient,
  type WandbOfflineOptions,
  WandbOfflineRun,
} from "./offline/writer.js";

// Online: the history, summary and config also streamed to a live run through the W&B JS SDK.

export {
  loadOnlineSdk,
  type OnlineAvailability,
  type WandbJsRun,
  type WandbJsSdk,
  WandbStreamingClient,
} from "./online.js";

// Errors.

export {
  DiagnoseBundleNotFoundError,
  WandbConfigError,
  WandbExportInputError,
  WandbOfflineRunError,
} from "./errors.js";
